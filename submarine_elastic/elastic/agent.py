"""The worker agent: the main process of every ``worker`` container of an elastic job.

It starts the training command at once, so imports, model and data are built while the job's ring
keeps training, attaches to the job's driver over gRPC, and relays: Hello, Warm when the script is
ready to join, Exited when it ends; Start (the slot's Horovod environment), Leave (scale-in) and Stop
from the driver.

The script joins with its own ``hvd.init()``: the command runs with ``tf_hooks/elastic/_site`` first
on ``PYTHONPATH``, whose ``sitecustomize`` makes the first ``hvd.init()`` of any Python process wait for
the slot (:mod:`tf_hooks.elastic.autojoin`), and a later one, after a Leave, exit with status 0.

The training process has one owner, :class:`~submarine_elastic.elastic.training.TrainingProcess`, which the
agent holds: it starts the process, reads and writes its channel, watches its heartbeats and copies its output
to its incarnation's own log (``training-N.log``, :mod:`submarine_elastic.elastic.trainlog`) and the agent's
streams. The agent keeps the state machine: a failed process's last stderr lines go to the driver with its
Exited event, so ``submarine job show`` can say why it failed.

The agent outlives its driver: when the driver's stream breaks (the driver died; YARN relaunches it),
the training process goes on training in its ring, and the agent tells it the driver is gone, finds the
driver again (through the YARN Services API) and re-attaches with where its process stands
(:class:`pb.Resume`), for up to ``SUBMARINE_DRIVER_GRACE_S`` seconds (default
:data:`DRIVER_GRACE_S`). The new driver adopts it and sends ``Reform``: the Horovod environment of the
ring it forms around its own rendezvous, which the process joins at its next commit. A driver that
refuses the re-attach (it already counts this worker out) gets the process stopped: it cannot come back
into a ring that re-formed without it.

Hung processes: once in a ring, the training process sends a heartbeat every second
(:mod:`tf_hooks.elastic.ring`). One that sends none for ``SUBMARINE_HUNG_AFTER_S`` seconds (default
:data:`HUNG_AFTER_S`, well under Gloo's 30 s timeout) is stopped, deadlocked or stuck holding the
interpreter: the agent kills it (SIGKILL, which also ends a stopped process), so its peers' collectives
fail at once and the ring re-forms without it, and reports it as hung; YARN then relaunches the worker.

GPUs: in a container holding ``yarn.io/gpu`` (``SUBMARINE_WORKER_GPUS``), the agent first takes its
container's devices (:mod:`submarine_elastic.elastic.gpus`: YARN's assignment, else a claim among the project's
jobs on the node), starts every training process with ``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` naming
them, and reports their minor numbers in its Hello (``job show``). Devices it cannot have within a minute end it
with status 2, which YARN relaunches.

Exit status, which YARN's restart policy (ALWAYS) acts on:
- the training process failed (not on the driver's request): the agent exits with its code, YARN
  relaunches it (in the same container), and the new agent joins as a new Horovod host (its key is
  the container id plus the agent's pid, so it is not taken for the blacklisted one);
- the process finished, or left on scale-in: the agent stays until YARN stops the container, so
  YARN does not start a replacement nobody asked for;
- the NodeManager stops the container (SIGTERM: YARN preempts it, or the service stops): the agent tells the
  driver (``Preempted``), the process leaves the ring at its next commit as on a scale-in (or is stopped,
  when it never joined one), and the agent reports its exit and exits 0 before the NodeManager's SIGKILL
  (:meth:`Agent.leave_container`). The training process runs in a session of its own, so the NodeManager's
  signals reach the agent only.

Run by the job spec as ``python -m submarine_elastic.elastic.agent`` with the command, base64-encoded,
in ``SUBMARINE_WORKER_CMD_B64`` (so no quoting of the user's command can break YARN's launch script).
"""

from __future__ import annotations

import base64
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import grpc

from submarine_elastic import env
from submarine_elastic.elastic.gpus import GpuPinningError, Pinning, claims_dir, pin, read_node_gpus
from submarine_elastic.elastic.training import TrainingProcess
from submarine_elastic.protocol.api import AgentState, ElasticError, IllegalTransitionError, advance
from submarine_elastic.protocol.locate import driver_address
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import (
    STREAM_KEEPALIVE_CLIENT_OPTIONS,
    InsecureChannelError,
    bearer,
    open_channel,
    plaintext_refused,
)
from submarine_elastic.submit.jobcode import unpack_code

log = logging.getLogger("submarine_elastic.agent")

CONNECT_TIMEOUT_S = 300.0
STOP_GRACE_S = 10.0
#: After its NodeManager's SIGTERM (YARN preempts or stops the container) the training process may take the
#: NodeManager's kill delay (``SUBMARINE_SIGKILL_DELAY_MS``, ``job run`` reads it from the cluster) less this
#: to leave the ring at a commit; then the agent stops it (SIGTERM, SIGKILL ``SIGTERM_STOP_S`` later) and
#: reports its exit. Under 1 s left (Hadoop's default delay is 250 ms): it is stopped at once.
SIGTERM_MARGIN_S = 1.5
SIGTERM_STOP_S = 1.0
#: How long an agent that lost its driver keeps its training process and looks for the next incarnation.
DRIVER_GRACE_S = 180.0
#: A training process in a ring that sends no heartbeat for this long is killed as hung.
HUNG_AFTER_S = 10.0
#: Pause between attempts to reach a lost driver.
REATTACH_PAUSE_S = 1.0


class Agent:
    """One worker container's agent: it holds the training process (:attr:`training`) and relays between it and
    the driver.

    Its :attr:`state` (:class:`AgentState`) changes only through :meth:`_move`, which refuses a transition
    the machine does not have; the threads that change it (the child's channel, the driver's stream, the
    main thread, the SIGTERM handler) hold one reentrant lock while they do.
    """

    def __init__(self, command: str, instance: str, container_id: str, host: str) -> None:
        self.instance = instance
        self.container_id = container_id
        self.host = host
        #: the NodeManager its container runs on (``host:port``), told to the driver in each Hello
        self.node = env.settings().node_id()
        # YARN relaunches a failed process in the same container: the pid tells the incarnations apart.
        self.agent_id = f"{container_id}-a{os.getpid()}"
        #: the GPUs its training process may use (None: a worker without any)
        self.pinning: Pinning | None = None
        #: how the driver is reached: client certificate, the name its certificate carries, plaintext asked for
        self._tls: tuple[tuple[bytes, bytes] | None, str | None, bool] = (None, None, False)
        #: the events of the current driver stream (None between streams: an event then is conveyed by the
        #: next Hello's Resume, or, for Exited, sent again first on the next stream)
        self._outbox: queue.Queue[pb.AgentEvent | None] | None = None
        self._outbox_lock = threading.Lock()
        self._exit_event: pb.AgentEvent | None = None
        self._state = AgentState.STARTING
        # Reentrant: the SIGTERM handler runs on the main thread, which may hold it at that moment.
        self._state_lock = threading.RLock()
        #: the training process, its channel, heartbeats and output (its ``ready`` moves this agent to WARM)
        self.training = TrainingProcess(
            command, instance, hung_after=HUNG_AFTER_S, on_ready=self._on_ready, in_ring=self._in_ring
        )
        #: its training process asked to join a ring (it reached WARM); sent with its Exited event
        self.joined = False
        #: the Horovod environment of the slot the process trains in (Start or Reform), and who placed it
        self.slot_env: dict[str, str] = {}
        self.placed_by = 0
        #: the job's latest target that set its batch, as the driver sent it (relayed to the process once it is
        #: in a ring)
        self.batch: pb.Target | None = None
        #: the driver stream ended because the job ended (the driver closed it), not because it was lost
        self.released = threading.Event()
        #: the agent stopped the process because it lost its driver for good or was refused by it
        self.gave_up = False
        #: its NodeManager is stopping the container (SIGTERM): the agent exits once the process is gone
        self.container_stopping = threading.Event()

    @property
    def state(self) -> AgentState:
        return self._state

    def _move(self, to: AgentState) -> None:
        """Enter ``to``. Callers hold ``_state_lock``.

        Raises:
            IllegalTransitionError: ``to`` cannot follow the current state.
        """
        self._state = advance(self.instance, self._state, to)

    # -------------------------------------------------------------- the training process

    def start_training(self) -> None:
        """Starts its training process, with the devices it was given (:attr:`pinning`)."""
        self.training.start(self.pinning)

    def _in_ring(self) -> bool:
        return self._state is AgentState.RUNNING

    def _on_ready(self, ready: pb.Ready) -> None:
        """The training process is imported, built and waits for its slot: WARM, and the driver is told."""
        with self._state_lock:
            if self._state is not AgentState.STARTING:
                log.warning("%s: 'ready' from the training process while %s; ignored", self.instance, self._state)
                return
            self._move(AgentState.WARM)
            self.joined = True
        warmup = time.monotonic() - self.training.started_at
        log.info("%s: training process warm after %.1f s", self.instance, warmup)
        self.send(pb.AgentEvent(warm=pb.Warm(pid=ready.pid, warmup_seconds=warmup)))

    def exited(self, code: int) -> pb.AgentEvent:
        """Enter EXITED; the Exited event for the driver, ``leaving`` when the process was asked to go.

        Raises:
            IllegalTransitionError: it was reported exited before.
        """
        with self._state_lock:
            leaving = self._state.asked_to_end
            self._move(AgentState.EXITED)
        return self.exited_event(code, leaving)

    def exited_event(self, code: int, leaving: bool) -> pb.AgentEvent:
        failed = not leaving and (code != 0 or not self.joined)
        tail = self.training.stderr_tail() if failed else ""
        return pb.AgentEvent(
            exited=pb.Exited(
                exit_code=code,
                leaving=leaving,
                joined=self.joined,
                stderr_tail=tail,
                log_path=str(self.training.log_path or ""),
                hung_seconds=self.training.hung_seconds,
            )
        )

    def stop_training(self, grace: float) -> None:
        """SIGTERM the training process's group, SIGKILL it after ``grace`` seconds; blocks until then."""
        proc = self.training.proc
        with self._state_lock:
            if proc is None or proc.poll() is not None or self._state is AgentState.EXITED:
                return
            if self._state is not AgentState.STOPPING:
                self._move(AgentState.STOPPING)
        self.training.stop(grace)

    def leave_container(self, leave_s: float, stop_s: float = SIGTERM_STOP_S) -> None:
        """The NodeManager is stopping this container (SIGTERM; SIGKILL follows after its kill delay). A process
        in a ring, or warm, leaves it at its next commit exactly as on a scale-in, and the driver is told first
        (``Preempted``), so it withdraws the worker from the ring and counts it out without a failure; a process
        still starting is stopped. A process not gone after ``leave_s`` (0 where the kill delay leaves no time
        to leave) is stopped: SIGTERM, SIGKILL ``stop_s`` later. A process that ended, or is leaving or stopping
        on the driver's word, is left as it is, and the driver told nothing. Blocks until the process is gone;
        the agent then exits (:meth:`run`). A second call does nothing."""
        if self.container_stopping.is_set():
            return
        with self._state_lock:
            state = self._state
            leaving = state in (AgentState.WARM, AgentState.RUNNING)
            if leaving:
                self._move(AgentState.LEAVING)
            self.container_stopping.set()
        if state not in (AgentState.STARTING, AgentState.WARM, AgentState.RUNNING):
            return
        how = "leaves the ring at its next commit" if leaving and leave_s > 0 else "is stopped"
        log.warning("%s: the NodeManager stops this container (SIGTERM); the training process %s", self.instance, how)
        self.send(pb.AgentEvent(preempted=pb.Preempted(reason=f"SIGTERM from its NodeManager; the process {how}")))
        proc = self.training.proc
        if proc is None:
            return
        if leaving and leave_s > 0:
            self.training.tell(pb.ToTraining(leave=pb.Leave()))
            try:
                proc.wait(timeout=leave_s)
                return
            except subprocess.TimeoutExpired:
                log.warning("%s: the training process did not leave within %.1f s; stopping it", self.instance, leave_s)
        self.stop_training(stop_s)

    # -------------------------------------------------------------- the driver stream

    def send(self, event: pb.AgentEvent) -> None:
        """Sends ``event`` on the current driver stream; an Exited event is also kept for the next one."""
        with self._outbox_lock:
            if event.WhichOneof("event") == "exited":
                self._exit_event = event
            if self._outbox is not None:
                self._outbox.put(event)

    def hello(self) -> pb.AgentEvent:
        """The first event of a stream: who this agent is and where its training process stands."""
        with self._state_lock:
            state = self._state
        rank = int(self.slot_env.get("HOROVOD_RANK", "-1")) if state is AgentState.RUNNING else -1
        resume = pb.Resume(state=cast(pb.AgentState, state.wire), rank=rank, driver_incarnation=self.placed_by)
        return pb.AgentEvent(
            hello=pb.Hello(
                instance=self.instance,
                container_id=self.container_id,
                host=self.host,
                agent_id=self.agent_id,
                resume=resume,
                gpus=self.pinning.minors if self.pinning is not None else (),
                node=self.node,
            )
        )

    def _outgoing(self, outbox: queue.Queue[pb.AgentEvent | None]) -> Iterator[pb.AgentEvent]:
        while True:
            event = outbox.get()
            if event is None:
                return
            yield event

    def _open_stream(self) -> queue.Queue[pb.AgentEvent | None]:
        """A new stream's outbox, holding the Hello (and the Exited event when the process already ended)."""
        outbox: queue.Queue[pb.AgentEvent | None] = queue.Queue()
        with self._outbox_lock:
            outbox.put(self.hello())
            if self._exit_event is not None:
                outbox.put(self._exit_event)
            self._outbox = outbox
        return outbox

    def _close_stream(self) -> None:
        with self._outbox_lock:
            if self._outbox is not None:
                self._outbox.put(None)
            self._outbox = None

    def _handle(self, command: pb.AgentCommand) -> None:
        kind = command.WhichOneof("command")
        if kind in ("start", "leave"):
            to = AgentState.RUNNING if kind == "start" else AgentState.LEAVING
            with self._state_lock:
                if self._state in (AgentState.STOPPING, AgentState.EXITED) or self.container_stopping.is_set():
                    return  # the process is going anyway
                self._move(to)  # a Start or Leave before Warm breaks the protocol: IllegalTransitionError
            if kind == "start":
                log.info("%s: joining the ring as rank %s", self.instance, command.start.env.get("HOROVOD_RANK"))
                self._place(dict(command.start.env))
                self.training.send_slot_env(self.slot_env)
                if self.batch is not None:
                    self.training.tell(pb.ToTraining(target=self.batch))
            else:
                log.info("%s: leaving the ring (scale-in)", self.instance)
                self.training.tell(pb.ToTraining(leave=pb.Leave()))
        elif kind == "reform":
            if self._state is not AgentState.RUNNING:
                log.error("%s: a Reform while %s; ignored", self.instance, self._state)
                return
            self._place(dict(command.reform.env))
            log.info(
                "%s: driver incarnation %d adopted this worker; re-forming the ring at the next commit",
                self.instance,
                self.placed_by,
            )
            self.training.tell(pb.ToTraining(reform=pb.Reform(env=self.slot_env)))
        elif kind == "target":
            self._relay_target(command.target)
        elif kind == "reattached":
            log.info("%s: the job driver took this worker back on a new stream; its ring stands", self.instance)
            self.training.tell(pb.ToTraining(driver_lost=False))
        elif kind == "stop":
            self.stop_training(command.stop.grace_seconds or STOP_GRACE_S)

    def _relay_target(self, target: pb.Target) -> None:
        """Keeps the job's latest target that sets its batch and hands it to the training process when that is in
        a ring (before, the process waits for its slot's environment only: it gets the target right after it).
        A target without a batch, or older than the one kept, changes nothing here."""
        if not target.HasField("batch_size") or (self.batch is not None and self.batch.version >= target.version):
            return
        self.batch = target
        with self._state_lock:
            running = self._state is AgentState.RUNNING
        if running:
            log.info("%s: target %d: batch %d", self.instance, target.version, target.batch_size)
            self.training.tell(pb.ToTraining(target=target))

    def _place(self, slot_env: dict[str, str]) -> None:
        self.slot_env = slot_env
        self.placed_by = int(slot_env.get("SUBMARINE_DRIVER_INCARNATION", "0") or 0)

    def run(
        self,
        target: str,
        token: str | None,
        tls_ca: bytes | None = None,
        *,
        locate: Callable[[], str] | None = None,
        grace: float = DRIVER_GRACE_S,
        client_cert: tuple[bytes, bytes] | None = None,
        server_name: str | None = None,
        insecure: bool = False,
    ) -> int:
        """Runs the training process and stays attached to the job's driver (see the module doc); returns
        the agent's exit status. ``locate`` finds the driver's address again after it was lost.

        The driver is reached over TLS, checked against ``tls_ca`` for ``server_name`` (the job's name for
        it) and shown ``client_cert``; in plaintext only with ``insecure``.

        Raises:
            InsecureChannelError: no ``tls_ca`` and not ``insecure`` (before the training process starts).
        """
        if tls_ca is None and not insecure:
            raise plaintext_refused(target)
        self._tls = (client_cert, server_name, insecure)
        self.start_training()
        threading.Thread(target=self.training.watch_heartbeats, daemon=True, name="heartbeats").start()
        link = threading.Thread(
            target=self._stay_attached, args=(target, token, tls_ca, locate, grace), daemon=True, name="driver-link"
        )
        link.start()

        code = self.training.wait()
        event = self.exited(code)
        leaving = event.exited.leaving
        log.info("%s: training process exited with %d%s", self.instance, code, " (leaving)" if leaving else "")
        self.send(event)
        if self.gave_up:
            self._close_stream()
            return 1
        if code != 0 and not leaving and not self.container_stopping.is_set():
            time.sleep(0.5)  # let the Exited event reach the driver before the container goes
            self._close_stream()
            return code
        # Finished or removed: stay until YARN stops this container (exiting would start a new one).
        self.container_stopping.wait()
        time.sleep(0.5)  # let the Exited event reach the driver before the container goes
        self._close_stream()
        return 0

    def _stay_attached(
        self, target: str, token: str | None, tls_ca: bytes | None, locate: Callable[[], str] | None, grace: float
    ) -> None:
        """Attaches to the driver and, each time the stream is lost, attaches to its next incarnation, until
        the driver ends the stream (the job ended) or stays away for ``grace`` s (the process is stopped)."""
        metadata = bearer(token)
        lost_at: float | None = None
        while True:
            wait = CONNECT_TIMEOUT_S if lost_at is None else max(0.0, lost_at + grace - time.monotonic())
            client_cert, server_name, insecure = self._tls
            channel = open_channel(
                target,
                ca=tls_ca,
                client_cert=client_cert,
                server_name=server_name,
                insecure=insecure,
                options=STREAM_KEEPALIVE_CLIENT_OPTIONS,
            )
            try:
                grpc.channel_ready_future(channel).result(timeout=min(wait, 5.0) if lost_at is not None else wait)
            except grpc.FutureTimeoutError:
                channel.close()
                if lost_at is None or time.monotonic() - lost_at >= grace:
                    self._give_up(target, "did not answer" if lost_at is None else f"stayed away for {grace:.0f} s")
                    return
                target = self._relocate(target, locate)
                continue
            commands = pb_grpc.ElasticDriverStub(channel).Attach(self._outgoing(self._open_stream()), metadata=metadata)
            try:
                for command in commands:
                    lost_at = None
                    try:
                        self._handle(command)
                    except IllegalTransitionError as exc:
                        log.error("%s: ignoring the driver's %s: %s", self.instance, command.WhichOneof("command"), exc)
                ended = None
            except grpc.RpcError as exc:
                ended = exc
            finally:
                self._close_stream()
                channel.close()
            if ended is None:
                self.released.set()
                return  # the driver closed the stream: the job ended
            if ended.code() is grpc.StatusCode.FAILED_PRECONDITION:
                self._give_up(target, f"refused this worker: {ended.details()}")
                return
            if not self.training.alive:
                return  # nothing left to re-attach for
            if lost_at is None:
                lost_at = time.monotonic()
                log.warning(
                    "%s: lost the job driver (%s); the training process goes on, looking for the driver for %.0f s",
                    self.instance,
                    ended.code(),
                    grace,
                )
                self.training.tell(pb.ToTraining(driver_lost=True))
            time.sleep(REATTACH_PAUSE_S)
            target = self._relocate(target, locate)

    def _relocate(self, target: str, locate: Callable[[], str] | None) -> str:
        if locate is None:
            return target
        try:
            found = locate()
        except (ElasticError, OSError) as exc:
            log.info("%s: the driver's address is not known yet (%s)", self.instance, exc)
            return target
        if found != target:
            log.info("%s: the job driver is now at %s", self.instance, found)
        return found

    def _give_up(self, target: str, why: str) -> None:
        """Stops the training process for good: the agent then exits with status 1 (YARN starts a fresh one)."""
        log.error("%s: the job driver at %s %s; stopping the training process", self.instance, target, why)
        self.gave_up = True
        self.stop_training(STOP_GRACE_S)


def pin_gpus(container_id: str) -> Pinning | None:
    """The devices of this worker's container (:mod:`submarine_elastic.elastic.gpus`); None for a CPU worker.

    Raises:
        GpuPinningError: its NodeManager cannot be asked, or the devices cannot be had (the message says why).
        ValueError: ``SUBMARINE_WORKER_GPUS`` is not a count.
    """
    settings = env.settings()
    count = settings.worker_gpus
    if not count:
        return None
    nm_host, nm_port, web_port = settings.nm_host, settings.nm_port, settings.nm_http_port
    if not (nm_host and nm_port and web_port):
        raise GpuPinningError("NM_HOST, NM_PORT and NM_HTTP_PORT must be set (YARN sets them in a container)")
    node = read_node_gpus(f"http://{nm_host}:{web_port}", settings.user())
    directory = claims_dir(settings.gpu_claims_directory(), nm_host, nm_port)
    pinning = pin(node, count, container_id, directory, f"{container_id} pid {os.getpid()}")
    log.info(
        "GPUs %s (%s) from %s: %s",
        ",".join(map(str, pinning.minors)),
        ",".join(pinning.uuids) or "no UUIDs",
        "YARN's assignment" if pinning.source == "yarn" else f"the claims in {directory}",
        pinning.env(),
    )
    return pinning


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    try:
        settings = env.settings()
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if not settings.worker_cmd_b64:
        log.error("SUBMARINE_WORKER_CMD_B64 is not set: nothing to run")
        return 2
    command = base64.b64decode(settings.worker_cmd_b64).decode()
    instance = settings.instance()
    container_id = settings.container_id or f"{instance}-{os.getpid()}"
    host = settings.nm_host or socket.gethostname()
    try:
        token, tls_ca, client_cert = settings.read_job_token(), settings.read_driver_tls_ca(), settings.read_agent_tls()
        insecure = settings.insecure
        hung_after = settings.hung_after_s or HUNG_AFTER_S
        grace = settings.driver_grace_s or DRIVER_GRACE_S
        kill_delay = settings.sigkill_delay_s()
        target = driver_address()
    except (ElasticError, OSError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    try:
        unpack_code(Path.cwd())  # the job's snapshot, once per container (relaunches find it unpacked)
    except (OSError, tarfile.TarError) as exc:
        log.error("%s: cannot unpack the job's code: %s", instance, exc)
        return 2
    agent = Agent(command, instance, container_id, host)
    agent.training.hung_after = hung_after
    try:
        agent.pinning = pin_gpus(container_id)
    except (GpuPinningError, ValueError) as exc:
        log.error("%s: %s", instance, exc)
        return 2
    leave_s = kill_delay - SIGTERM_MARGIN_S if kill_delay is not None and kill_delay - SIGTERM_MARGIN_S >= 1 else 0.0

    def on_sigterm(_signum: int, _frame: object) -> None:
        if agent.training.proc is None:
            sys.exit(0)  # nothing started yet: nothing to leave
        # Off the main thread, which waits for the training process and then reports its exit.
        threading.Thread(target=agent.leave_container, args=(leave_s,), daemon=True, name="sigterm").start()

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return agent.run(
            target,
            token,
            tls_ca,
            locate=lambda: driver_address(timeout=5.0),
            grace=grace,
            client_cert=client_cert,
            server_name=settings.driver_tls_name,
            insecure=insecure,
        )
    except InsecureChannelError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
