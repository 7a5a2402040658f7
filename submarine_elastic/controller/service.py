"""The controller: jobs in, policy decisions out, applied through each job's driver.

Each round (every ``interval`` seconds, and at once on an arrival or a departure) it

1. syncs the jobs it knows with the cluster (a job whose application is gone has ended: it leaves and
   the secrets kept for it are removed; yarn-service applications started by someone else join as
   fixed-size jobs; a name submitted again is a new run of the job);
2. reads each job's ring size from its driver and its metrics from the metrics store (what the training
   processes stream, and what :meth:`ControllerService.report_metrics` is given, are kept there alike), and
   keeps the throughput per world size in SQLite (history that survives a restart);
3. counts the cluster in worker slots as YARN places containers (:mod:`.capacity`: memory and vcores
   per node, each job's container sizes, the ApplicationMasters and drivers still to be placed), or
   takes ``capacity`` slots when one is given;
4. builds a :class:`~submarine_elastic.policy.Snapshot`, with the scheduler's queues and each job's queue,
   and asks the policy engine for decisions (with two queues or more it decides within each queue: the
   queue's guarantee, and what it may borrow of idle ones up to its maximum; see
   :mod:`~submarine_elastic.policy.queues`);
5. records each decision, then sends it to the job's driver in the background, through at most
   :data:`SENDERS` threads (graceful scale-in, stop-free scale-out; the driver takes the target and reconciles
   YARN and the ring toward it);
6. follows every decision sent: it is applied once the job's YARN worker component has exactly that
   many containers READY and the driver's ring has that world size (read each round); until then it
   is pending, with why (``YARN has 3 of 1``, ``ring has 2 of 3``), and once it has not converged
   within ``stall_after`` seconds it is stalled;
7. lowers the target of a running job that asked for more workers than fit for longer than
   :data:`SETTLE_S` (or a round), so YARN keeps no request open that would take room the arbiter gives
   to another job.

One resize per job at a time: no new one is sent while the last is pending (a stalled one may be
superseded; a grow that the cluster's room cannot hold is stalled by step 7). A controller that was
killed adopts, on restart, each job's target as its driver holds it: a resize the driver took is
followed to its end, one it never took is recorded as failed, and nothing is sent to undo either.
"""

from __future__ import annotations

import collections
import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    DecisionState,
    IllegalTransitionError,
    InvalidJobError,
    JobBackend,
    JobFootprint,
    JobRecord,
    JobSize,
    JobSource,
    JobState,
    JobSubmission,
    MetricsReport,
)
from submarine_elastic.controller.capacity import CapacityFilter, count_slots, fit, slot_unit
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.elastic.proto import elastic_pb2 as pb
from submarine_elastic.limits import JOB_NAME
from submarine_elastic.metrics.api import (
    MAX_JOBS,
    MAX_POINTS_PER_REPLY,
    InvalidPointError,
    MetricsStore,
    RecentPoint,
)
from submarine_elastic.metrics.api import UnknownJobError as NoMetricsError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import (
    DEFAULT_QUEUE,
    LOSS_WINDOW,
    Decision,
    JobMetrics,
    JobView,
    PolicyEngine,
    PolicyError,
    Snapshot,
    StepTime,
    Throughput,
    load_job_policy_spec,
    loss_window,
)
from submarine_elastic.yarn import GPU_RESOURCE

log = logging.getLogger(__name__)

SERIES_WINDOW = 40  # recent points per job per round that give the step times per worker and the global batch
#: Most points read per job per round for its loss window (every rank reports each step): LOSS_WINDOW steps of up
#: to 8 ranks, about 1 ms; a larger ring's window spans fewer steps.
LOSS_POINTS = 8 * LOSS_WINDOW
#: Jobs the controller's metrics store keeps, the least recently updated evicted beyond: the most a store may keep,
#: so that a controller of up to that many live jobs reads every job's metrics...
METRICS_JOBS = MAX_JOBS
#: ... each with its newest points up to what one GetJob returns (``job show``); a round reads at most LOSS_POINTS.
#: About 0.55 MiB a job at most (docs/security.md), 560 MiB for all of them.
METRICS_POINTS_PER_JOB = MAX_POINTS_PER_REPLY
#: The worker name of the points :meth:`ControllerService.report_metrics` keeps in the metrics store.
REPORTED = "controller-api"
START_GRACE_S = 60.0  # a job may take this long after its submission to appear in the RM's list
CLOCK_SKEW_S = 30.0  # an application started this much before its run was registered still belongs to it
#: YARN's view of a job settles within this: a container allocated shows in its service's status a heartbeat
#: or two later. A drop of capacity, or a job asking for more than fits, counts once it has lasted this long
#: (or a round, when rounds are longer).
SETTLE_S = 10.0
#: Threads that send decisions to the jobs' drivers, at most, whatever a round decides: a round that resizes
#: 500 jobs queues its flex calls rather than starting 500 threads (0.2-0.4 s of thread starts). A flex call
#: ends within its deadline (3 s, 2 s more to locate the driver), so a driver that does not answer holds one
#: sender that long. A replacement waits for the ring to re-form (up to ``stall_after``): it has a thread of its
#: own, so that replacements never hold the senders (one per job at a time).
SENDERS = 16
#: Rounds between full collections of the cycle collector (:meth:`ControllerService.collect_garbage`).
FULL_COLLECTION_ROUNDS = 60


@dataclass
class _Converging:
    """A job's latest decision while it is pending or stalled (what the controller follows each round)."""

    decision_id: int
    record: DecisionRecord
    run: int
    restarts_cooldown: bool = True
    stalled: bool = False
    why: str | None = None


class _Held(NamedTuple):
    """Workers a job holds in one round: in its ring, and given to it but not in its ring yet."""

    current: int
    pending: int


@dataclass(frozen=True)
class _Room:
    """What one round counts: the capacity in slots, what each job holds, who asks for more than fits."""

    capacity: int
    holding: dict[str, _Held]  # by job id
    short: dict[str, tuple[int, str]]  # running job id -> (workers that fit, why)


class ControllerService(Controller):
    """The live controller. Start its loop with :meth:`start`; :meth:`tick` runs one round by hand.

    Args:
        store: the SQLite state.
        engine: the policy engine (job policy + arbiter).
        backend: the cluster's jobs.
        metrics: the metrics service's store; None: one of its own, which holds what :meth:`report_metrics`
            is given.
        interval: seconds between rounds.
        stall_after: seconds a decision may take to converge (YARN's READY workers and the ring both at
            its size) before it is recorded as stalled; also the bound of a replacement's steps.
        capacity: worker slots to hand out, whatever the cluster reports (``--capacity``); None counts
            them from the nodes' memory and vcores and the jobs' container sizes.
        clock: wall-clock seconds (injectable for tests).

    Raises:
        ValueError: ``interval`` or ``stall_after`` is not positive, or ``capacity`` is below 1.
    """

    def __init__(
        self,
        store: ControllerStore,
        engine: PolicyEngine,
        backend: JobBackend,
        *,
        metrics: MetricsStore | None = None,
        interval: float = 5.0,
        stall_after: float = 300.0,
        capacity: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        if stall_after <= 0:
            raise ValueError(f"stall_after must be > 0 seconds, got {stall_after}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1 worker slot, got {capacity}")
        self.store = store
        self.engine = engine
        self.backend = backend
        self.metrics: MetricsStore = metrics if metrics is not None else metrics_store()
        self.interval = interval
        self.stall_after = stall_after
        self.capacity = capacity
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._in_flight: dict[str, threading.Event] = {}  # job id -> set once its decision's send has ended
        self._senders = ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="resize")
        self._rounds = 0  # rounds the loop ran, for :meth:`collect_garbage`
        self._converging: dict[str, _Converging] = {}  # job id -> its pending or stalled decision
        self._unadopted: set[str] = set()  # jobs whose driver's target is to be read before any resize
        self._lock = threading.Lock()
        self._reports: dict[str, int] = {}  # job id -> seq of the last point report_metrics kept
        self._reports_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._job_policies: dict[str, tuple[int, str | None]] = {}
        self._history_updates: list[tuple[str, int, float, int]] = []
        # job id -> the batch part of the target its driver last took from us
        self._batch_sent: dict[str, pb.Target] = {}
        self.settle = max(interval, SETTLE_S)
        self._capacity_filter = CapacityFilter(self.settle)
        self._footprints: dict[tuple[str, int], JobFootprint] = {}
        self._short_since: dict[tuple[str, int], float] = {}
        # Jobs get their own policies back before the engine's state, which holds those policies' state.
        for job in store.jobs(live_only=True):
            self._use_policy(job)
        state = store.get("policy_engine")
        if state:
            try:
                engine.load_state_dict(state)
            except PolicyError as exc:
                log.error("the saved policy state cannot be used (%s); the policies start afresh", exc)
        self._recover()

    # ------------------------------------------------------------------ Controller

    def job_submitted(
        self,
        job_id: str,
        min_workers: int,
        max_workers: int,
        workers: int,
        *,
        elastic: bool = True,
        source: JobSource = JobSource.CLI,
        policy: str | None = None,
        app_id: str | None = None,
        gpus: int = 0,
        queue: str | None = None,
    ) -> JobRecord:
        """A job arrived; a name the controller knew already starts a new run of it (see :class:`JobRecord`).
        A job submitted with ``job run`` is pending until YARN shows its application; the others run.

        Raises:
            InvalidJobError: bad id, limits or source (see :class:`JobSubmission`), a policy that does
                not load (named, with why), or ``gpus`` per worker that no node of the cluster has (as ``job run``
                refuses them; not checked with a fixed ``capacity`` or while the nodes are unknown).
        """
        job = JobSubmission(job_id, min_workers, max_workers, workers, elastic, source, policy, gpus, queue)
        if job.gpus and self.capacity is None:
            self._refuse_unplaceable(job)
        if job.policy is not None:
            try:
                load_job_policy_spec(job.policy)
            except PolicyError as exc:
                raise InvalidJobError(f"job {job_id!r}: policy {job.policy!r} cannot be used: {exc}") from exc
        record = JobRecord(
            job.job_id,
            job.min_workers,
            job.max_workers,
            job.workers,
            job.workers,
            job.elastic,
            job.source.first_state,
            self.clock(),
            job.source,
            app_id=app_id,
            policy=job.policy,
            queue=job.queue,
        )
        run = self.store.upsert_job(record)
        if run > 1:  # what the metrics store holds of the name is the last run's, as the history dropped
            with self._reports_lock:
                self.metrics.forget(job.job_id)
                self._reports.pop(job.job_id, None)
        self._unadopted.discard(job.job_id)  # this run's target is the one just submitted
        log.info(
            "job %s arrived (%s%s): %d workers in [%d, %d]",
            job_id,
            job.source,
            f", run {run}" if run > 1 else "",
            workers,
            min_workers,
            max_workers,
        )
        self._wake.set()
        return self.store.job(job_id)

    def _refuse_unplaceable(self, job: JobSubmission) -> None:
        """Refuses a job whose workers ask more GPUs than the largest node has: YARN would keep them pending.

        Raises:
            InvalidJobError: naming what the job asks and what each node has.
        """
        nodes = self.backend.nodes()
        if nodes is None:
            return
        largest = max((n.gpus for n in nodes), default=0)
        if largest < job.gpus:
            offers = ", ".join(f"{n.node_id} {n.gpus}" for n in nodes) or "no running node"
            raise InvalidJobError(
                f"job {job.job_id!r} asks {GPU_RESOURCE} {job.gpus} per worker, but the largest node of the cluster "
                f"has {largest} ({GPU_RESOURCE} by node: {offers}); a worker's GPUs come from one node"
            )

    def job_finished(self, job_id: str) -> None:
        if self.store.change_state(job_id, JobState.FINISHED):
            log.info("job %s left", job_id)
            self._wake.set()

    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        """Kept in the metrics store as a point of the job (worker :data:`REPORTED`), where the controller reads
        the metrics of every job; the throughput the store now has at ``world_size`` is saved at once."""
        self.store.job(job_id)
        report = MetricsReport(job_id, world_size, step, samples_per_second, loss)
        with self._reports_lock:  # seqs reach the store in order, or a later one would drop an earlier one
            seq = self._reports[job_id] = self._reports.get(job_id, 0) + 1
            try:
                self.metrics.ingest(_report_batch(report, seq, self.clock()))
            except InvalidPointError as exc:
                raise InvalidJobError(f"job {job_id!r}: {exc}") from exc
            [stat] = [t for t in self.metrics.summary(job_id).throughput if t.world_size == report.world_size]
        self.store.record_throughput(job_id, stat.world_size, stat.aggregate_examples_per_second, stat.points)

    def jobs(self) -> list[JobRecord]:
        return self.store.jobs()

    def job(self, job_id: str) -> JobRecord:
        return self.store.job(job_id)

    def decision(self, job_id: str) -> DecisionRecord | None:
        self.store.job(job_id)
        records = self.store.decisions(job_id)
        return records[-1] if records else None

    def timeline(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        self.store.job(job_id)
        return self.store.decisions(job_id, all_runs=all_runs)

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="controller")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop; decisions queued for a sender are dropped (recorded, never sent: a restarted
        controller adopts each driver's target), those being sent end within their deadline."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._senders.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        """Run the next round now (an arrival or departure noticed outside this process)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the controller must outlive any one bad round
                log.exception("controller round failed; next round in %.0f s", self.interval)
            self.collect_garbage()
            self._wake.wait(self.interval)
            self._wake.clear()

    def collect_garbage(self) -> None:
        """Run the cycle collector between rounds, and keep what survives out of its collections during the
        next one (``gc.freeze``). The process holds every job's recent points (at 500 jobs some 175,000 tracked
        objects after 30 rounds, more as the jobs' rings fill): a full collection of them took 70-250 ms, and
        Python ran one every 4-5 rounds, in the middle of a round. Between rounds this scans only what came
        since the last one; every :data:`FULL_COLLECTION_ROUNDS` rounds it scans everything again (a frozen
        object is still freed when its last reference goes, but a cycle only by a full collection)."""
        self._rounds += 1
        if self._rounds % FULL_COLLECTION_ROUNDS == 0:
            gc.unfreeze()
        gc.collect()
        gc.freeze()

    def tick(self) -> list[DecisionRecord]:
        """One round: sync, follow the decisions sent, count, snapshot, decide, start sending. Returns the
        decisions recorded."""
        self._sync_cluster()
        now = self.clock()
        with self._lock:
            following = bool(self._converging or self._unadopted)
        if following:  # else there is nothing to follow, and no need to read the jobs twice
            self._follow(self.store.jobs(live_only=True), now)
        live = self.store.jobs(live_only=True)
        sizes = {job.job_id: self.backend.ring_size(job.job_id) for job in live}
        self.store.observe({job_id: size for job_id, size in sizes.items() if size is not None}, now)
        for job in live:
            if sizes[job.job_id] is not None:
                self._started(job)
        room = self._count_fixed(live, sizes) if self.capacity is not None else self._count_yarn(live, sizes, now)
        if room is None:
            log.warning("the cluster's nodes are unknown (the ResourceManager did not answer); no decision this round")
            return []
        managed = [job for job in live if job.job_id in room.holding]
        queues = self.backend.queues() if self.capacity is None else []
        names = [q.name for q in queues]
        views = []
        for job in managed:
            current, pending = room.holding[job.job_id]
            self._use_policy(job)
            batch_limits = self.backend.batch_limits(job.job_id)
            placement = self.backend.placement(job.job_id) if sizes[job.job_id] is not None else ()
            views.append(
                JobView(
                    job_id=job.job_id,
                    min_workers=job.min_workers,
                    max_workers=job.max_workers,
                    elastic=job.elastic,
                    current_workers=current,
                    pending_workers=pending,
                    submitted_at=job.submitted_at,
                    last_resize_at=job.last_resize_at,
                    instances=self.backend.instances(job.job_id) if sizes[job.job_id] is not None else (),
                    metrics=self._metrics(job.job_id),
                    min_batch_size=batch_limits[0] if batch_limits else None,
                    max_batch_size=batch_limits[1] if batch_limits else None,
                    # What the driver last read; a count that no longer fits what the job holds (a resize
                    # between the two reads) is left unknown rather than refused.
                    placement=placement if sum(placement) <= current + pending else (),
                    queue=_queue_of(job, names),
                )
            )
        self.store.record_throughputs(self._history_updates)
        self._history_updates.clear()
        total = sum(v.holding for v in views)
        metrics_of = {v.job_id: v.metrics for v in views}
        snapshot = Snapshot(
            now=now, capacity=room.capacity, free=max(0, room.capacity - total), jobs=tuple(views), queues=tuple(queues)
        )
        recorded = []
        decided: set[str] = set()
        # Each decision with its job's changes, to record all in one transaction, then how to send it.
        to_send: list[_ToSend] = []
        for decision in self.engine.decide(snapshot):
            job = next(j for j in managed if j.job_id == decision.job_id)
            if self._busy(job.job_id):
                continue  # its last resize is still converging: none is stacked on it
            decided.add(job.job_id)
            holding = sum(room.holding[job.job_id])
            batch = self._batch_change(decision, metrics_of.get(job.job_id))
            if decision.replace and decision.target_workers == job.target:
                record = DecisionRecord(
                    job.job_id,
                    self.clock(),
                    job.target,
                    job.target,
                    f"replace {', '.join(decision.replace)}: {decision.reason}",
                )
                changes: dict[str, Any] = {"last_resize_at": record.time}
                to_send.append(_ToSend(record, changes, job.run, job.target, replace=tuple(decision.replace)))
                continue
            if decision.target_workers == job.target:
                if batch is not None:  # the batch alone changes: no resize, no cooldown
                    record = DecisionRecord(job.job_id, self.clock(), job.target, job.target, decision.reason)
                    to_send.append(_ToSend(record, {}, job.run, job.target, batch=batch, restarts_cooldown=False))
                continue
            record = DecisionRecord(job.job_id, self.clock(), holding, decision.target_workers, decision.reason)
            changes = {"target": decision.target_workers, "last_resize_at": record.time}
            to_send.append(_ToSend(record, changes, job.run, job.target, batch=batch))
        ids = self.store.add_decisions([(send.record, send.changes) for send in to_send])
        for decision_id, send in zip(ids, to_send, strict=True):
            recorded.append(send.record)
            self._apply(
                decision_id,
                send.record,
                send.run,
                send.previous_target,
                send.replace,
                restarts_cooldown=send.restarts_cooldown,
                batch=send.batch,
            )
        recorded += self._lower_short_targets(managed, room, decided, now)
        for job_id in set(self._job_policies) - {job.job_id for job in live}:
            # Its policy has had its after_train: a restarted controller would not set it again.
            del self._job_policies[job_id]
            self.engine.set_job_policy(job_id, None)
        self.store.put("policy_engine", self.engine.state_dict())
        return recorded

    def wait_idle(self, timeout: float) -> bool:
        """Block until no decision is being sent to a driver (at most ``timeout`` s); True if idle. A
        decision sent may still be pending: :meth:`tick` follows it."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                sends = list(self._in_flight.values())
            if not sends:
                return True
            for done in sends:
                done.wait(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                with self._lock:
                    return not self._in_flight

    # ------------------------------------------------------------------ counting

    def _count_fixed(self, live: list[JobRecord], sizes: dict[str, int | None]) -> _Room:
        """``--capacity`` slots, one per worker whatever its size; every live job takes part."""
        capacity = self.capacity or 0
        held = sum(max(size, job.target) for job in live if (size := sizes[job.job_id]) is not None)
        holding: dict[str, _Held] = {}
        for job in live:
            size = sizes[job.job_id]
            if size is not None:
                # Running: it holds its ring plus any scale-out in flight.
                holding[job.job_id] = _Held(size, max(0, job.target - size))
            elif held + job.target <= capacity:
                # Not started yet, and what it asked for is free: it holds that while its ring forms.
                holding[job.job_id] = _Held(0, job.target)
                held += job.target
            else:
                # Not started and the cluster is full: it waits, so the arbiter makes room for it.
                holding[job.job_id] = _Held(0, 0)
        return _Room(capacity=capacity, holding=holding, short={})

    def _count_yarn(self, live: list[JobRecord], sizes: dict[str, int | None], now: float) -> _Room | None:
        """Slots as YARN places containers (see :mod:`.capacity`); None when the nodes are unknown.

        A job holds the workers YARN gave it (in its ring or warming up) plus those it asked for that fit in
        the free slots, claimed in order of submission; what does not fit it does not hold. Applications
        someone else started are not managed: their containers are already counted as used room. Neither is
        a job submitted with ``job run`` until YARN shows its service, nor an arrival while YARN places its
        ApplicationMaster and driver in room that is free. A job reported through the bridge that YARN does
        not know is taken to have workers of the slot's size.
        """
        nodes = self.backend.nodes()
        if nodes is None:
            return None
        known: dict[str, JobFootprint] = {}
        for job in live:
            key = (job.job_id, job.run)
            found = self.backend.footprint(job.job_id)
            if found is not None:
                self._footprints[key] = found
            if key in self._footprints:
                known[job.job_id] = self._footprints[key]
        managed = [
            job
            for job in live
            # A job `job run` registered that YARN does not show yet may never get there (its submission
            # can fail): nobody gives it workers before it does.
            if not (job.source is JobSource.CLI and job.job_id not in known)
            and not (job.source is JobSource.YARN and sizes[job.job_id] is None)
        ]
        sized = [known[job.job_id].worker for job in managed if job.job_id in known]
        unit = slot_unit(sized or [self.backend.default_worker()])
        footprints = {job.job_id: known.get(job.job_id, JobFootprint(unit)) for job in managed}
        live_keys = {(job.job_id, job.run) for job in live}
        self._footprints = {k: v for k, v in self._footprints.items() if k in live_keys}
        slots = count_slots(nodes, footprints)
        if slots is None:
            return _Room(capacity=0, holding={}, short={})
        # Only what YARN shows is filtered: room that arrivals' AMs and drivers will take is no dip.
        seen = slots.held + slots.free + slots.reserved
        kept = self._capacity_filter.update(now, slots.unit, seen)
        capacity = max(0, kept - slots.reserved)
        free = slots.free + (kept - seen)  # a drop not acted on yet still counts as free
        # An arrival whose ApplicationMaster and driver fit in the free room waits until YARN has placed them
        # (seconds): where they land is YARN's choice, and room taken from others for its workers could go
        # to them instead. Their room stays counted as taken meanwhile.
        room = {n.node_id: n.free for n in nodes}
        placing = set()
        for job in sorted(managed, key=lambda j: (j.submitted_at, j.job_id)):
            unplaced = footprints[job.job_id].unplaced
            if sizes[job.job_id] is None and unplaced and (left := fit(room, unplaced)) is not None:
                room = left
                placing.add(job.job_id)
        holding: dict[str, _Held] = {}
        short: dict[str, tuple[int, str]] = {}
        for job in sorted(managed, key=lambda j: (j.submitted_at, j.job_id)):
            if job.job_id in placing:
                continue
            size = sizes[job.job_id]
            current = size or 0
            given = max(current, footprints[job.job_id].workers_allocated)
            claim = min(max(0, job.target - given), max(0, free))
            free -= claim
            holding[job.job_id] = _Held(current, given - current + claim)
            if size is not None and given + claim < job.target:
                short[job.job_id] = (
                    given + claim,
                    f"only {given + claim} of its {job.target} workers fit "
                    f"({footprints[job.job_id].worker} each; {slots.free} free slots of {slots.unit})",
                )
        return _Room(capacity=capacity, holding=holding, short=short)

    def _lower_short_targets(
        self, managed: list[JobRecord], room: _Room, decided: set[str], now: float
    ) -> list[DecisionRecord]:
        """Bring a running job's target down to what fits once it has asked for more for ``settle`` seconds:
        an open YARN request would take the next room that frees, whoever the arbiter gives it to."""
        recorded = []
        short_now = {(job.job_id, job.run) for job in managed if job.job_id in room.short}
        self._short_since = {k: t for k, t in self._short_since.items() if k in short_now}
        for job in managed:
            key = (job.job_id, job.run)
            if key not in short_now:
                continue
            since = self._short_since.setdefault(key, now)
            fits, why = room.short[job.job_id]
            to = max(fits, job.min_workers)
            if (
                now - since < self.settle
                or job.job_id in decided
                or self._sending(job.job_id)
                or job.job_id in self._unadopted
                or to >= job.target
            ):
                continue
            # A grow still pending cannot converge in the room there is: it stalls, and this supersedes it.
            self._stall(job.job_id, why)
            record = DecisionRecord(job.job_id, now, job.target, to, why)
            decision_id = self.store.add_decision(record)
            self.store.update_job(job.job_id, target=to)
            recorded.append(record)
            self._apply(decision_id, record, job.run, job.target, restarts_cooldown=False)
        return recorded

    # ------------------------------------------------------------------ pieces

    def _use_policy(self, job: JobRecord) -> None:
        """Give a job's run the policy it was submitted with (``--policy``; checked when it was submitted,
        so only a policy package uninstalled since then keeps the default)."""
        name = job.policy
        if self._job_policies.get(job.job_id, (0, None)) == (job.run, name):
            return
        first = job.job_id not in self._job_policies
        self._job_policies[job.job_id] = (job.run, name)
        if name is None:
            if not first:
                self.engine.set_job_policy(job.job_id, None)
            return
        try:
            self.engine.set_job_policy(job.job_id, load_job_policy_spec(name))
        except PolicyError as exc:
            log.error("job %s: policy %r cannot be used (%s); it keeps the default policy", job.job_id, name, exc)

    def _sending(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._in_flight

    def _busy(self, job_id: str) -> bool:
        """No new resize for the job: one is being sent, or is pending, or its driver's target is unknown
        (after a restart, or a send that failed) and a resize could undo one the driver took."""
        with self._lock:
            converging = self._converging.get(job_id)
            return (
                job_id in self._in_flight
                or job_id in self._unadopted
                or (converging is not None and not converging.stalled)
            )

    def _apply(
        self,
        decision_id: int,
        record: DecisionRecord,
        run: int,
        previous_target: int,
        replace: tuple[str, ...] = (),
        *,
        restarts_cooldown: bool = True,
        batch: pb.Target | None = None,
    ) -> None:
        """Send a recorded decision to the job's driver in the background (a sender, or a thread of its own for a
        replacement; see :data:`SENDERS`), then follow it (:meth:`_check`) as a decision of the job's ``run``. If
        the driver does not take it, it fails and the job's target goes back to ``previous_target`` until the
        driver's is read again. ``batch``: the batch part of the target (global batch, accumulation steps, learning
        rate; unset: the job's rule), sent with the worker count as one target."""
        job_id = record.job_id
        with self._lock:
            self._converging[job_id] = _Converging(decision_id, record, run, restarts_cooldown)

        def send() -> None:
            try:
                if replace:
                    self.backend.replace(job_id, replace, self.stall_after)
                else:
                    target = pb.Target(workers=record.to_workers, reason=record.reason)
                    if batch is not None:
                        target.MergeFrom(batch)
                    self.backend.set_target(job_id, target)
                    if batch is not None:
                        with self._lock:
                            self._batch_sent[job_id] = batch
            except Exception as exc:  # noqa: BLE001 - recorded as the decision's error, the loop goes on
                log.warning("resize of %s to %d failed: %s", job_id, record.to_workers, exc)
                with self._lock:
                    self._converging.pop(job_id, None)
                    self._unadopted.add(job_id)
                self.store.finish_decision(decision_id, DecisionState.FAILED, str(exc) or type(exc).__name__)
                self.store.update_job(job_id, target=previous_target)
            else:
                try:
                    self._check(job_id, self.backend.size(job_id), self.clock())
                except Exception:  # noqa: BLE001 - the next round reads it again
                    log.exception("cannot follow the resize of %s; the next round reads it again", job_id)
            finally:
                with self._lock:
                    self._in_flight.pop(job_id, None)
                done.set()
                self._wake.set()

        done = threading.Event()
        with self._lock:
            self._in_flight[job_id] = done
        if replace:
            threading.Thread(target=send, daemon=True, name=f"replace-{job_id}").start()
            return

        def dropped() -> None:  # the controller stopped before a sender took it: recorded, never sent
            with self._lock:
                self._in_flight.pop(job_id, None)
            done.set()

        try:
            queued = self._senders.submit(send)
        except RuntimeError:  # stopped already (a round that outlived stop()'s wait)
            dropped()
            return
        queued.add_done_callback(lambda future: dropped() if future.cancelled() else None)

    def _batch_change(self, decision: Decision, metrics: JobMetrics | None) -> pb.Target | None:
        """The batch part of the target ``decision`` asks of its job's driver, or None when it asks none or the
        same one its driver last took from this controller. A learning rate alone keeps the batch the job
        reports."""
        if decision.batch_size is None and decision.learning_rate is None:
            return None
        with self._lock:
            sent = self._batch_sent.get(decision.job_id)
        batch_size = decision.batch_size
        if batch_size is None:
            batch_size = sent.batch_size if sent is not None else (metrics.batch_size if metrics is not None else None)
        if batch_size is None:
            log.warning("%s: a learning rate without a known batch size is not sent", decision.job_id)
            return None
        batch = pb.Target(batch_size=batch_size, accum_steps=decision.accum_steps or 0)
        if decision.learning_rate is not None:
            batch.learning_rate = decision.learning_rate
        return None if batch == sent else batch

    # ------------------------------------------------------------------ following decisions

    def _follow(self, live: list[JobRecord], now: float) -> None:
        """Adopt the driver's target of each job that needs it, and move each decision sent on: applied,
        pending with why, or stalled. A job whose decision is being sent is left to its sender."""
        by_id = {job.job_id: job for job in live}
        with self._lock:
            self._unadopted.intersection_update(by_id)  # a job that ended gets no resize anyway
            following = list(self._converging.items())
        for job_id, converging in following:
            job = by_id.get(job_id)
            if job is None or job.run != converging.run:
                with self._lock:
                    del self._converging[job_id]
                if not converging.stalled:
                    why = "the job ended" if job is None else "the job was submitted again"
                    self.store.finish_decision(
                        converging.decision_id, DecisionState.FAILED, f"{why} before it converged"
                    )
        for job in live:
            followed = job.job_id in self._unadopted or job.job_id in self._converging
            if not followed or self._sending(job.job_id):
                continue
            seen = self.backend.size(job.job_id)
            if job.job_id in self._unadopted:
                self._adopt(job, seen)
            if job.job_id in self._converging:
                self._check(job.job_id, seen, now)

    def _adopt(self, job: JobRecord, seen: JobSize | None) -> None:
        """Take the driver's target as the job's: a resize the driver took is in flight, not undone. A
        pending decision for another size was never taken by it (or was overtaken): it fails, and
        nothing is sent to the driver. Without an answer the job stays unadopted (and gets no resize)."""
        if seen is None:
            return
        if seen.target != job.target:
            log.info(
                "job %s: its driver's target is %d workers (%d recorded here); the controller adopts it",
                job.job_id,
                seen.target,
                job.target,
            )
            self.store.update_job(job.job_id, target=seen.target)
        with self._lock:
            self._unadopted.discard(job.job_id)
            converging = self._converging.get(job.job_id)
            if converging is not None and converging.record.to_workers != seen.target:
                del self._converging[job.job_id]
            else:
                converging = None
        if converging is not None:
            self.store.finish_decision(
                converging.decision_id,
                DecisionState.FAILED,
                f"its driver's target is {seen.target}, not {converging.record.to_workers}: the driver did not take "
                f"it before the controller restarted, or was resized since",
            )

    def _check(self, job_id: str, seen: JobSize | None, now: float) -> None:
        """Applied when the driver's target, YARN's READY workers and the ring all have the decided size;
        else pending with why, and stalled once ``stall_after`` seconds have passed since it was decided."""
        with self._lock:
            converging = self._converging.get(job_id)
        if converging is None:
            return
        to = converging.record.to_workers
        why = "its driver does not answer" if seen is None else seen.lag(to)
        if why is None:
            with self._lock:
                if self._converging.get(job_id) is converging:
                    del self._converging[job_id]
            self.store.finish_decision(converging.decision_id, DecisionState.APPLIED)
            if converging.restarts_cooldown:
                self.store.update_job(job_id, workers=to, observed_at=now, last_resize_at=now)
            else:
                self.store.update_job(job_id, workers=to, observed_at=now)
            log.info("resize of %s to %d applied: YARN and the ring have it", job_id, to)
            return
        stalled = converging.stalled or now - converging.record.time >= self.stall_after
        if stalled and not converging.stalled:
            log.warning(
                "resize of %s to %d stalled: not converged %.0f s after it was decided (%s)",
                job_id,
                to,
                now - converging.record.time,
                why,
            )
        if (why, stalled) != (converging.why, converging.stalled):
            self.store.note_progress(converging.decision_id, why, stalled=stalled)
            converging.why, converging.stalled = why, stalled

    def _stall(self, job_id: str, cause: str) -> None:
        """Record the job's pending decision as stalled by ``cause`` (it is about to be superseded)."""
        with self._lock:
            converging = self._converging.get(job_id)
        if converging is None or converging.stalled:
            return
        why = f"{converging.why}; {cause}" if converging.why else cause
        self.store.note_progress(converging.decision_id, why, stalled=True)
        converging.why, converging.stalled = why, True

    def _recover(self) -> None:
        """Pick up what a previous controller left: the latest pending or stalled decision of each live job
        is followed again; every live job adopts its driver's target before it gets another resize."""
        jobs = {job.job_id: job for job in self.store.jobs()}
        for decision_id, record in self.store.pending_decisions():  # oldest first
            job = jobs.get(record.job_id)
            if job is None or job.run != record.run or not job.live:
                if record.state is DecisionState.IN_PROGRESS:
                    again = job is not None and job.run != record.run
                    why = "the job was submitted again" if again else "the job ended"
                    self.store.finish_decision(decision_id, DecisionState.FAILED, f"{why} before it converged")
                continue
            earlier = self._converging.get(record.job_id)
            if earlier is not None and not earlier.stalled:
                self.store.finish_decision(earlier.decision_id, DecisionState.FAILED, "a later decision superseded it")
            self._converging[record.job_id] = _Converging(
                decision_id, record, job.run, stalled=record.state is DecisionState.STALLED, why=record.progress
            )
        self._unadopted = {job.job_id for job in jobs.values() if job.live}
        self._follow(self.store.jobs(live_only=True), self.clock())

    def _sync_cluster(self) -> None:
        """Jobs whose application is gone have ended; applications of names the controller does not know
        (or knew from a run that ended) join as fixed-size jobs."""
        running = self.backend.cluster_jobs()
        if running is None:
            return
        now = self.clock()
        for job in self.store.jobs(live_only=True):
            app = running.get(job.job_id)
            if app is None:
                if now - job.submitted_at > START_GRACE_S:
                    self._ended(job, forget=True)
            elif job.app_id is None:
                if app.started_at >= job.submitted_at - CLOCK_SKEW_S:
                    self.store.update_job(job.job_id, app_id=app.app_id)
                    self._started(job)
            elif app.app_id != job.app_id:
                # The run we knew ended and another application of that name runs: its secrets are the
                # new one's, so they stay.
                self._ended(job, forget=False)
        known = {j.job_id: j for j in self.store.jobs()}
        for name, app in running.items():
            seen = known.get(name)
            new_run = seen is not None and not seen.live and seen.app_id not in (None, app.app_id)
            if (seen is None or new_run) and JOB_NAME.matches(name):
                self.job_submitted(
                    name,
                    app.workers,
                    app.workers,
                    app.workers,
                    elastic=False,
                    source=JobSource.YARN,
                    app_id=app.app_id,
                    queue=app.queue,
                )

    def _started(self, job: JobRecord) -> None:
        """A pending job's application or ring showed: it runs (unless it left meanwhile)."""
        if job.state is JobState.PENDING:
            try:
                self.store.change_state(job.job_id, JobState.RUNNING, run=job.run)
            except IllegalTransitionError:
                pass  # finished since the round read it: it stays finished

    def _ended(self, job: JobRecord, *, forget: bool) -> None:
        if not self.store.change_state(job.job_id, JobState.FINISHED, run=job.run):
            return  # submitted again meanwhile: the new run is not the one that ended
        log.info("job %s left (its application is gone)", job.job_id)
        self._wake.set()
        if forget:
            try:
                self.backend.job_ended(job.job_id)
            except OSError as exc:
                log.warning("job %s ended but what was kept for it stays: %s", job.job_id, exc)

    def _metrics(self, job_id: str) -> JobMetrics:
        history = self.store.throughput(job_id)
        losses: tuple[float, ...] = ()
        step = 0
        step_times: dict[str, list[float]] = {}
        noise_scale = batch_size = resize_cost = None
        configurations: tuple[StepTime, ...] = ()
        try:
            summary = self.metrics.summary(job_id)
        except NoMetricsError:
            summary = None
        if summary is not None:
            step = summary.last_step
            for stat in summary.throughput:
                measured = (stat.aggregate_examples_per_second, stat.points)
                if history.get(stat.world_size) != measured:
                    history[stat.world_size] = measured
                    self._history_updates.append((job_id, stat.world_size, *measured))
            points = self.metrics.recent(job_id, max(SERIES_WINDOW, min(LOSS_WINDOW * summary.world_size, LOSS_POINTS)))
            losses = loss_window((p.step, p.loss) for p in points if p.loss is not None)
            points = points[-SERIES_WINDOW:]
            for p in points:
                if p.step_time_seconds is not None and p.instance:
                    step_times.setdefault(p.instance, []).append(p.step_time_seconds)
            if summary.noise is not None:
                noise_scale = summary.noise.gradient_noise_scale
            batch_size = _global_batch(points, summary.world_size)
            resize_cost = summary.resize_pause_s
            # Nodes are not in the points: every configuration counts as one node until they are.
            configurations = tuple(
                StepTime(c.world_size, 1, c.batch_size, 0, c.median_step_time_seconds, steps=c.steps)
                for c in summary.configurations
                if c.batch_size > 0 and c.median_step_time_seconds > 0
            )
        return JobMetrics(
            step=step,
            throughput={ws: Throughput(samples_per_second=sps, steps=n) for ws, (sps, n) in history.items()},
            loss_window=losses,
            step_times={name: tuple(times) for name, times in step_times.items()},
            gradient_noise_scale=noise_scale,
            batch_size=batch_size,
            configurations=configurations,
            resize_cost_s=resize_cost,
        )


class _ToSend(NamedTuple):
    """A decision of a round, recorded with its job's ``changes`` before any is sent (:meth:`ControllerService._apply`
    takes the rest)."""

    record: DecisionRecord
    changes: dict[str, Any]
    run: int
    previous_target: int
    replace: tuple[str, ...] = ()
    batch: pb.Target | None = None
    restarts_cooldown: bool = True


def metrics_store() -> InMemoryStore:
    """The store of the controller's metrics service: the metrics of :data:`METRICS_JOBS` jobs, each
    :data:`METRICS_POINTS_PER_JOB` points deep (the store's own default keeps 256 jobs, and a controller of more
    would run the others without their metrics)."""
    return InMemoryStore(max_jobs=METRICS_JOBS, points_per_job=METRICS_POINTS_PER_JOB)


def _queue_of(job: JobRecord, queues: list[str]) -> str:
    """The leaf queue a job counts in: the one it names (a leaf name, or a path's last part), YARN's
    ``default`` when it names none; the first of ``queues`` when that is not one of them; :data:`DEFAULT_QUEUE`
    (the one pool) when there are no queues."""
    leaf = (job.queue or DEFAULT_QUEUE).rsplit(".", 1)[-1]
    return leaf if leaf in queues else queues[0] if queues else DEFAULT_QUEUE


def _report_batch(report: MetricsReport, seq: int, now: float) -> metrics_pb2.ReportBatch:
    """``report`` as the point a training process would stream: the job's throughput split evenly over its
    ``world_size`` workers (the store keeps examples per second per worker)."""
    point = metrics_pb2.StepPoint(
        seq=seq, step=report.step, examples_per_second=report.samples_per_second / report.world_size, wall_time=now
    )
    if report.loss is not None:
        point.loss = report.loss
    return metrics_pb2.ReportBatch(
        job_id=report.job_id,
        worker=metrics_pb2.WorkerRef(instance=REPORTED, rank=0),
        incarnation=REPORTED,
        world_size=report.world_size,
        points=[point],
    )


def _global_batch(points: list[RecentPoint], world_size: int) -> int | None:
    """The job's global batch now, from the steps every rank at ``world_size`` reported among ``points``: the
    sum of the ranks' batches that most of those steps add up to (the newest such sum on a tie); else (no step
    has every rank's report yet) the newest step's batch times ``world_size``; None without one.

    One step's batches, never one rank's older batch beside another's newer one (a step just after a batch
    change would otherwise add up to neither); and the usual sum, not a short last step of an epoch."""
    by_step: dict[int, dict[int, int]] = {}
    newest: tuple[int, int] | None = None  # (step, batch) of the newest report
    for p in points:
        if p.world_size == world_size and p.batch_size is not None:
            by_step.setdefault(p.step, {})[p.rank] = p.batch_size
            if newest is None or p.step >= newest[0]:
                newest = (p.step, p.batch_size)
    sums = [sum(ranks.values()) for _, ranks in sorted(by_step.items()) if len(ranks) == world_size]
    if sums:
        counts = collections.Counter(sums)
        most = max(counts.values())
        return next(total for total in reversed(sums) if counts[total] == most)
    return newest[1] * world_size if newest is not None else None
