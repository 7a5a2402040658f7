"""Joining the Horovod ring when started by a submarine-elastic worker agent.

The agent in each worker container starts the training command as soon as the container runs, with
``SUBMARINE_AGENT_FD`` naming one end of a socket pair. The script imports TensorFlow, builds its model
and data, and then calls :func:`init_horovod`, which tells the agent the process is warm and blocks
until the job's driver places it in a ring (the agent passes on the slot's Horovod environment). So a
joiner's start-up runs while the current ring keeps training; only the re-form is on its critical path.

Outside an agent (``horovodrun``, a plain ``python``) :func:`init_horovod` is just ``hvd.init()``.

Once the process is in a ring, one daemon thread (:class:`AgentChannel`) owns the channel:

- it writes a heartbeat every :data:`HEARTBEAT_S` seconds; the agent kills a process that stops
  beating (stopped, or stuck holding the interpreter) so its ring can re-form without it. When the
  interpreter exits it says ``exiting``: the exit handlers and the teardown after them (Horovod's shutdown,
  TensorFlow's, where no thread beats any more) then get the agent's exit grace instead of the hung bound;
- it reads what the agent sends (``ToTraining`` of ``elastic.proto``, framed by
  :mod:`submarine_elastic.protocol.channel`): ``leave`` (scale-in: :func:`leave_requested`), ``driver_lost``
  (true: the job's driver went away, a re-init waits for the next one; false: the same driver took the agent
  back), ``reform`` (a new driver incarnation adopted
  this process: the Horovod environment of its new ring, and a re-form at the next commit, triggered
  through Horovod's own host-update notification), ``target`` (the job's target as its driver numbered it,
  decided by its controller or an operator; its batch is :func:`batch_setting`, and the ranks take rank 0's
  at their next commit, :class:`tf_hooks.elastic.state.ElasticState`) and ``pong`` (the answer to
  :meth:`AgentChannel.sync`).

Every re-initialisation after the first (Horovod's elastic reset) first calls :func:`prepare_reinit`.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from submarine_elastic import env
from submarine_elastic.protocol.channel import ChannelError, FrameReader, send
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tf_hooks.elastic.rules import BatchSetting

logger = logging.getLogger(__name__)

#: Seconds between the process's heartbeats to its agent.
HEARTBEAT_S = 1.0
#: How long a re-initialisation waits for the job's driver to come back (the agent gives up sooner).
DRIVER_WAIT_S = 600.0
#: How long :meth:`AgentChannel.sync` waits for the agent's answer.
SYNC_TIMEOUT_S = 10.0


class RingJoinError(RuntimeError):
    """The agent's channel closed or sent something unreadable before the ring formed, or the job's
    driver did not come back while the process waited to re-form its ring."""


class AgentChannel:
    """The process's end of its agent's channel once the process is in a ring (see the module doc).

    ``leave``, ``driver_lost`` and the pending ``reform`` environment change only on its thread,
    under its condition; readers wait on it.
    """

    def __init__(
        self,
        sock: socket.socket,
        reader: FrameReader[pb.ToTraining] | None = None,
        unread: Sequence[pb.ToTraining] = (),
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._sock = sock
        self._on_lost = on_lost
        self._reader = reader if reader is not None else FrameReader(pb.ToTraining)
        self._unread = list(unread)
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self.leave = False
        self.driver_lost = False
        self.closed = False
        self._reform: dict[str, str] | None = None
        #: the job's latest batch setting the agent relayed (None: never set)
        self.batch: BatchSetting | None = None
        self._pings = 0
        self._pongs = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="submarine-agent-channel")
        self._thread.start()
        atexit.register(self.say_exiting)

    def say_exiting(self) -> None:
        """Tells the agent the interpreter is shutting down (no heartbeat follows)."""
        self.send(pb.FromTraining(exiting=True))

    def send(self, message: pb.FromTraining) -> bool:
        try:
            with self._send_lock:
                send(self._sock, message)
            return True
        except OSError:
            return False

    def _run(self) -> None:
        """Reads the agent's messages until the channel closes or breaks; then, whatever ended the reading (an
        error in it too), ``on_lost``: a process that can no longer hear its agent must not train on."""
        try:
            self._read()
        except Exception:
            logger.exception("reading the worker agent's channel failed")
        finally:
            with self._cond:
                self.closed = True
                self._cond.notify_all()
            if self._on_lost is not None:
                self._on_lost()

    def _read(self) -> None:
        self._sock.settimeout(HEARTBEAT_S)
        pending, self._unread = self._unread, []
        next_beat = 0.0
        while True:
            now = time.monotonic()
            if now >= next_beat:
                self.send(pb.FromTraining(beat=now))
                next_beat = now + HEARTBEAT_S
            for message in pending:
                self._dispatch(message)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                pending = []
                continue
            except OSError:
                return
            if not chunk:
                return
            try:
                pending = self._reader.feed(chunk)
            except ChannelError as exc:
                logger.error("the worker agent broke its channel: %s", exc)
                return

    def _dispatch(self, message: pb.ToTraining) -> None:
        kind = message.WhichOneof("message")
        reform = None
        with self._cond:
            if kind == "leave":
                self.leave = True
            elif kind == "driver_lost":
                self.driver_lost = message.driver_lost  # false: the same driver took the agent back
            elif kind == "reform":
                reform = dict(message.reform.env)
                self._reform = reform
                self.driver_lost = False
            elif kind == "target" and message.target.HasField("batch_size"):
                try:
                    batch = BatchSetting.from_target(message.target)
                except ValueError as exc:
                    logger.warning("ignoring a target from the worker agent: %s", exc)
                else:
                    if self.batch is None or batch.version > self.batch.version:
                        self.batch = batch
            elif kind == "pong":
                self._pongs = max(self._pongs, message.pong)
            self._cond.notify_all()
        if reform is not None:
            _interrupt_ring()

    def sync(self, timeout: float = SYNC_TIMEOUT_S) -> bool:
        """Waits until everything the agent sent before now has been read; False on timeout or a closed channel."""
        with self._cond:
            self._pings += 1
            n = self._pings
        if not self.send(pb.FromTraining(ping=n)):
            return False
        with self._cond:
            return self._cond.wait_for(lambda: self._pongs >= n or self.closed, timeout) and self._pongs >= n

    def take_reform(self, timeout: float) -> dict[str, str] | None:
        """The new ring's environment a new driver sent (once), waiting up to ``timeout`` s while the driver is
        lost; None when there is none.

        Raises:
            RingJoinError: the driver is still lost after ``timeout`` s, or the agent went away meanwhile.
        """
        with self._cond:
            if self.driver_lost:
                logger.warning("the job's driver is gone; waiting for its next incarnation to re-form the ring")
                self._cond.wait_for(lambda: not self.driver_lost or self.closed, timeout)
                if self.driver_lost:
                    why = (
                        "the worker agent went away" if self.closed else f"it did not come back within {timeout:.0f} s"
                    )
                    raise RingJoinError(f"cannot re-form the ring: the job's driver is gone and {why}")
            reform, self._reform = self._reform, None
            return reform


#: The agent's channel once this process is in a ring (None: not started by an agent, or not placed yet).
_channel: AgentChannel | None = None
#: A new driver's environment was applied before the current ``hvd.init()``: Horovod's worker notification
#: service must be registered with that driver's rendezvous once the init is done.
_reformed = False


#: What the agent may send a process that waits for its slot before the slot itself: the driver lost and back
#: (a driver relaunched meanwhile, whose next incarnation places it), and the job's targets (kept for the ring).
_BEFORE_START = frozenset({"driver_lost", "target"})


def _slot_start(got: list[pb.ToTraining]) -> int | None:
    """The index of the slot's environment (``start``) among the messages ``got`` so far; None while it has
    not come.

    Raises:
        RingJoinError: a message that has no meaning before the slot came before it.
    """
    for i, message in enumerate(got):
        kind = message.WhichOneof("message")
        if kind == "start":
            return i
        if kind not in _BEFORE_START:
            raise RingJoinError(f"the worker agent sent {kind} before the slot's environment")
    return None


def wait_for_slot(timeout: float | None = None) -> dict[str, str]:
    """Tell the agent this process is warm and block until it sends the slot's Horovod environment.

    Blocks for up to ``timeout`` seconds (None: until the driver places the process). Sets the
    environment in ``os.environ``, starts the channel's thread (:class:`AgentChannel`) and returns the
    environment; returns ``{}`` when not started by an agent.

    Raises:
        RingJoinError: the agent went away or sent a malformed message.
        TimeoutError: ``timeout`` passed first.
    """
    global _channel
    fd = env.settings().agent_fd
    if fd is None:
        return {}
    sock = socket.socket(fileno=fd)
    reader = FrameReader(pb.ToTraining)
    placed = False
    try:
        sock.settimeout(timeout)
        send(sock, pb.FromTraining(ready=pb.Ready(pid=os.getpid(), time=time.time())))
        got: list[pb.ToTraining] = []
        while (start := _slot_start(got)) is None:
            try:
                chunk = sock.recv(65536)
            except TimeoutError as exc:
                raise TimeoutError(f"not placed in a ring within {timeout} s") from exc
            if not chunk:
                raise RingJoinError("the worker agent closed the channel before the ring formed")
            try:
                got += reader.feed(chunk)
            except ChannelError as exc:
                raise RingJoinError(f"unreadable message from the worker agent: {exc}") from exc
        slot_env = dict(got[start].start.env)
        # The driver's comings and goings before this process was placed concern no ring of it: dropped.
        after = [m for m in got[:start] if m.WhichOneof("message") == "target"] + got[start + 1 :]
        placed = True
    finally:
        if not placed:
            sock.close()
    os.environ.pop("SUBMARINE_AGENT_FD", None)
    os.environ.update(slot_env)
    _channel = AgentChannel(sock, reader, after, on_lost=_agent_lost)
    return slot_env


#: The exit status of a training process whose agent went away while it trained.
AGENT_LOST_EXIT = 70


def _agent_lost() -> None:
    """The agent's channel closed while this process trains: its agent died (killed; every orderly end of an
    agent comes after its process's). Nothing can tell this process to leave or re-form any more, and in a ring of
    one, which needs no peer, it would train on beside the ring the job forms without it: two rings committing the
    same steps (seen in a chaos run: a killed agent's process and the next driver's ring both trained steps
    728-815). It leaves the job at once, whatever saying so does: its output went to the dead agent, so a write
    fails with a broken pipe (which, raised here, once ended only this thread and the process trained on)."""
    try:
        logger.error(
            "the worker agent went away while this process trained: it leaves the job (exit %d)", AGENT_LOST_EXIT
        )
        sys.stderr.flush()
    finally:
        os._exit(AGENT_LOST_EXIT)


def channel() -> AgentChannel | None:
    """This process's channel to its agent once it is in a ring, else None."""
    return _channel


def prepare_reinit(timeout: float = DRIVER_WAIT_S) -> None:
    """What a re-initialisation of Horovod does first in an agent-started process: reads everything the
    agent sent (a Leave sent before the re-form is seen), waits while the job's driver is gone, and
    applies the environment of the ring a new driver incarnation formed (its rendezvous).

    Raises:
        RingJoinError: the driver did not come back within ``timeout`` s.
    """
    global _reformed
    if _channel is None:
        return
    _channel.sync()
    reform = _channel.take_reform(timeout)
    if reform:
        os.environ.update(reform)
        _reformed = True
        logger.warning(
            "re-forming the ring around the job's new driver (incarnation %s)",
            reform.get("SUBMARINE_DRIVER_INCARNATION", "?"),
        )


def after_init() -> None:
    """What a successful ``hvd.init()`` does last: after a re-form around a new driver, registers Horovod's
    worker notification service with that driver's rendezvous, so it can interrupt this ring on later
    resizes (Horovod registers it once per process, with the rendezvous of the time)."""
    global _reformed
    if not _reformed:
        return
    _reformed = False
    module = sys.modules.get("horovod.common.elastic")
    manager = getattr(module, "notification_manager", None)
    if manager is None or getattr(manager, "_service", None) is None:
        return  # not an elastic script, or before its first hvd.elastic.run: it registers itself then
    old = manager._service
    manager._service = None
    manager.init()  # a new service, registered with the rendezvous now in os.environ
    old.shutdown()


def _interrupt_ring() -> None:
    """Makes the ring this process trains in re-form at its next commit, as Horovod's driver does when its
    hosts change (a no-op outside ``hvd.elastic.run``)."""
    module = sys.modules.get("horovod.common.elastic")
    if module is None:
        return
    from horovod.runner.elastic.worker import HostUpdateResult

    module.notification_manager.handle_hosts_updated(time.time(), HostUpdateResult.mixed)


def batch_setting() -> BatchSetting | None:
    """The job's latest batch setting this process's agent relayed (None: none, or not started by an agent).
    Never blocks. Each rank may see a new one at another moment: :class:`~tf_hooks.elastic.state.ElasticState`
    makes every rank take rank 0's at the same commit."""
    return _channel.batch if _channel is not None else None


def leave_requested() -> bool:
    """Whether the agent has asked this process to leave the ring (scale-in). Never blocks.

    Answers False outside an agent, before the process is in a ring, and when the agent is gone.
    :func:`prepare_reinit` reads everything sent before it, so a re-init sees a Leave sent before the re-form.
    """
    return _channel is not None and _channel.leave


def init_horovod(timeout: float | None = None) -> Any:
    """:func:`wait_for_slot`, then ``horovod.tensorflow.init()``; returns the ``horovod.tensorflow`` module.

    Raises:
        RingJoinError, TimeoutError: as :func:`wait_for_slot`.
    """
    wait_for_slot(timeout)
    import horovod.tensorflow as hvd

    hvd.init()
    return hvd
