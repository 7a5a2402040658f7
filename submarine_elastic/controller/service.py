"""The controller: jobs in, policy decisions out, applied through each job's driver.

Each round (every ``interval`` seconds, and at once on an arrival or a departure) it

1. syncs the jobs it knows with the cluster (jobs that ended leave; yarn-service applications
   started by someone else join as fixed-size jobs, so they count against capacity);
2. reads each job's ring size from its driver and its metrics from the metrics service, and keeps
   the throughput per world size in SQLite (history that survives a restart);
3. builds a :class:`~submarine_elastic.policy.Snapshot` and asks the policy engine for decisions;
4. records each decision, then applies it in the background through the job's driver (graceful
   scale-in, stop-free scale-out), marking it applied once the driver confirms the new size.

One resize per job is in flight at a time. A decision left unapplied by a controller that was
killed is finished on restart by reading the job's real size back, never by resizing twice.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    InvalidJobError,
    JobRecord,
)
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import MetricsStore
from submarine_elastic.metrics.api import UnknownJobError as NoMetricsError
from submarine_elastic.policy import (
    JobMetrics,
    JobView,
    PolicyEngine,
    PolicyError,
    Snapshot,
    Throughput,
    load_job_policy_spec,
)

log = logging.getLogger(__name__)

_JOB_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
LOSS_WINDOW = 20  # the convergence policy looks at 20 points by default
SERIES_WINDOW = 40  # recent points read per job per round: the loss window, step times per worker


class JobBackend(ABC):
    """How the controller sees and changes the jobs on a cluster (the real one: :class:`YarnJobBackend`)."""

    @abstractmethod
    def capacity(self, live_jobs: int) -> int:
        """Worker slots the cluster has for ``live_jobs`` jobs (each also runs an AM and a driver)."""

    @abstractmethod
    def ring_size(self, job_id: str) -> int | None:
        """The job's current ring size, or None if its driver does not answer (yet)."""

    @abstractmethod
    def resize(self, job_id: str, workers: int, reason: str, timeout: float) -> None:
        """Resize and block until the ring has ``workers`` (at most ``timeout`` s).

        Raises:
            Exception: any failure; the controller records its message.
        """

    def instances(self, job_id: str) -> tuple[str, ...]:
        """Instance names of the job's ring members (``worker-0``, ...); () when unknown."""
        return ()

    def replace(self, job_id: str, instances: tuple[str, ...], timeout: float) -> None:
        """Swap the named workers for fresh ones, keeping the job's size; blocks until done.

        Raises:
            Exception: any failure (the default: this backend cannot replace workers).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot replace workers")

    @abstractmethod
    def cluster_jobs(self) -> dict[str, int] | None:
        """Live yarn-service applications: name -> worker slots they hold; None if the RM did not answer."""


class ControllerService(Controller):
    """The live controller. Start its loop with :meth:`start`; :meth:`tick` runs one round by hand.

    Args:
        store: the SQLite state.
        engine: the policy engine (job policy + arbiter).
        backend: the cluster's jobs.
        metrics: the metrics service's store, or None.
        interval: seconds between rounds.
        resize_timeout: seconds a resize may take before it is recorded as failed.
        clock: wall-clock seconds (injectable for tests).
    """

    def __init__(
        self,
        store: ControllerStore,
        engine: PolicyEngine,
        backend: JobBackend,
        *,
        metrics: MetricsStore | None = None,
        interval: float = 5.0,
        resize_timeout: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.store = store
        self.engine = engine
        self.backend = backend
        self.metrics = metrics
        self.interval = interval
        self.resize_timeout = resize_timeout
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._in_flight: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._job_policies: dict[str, str] = {}
        self._history_updates: list[tuple[str, int, float, int]] = []
        # Jobs get their own policies back before the engine's state, which holds those policies' state.
        for job in store.jobs(live_only=True):
            self._use_policy(job.job_id, store.job_extra(job.job_id)[0])
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
        source: str = "cli",
        policy: str | None = None,
    ) -> JobRecord:
        if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
            raise InvalidJobError(f"job id must match [a-z][a-z0-9-]*, got {job_id!r}")
        for name, value in (("min_workers", min_workers), ("max_workers", max_workers), ("workers", workers)):
            if not isinstance(value, int) or value < 1:
                raise InvalidJobError(f"{name} must be an integer >= 1, got {value!r}")
        if not min_workers <= workers <= max_workers:
            raise InvalidJobError(f"workers {workers} must lie within min {min_workers} and max {max_workers}")
        if not elastic and min_workers != max_workers:
            raise InvalidJobError(f"a fixed-size job needs min == max, got {min_workers} and {max_workers}")
        record = JobRecord(job_id, min_workers, max_workers, workers, workers, elastic, "running", self.clock(), source)
        self.store.upsert_job(record, policy)
        log.info("job %s arrived (%s): %d workers in [%d, %d]", job_id, source, workers, min_workers, max_workers)
        self._wake.set()
        return record

    def job_finished(self, job_id: str) -> None:
        self.store.update_job(job_id, state="finished")
        log.info("job %s left", job_id)
        self._wake.set()

    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        self.store.job(job_id)
        if world_size < 1 or step < 0:
            raise InvalidJobError(f"world_size must be >= 1 and step >= 0, got {world_size} and {step}")
        if not math.isfinite(samples_per_second) or samples_per_second < 0:
            raise InvalidJobError(f"samples_per_second must be finite and >= 0, got {samples_per_second}")
        if loss is not None and not math.isfinite(loss):
            raise InvalidJobError(f"loss must be finite, got {loss}")
        old = self.store.throughput(job_id).get(world_size, (0.0, 0))
        self.store.record_throughput(job_id, world_size, samples_per_second, old[1] + 1)
        if loss is not None:
            losses = (self.store.get(f"loss/{job_id}") or [])[-(LOSS_WINDOW - 1) :] + [loss]
            self.store.put(f"loss/{job_id}", losses)

    def decision(self, job_id: str) -> DecisionRecord | None:
        self.store.job(job_id)
        records = self.store.decisions(job_id)
        return records[-1] if records else None

    def jobs(self) -> list[JobRecord]:
        return self.store.jobs()

    def timeline(self, job_id: str) -> list[DecisionRecord]:
        self.store.job(job_id)
        return self.store.decisions(job_id)

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="controller")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        """Run the next round now (an arrival or departure noticed outside this process)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the controller must outlive any one bad round
                log.exception("controller round failed; next round in %.0f s", self.interval)
            self._wake.wait(self.interval)
            self._wake.clear()

    def tick(self) -> list[DecisionRecord]:
        """One round: sync, snapshot, decide, start applying. Returns the decisions recorded."""
        self._sync_cluster()
        live = self.store.jobs(live_only=True)
        capacity = self.backend.capacity(len(live))
        sizes = {job.job_id: self.backend.ring_size(job.job_id) for job in live}
        held = sum(
            (size or 0) + max(0, job.target - (size or 0)) for job in live if (size := sizes[job.job_id]) is not None
        )
        views = []
        for job in live:
            size = sizes[job.job_id]
            if size is not None and size != job.workers and not self._busy(job.job_id):
                self.store.update_job(job.job_id, workers=size)
            if size is not None:
                # Running: it holds its ring plus any scale-out in flight.
                current, pending = size, max(0, job.target - size)
            elif held + job.target <= capacity:
                # Not started yet, and what it asked for is free: it holds that while its ring forms.
                current, pending = 0, job.target
                held += job.target
            else:
                # Not started and the cluster is full: it waits, so the arbiter makes room for it.
                current, pending = 0, 0
            policy, last_resize_at = self.store.job_extra(job.job_id)
            self._use_policy(job.job_id, policy)
            views.append(
                JobView(
                    job_id=job.job_id,
                    min_workers=job.min_workers,
                    max_workers=job.max_workers,
                    elastic=job.elastic,
                    current_workers=current,
                    pending_workers=pending,
                    submitted_at=job.submitted_at,
                    last_resize_at=last_resize_at,
                    instances=self.backend.instances(job.job_id) if size is not None else (),
                    metrics=self._metrics(job.job_id),
                )
            )
        self.store.record_throughputs(self._history_updates)
        self._history_updates.clear()
        total = sum(v.holding for v in views)
        snapshot = Snapshot(now=self.clock(), capacity=capacity, free=max(0, capacity - total), jobs=tuple(views))
        recorded = []
        for decision in self.engine.decide(snapshot):
            job = next(j for j in live if j.job_id == decision.job_id)
            if self._busy(job.job_id):
                continue
            if decision.replace and decision.target_workers == job.target:
                record = DecisionRecord(
                    job.job_id,
                    self.clock(),
                    job.target,
                    job.target,
                    f"replace {', '.join(decision.replace)}: {decision.reason}",
                )
                decision_id = self.store.add_decision(record)
                self.store.update_job(job.job_id, last_resize_at=record.time)
                recorded.append(record)
                self._apply(decision_id, record, replace=tuple(decision.replace))
                continue
            if decision.target_workers == job.target:
                continue
            record = DecisionRecord(job.job_id, self.clock(), job.target, decision.target_workers, decision.reason)
            decision_id = self.store.add_decision(record)
            self.store.update_job(job.job_id, target=decision.target_workers, last_resize_at=record.time)
            recorded.append(record)
            self._apply(decision_id, record)
        self.store.put("policy_engine", self.engine.state_dict())
        return recorded

    def wait_idle(self, timeout: float) -> bool:
        """Block until no resize is in flight (at most ``timeout`` s); True if idle."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._in_flight.values())
            if not threads:
                return True
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                with self._lock:
                    return not self._in_flight

    # ------------------------------------------------------------------ pieces

    def _use_policy(self, job_id: str, name: str | None) -> None:
        """Give a job the policy it was submitted with (``--policy``); a bad name keeps the default."""
        if name is None or self._job_policies.get(job_id) == name:
            return
        self._job_policies[job_id] = name
        try:
            self.engine.set_job_policy(job_id, load_job_policy_spec(name))
        except PolicyError as exc:
            log.error("job %s: policy %r cannot be used (%s); it keeps the default policy", job_id, name, exc)

    def _busy(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._in_flight

    def _apply(self, decision_id: int, record: DecisionRecord, replace: tuple[str, ...] = ()) -> None:
        def run() -> None:
            try:
                if replace:
                    self.backend.replace(record.job_id, replace, self.resize_timeout)
                else:
                    self.backend.resize(record.job_id, record.to_workers, record.reason, self.resize_timeout)
            except Exception as exc:  # noqa: BLE001 - recorded as the decision's error, the loop goes on
                log.warning("resize of %s to %d failed: %s", record.job_id, record.to_workers, exc)
                self.store.finish_decision(decision_id, applied=False, error=str(exc) or type(exc).__name__)
                self.store.update_job(record.job_id, target=record.from_workers)
            else:
                self.store.finish_decision(decision_id, applied=True)
                self.store.update_job(record.job_id, workers=record.to_workers, last_resize_at=self.clock())
            finally:
                with self._lock:
                    self._in_flight.pop(record.job_id, None)
                self._wake.set()

        thread = threading.Thread(target=run, daemon=True, name=f"resize-{record.job_id}")
        with self._lock:
            self._in_flight[record.job_id] = thread
        thread.start()

    def _recover(self) -> None:
        """Finish decisions a previous controller left in flight by reading the jobs' real sizes."""
        for decision_id, record in self.store.pending_decisions():
            size = self.backend.ring_size(record.job_id)
            if size == record.to_workers:
                self.store.finish_decision(decision_id, applied=True)
                self.store.update_job(record.job_id, workers=size, target=size)
            else:
                self.store.finish_decision(decision_id, applied=False, error="controller restarted before it applied")
                if size is not None:
                    self.store.update_job(record.job_id, workers=size, target=size)

    def _sync_cluster(self) -> None:
        running = self.backend.cluster_jobs()
        if running is None:
            return
        known = {j.job_id: j for j in self.store.jobs()}
        for job in known.values():
            if job.state != "finished" and job.job_id not in running and self.clock() - job.submitted_at > 60:
                self.job_finished(job.job_id)
        for name, workers in running.items():
            if name not in known and _JOB_ID.fullmatch(name):
                self.job_submitted(name, workers, workers, workers, elastic=False, source="yarn")

    def _metrics(self, job_id: str) -> JobMetrics:
        history = self.store.throughput(job_id)
        losses = tuple(self.store.get(f"loss/{job_id}") or ())
        step = 0
        step_times: dict[str, list[float]] = {}
        if self.metrics is not None:
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
                points = self.metrics.series(job_id, SERIES_WINDOW)
                window = [p.point.loss for p in points if p.point.HasField("loss")][-LOSS_WINDOW:]
                if window:
                    losses = tuple(window)
                for p in points:
                    if p.point.HasField("step_time_seconds") and p.worker.instance:
                        step_times.setdefault(p.worker.instance, []).append(p.point.step_time_seconds)
        return JobMetrics(
            step=step,
            throughput={ws: Throughput(samples_per_second=sps, steps=n) for ws, (sps, n) in history.items()},
            loss_window=losses,
            step_times={name: tuple(times) for name, times in step_times.items()},
        )
