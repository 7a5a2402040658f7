"""A worker's training process and its one owner, :class:`TrainingProcess`, which the agent holds.

1. Start: the training command runs under ``/bin/bash -c`` in a session of its own (the NodeManager's signals
   reach the agent only), with its end of a socket pair as its channel to the agent (``SUBMARINE_AGENT_FD``),
   ``tf_hooks/elastic/_site`` first on ``PYTHONPATH`` and the container's devices named (:func:`training_env`);
   its output goes to its incarnation's log and the agent's streams (:mod:`submarine_elastic.elastic.trainlog`).
2. Its channel (``FromTraining``): heartbeats, pings it wants answered, that it is exiting, and ``ready`` once,
   which goes to the agent, whose state machine it moves; the agent's messages go back on the same socket.
3. Heartbeats: once in a ring, a process silent past the hung bound (:func:`hung_for`) is killed (SIGKILL to
   its group, which also ends a stopped process), so its peers' collectives fail at once.
4. Stop: SIGTERM to its group, SIGKILL after a grace.

Nothing here knows the driver or the agent's state: the agent says whether the process is in a ring.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.elastic.gpus import Pinning
from submarine_elastic.elastic.trainlog import IncarnationLog, log_dir, next_log_path
from submarine_elastic.protocol import channel
from submarine_elastic.protocol.channel import ChannelError, FrameReader
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.settings import container_env, env_name

# The agent's logger: these are the agent's lines, whichever of its parts writes them.
log = logging.getLogger("submarine_elastic.agent")

#: A training process that said it is exiting (its interpreter shutting down, where no thread beats any
#: more: Horovod's and TensorFlow's teardown, which a loaded machine stretches past the hung bound) is killed
#: as hung only when it is still there this long after saying so.
EXIT_GRACE_S = 120.0


def site_dir() -> Path:
    """The directory whose ``sitecustomize`` makes ``hvd.init()`` join the job's ring."""
    import tf_hooks.elastic

    return Path(tf_hooks.elastic.__file__).resolve().parent / "_site"


def training_env(base: Mapping[str, str], agent_fd: int, devices: Mapping[str, str]) -> dict[str, str]:
    """The training process's environment: ``base`` (the agent's) with its channel's descriptor, without the
    agent's own command, :func:`site_dir` first on ``PYTHONPATH`` and ``devices`` (the GPU variables) set.

    Raises:
        SettingsError: ``agent_fd`` is not a descriptor number (naming ``SUBMARINE_AGENT_FD``).
    """
    child_env = dict(base)
    child_env.update(container_env(agent_fd=agent_fd))
    child_env.pop(env_name("worker_cmd_b64"), None)
    paths = [str(site_dir()), *filter(None, child_env.get("PYTHONPATH", "").split(os.pathsep))]
    child_env["PYTHONPATH"] = os.pathsep.join(paths)
    child_env.update(devices)
    return child_env


def hung_for(
    now: float, last_beat: float, exiting_at: float | None, hung_after: float, exit_grace: float
) -> tuple[float, float] | None:
    """``(silent, bound)`` for a process in a ring that broke its bound, None while it keeps it: silent since its
    last heartbeat past ``hung_after``, or, once it said it is exiting (at ``exiting_at``), silent since the later
    of the two past ``exit_grace``."""
    silent = now - (last_beat if exiting_at is None else max(last_beat, exiting_at))
    bound = hung_after if exiting_at is None else exit_grace
    return (silent, bound) if silent > bound else None


class TrainingProcess:
    """One incarnation of a worker's training process: it starts it, reads and writes its channel, copies its
    output, kills it when hung and stops it.

    ``on_ready`` is called (on the channel's thread) with the process's ``ready``; ``in_ring`` says whether the
    process is in a ring now, where its heartbeats count.
    """

    def __init__(
        self,
        command: str,
        instance: str,
        *,
        hung_after: float,
        on_ready: Callable[[pb.Ready], None],
        in_ring: Callable[[], bool],
    ) -> None:
        self.command = command
        self.instance = instance
        self.hung_after = hung_after
        self._on_ready = on_ready
        self._in_ring = in_ring
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel_end: socket.socket | None = None
        self.started_at = 0.0
        self._log: IncarnationLog | None = None
        #: the last heartbeat of the training process (monotonic), once it is in a ring
        self.last_beat: float | None = None
        #: when the training process said it is exiting (None: it did not)
        self.exiting_at: float | None = None
        #: how long it was silent when it was killed as hung (0: it was not)
        self.hung_seconds = 0.0

    @property
    def log_path(self) -> Path | None:
        """This incarnation's log file (None before :meth:`start`)."""
        return self._log.path if self._log is not None else None

    @property
    def alive(self) -> bool:
        """It was started and has not ended."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, pinning: Pinning | None) -> None:
        """Starts the process (with ``pinning``'s devices, None for a CPU worker) and the threads that copy its
        output and read its channel; returns at once.

        Raises:
            OSError: the log directory cannot be made or the log opened, or the process cannot be started.
        """
        ours, theirs = socket.socketpair()
        self.channel_end = ours
        # The process inherits the claim locks too: the devices stay taken while it lives, even past its agent.
        claims = tuple(pinning.fds) if pinning is not None else ()
        child_env = training_env(os.environ, theirs.fileno(), pinning.env() if pinning is not None else {})
        workdir = env.settings().workdir
        directory = log_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._log = IncarnationLog(next_log_path(directory))  # closed in wait
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", self.command],
            cwd=str(workdir) if workdir else None,
            env=child_env,
            pass_fds=(theirs.fileno(), *claims),
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        theirs.close()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._log.follow(self.proc.stdout, self.proc.stderr)
        log.info(
            "%s: started training process %d (log %s): %s", self.instance, self.proc.pid, self.log_path, self.command
        )
        threading.Thread(target=self._read, daemon=True, name="child-channel").start()

    def _read(self) -> None:
        """Reads the training process's messages (:meth:`on_message`). A broken frame ends the reading (the
        process's heartbeats then stop counting)."""
        assert self.channel_end is not None
        reader = FrameReader(pb.FromTraining)
        while True:
            try:
                chunk = self.channel_end.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            try:
                messages = reader.feed(chunk)
            except ChannelError as exc:
                log.error("%s: the training process broke its channel: %s", self.instance, exc)
                return
            for message in messages:
                self.on_message(message)

    def on_message(self, message: pb.FromTraining) -> None:
        """One message of the process: a heartbeat or its exiting noted, a ping answered, ``ready`` handed on."""
        kind = message.WhichOneof("message")
        if kind == "beat":
            self.last_beat = time.monotonic()
        elif kind == "exiting":
            self.exiting_at = time.monotonic()
        elif kind == "ping":
            self.tell(pb.ToTraining(pong=message.ping))
        elif kind == "ready":
            self._on_ready(message.ready)

    def watch_heartbeats(self) -> None:
        """Kills the training process when it is in a ring and sent no heartbeat for ``hung_after`` s, or, once
        it said it is exiting, when it is still there ``EXIT_GRACE_S`` later. Blocks until it ended or was
        killed."""
        while self.proc is not None and self.proc.poll() is None:
            time.sleep(min(1.0, self.hung_after / 4))
            beat, exiting = self.last_beat, self.exiting_at
            if beat is None or not self._in_ring():
                continue
            hung = hung_for(time.monotonic(), beat, exiting, self.hung_after, EXIT_GRACE_S)
            if hung is None:
                continue
            silent, bound = hung
            self.hung_seconds = silent
            log.error(
                "%s: the training process sent no heartbeat for %.1f s (bound %.0f s%s): hung; killing it so "
                "the ring re-forms without it",
                self.instance,
                silent,
                bound,
                ", exiting" if exiting is not None else "",
            )
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return

    def wait(self) -> int:
        """Blocks until the training process ended and its output is copied; returns its status."""
        assert self.proc is not None
        code = self.proc.wait()
        if self._log is not None:
            self._log.close()
        return code

    def stderr_tail(self) -> str:
        """The last lines of its stderr (empty before it started)."""
        return self._log.stderr_tail() if self._log is not None else ""

    def tell(self, message: pb.ToTraining) -> None:
        """Sends ``message`` on its channel; a process that cannot be told (gone) is logged, not raised."""
        if self.channel_end is None:
            return
        try:
            channel.send(self.channel_end, message)
        except OSError as exc:
            log.warning(
                "%s: could not tell the training process %s: %s", self.instance, message.WhichOneof("message"), exc
            )

    def send_slot_env(self, slot_env: dict[str, str]) -> None:
        """Tells the process its slot's Horovod environment (``Start``): its waiting ``hvd.init()`` joins."""
        self.tell(pb.ToTraining(start=pb.Start(env=slot_env)))

    def stop(self, grace: float) -> None:
        """SIGTERM the training process's group, SIGKILL it after ``grace`` seconds; blocks until then."""
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
