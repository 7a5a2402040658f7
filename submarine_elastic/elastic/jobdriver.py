"""The job driver (:class:`JobDriver`): one job's control plane, made of parts with one owner each.

1. :class:`~submarine_elastic.elastic.driver_servicer.DriverServicer` (``servicer``): the gRPC face; it checks
   what arrives and hands it to the driver (:meth:`JobDriver.attach`, :meth:`JobDriver.on_event`,
   :meth:`JobDriver.take_target`, :meth:`JobDriver.status`).
2. :class:`~submarine_elastic.elastic.ringhost.AgentRegistry` (``registry``): the agents, which double as
   Horovod's host discovery; Horovod itself is reached only through
   :mod:`~submarine_elastic.elastic.horovod_adapter`.
3. :class:`~submarine_elastic.elastic.reconcile.TargetBook` (``targets``) and
   :class:`~submarine_elastic.elastic.resizer.Resizer` (``resizer``): the targets, numbered, carried out in
   version order by the pure reconcile step's plans.
4. :class:`~submarine_elastic.elastic.yarnsync.YarnSync` (``sync``): YARN's worker component, the target the
   driver set and what YARN had when it last looked.
5. :class:`~submarine_elastic.elastic.adoption.Adopter` (``adoption``): a relaunched incarnation's take-over of
   its predecessor's ring.
6. :class:`~submarine_elastic.protocol.records.DriverState` and
   :class:`~submarine_elastic.protocol.records.JobOutcome`: what the next incarnation reads, and how the job
   ended.

The driver itself runs the job: the first ring, each slot's start, the workers' failures
(:mod:`~submarine_elastic.elastic.failures`), the containers YARN lost, and the end. The job follows
:class:`~submarine_elastic.protocol.api.JobPhase`; a transition it does not have raises.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import sys
import threading
import time
from pathlib import Path
from typing import cast

import grpc

from submarine_elastic import env
from submarine_elastic.elastic.adoption import Adopter, restart_reason, stopped_run
from submarine_elastic.elastic.driver_servicer import DriverServicer, control_plane_threads, serve_control_plane
from submarine_elastic.elastic.failures import (
    MAX_FAILURES,
    ended_by,
    exit_failure,
    job_reason,
    lost_failure,
    lost_on_the_way,
)
from submarine_elastic.elastic.horovod_adapter import (
    BoundRendezvousServer,
    ElasticDriver,
    SlotInfo,
    leave_for,
    new_ring,
    slot_env,
    wait_for_reform,
)
from submarine_elastic.elastic.reconcile import REQUEUED, TargetBook, lost_agents
from submarine_elastic.elastic.resizer import Resizer
from submarine_elastic.elastic.ringhost import LOST_EXIT, AgentHandle, AgentRegistry, rendezvous_address
from submarine_elastic.elastic.yarnsync import YarnSync, replaced_by_yarn
from submarine_elastic.protocol.api import (
    DRIVER_COMPONENT,
    WORKER_COMPONENT,
    Adoption,
    BatchLimits,
    IllegalTransitionError,
    JobPhase,
    Limits,
    WorkerState,
    advance,
    verdict,
)
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import WHOLE_JOB_LOST, DriverState, JobOutcome, StateKeeper
from submarine_elastic.rpc import ServerTls
from submarine_elastic.yarn import ContainerStatus, ServiceBackend, YarnError
from tf_hooks.tensorboard import DecisionLog

log = logging.getLogger("submarine_elastic.driver")

#: How often the driver's state file is brought up to date.
PERSIST_EVERY_S = 1.0
#: How often the driver reads the worker containers YARN runs, to stop agents whose container YARN lost.
CONTAINER_CHECK_S = 5.0


#: How long an agent whose stream was lost (its process training on, as far as the driver knows) has to re-attach
#: before its process counts lost: with the keepalive's 15 s (``rpc.PARTITION_NOTICED_WITHIN_S``), under the jobs'
#: 20 s Gloo timeout. An agent that lost its stream to a paused driver re-attaches within a second of its waking.
REATTACH_GRACE_S = 3.0

#: The exit status of a driver that ends for YARN to relaunch it (its ring lost whole, the job resumable from a
#: checkpoint; sysexits' EX_TEMPFAIL), and how many incarnations may run a job before a lost ring fails it.
RELAUNCH_EXIT = 75
MAX_INCARNATIONS = 8
#: Training processes killed by a signal before the job's first ring formed that YARN relaunches; the next fails the
#: job (a script the OOM killer ends in every container it starts in is not retried for ever).
MAX_KILLED_BEFORE_RING = 3

#: What Horovod is told of a worker YARN stopped that left the ring cleanly while the ring needed it
#: (:meth:`JobDriver._stopped_in_ring`): a failure, never the job's success.
STOPPED_IN_RING_EXIT = 1


class JobDriver:
    """The control plane of one job: agents attach, clients resize it and read its status (through
    :class:`DriverServicer`, ``servicer``).

    ``phase`` (:class:`JobPhase`) moves only along its transitions: assigning one it does not have raises
    :class:`IllegalTransitionError`. Its parts are listed in the module's docstring.
    """

    def __init__(
        self,
        job: str,
        limits: Limits,
        yarn: ServiceBackend,
        token: str | None,
        iface: str,
        elastic_timeout: int,
        *,
        state_file: Path | None = None,
        app: str = "",
        container_id: str = "",
        batch_limits: BatchLimits | None = None,
        queue: str | None = None,
    ) -> None:
        self.job = job
        #: the YARN queue the job runs in (None: the cluster's default)
        self.queue = queue
        self.limits = limits
        self.batch_limits = batch_limits
        self.yarn = yarn
        self.token = token
        self.iface = iface
        self.registry = AgentRegistry()
        self._phase = JobPhase.WAITING
        self._ring_formed = False
        self._hvd: ElasticDriver | None = None
        self._rendezvous = BoundRendezvousServer(verbose=0)
        self._rendezvous.on_ring = self._opening
        self._elastic_timeout = elastic_timeout
        self._server_ip = "127.0.0.1"
        self._rendezvous_port = 0
        #: the first failed training processes (at most MAX_FAILURES), kept under their lock
        self.failures: list[pb.WorkerFailure] = []
        #: the workers whose training process ended on its own, cleanly, in the ring (not stopped, not leaving)
        self.finished_workers: set[str] = set()
        self._failures_lock = threading.Lock()
        self._killed_before_ring = 0  # processes killed by a signal before the first ring formed (relaunched)
        self.error = ""
        self._fatal = threading.Event()
        self._app = app
        #: this driver's own YARN container ('' outside YARN): when YARN counts it out, the driver steps down
        self.container_id = container_id
        self._server: grpc.Server | None = None
        previous = DriverState.load(state_file, app)
        #: what the previous incarnation left (None: this is the job's first driver)
        self.previous = previous
        self.incarnations = list(previous.incarnations) if previous else []
        self.incarnation = len(self.incarnations) + 1
        self._started = time.time()
        self.incarnations.append(
            pb.DriverIncarnation(number=self.incarnation, started=self._started, host=socket.gethostname())
        )
        #: the last state of the job's run YARN stopped (``yarn app -stop``) before it started this one (None: none)
        stopped = stopped_run(state_file, app) if previous is None else None
        #: YARN's worker component: the target this driver set, and what YARN had when it last looked
        count = (previous.target if previous else 0) or (stopped.target if stopped else 0) or limits.num
        self.sync = YarnSync(yarn, job, removing=previous.removing if previous else (), count=count)
        #: the job's targets: taken from clients (SetTarget), numbered, applied by the resizer in order
        self.targets = TargetBook.resumed(limits.num, previous) if previous else TargetBook(count)
        self.registry.target = lambda: self.targets.workers
        if previous is not None:
            self.failures = list(previous.failures)
            log.warning(
                "driver incarnation %d of job %s: the previous one left target %d (ring of %d)",
                *(self.incarnation, job, self.target, previous.world_size),
            )
        if stopped is not None:  # YARN started the service again after `yarn app -stop`
            reason = restart_reason(stopped, app, self.targets.workers)
            log.warning("%s", reason)
            self.targets.noted(stopped.world_size or stopped.target, self.targets.workers, reason)
        self._state_keeper = StateKeeper(state_file) if state_file is not None else None
        #: each client's target as taken, in the job's TensorBoard run (``SUBMARINE_TENSORBOARD_DIR``)
        self.decisions = DecisionLog.from_env()
        #: carries out the targets, one at a time, in version order (its thread runs :meth:`Resizer.loop`)
        self.resizer = Resizer(
            self.registry,
            self.targets,
            self.sync,
            yarn,
            limits,
            batch_limits,
            queue=queue,
            ranks=self._ranks,
            preempted_from=previous.preempted_from or None if previous else None,
        )
        #: a relaunched incarnation's take-over of its predecessor's ring
        self.adoption = Adopter(self.registry, previous, limits.min)
        #: the gRPC servicer of its control plane
        self.servicer = DriverServicer(self)

    @property
    def phase(self) -> JobPhase:
        return self._phase

    @phase.setter
    def phase(self, to: JobPhase) -> None:
        """Raises IllegalTransitionError for a transition :class:`JobPhase` does not have."""
        self._phase = advance(f"job {self.job}", self._phase, JobPhase(to))
        self._ring_formed = self._ring_formed or self._phase is JobPhase.RUNNING

    @property
    def target(self) -> int:
        """The worker count the resizer applies now."""
        return self.targets.workers

    @property
    def requested(self) -> int:
        """The worker count of the newest target taken."""
        return self.targets.requested

    @property
    def timeline(self) -> list[pb.ResizeEvent]:
        return self.targets.timeline

    @property
    def batch_timeline(self) -> list[pb.Target]:
        """Every target that set the job's batch, oldest first (at most MAX_BATCH_TIMELINE)."""
        return self.targets.batch_timeline

    @property
    def ring_formed(self) -> bool:
        """The job has been RUNNING: its ring formed once."""
        return self._ring_formed

    # ------------------------------------------------------------------ agents and clients (DriverServicer)

    def attach(self, agent: AgentHandle, resume: pb.Resume | None) -> tuple[AgentHandle, str]:
        """Registers an agent whose Hello was valid, unless :meth:`admit` refuses it; sends it the batch in force.
        Returns the handle its stream serves and why it is refused ('' when it is not). An agent this driver
        already holds re-attaches after losing its stream (:meth:`Adopter.take_back`): the handle is the one it had."""
        known = self.registry.get(agent.agent_id)
        if known is not None and not known.state.ended:
            return self.adoption.take_back(agent, resume, self.targets.batch)
        refusal = self.admit(agent, resume)
        if refusal:
            return agent, refusal
        for lost in self.registry.snapshot():
            if lost.container_id == agent.container_id and lost.stream_lost_at is not None:
                # Its container's next agent (YARN relaunched the one that died there): the lost one is not coming back.
                self._stream_gone(lost, lost.commands)
        self.registry.add(agent)
        batch = self.targets.batch
        if batch is not None:
            agent.commands.put(pb.AgentCommand(target=batch))
        log.info(
            "agent attached: %s (%s)%s",
            agent.instance,
            agent.container_id,
            f", adopted at rank {agent.adopted_rank}" if agent.adopted else "",
        )
        return agent, ""

    def admit(self, agent: AgentHandle, resume: pb.Resume | None) -> str:
        """Why a (re-)attaching agent is refused ('' when it is not), its state set from ``resume``
        (:meth:`Adopter.admit`)."""
        return self.adoption.admit(agent, resume, incarnation=self.incarnation, ring_formed=self.ring_formed)

    def on_event(self, agent: AgentHandle, event: pb.AgentEvent) -> None:
        """One event of ``agent``'s stream: warm, exited or preempted; one its state does not allow is logged and
        ignored."""
        kind = event.WhichOneof("event")
        try:
            if kind == "warm":
                log.info("%s warm after %.1f s", agent.instance, event.warm.warmup_seconds)
                self.registry.move(agent.agent_id, WorkerState.WARM)
            elif kind == "exited":
                code = event.exited.exit_code
                log.info("%s exited with %d%s", agent.instance, code, " (leaving)" if event.exited.leaving else "")
                if agent.state.ended:
                    raise IllegalTransitionError(agent.instance, agent.state, WorkerState.EXITED)
                self._note_exit(agent, event.exited)
                self.registry.end(agent, code, asked=event.exited.leaving)
            elif kind == "preempted":
                self.resizer.on_preempted(agent, event.preempted.reason)
        except IllegalTransitionError as exc:
            log.error("ignoring %s's %s event: %s", agent.instance, kind, exc)

    def detach(self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None] | None = None) -> None:
        """``agent``'s stream whose replies were ``commands`` (default: its current one) ended. One it no longer
        uses (it re-attached since) changes nothing. An agent that stays in the job (attached, warm or running,
        not leaving) has :data:`REATTACH_GRACE_S` to re-attach, still offered to Horovod: its process may train on
        in the ring while the stream is down. Otherwise, or once the grace ends, its process is lost to the job."""
        commands = agent.commands if commands is None else commands
        if not self.registry.lose_stream(agent, commands):
            return
        commands.put(None)  # the lost stream's replies end; what is queued after waits for a re-attach
        if agent.staying and not self._fatal.is_set():
            log.warning(
                "lost the stream of %s (%s); its process counts lost unless it re-attaches within %.0f s",
                *(agent.instance, agent.agent_id, REATTACH_GRACE_S),
            )
            grace = threading.Timer(REATTACH_GRACE_S, self._stream_gone, args=(agent, commands))
            grace.daemon = True
            grace.start()
            return
        self._stream_gone(agent, commands)

    def _stream_gone(self, agent: AgentHandle, commands: queue.Queue[pb.AgentCommand | None]) -> None:
        """``agent`` did not re-attach on another stream: its process is lost to the job if it had not ended, and
        its commands end."""
        if not self.registry.disconnect(agent, commands):
            return
        self.registry.lose(agent)  # an agent that went without a word: its process is lost to the job
        log.info("agent detached: %s", agent.instance)

    def _note_exit(self, agent: AgentHandle, exited: pb.Exited) -> None:
        """Keeps a failed (or never joined) training process's reason (:func:`exit_failure`); fails the job when
        the process finished without ever joining the ring, or failed before the ring formed (the script is
        broken: it would fail in every container YARN relaunched). A process killed by a signal before then (an
        operator, the kernel's OOM killer, a fault) is a lost worker, which YARN relaunches, up to
        :data:`MAX_KILLED_BEFORE_RING` times; the next fails the job."""
        failure = exit_failure(agent, exited, self._ranks().get(agent.agent_id, -1))
        if failure is None:
            return
        self._keep(failure)
        tail = exited.stderr_tail
        log.error("%s%s", failure.reason, f"; its stderr ended with:\n{tail}" if tail else "")
        killed_early = exited.exit_code < 0 and not self.ring_formed
        if killed_early and self._killed_before_ring < MAX_KILLED_BEFORE_RING:
            self._killed_before_ring += 1
            log.warning(
                "%s was killed before the first ring formed: a lost worker, which YARN relaunches (%d of %d)",
                *(agent.instance, self._killed_before_ring, MAX_KILLED_BEFORE_RING),
            )
            return
        if exited.exit_code == 0 or not self.ring_formed:
            self._give_up(failure)

    def _keep(self, failure: pb.WorkerFailure) -> None:
        """Keeps ``failure`` if fewer than MAX_FAILURES are (from gRPC threads and the container watch alike)."""
        with self._failures_lock:
            if len(self.failures) < MAX_FAILURES:
                self.failures.append(failure)

    def _give_up(self, failure: pb.WorkerFailure) -> None:
        if not self.error:
            self.error = job_reason(failure)
        self._fatal.set()
        if self._hvd is not None:
            self._hvd.stop(error_message=self.error)

    def _ranks(self) -> dict[str, int]:
        ranks: dict[str, int] = {}
        if self._hvd is not None:
            for host, slots in self._hvd.host_assignments.items():
                ranks[host] = slots[0].rank if slots else -1
        return ranks

    def take_target(self, target: pb.Target) -> tuple[pb.Target, int]:
        """A client's target (:meth:`TargetBook.take`): the target as taken and the worker count before it; it
        replaces growing back on the driver's own after a preemption.

        Raises:
            FlexRefusedError: it is refused (naming why).
        """
        self.resizer.forget_preemption()
        taken, previous = self.targets.take(
            target,
            self.limits,
            self.batch_limits,
            (a.instance for a in self.registry.snapshot()),
            on_batch=self._relay_batch,
        )
        if self.decisions is not None:
            self.decisions.note(taken, previous)
        return taken, previous

    def _relay_batch(self, target: pb.Target) -> None:
        """A target that changes the job's batch (called in version order): sent to every attached agent, which
        hands it to its training process once that is in a ring; the ranks take rank 0's at their next commit
        (an agent that attaches later gets it first thing)."""
        log.info(
            "batch %d, accumulation %d%s (target %d): %s",
            target.batch_size,
            target.accum_steps,
            f", learning rate {target.learning_rate:g}" if target.HasField("learning_rate") else "",
            target.version,
            target.reason,
        )
        for agent in self.registry.snapshot():
            if agent.connected and not agent.state.ended:
                agent.commands.put(pb.AgentCommand(target=target))

    def status(self) -> pb.JobStatus:
        """The job as the driver sees it now, with the reconcile step's verdict on its target."""
        workers = self.registry.statuses(self._ranks())
        target, version = self.targets.workers, self.targets.version
        world_size = self._hvd.world_size() if self._hvd is not None else 0
        leaving = [w.instance for w in workers if w.state == WorkerState.LEAVING.wire]
        yarn_lag = self.sync.lag()
        yarn_ready = self.sync.ready()
        judged = verdict(target, world_size, leaving, yarn_ready, yarn_lag, yarn_settled=not self.sync.reconciling)
        batch_timeline = self.targets.batch_timeline
        return pb.JobStatus(
            job=self.job,
            phase=cast(pb.JobPhase, self.phase.wire),
            target=target,
            world_size=world_size,
            min_workers=self.limits.min,
            max_workers=self.limits.max,
            workers=workers,
            timeline=self.targets.timeline,
            error=self.error or "; ".join(why for why in (self._waiting_reason(), yarn_lag) if why),
            failures=self.failures,
            incarnations=self.incarnations,
            batch=batch_timeline[-1] if batch_timeline else None,
            batch_timeline=batch_timeline,
            min_batch_size=self.batch_limits.min if self.batch_limits else 0,
            max_batch_size=self.batch_limits.max if self.batch_limits else 0,
            ring_at_target=judged.ring_at_target,
            yarn_ready=yarn_ready,
            converged=judged.converged,
            lag=judged.lag,
            version=version,
        )

    def _waiting_reason(self) -> str:
        """Why the ring has not formed yet ('' once it has, or when nothing is wrong)."""
        if self.ring_formed or self.phase is not JobPhase.WAITING:
            return ""
        agents = [a for a in self.registry.snapshot() if a.connected]
        joined = [a for a in agents if a.joined]
        if not agents:
            return "no worker agent has attached yet (containers starting?)"
        if len(joined) < self.limits.min:
            return (
                f"{len(agents)} worker(s) attached, {len(joined)} asked to join the ring (need {self.limits.min}): "
                f"the training processes have not called hvd.init() yet"
            )
        return ""

    # ------------------------------------------------------------------ containers YARN lost

    def _watch_containers(self) -> None:
        """Every CONTAINER_CHECK_S, reads the worker component from YARN and evicts the agents whose container
        YARN counts out (:meth:`_evict_orphans`); a read that fails is tried again at the next round."""
        while not self._fatal.is_set():
            time.sleep(CONTAINER_CHECK_S)
            generation = self.sync.generation
            try:
                status = self.yarn.status(self.job)
            except YarnError as exc:
                log.debug("cannot read the worker containers from YARN: %s", exc)
                continue
            worker, driver = status.component(WORKER_COMPONENT), status.component(DRIVER_COMPONENT)
            if driver is not None and (why := replaced_by_yarn(self.container_id, driver.containers)):
                self._step_down(why)
                return
            if worker is not None:
                self.sync.watched(worker.ready_count)
                self.resizer.on_yarn(worker, generation)
                self._evict_orphans(worker.containers)
                self.resizer.grow_back(worker.memory_mb, worker.vcores)

    def _step_down(self, why: str) -> None:
        """A driver YARN replaced (its NodeManager was lost while it ran on): it drops every agent's stream, so
        they find and re-attach to the driver YARN runs now, and exits."""
        log.error("stepping down: %s; the agents re-attach to the driver YARN runs now", why)
        if self._server is not None:
            self._server.stop(grace=0)
        logging.shutdown()
        os._exit(0)

    def _evict_orphans(self, containers: tuple[ContainerStatus, ...]) -> list[AgentHandle]:
        """Evicts the agents still attached whose container YARN no longer runs (:func:`lost_agents`); returns
        them. Each is withdrawn from discovery (its ring re-forms without it), told to Stop, and recorded among
        the failures with why; one whose stream is lost too went with its container and counts lost at once."""
        evicted: list[AgentHandle] = []
        for agent, reason in lost_agents(self.registry.snapshot(), containers):
            rank = self._ranks().get(agent.agent_id, -1)
            if agent.stream_lost_at is not None:
                # Its stream is gone too: its process went with the container (a host that died), not a leaver.
                self._keep(lost_failure(agent, reason, rank))
                self._stream_gone(agent, agent.commands)
                evicted.append(agent)
                continue
            if agent.state in (WorkerState.WARM, WorkerState.RUNNING):
                try:
                    self.registry.move(agent.agent_id, WorkerState.LEAVING)
                except IllegalTransitionError:
                    continue  # its process ended meanwhile
            agent.commands.put(pb.AgentCommand(stop=pb.Stop(grace_seconds=10)))
            evicted.append(agent)
            if any(f.container_id == agent.container_id for f in self.failures):
                continue  # an agent not yet warm is told again each round until its process ends
            log.warning("%s", reason)
            self._keep(lost_failure(agent, reason, rank))
        return evicted

    # ------------------------------------------------------------------ Horovod

    def _create_worker(self, slot_info: SlotInfo, events: list[threading.Event]) -> tuple[int, float]:
        agent = self.registry.get(slot_info.hostname)
        if agent is None:
            log.error("no agent for host %s", slot_info.hostname)
            return 1, time.time()
        env_of_slot = {
            **slot_env(self._server_ip, self.iface, self._rendezvous_port, slot_info),
            "PYTHONUNBUFFERED": "1",
            "SUBMARINE_DRIVER_INCARNATION": str(self.incarnation),
        }
        if agent.adoption is Adoption.ADOPTED and agent.state is WorkerState.RUNNING:
            # It trains in the previous incarnation's ring: it re-forms around this driver's rendezvous.
            agent.adoption = advance(agent.instance, agent.adoption, Adoption.REFORMED)
            agent.commands.put(pb.AgentCommand(reform=pb.Reform(env=env_of_slot)))
        else:
            try:
                self.registry.move(agent.agent_id, WorkerState.RUNNING)
            except IllegalTransitionError as exc:
                # Horovod read discovery just before the worker began to leave, or before it ended.
                log.info("no slot for %s: %s", agent.instance, exc)
            else:
                agent.commands.put(pb.AgentCommand(start=pb.Start(env=env_of_slot)))
        while not agent.exited.wait(0.5):
            if any(e.is_set() for e in events):
                agent.commands.put(pb.AgentCommand(stop=pb.Stop(grace_seconds=10)))
                agent.exited.wait(15)
                break
        code = agent.exit_code if agent.exit_code is not None else 1
        stopped = any(e.is_set() for e in events)  # Horovod stopped the ring, or was stopping it when it ended
        if code == 0 and not stopped and agent.state is WorkerState.EXITED and not agent.preempted:
            self.finished_workers.add(agent.instance)
        self._wait_for_reform()
        withdrawn = agent.state in (WorkerState.LEAVING, WorkerState.LEFT) and not agent.preempted
        if withdrawn and self._hvd_assigned(slot_info) and not any(e.is_set() for e in events):
            self._left_before_the_reform(agent, slot_info, code)
        if agent.state in (WorkerState.LEAVING, WorkerState.LEFT) and not self._hvd_assigned(slot_info):
            # Removed on scale-in and no longer in Horovod's ring: the exit is expected.
            return 0, time.time()
        if agent.preempted:
            return self._stopped_in_ring(agent, code), time.time()
        return code, time.time()

    def _left_before_the_reform(self, agent: AgentHandle, slot_info: SlotInfo, code: int) -> None:
        """``agent``'s worker was withdrawn from the ring (a scale-in, a decommission or a flex down through YARN:
        the ring can do without it) but its process ended, or its agent went (YARN stopped the container after
        its kill delay), before Horovod re-formed the ring without it. Told to Horovod now, its exit would be a
        failure (its host blacklisted; the job stopped when no host of the ring is left unblacklisted) or, clean,
        the job's success. It leaves as it would have: recorded ready for the re-form, in which it gets no slot
        (:func:`leave_for`); the survivors re-form at their next commit, or roll back to it when the worker went
        in the middle of a step. Its exit is then that of a host Horovod no longer counts."""
        assert self._hvd is not None
        log.info(
            "%s ended (%d) before the ring re-formed without it: it leaves at the re-form, no failure",
            agent.instance,
            code,
        )
        leave_for(self._hvd, slot_info.hostname, slot_info.local_rank)

    def _stopped_in_ring(self, agent: AgentHandle, code: int) -> int:
        """The exit code Horovod is told for ``agent``, a worker YARN stopped (an operator's flex or stop through
        YARN, a preemption) that was still in Horovod's ring when its process ended with ``code``: the ring needed
        it (fewer than --min_workers would have been left without it). A clean exit in the ring is the job's
        success to Horovod, so it is told a failure: the others roll back to their last commit and re-form with
        the worker YARN starts in its place. When it was the last of its ring and the job writes no checkpoint, no
        worker holds what the job trained: the job ends saying so (not with Horovod's exit codes), rather than
        training again from its first step."""
        others = [
            a for a in self.registry.snapshot() if a is not agent and a.state is WorkerState.RUNNING and not a.preempted
        ]
        if not others and not env.settings().checkpoint_path:
            self.error = (
                f"{WHOLE_JOB_LOST}: YARN stopped {agent.instance}, the last worker of its ring (a flex through YARN "
                f"below --min_workers {self.limits.min}, a stop or a preemption), and the job writes no checkpoint "
                f"(--checkpoint_path): what it trained is lost; run it again, with --checkpoint_path to resume "
                f"after such a loss"
            )
            log.error("%s", self.error)
            self._fatal.set()
            if self._hvd is not None:
                self._hvd.stop(error_message=self.error)
        return code or STOPPED_IN_RING_EXIT

    def _wait_for_reform(self) -> None:
        """Waits while Horovod forms a new ring: it records an exit reported then among the new ring's workers, so
        the exit of one the new ring left out would fill a place of its next re-form (which then goes ahead
        without one of its own workers). Reported after the re-form, it is ignored, as for removed hosts."""
        if self._hvd is not None:
            wait_for_reform(self._hvd)

    def _hvd_assigned(self, slot_info: SlotInfo) -> bool:
        return self._hvd is not None and self._hvd.has_rank_assignment(slot_info.hostname, slot_info.local_rank)

    def serve(
        self, port: int, tls: ServerTls | None = None, *, host: str = "127.0.0.1"
    ) -> tuple[grpc.Server, int] | None:
        """Starts the control plane on ``host:port`` (port 0: any free one; :func:`serve_control_plane`, the job
        token required when the driver has one); returns the server and its port, None when the port is taken."""
        return serve_control_plane(
            self.servicer, token=self.token, threads=control_plane_threads(self.limits), port=port, tls=tls, host=host
        )

    def run(self, port: int, tls: ServerTls | None = None, *, host: str = "127.0.0.1") -> int:
        """Serves the control plane on ``host:port`` (see :meth:`serve`) and drives the job until it ends;
        returns the exit code. Horovod's rendezvous listens on the address its workers are told
        (:func:`rendezvous_address` of the Gloo interface), not on every interface."""
        served = self.serve(port, tls, host=host)
        if served is None:
            log.error("cannot listen on %s port %d (taken?)", host, port)
            return 2
        server, _ = served
        self._server = server
        how = "plaintext" if tls is None else "mutual TLS" if tls.client_ca else "TLS"
        log.info("driver of job %s listening on %s port %d (%s); limits %s", self.job, host, port, how, self.limits)
        threading.Thread(target=self.resizer.loop, daemon=True, name="resizer").start()
        threading.Thread(target=self._persist_loop, daemon=True, name="persist").start()
        threading.Thread(target=self._watch_containers, daemon=True, name="containers").start()
        if self.previous is not None:
            # What YARN should have is what the previous incarnation last applied (and still removes by name).
            self.sync.set_target(self.target)

        self._server_ip = rendezvous_address(self.iface, host)
        hvd_driver, self._rendezvous_port = new_ring(
            self._rendezvous, self.registry, self.limits.min, self.limits.max, self._elastic_timeout, self._server_ip
        )
        self._hvd = hvd_driver
        adopting = self.adoption.await_ring(self._fatal)
        if self.adoption.lost:
            self.error = self.adoption.lost
            return self._end(server, 1)
        if self.adoption.resumed:
            self.targets.noted(0, self.target, self.adoption.resumed)
        if adopting:
            self._ring_formed = True  # the job has trained: a worker failure from now on is not a start-up failure
        else:
            self.targets.requeue_requested(REQUEUED)
        log.info("waiting for %d warm workers (at least %d)", self.limits.num, self.limits.min)
        # The target, not --num_workers: a controller may have shrunk the job before it started.
        settled_s = self.registry.await_first_ring(
            lambda: self.target, self.limits.min, self._elastic_timeout, self._fatal
        )
        if settled_s is None:
            ready = len(self.registry.available())
            why = self._waiting_reason() or f"only {ready} of at least {self.limits.min} workers became ready"
            self.error = f"the ring did not form within {self._elastic_timeout} s (HOROVOD_ELASTIC_TIMEOUT): {why}"
            return self._end(server, 3)
        if self._fatal.is_set():
            return self._end(server, 3)
        self.phase = JobPhase.RUNNING
        first_ring = len(self.registry.available())
        if first_ring < self.target:
            log.info("first ring %d of target %d: no more workers in %.0f s", first_ring, self.target, settled_s)
        hvd_driver.start(first_ring if adopting else min(self.target, first_ring), self._create_worker)
        if adopting:
            threading.Thread(
                target=self._finish_adoption, args=(hvd_driver, first_ring), daemon=True, name="adoption"
            ).start()
        results = hvd_driver.get_results()
        hvd_driver.stop()
        failed = {name: code for name, (code, _t) in results.worker_results.items() if code != 0}
        if self._ring_lost_to_checkpoint(failed):
            return self._relaunch(server)
        if lost_on_the_way(failed, self.finished_workers) and not (results.error_message or self._fatal.is_set()):
            failed = {}  # the training finished in the ring; the workers lost on the way stay in the failures
        if results.error_message or failed or self._fatal.is_set():
            if not self.error:
                lost = [a.instance for a in self.registry.snapshot() if a.exit_code == LOST_EXIT]
                said = ended_by(results.error_message, failed, lost)
                self.error = job_reason(self.failures[0]) if self.failures else said
            return self._end(server, 1)
        if not self.finished_workers:
            # Horovod stops without an error when it cannot form the next ring (no host of the last one left, every
            # host blacklisted); the workers it then stops exit cleanly. That is no finished training.
            self.error = (
                "Horovod stopped the ring before any worker finished its training (no error and no failed worker: "
                "the driver's log has Horovod's reason); the job did not finish"
            )
            log.error("%s", self.error)
            return self._end(server, 1)
        log.info("job finished: %s finished its training", ", ".join(sorted(self.finished_workers)))
        return self._end(server, 0)

    def _ring_lost_to_checkpoint(self, failed: dict[str, int]) -> bool:
        """Every worker of the ring failed at once (its last worker killed, say), none finished, the job was not
        failed on purpose (a start-up failure, a loss it cannot resume from), it writes checkpoints, and fewer than
        :data:`MAX_INCARNATIONS` drivers have run it: the job resumes from its newest checkpoint rather than
        ending FAILED."""
        return bool(
            failed
            and not self._fatal.is_set()
            and not self.finished_workers
            and env.settings().checkpoint_path
            and len(self.incarnations) < MAX_INCARNATIONS
        )

    def _relaunch(self, server: grpc.Server) -> int:
        """Ends this incarnation without concluding the job: YARN relaunches the driver (ON_FAILURE), and the next
        forms a new ring from the newest checkpoint (:class:`Adopter`). The agents' streams are cut, not ended: an
        agent takes a clean end as the job's (a worker attached a moment before never joined the next driver)."""
        log.error("every worker of the ring failed; the job writes checkpoints: the next driver resumes it from there")
        self._persist()
        server.stop(grace=None)
        return RELAUNCH_EXIT

    def _finish_adoption(self, hvd_driver: ElasticDriver, adopted: int) -> None:
        """Once the adopted ring re-formed around this driver (:meth:`Adopter.await_reform`), takes up a resize the
        previous incarnation had been asked for."""
        self.adoption.await_reform(hvd_driver, adopted, self.incarnations[-1])
        self.targets.requeue_requested(REQUEUED)

    def _opening(self, hosts: tuple[str, ...]) -> None:
        """A ring of ``hosts`` is opening: recorded before any of them trains in it (:attr:`DriverState.ring`)."""
        self.registry.ring = hosts
        self._persist()

    def _persist_loop(self) -> None:
        while True:
            self._persist()
            time.sleep(PERSIST_EVERY_S)

    def _persist(self) -> None:
        """Writes :class:`DriverState` when it changed (the next incarnation reads it)."""
        if self._state_keeper is not None:
            self._state_keeper.keep(self._state)

    def _state(self) -> DriverState:
        return DriverState(
            app=self._app,
            target=self.target,
            requested=self.requested,
            world_size=self._hvd.world_size() if self._hvd is not None else 0,
            removing=self.sync.removing,
            timeline=tuple(self.timeline),
            failures=tuple(self.failures),
            incarnations=tuple(self.incarnations),
            error=self.error,
            batch_timeline=tuple(self.targets.batch_timeline),
            version=self.targets.version,
            preempted_from=self.resizer.preempted_from or 0,
            ring=self.registry.ring,
        )

    def _end(self, server: grpc.Server, rc: int) -> int:
        """Stops every agent stream and the server; logs the reason of a failure as the last line."""
        if rc == 0:
            self.phase = JobPhase.FINISHED
        else:
            self.phase = JobPhase.FAILED
            log.error("job failed: %s", self.error or "unknown reason")
            for failure in self.failures[:1]:
                if failure.stderr_tail:
                    sys.stderr.write(f"--- {failure.instance} stderr (last lines) ---\n{failure.stderr_tail}\n")
            sys.stderr.write(f"submarine-elastic job {self.job} failed: {self.error or 'unknown reason'}\n")
            sys.stderr.flush()
        self._record_outcome()
        self._persist()
        for agent in self.registry.snapshot():
            agent.commands.put(None)
        server.stop(grace=2)
        return rc

    def _record_outcome(self) -> None:
        """Writes how the job ended where ``submarine job show`` reads it after the service is gone."""
        path = env.settings().job_outcome_file
        if path is None:
            return
        record = JobOutcome(
            job=self.job,
            phase=self.phase,
            error=self.error,
            time=time.time(),
            failures=tuple(self.failures),
            batch_timeline=tuple(self.batch_timeline),
            timeline=tuple(self.timeline),
        )
        try:
            record.save(path)
        except OSError as exc:
            log.warning("cannot record the job's outcome in %s: %s", path, exc)
