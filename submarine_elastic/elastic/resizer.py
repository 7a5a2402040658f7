"""The job driver's resizer: it carries out the job's targets, one at a time, in version order.

1. :meth:`Resizer.loop` (the resizer thread) takes each target the
   :class:`~submarine_elastic.elastic.reconcile.TargetBook` queued and carries it out (:meth:`Resizer.resize`:
   the reconcile step's :func:`~submarine_elastic.elastic.reconcile.plan_resize`, the leavers out of the ring at
   a commit boundary, then YARN's new target); between targets it reconciles YARN with the target until YARN has
   it (:class:`~submarine_elastic.elastic.yarnsync.YarnSync`).
2. :meth:`Resizer.on_preempted`: a worker whose container YARN preempts is withdrawn and the target lowered by
   one, the instance removed by name; :meth:`Resizer.grow_back` raises it back when capacity returns
   (:func:`~submarine_elastic.elastic.reconcile.grow_back`).
3. :meth:`Resizer.on_yarn`: a worker count someone else gave YARN (``yarn app -flex``, ``-decommission``, the
   Services REST API) is taken as the operator's target or refused and put back
   (:func:`~submarine_elastic.elastic.reconcile.yarn_change`); a worker YARN stops for such a change leaves the
   ring as on a scale-in, not as a preemption.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from submarine_elastic.elastic.reconcile import (
    Member,
    TargetBook,
    YarnChange,
    grow_back,
    plan_resize,
    stopped_by_the_scale_in,
    workers_that_fit,
    yarn_change,
)
from submarine_elastic.elastic.ringhost import AgentHandle, AgentRegistry
from submarine_elastic.elastic.yarnsync import YarnSync
from submarine_elastic.protocol.api import BatchLimits, FlexRefusedError, IllegalTransitionError, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import ComponentStatus, ServiceBackend, YarnError

log = logging.getLogger("submarine_elastic.driver")

#: How long a scale-in waits for its leavers' processes to end before YARN is told all the same.
LEAVE_TIMEOUT_S = 300.0
#: How long the driver waits before it reads YARN again to confirm a count lowered with no instance named. The
#: ResourceManager's ApplicationMaster writes its service out while a decommission changes it: one read caught
#: the count lowered before the instance was listed decommissioned, and took it for a flex down (whose leaver is
#: another worker than the one YARN stops).
CONFIRM_FLEX_DOWN_S = 0.2
#: The states of a worker that is the job's (attached, warm or in the ring) and not on its way out.
LIVE_STATES = frozenset({WorkerState.ATTACHED, WorkerState.WARM, WorkerState.RUNNING})


class Resizer:
    """Carries out one job's targets (``targets``) on its ring (``registry``) and YARN (``sync``).

    ``ranks`` reads each agent's rank in Horovod's ring (by agent id). ``preempted_from`` is the worker target
    before YARN preempted the first of the workers it took (None: none since the job, or a client, last set the
    target): the job grows back to it when capacity returns.
    """

    def __init__(
        self,
        registry: AgentRegistry,
        targets: TargetBook,
        sync: YarnSync,
        yarn: ServiceBackend,
        limits: Limits,
        batch_limits: BatchLimits | None,
        *,
        queue: str | None,
        ranks: Callable[[], dict[str, int]],
        preempted_from: int | None = None,
    ) -> None:
        self._registry = registry
        self._targets = targets
        self._sync = sync
        self._yarn = yarn
        self._limits = limits
        self._batch_limits = batch_limits
        self._queue = queue
        self._ranks = ranks
        self._lock = threading.Lock()
        self.preempted_from = preempted_from
        #: one YARN change judged at a time (the container watch and the agents' gRPC threads)
        self._yarn_lock = threading.Lock()
        #: the instances an operator's change through YARN removes: YARN stops them, no preemption
        self._yarn_leavers: set[str] = set()

    def forget_preemption(self) -> None:
        """A client's target replaces growing back on the driver's own."""
        with self._lock:
            self.preempted_from = None

    def loop(self) -> None:
        """Takes targets one at a time, in version order; between them, reconciles YARN with the target until it
        has it."""
        while True:
            target = self._targets.next(self._sync.pause())
            if target is not None:
                self.resize(target)
            if self._sync.reconciling:
                self._sync.reconcile(give_way=lambda: self._targets.pending > 0)

    def resize(self, target: pb.Target) -> None:
        """Carries out :func:`plan_resize`: the leavers out of the ring (waiting for them to go), then YARN's new
        target."""
        live = list(self._registry.available())
        # A preempted worker left the ring already (withdrawn when its agent said so) or stays until it is gone (the
        # ring needs it); named, it goes all the same.
        live += [a for a in self._registry.snapshot() if a.preempted and a.instance in target.remove and a not in live]
        ranks = self._ranks()
        members = [Member(a.instance, a.number, ranks.get(a.agent_id, -1)) for a in live]
        plan = plan_resize(self._targets.workers, target, members)
        if plan is None:
            if self._sync.count != target.workers:
                self._sync.set_target(target.workers)  # YARN was given another count, refused: put back
            return
        log.info("resize %d -> %d (%s)", self._targets.workers, plan.workers, target.reason)
        self._targets.applied(plan.workers, target.reason)
        leavers = [a for a in live if a.instance in plan.leavers]
        # Leave first, then withdraw: Horovod reads discovery every 0.1 s and only then interrupts the ring
        # (at its next commit), so the leavers know before their re-form that they go; their hvd.init() then
        # finds no slot and they exit cleanly (tf_hooks.elastic.autojoin) instead of being aborted by Horovod.
        for agent in leavers:
            if not agent.preempted:
                agent.commands.put(pb.AgentCommand(leave=pb.Leave()))
        for agent in leavers:
            if agent.preempted:
                continue
            try:
                self._registry.move(agent.agent_id, WorkerState.LEAVING)
            except IllegalTransitionError:
                log.info("%s ended before it was told to leave", agent.instance)
        deadline = time.monotonic() + LEAVE_TIMEOUT_S
        for agent in leavers:
            if not agent.exited.wait(max(0.0, deadline - time.monotonic())):
                log.warning("%s did not leave within %.0f s; removing it anyway", agent.instance, LEAVE_TIMEOUT_S)
        self._sync.set_target(plan.workers, plan.remove)

    def on_preempted(self, agent: AgentHandle, reason: str) -> None:
        """The worker's NodeManager is stopping its container (YARN preempts it): a scale-in the driver did not
        ask for. The worker is withdrawn from the ring at once (Horovod re-forms without it at its next commit,
        while its process leaves), and the job's target drops by one with the instance removed by name (not
        below ``--min_workers``), so YARN Services does not ask again for a container its queue cannot keep;
        no failure is counted. The job grows back when capacity returns (:meth:`grow_back`)."""
        if agent.state not in (WorkerState.ATTACHED, WorkerState.WARM, WorkerState.RUNNING):
            return  # leaving or gone on the driver's word already: its container goes as asked
        live = [Member(a.instance, a.number) for a in self._registry.snapshot()
                if a.state in LIVE_STATES and not a.preempted]  # fmt: skip
        others = [a for a in self._registry.available() if a is not agent]
        # The ring cannot re-form without it when fewer than --min_workers would stay. Withdrawn, it would have
        # Horovod interrupt the ring for a removal only, after which the ranks skip their state sync; but Horovod
        # then waits for enough workers and re-forms with the replacement, which does sync: it waits in a
        # broadcast the others never join while they wait in their next allreduce (the ring hung). Left in the
        # ring, it is lost like a failed worker: the others roll back to their last commit and re-form, synced,
        # with the replacement YARN starts; no failure is counted.
        stays = len(others) < self._limits.min and agent.state is WorkerState.RUNNING
        if not stays and agent.state in (WorkerState.WARM, WorkerState.RUNNING):
            # Out of the ring before anything is asked of YARN: its process leaves at its next commit, and one
            # that ends while Horovod still counts it in the ring ends the whole job (a clean exit is the job's).
            self._registry.move(agent.agent_id, WorkerState.LEAVING)
        if agent.instance not in self._yarn_leavers:
            # An operator's flex down through YARN stops containers too.
            self.on_yarn(*self._sync.worker(), live=live)
        if agent.instance in self._yarn_leavers:
            log.info("%s's container is stopped by YARN: an operator's change through YARN", agent.instance)
            return
        if agent.instance in stopped_by_the_scale_in(live, self._targets.workers, self._sync.removing):
            # More workers than the target and this is one YARN stops on its way down to it (a container it
            # allocated late for an earlier, larger target): the driver's own scale-in carried out, not a
            # preemption; lowering the target would have YARN stop one more.
            log.info(
                "%s's container is stopped by YARN on the way to %d workers", agent.instance, self._targets.workers
            )
            return
        log.warning("%s is preempted by YARN (%s)", agent.instance, reason)
        agent.preempted = True
        if stays:
            log.warning(
                "%s stays in the ring until it is gone: without it fewer than --min_workers (%d) would be left",
                agent.instance,
                self._limits.min,
            )
        with self._lock:
            if self.preempted_from is None:
                self.preempted_from = self._targets.requested
        target = pb.Target(
            workers=max(self._limits.min, self._targets.requested - 1),
            remove=[agent.instance],
            reason=f"preempted by YARN: {agent.instance}",
        )
        try:
            self._targets.take(
                target, self._limits, self._batch_limits, (a.instance for a in self._registry.snapshot())
            )
        except FlexRefusedError as exc:
            log.error("cannot take %s out of the job's target: %s", agent.instance, exc)

    def grow_back(self, memory_mb: int | None, vcores: int | None) -> None:
        """After a preemption, raises the target back towards what it was, by as many workers as the cluster and
        the job's queue can hold while no queue waits for capacity (:func:`grow_back`): asking while another
        queue waits would only have YARN preempt them again. Nothing while a resize is under way."""
        with self._lock:
            preempted_from = self.preempted_from
        if preempted_from is None or not memory_mb or self._sync.reconciling:
            return
        if self._targets.requested != self._targets.workers or self._targets.pending:
            return
        try:
            fits = workers_that_fit(self._yarn.queues(), self._yarn.nodes(), memory_mb, vcores or 1, self._queue)
        except YarnError as exc:
            log.debug("cannot read the cluster's capacity: %s", exc)
            return
        target = grow_back(self._targets.workers, preempted_from, fits)
        if (target if target is not None else self._targets.workers) >= preempted_from:
            with self._lock:
                self.preempted_from = None  # back at the target before the preemption (or on the way there)
        if target is None:
            return
        log.info("capacity returned: growing back to %d workers", target)
        try:
            self._targets.take(
                pb.Target(workers=target, reason="capacity returned after preemption"),
                self._limits,
                self._batch_limits,
                (),
            )
        except FlexRefusedError as exc:
            log.error("cannot grow back to %d workers: %s", target, exc)

    def on_yarn(
        self,
        worker: ComponentStatus | None,
        generation: int,
        *,
        live: Sequence[Member] | None = None,
        confirmed: bool = False,
    ) -> YarnChange | None:
        """YARN's worker component as read at ``generation`` (:meth:`YarnSync.worker`): when its desired count is
        not the one the driver gave it, and the driver neither reconciles nor gave YARN a count since the read,
        someone else changed it. Within the job's limits it is the operator's target (taken like a client's, with
        the instances YARN stops named as the leavers); outside, it is refused, kept in the timeline with why, and
        YARN put back. A count lowered with no instance named is read again after :data:`CONFIRM_FLEX_DOWN_S`
        first (unless ``confirmed``), and the second read is acted on. ``live``: the job's live workers as they
        were before a worker YARN stops was withdrawn (default: as they are). Returns what was done (None:
        nothing to do)."""
        if worker is None:
            return None
        with self._yarn_lock:
            ours = self._sync.count
            if ours is None or self._sync.reconciling or generation != self._sync.generation:
                return None
            if live is None:
                live = [Member(a.instance, a.number) for a in self._registry.snapshot()
                        if a.state in LIVE_STATES and not a.preempted]  # fmt: skip
            change = yarn_change(
                worker.number_of_containers,
                ours,
                self._limits,
                decommissioned=worker.decommissioned,
                removing=self._sync.removing,
                live=live,
            )
            if change is None:
                return None
            if confirmed or change.by_name or change.desired > ours:
                self._take_yarn_change(change, ours)
                return change
        time.sleep(CONFIRM_FLEX_DOWN_S)
        return self.on_yarn(*self._sync.worker(), live=live, confirmed=True)

    def _take_yarn_change(self, change: YarnChange, ours: int) -> None:
        """Carries out :meth:`on_yarn`'s ``change`` of YARN's count from ``ours``; under the YARN lock."""
        if change.target is None:
            log.warning("%s", change.refused)
            self._targets.noted(change.desired, change.put_back, change.refused)
            self._sync.adopt(change.desired)  # what YARN has now; the resizer puts it back
            self._targets.put_back(change.refused)
            return
        log.warning("taking the operator's target: %s", change.target.reason)
        self._sync.adopt(change.desired)
        self._yarn_leavers = set(change.target.remove)
        self.forget_preemption()
        try:
            self._targets.take(
                change.target, self._limits, self._batch_limits, (a.instance for a in self._registry.snapshot())
            )
        except FlexRefusedError as exc:
            refused = f"{change.target.reason}: refused ({exc}), YARN put back to {ours}"
            log.error("%s", refused)
            self._yarn_leavers = set()
            self._targets.noted(change.desired, ours, refused)
            self._targets.put_back(refused)
