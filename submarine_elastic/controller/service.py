"""The controller: jobs in, policy decisions out, applied through each job's driver.

Each round (every ``interval`` seconds, and at once on an arrival or a departure) is sync, observe, step, act:
:meth:`ControllerService.tick` syncs the jobs with the cluster, :class:`~.observe.Observer` reads what the round
needs once (one status call to each job's driver), the pure :func:`~.step.step` says what to do, and the service
and its :class:`~.act.Sender` carry it out. Each job's state between rounds is one entry of a
:class:`~.book.JobBook`. In all, a round

1. syncs the jobs it knows with the cluster (a job whose application is gone has ended: it leaves and
   the secrets kept for it are removed; yarn-service applications started by someone else join as
   fixed-size jobs; a name submitted again is a new run of the job);
2. reads each job's status from its driver (one call: target, ring, READY workers, ring members, batch
   limits, placement) and its metrics from the metrics store (what the training
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

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable

from submarine_elastic.controller.act import SENDERS as SENDERS
from submarine_elastic.controller.act import Sender, carry
from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    DecisionState,
    IllegalTransitionError,
    InvalidJobError,
    JobBackend,
    JobRecord,
    JobSource,
    JobState,
    JobSubmission,
    MetricsReport,
)
from submarine_elastic.controller.book import Converging, JobBook
from submarine_elastic.controller.jobmetrics import LOSS_POINTS as LOSS_POINTS
from submarine_elastic.controller.jobmetrics import METRICS_JOBS as METRICS_JOBS
from submarine_elastic.controller.jobmetrics import METRICS_POINTS_PER_JOB as METRICS_POINTS_PER_JOB
from submarine_elastic.controller.jobmetrics import REPORTED as REPORTED
from submarine_elastic.controller.jobmetrics import SERIES_WINDOW as SERIES_WINDOW
from submarine_elastic.controller.jobmetrics import metrics_store as metrics_store
from submarine_elastic.controller.jobmetrics import report_batch
from submarine_elastic.controller.observe import Observer
from submarine_elastic.controller.step import Step, follow, step
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.limits import JOB_NAME
from submarine_elastic.metrics.api import InvalidPointError, MetricsStore, ThroughputStat
from submarine_elastic.policy import Decision, PolicyEngine, PolicyError, Snapshot, load_job_policy_spec
from submarine_elastic.yarn import GPU_RESOURCE, gpus_on_one_node_problem

log = logging.getLogger(__name__)

START_GRACE_S = 60.0  # a job may take this long after its submission to appear in the RM's list
CLOCK_SKEW_S = 30.0  # an application started this much before its run was registered still belongs to it
#: A started job whose application the RM neither lists nor knows ends after this long missing.
MISSING_ENDED_S = 300.0
#: YARN's view of a job settles within this: a container allocated shows in its service's status a heartbeat
#: or two later. A drop of capacity, or a job asking for more than fits, counts once it has lasted this long
#: (or a round, when rounds are longer).
SETTLE_S = 10.0
#: Rounds between full collections of the cycle collector (:meth:`ControllerService.collect_garbage`).
FULL_COLLECTION_ROUNDS = 60
#: Seconds between two tries at removing what an ended job left (its secrets on HDFS while HDFS is away); the
#: jobs still to clean are kept in the controller's database under :data:`LEFT_KEY`, so a restart goes on.
LEFT_RETRY_S = 15.0
LEFT_KEY = "ended-jobs-left"


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
        self.settle = max(interval, SETTLE_S)
        self._wake = threading.Event()
        self._missing_since: dict[str, float] = {}  # job -> when its started application went missing (clock)
        self._stop = threading.Event()
        self._rounds = 0  # rounds the loop ran, for :meth:`collect_garbage`
        self._left_tried = float("-inf")  # when :meth:`_clean_up_left` last tried
        self._thread: threading.Thread | None = None
        self.book = JobBook()
        self._observer = Observer(backend, store, self.metrics, settle=self.settle)
        self._sender = Sender(backend, store, self.book, stall_after=stall_after, clock=clock, wake=self._wake.set)
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

    def submit(self, job: JobSubmission, *, app_id: str | None = None) -> JobRecord:
        """A job arrived; a name the controller knew already starts a new run of it (see :class:`JobRecord`).
        A job submitted with ``job run`` is pending until YARN shows its application; the others run.

        Args:
            app_id: its YARN application, when the controller found it in the RM's list.

        Raises:
            InvalidJobError: a policy that does not load (named, with why), or ``gpus`` per worker that no node of
                the cluster has (as ``job run`` refuses them; not checked with a fixed ``capacity`` or while the
                nodes are unknown).
        """
        if job.gpus and self.capacity is None:
            self._refuse_unplaceable(job)
        if job.policy is not None:
            try:
                load_job_policy_spec(job.policy)
            except PolicyError as exc:
                raise InvalidJobError(f"job {job.job_id!r}: policy {job.policy!r} cannot be used: {exc}") from exc
        record = job.record(self.clock(), app_id=app_id)
        run = self.store.upsert_job(record)
        # What the metrics store holds of the name is the last run's, as the history dropped; this run's
        # target is the one just submitted.
        self.book.submitted(job.job_id, new_run=run > 1, forget=lambda: self.metrics.forget(job.job_id))
        log.info(
            "job %s arrived (%s%s): %d workers in [%d, %d]",
            job.job_id,
            job.source,
            f", run {run}" if run > 1 else "",
            job.workers,
            job.min_workers,
            job.max_workers,
        )
        self._wake.set()
        return self.store.job(job.job_id)

    def _refuse_unplaceable(self, job: JobSubmission) -> None:
        """Refuses a job whose workers ask more GPUs than the largest node has: YARN would keep them pending.

        Raises:
            InvalidJobError: naming what the job asks and what each node has.
        """
        nodes = self.backend.nodes()
        if nodes is None:
            return
        problem = gpus_on_one_node_problem(job.gpus, [(n.node_id, n.gpus) for n in nodes])
        if problem is not None:
            raise InvalidJobError(f"job {job.job_id!r} asks {GPU_RESOURCE} {job.gpus} per worker, but {problem}")

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

        def ingest(seq: int) -> ThroughputStat:
            try:
                self.metrics.ingest(report_batch(report, seq, self.clock()))
            except InvalidPointError as exc:
                raise InvalidJobError(f"job {job_id!r}: {exc}") from exc
            [stat] = [t for t in self.metrics.summary(job_id).throughput if t.world_size == report.world_size]
            return stat

        stat = self.book.report(job_id, ingest)
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
        self._sender.stop()

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
        """One round: sync the jobs with the cluster, observe, step, act. Returns the decisions recorded."""
        self._sync_cluster()
        now = self.clock()
        self._clean_up_left(now)
        observation = self._observer.observe(self.store.jobs(live_only=True), now, self.capacity)
        for job in observation.ended:
            self._ended(job, forget=True, why="its service has ended")
        by_id = {job.job_id: job for job in observation.jobs}

        def decide(snapshot: Snapshot) -> Iterable[Decision]:
            for view in snapshot.jobs:
                self._use_policy(by_id[view.job_id])
            return self.engine.decide(snapshot)

        return self._act(
            step(observation, self.book.snapshot(), decide, stall_after=self.stall_after, settle=self.settle),
            observation.jobs,
            now,
        )

    def _act(self, done: Step, live: Iterable[JobRecord], now: float) -> list[DecisionRecord]:
        """Carry out a round's step, in its order; the decisions recorded."""
        for followed in done.follows:
            carry(self.store, self.book, followed)
        self.store.observe(dict(done.rings), now)
        live = list(live)
        for job in live:
            if job.job_id in done.rings:
                self._started(job)
        if not done.counted:
            log.warning("the cluster's nodes are unknown (the ResourceManager did not answer); no decision this round")
            return []
        self.store.record_throughputs(list(done.history))
        for stalled in done.stalls:
            carry(self.store, self.book, stalled)
        ids = self.store.add_decisions([(send.record, dict(send.changes)) for send in done.sends])
        for decision_id, send in zip(ids, done.sends, strict=True):
            self._sender.send(decision_id, send)
        self.book.set_short(done.short_since)
        for job_id in self.book.with_policies() - {job.job_id for job in live}:
            # Its policy has had its after_train: a restarted controller would not set it again.
            self.book.set_policy(job_id, None)
            self.engine.set_job_policy(job_id, None)
        self.store.put("policy_engine", self.engine.state_dict())
        return [send.record for send in done.sends]

    def wait_idle(self, timeout: float) -> bool:
        """Block until no decision is being sent to a driver (at most ``timeout`` s); True if idle. A
        decision sent may still be pending: :meth:`tick` follows it."""
        deadline = time.monotonic() + timeout
        while True:
            sends = self.book.sends()
            if not sends:
                return True
            for done in sends:
                done.wait(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                return not self.book.sends()

    # ------------------------------------------------------------------ pieces

    def _use_policy(self, job: JobRecord) -> None:
        """Give a job's run the policy it was submitted with (``--policy``; checked when it was submitted,
        so only a policy package uninstalled since then keeps the default)."""
        name = job.policy
        given = self.book.policy(job.job_id)
        if given == (job.run, name):
            return
        self.book.set_policy(job.job_id, (job.run, name))
        if name is None:
            if given is not None:
                self.engine.set_job_policy(job.job_id, None)
            return
        try:
            self.engine.set_job_policy(job.job_id, load_job_policy_spec(name))
        except PolicyError as exc:
            log.error("job %s: policy %r cannot be used (%s); it keeps the default policy", job.job_id, name, exc)

    def _recover(self) -> None:
        """Pick up what a previous controller left: the latest pending or stalled decision of each live job
        is followed again; every live job adopts its driver's target before it gets another resize."""
        jobs = {job.job_id: job for job in self.store.jobs()}
        for decision_id, record in self.store.pending_decisions():  # oldest first
            job = jobs.get(record.job_id)
            if job is None or job.run != record.run or not job.live:
                if record.state is DecisionState.PENDING:
                    again = job is not None and job.run != record.run
                    why = "the job was submitted again" if again else "the job ended"
                    self.store.finish_decision(decision_id, DecisionState.FAILED, f"{why} before it converged")
                continue
            stalled = record.state is DecisionState.STALLED
            converging = Converging(decision_id, record, job.run, stalled=stalled, why=record.progress)
            earlier = self.book.recover(record.job_id, converging)
            if earlier is not None and not earlier.stalled:
                self.store.finish_decision(earlier.decision_id, DecisionState.FAILED, "a later decision superseded it")
        live = [job for job in jobs.values() if job.live]
        self.book.unadopt(job.job_id for job in live)
        statuses = self._observer.statuses(live)
        for followed in follow(live, self.book.snapshot(), statuses, self.clock(), self.stall_after):
            carry(self.store, self.book, followed)

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
                if self._gone(job, now):
                    self._ended(job, forget=True)
                continue
            self._missing_since.pop(job.job_id, None)
            if job.app_id is None:
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
                found = JobSubmission(
                    name, app.workers, app.workers, app.workers, elastic=False, source=JobSource.YARN, queue=app.queue
                )
                self.submit(found, app_id=app.app_id)

    def _gone(self, job: JobRecord, now: float) -> bool:
        """Whether a live job whose application the RM did not list has ended. One never seen started ends
        :data:`START_GRACE_S` after its submission. One that started has ended when the RM says its application
        did; not while the RM says it runs (the listing of a ResourceManager recovering its applications after a
        restart left it out: ending it then removed the files YARN needs to relaunch its containers, and every
        relaunch of its driver failed); and, while the RM does not know it, once it has been missing for
        :data:`MISSING_ENDED_S`."""
        if job.app_id is None:
            return now - job.submitted_at > START_GRACE_S
        ended = self.backend.application_ended(job.app_id)
        if ended is not None:
            if not ended:
                log.info("job %s: its application %s runs, though the RM did not list it", job.job_id, job.app_id)
            return ended
        since = self._missing_since.setdefault(job.job_id, now)
        return now - since > MISSING_ENDED_S

    def _started(self, job: JobRecord) -> None:
        """A pending job's application or ring showed: it runs (unless it left meanwhile)."""
        if job.state is JobState.PENDING:
            try:
                self.store.change_state(job.job_id, JobState.RUNNING, run=job.run)
            except IllegalTransitionError:
                pass  # finished since the round read it: it stays finished

    def _ended(self, job: JobRecord, *, forget: bool, why: str = "its application is gone") -> None:
        if not self.store.change_state(job.job_id, JobState.FINISHED, run=job.run):
            return  # submitted again meanwhile: the new run is not the one that ended
        log.info("job %s left (%s)", job.job_id, why)
        self._wake.set()
        if forget:
            self._clean_up(job.job_id)

    def _clean_up(self, job_id: str) -> None:
        """Removes what was kept for an ended job (:meth:`JobBackend.job_ended`); what could not be (HDFS away)
        is tried again every :data:`LEFT_RETRY_S` (:meth:`_clean_up_left`)."""
        left = set(self.store.get(LEFT_KEY, []))
        kept = job_id in left
        removed = self._removed(job_id, kept=kept)
        if removed and kept:
            self.store.put(LEFT_KEY, sorted(left - {job_id}))
        elif not removed and not kept:
            self.store.put(LEFT_KEY, sorted(left | {job_id}))

    def _removed(self, job_id: str, *, kept: bool) -> bool:
        """Whether what was kept for ended ``job_id`` is removed now; the first failure is logged, and the
        removal of what was ``kept`` (listed under :data:`LEFT_KEY`)."""
        try:
            self.backend.job_ended(job_id)
        except OSError as exc:
            if not kept:
                log.warning("job %s ended but what was kept for it stays, tried again: %s", job_id, exc)
            return False
        if kept:
            log.info("what was kept for ended job %s is removed", job_id)
        return True

    def _clean_up_left(self, now: float) -> None:
        """Tries again, at most every :data:`LEFT_RETRY_S`, to remove what ended jobs left; a job submitted
        again since owns its files anew and is left alone. One read of the list, one write when it changed."""
        if now - self._left_tried < LEFT_RETRY_S:
            return
        self._left_tried = now
        left = self.store.get(LEFT_KEY, [])
        if not left:
            return
        live = {job.job_id for job in self.store.jobs(live_only=True)}
        still = [job_id for job_id in left if job_id not in live and not self._removed(job_id, kept=True)]
        if still != left:
            self.store.put(LEFT_KEY, still)
