"""The discrete-event engine: jobs arrive, schedulers allocate, jobs progress and finish.

Time only moves between events: a job's arrival, a job's completion (predicted exactly from its current
goodput, see :mod:`submarine_elastic.sim.physics`), and a scheduling round every ``interval_s`` while any
job is active. Every arrival and completion also triggers a round, so a job that fits starts at once.
Between events each job's progress rate is constant within an epoch, so progress is integrated exactly,
epoch by epoch; nothing is sampled. A run is a pure function of its inputs: same workload, cluster,
scheduler and costs, same result.

Placement is the simulator's, like YARN's is the cluster's: a scheduler says how many workers a job
gets; the simulator keeps a job's existing workers where they are, puts new ones on the nodes the job
already uses, then best-fit on one node when they fit there, else on the nodes with the most free GPUs;
it removes workers from the nodes where the job has the fewest first. A scheduler may also say how many
nodes the workers should span at most (``Allocation.nodes``): where keeping them in place would span more
and the job fits on fewer nodes than that elsewhere, the simulator moves all its workers, packed on the
fewest nodes it can (whole free nodes first, best fit for the rest), and the job pays
:meth:`ResizeCosts.move` (the dearest change: it stops and starts elsewhere).
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from submarine_elastic.policy.losses import LOSS_WINDOW
from submarine_elastic.sim.api import (
    Allocation,
    AllocationChange,
    ClusterConfig,
    ClusterView,
    JobResult,
    JobSpec,
    JobView,
    MeasuredStep,
    ResizeCosts,
    Scheduler,
    SchedulerError,
    SimError,
    SimResult,
    SimSummary,
    UtilSample,
)
from submarine_elastic.sim.physics import Application, TraceCatalog

log = logging.getLogger(__name__)

#: Configurations (workers, nodes, micro-batch, accumulation) per job whose iteration times schedulers see,
#: the most recent ones.
MEASURED_CONFIGURATIONS = 32
#: Rounds in a row that may pass with pending jobs, nothing running and nothing left to arrive, before the
#: run stops and reports those jobs unfinished (a scheduler that will never start them).
STALL_ROUNDS = 3


class BatchRule(StrEnum):
    """How a job's global batch follows its worker count when a scheduler does not set it.

    ``fixed-local``: each worker keeps the per-worker batch the user asked for (global = local x workers,
    capped at the largest validated batch). ``fixed-global``: the global batch stays what the user asked for.
    """

    FIXED_LOCAL = "fixed-local"
    FIXED_GLOBAL = "fixed-global"


@dataclass(frozen=True)
class SimConfig:
    """Knobs of a run other than the workload, cluster and scheduler."""

    interval_s: float = 60.0
    costs: ResizeCosts = ResizeCosts()
    batch_rule: BatchRule = BatchRule.FIXED_LOCAL
    max_time_s: float = 90 * 86400.0
    #: Upper bound of an elastic job's workers when the workload gives none (also capped by the cluster
    #: and by the application's largest useful worker count).
    default_max_replicas: int = 64

    def __post_init__(self) -> None:
        if not math.isfinite(self.interval_s) or self.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        if not self.max_time_s > 0:
            raise ValueError(f"max_time_s must be > 0, got {self.max_time_s}")
        if self.default_max_replicas < 1:
            raise ValueError(f"default_max_replicas must be >= 1, got {self.default_max_replicas}")


class _Job:
    """Mutable state of one simulated job."""

    def __init__(self, spec: JobSpec, app: Application, cluster: ClusterConfig, default_max: int) -> None:
        self.spec = spec
        self.app = app
        self.min_replicas = spec.min_replicas or 1
        cap = min(cluster.total_gpus, max(default_max, spec.num_replicas), app.max_useful_replicas())
        self.max_replicas = spec.max_replicas or max(cap, spec.num_replicas, self.min_replicas)
        self.local_bsz = spec.batch_size / spec.num_replicas
        self.batch = app.clamp_batch(spec.batch_size)
        self.workers = 0
        self.nodes: dict[int, int] = {}
        self.progress = 0.0
        self.epoch = 0
        self.t = spec.arrival_s
        self.pause_until = 0.0
        self.rates = np.zeros(app.epochs)
        self.tail = np.zeros(app.epochs)
        self.version = 0
        self.gpu_s = 0.0
        self.run_s = 0.0
        self.start_s: float | None = None
        self.completion_s: float | None = None
        self.resizes = 0
        self.moves = 0
        self.preemptions = 0
        self.peak_workers = 0
        self.throughput: dict[int, float] = {}
        # what views give of the job's throughput and placement, made again when they change (in reconfigure)
        self.throughput_view: Mapping[int, float] = MappingProxyType({})
        self.placed: tuple[int, ...] = ()
        # the view's values that follow from the batch and the epoch alone, by (batch, epoch)
        self._epoch_key: tuple[float, int] | None = None
        self._epoch_values: tuple[float | None, tuple[float, ...], float, float | None] = (None, (), 1.0, None)
        self.iter_s = 0.0
        self.steps = 0.0
        self.steps_at: dict[int, float] = {}
        self.last_resize_s: float | None = None
        # configuration -> [iteration s, sync s, iterations], most recently entered last
        self.measured: dict[tuple[int, int, float, int], list[float]] = {}
        self.config: tuple[int, int, float, int] | None = None
        self._measured_views: dict[tuple[int, int, float, int], MeasuredStep] = {}
        # the configurations last given, and whether any but the newest changed since (a reconfiguration)
        self._measured_given: tuple[MeasuredStep, ...] = ()
        self._reshaped = True

    @functools.cached_property
    def target_progress(self) -> float:
        """The application's progress at which the job is done (read every round: kept)."""
        return self.app.target_progress

    @functools.cached_property
    def higher_is_better(self) -> bool:
        """Whether the application's validation metric rises as training goes on (read every round: kept)."""
        return self.app.metric_higher_is_better

    def measured_steps(self) -> tuple[MeasuredStep, ...]:
        """The configurations measured so far, oldest first (each built again only when it changed). Between
        reconfigurations only the newest (the one the job runs in) gains steps: the others are given as they
        were."""
        if not self._reshaped:
            key, (seconds, sync, steps) = next(reversed(self.measured.items()))
            last = self._measured_given[-1]
            if last.steps != int(steps) or last.seconds != seconds:
                last = self._measured_views[key] = MeasuredStep(*key, seconds, sync, int(steps))
                self._measured_given = (*self._measured_given[:-1], last)
            return self._measured_given
        out = []
        for key, (seconds, sync, steps) in self.measured.items():
            known = self._measured_views.get(key)
            if known is None or known.steps != int(steps) or known.seconds != seconds:
                known = self._measured_views[key] = MeasuredStep(*key, seconds, sync, int(steps))
            out.append(known)
        if len(self._measured_views) > 2 * MEASURED_CONFIGURATIONS:
            self._measured_views = {key: self._measured_views[key] for key in self.measured}
        self._measured_given = tuple(out)
        self._reshaped = not out
        return self._measured_given

    def placement(self) -> tuple[int, ...]:
        return tuple(sorted(self.nodes.values(), reverse=True))

    def epoch_values(self) -> tuple[float | None, tuple[float, ...], float, float | None]:
        """The validation metric after the last epoch (None before the first), the metric after each of the last
        :data:`LOSS_WINDOW` epochs, the statistical efficiency and the noise scale: made once per batch and epoch."""
        key = (self.batch, self.epoch)
        if key != self._epoch_key:
            app, epoch = self.app, self.epoch
            metrics = app.metrics(self.batch)
            self._epoch_values = (
                float(metrics[epoch - 1]) if epoch > 0 else None,
                tuple(metrics[max(0, epoch - LOSS_WINDOW) : epoch].tolist()),
                app.efficiency(self.batch, epoch),
                app.noise_scale(self.batch, epoch),
            )
            self._epoch_key = key
        return self._epoch_values

    def advance(self, t: float) -> None:
        """Move progress to time ``t`` at the current allocation."""
        dt = t - self.t
        if dt <= 0:
            return
        if self.workers:
            self.gpu_s += self.workers * dt
            self.run_s += dt
            remaining = t - max(self.t, self.pause_until)
            if remaining > 0:
                steps = remaining / self.iter_s
                self.steps += steps
                self.steps_at[self.workers] = self.steps_at.get(self.workers, 0.0) + steps
                if self.config in self.measured:
                    self.measured[self.config][2] += steps
            ends = self.app.epoch_progress
            last = self.app.epochs - 1
            while remaining > 0:
                rate = self.rates[self.epoch]
                need = (ends[self.epoch] - self.progress) / rate
                if need <= remaining and self.epoch < last:
                    self.progress = float(ends[self.epoch])
                    self.epoch += 1
                    remaining -= need
                else:
                    self.progress = min(self.progress + rate * remaining, float(ends[self.epoch]))
                    remaining = 0.0
        self.t = t

    def reconfigure(self, batch: float) -> None:
        """Recompute the per-epoch goodput for the current placement and ``batch``."""
        self.batch = batch
        placement = self.placed = self.placement()
        if not self.workers:
            self.rates = np.zeros(self.app.epochs)
            return
        cost = self.app.iteration(placement, batch)
        seconds = cost.seconds
        self.iter_s = seconds
        self.config = (self.workers, len(placement), cost.atomic_bsz, cost.accum_steps)
        entry = self.measured.pop(self.config, None)
        self._reshaped = True
        sync = self.app.step_time(placement, cost.atomic_bsz)[1]
        self.measured[self.config] = [seconds, sync, entry[2] if entry else 0.0]
        while len(self.measured) > MEASURED_CONFIGURATIONS:
            del self.measured[next(iter(self.measured))]
        self.throughput[self.workers] = self.app.clamp_batch(batch) / seconds
        self.throughput_view = MappingProxyType(dict(self.throughput))
        self.rates = self.app.gains(batch) / seconds
        widths = np.diff(self.app.epoch_progress, prepend=0.0)
        durations = widths / self.rates
        # tail[e]: seconds for the epochs after e
        self.tail = np.concatenate((np.cumsum(durations[::-1])[::-1][1:], [0.0]))

    def finish_time(self) -> float:
        """When the job completes if nothing changes (``inf`` without workers)."""
        if not self.workers:
            return math.inf
        e = self.epoch
        rest = (self.app.epoch_progress[e] - self.progress) / self.rates[e] + self.tail[e]
        return max(self.t, self.pause_until) + float(rest)


class _Nodes:
    """Free GPUs per node and the placement rules (see the module docstring)."""

    def __init__(self, cluster: ClusterConfig) -> None:
        self.free = [cluster.gpus_per_node] * cluster.nodes

    @property
    def total_free(self) -> int:
        return sum(self.free)

    def grow(self, job: _Job, count: int) -> None:
        for node in sorted(job.nodes, key=lambda n: (-self.free[n], n)):
            take = min(self.free[node], count)
            if take:
                self._take(job, node, take)
                count -= take
        while count:
            fits = [n for n, f in enumerate(self.free) if f >= count]
            if fits:
                node = min(fits, key=lambda n: (self.free[n], n))
            else:
                node = max(range(len(self.free)), key=lambda n: (self.free[n], -n))
            take = min(self.free[node], count)
            if take == 0:
                raise SimError(f"no free GPU left for job {job.spec.name!r}")
            self._take(job, node, take)
            count -= take

    def place(self, job: _Job, count: int, span: int) -> bool:
        """Give ``job`` ``count`` workers (at least what it holds) on at most ``span`` nodes where that can be
        done, in place or else by moving all its workers, packed; True when they moved. Where neither fits
        within ``span``, the fewer nodes of the two: in place unless moving spans fewer."""
        held = sum(job.nodes.values())
        own = sum(self.free[n] for n in job.nodes)
        others = sorted((f for n, f in enumerate(self.free) if n not in job.nodes), reverse=True)
        in_place = len(job.nodes) + _fewest(others, max(0, count - held - own))
        if in_place <= span:
            self.grow(job, count - held)
            return False
        moved = _fewest(
            sorted((self.free[n] + job.nodes.get(n, 0) for n in range(len(self.free))), reverse=True), count
        )
        if moved >= in_place:
            self.grow(job, count - held)
            return False
        self.shrink(job, held)
        self.grow(job, count)
        return True

    def shrink(self, job: _Job, count: int) -> None:
        while count:
            node = min(job.nodes, key=lambda n: (job.nodes[n], -n))
            give = min(job.nodes[node], count)
            job.nodes[node] -= give
            if not job.nodes[node]:
                del job.nodes[node]
            self.free[node] += give
            count -= give

    def _take(self, job: _Job, node: int, count: int) -> None:
        self.free[node] -= count
        job.nodes[node] = job.nodes.get(node, 0) + count


def _fewest(free_most_first: Sequence[int], count: int) -> int | float:
    """The fewest nodes of these free GPUs (most first) that hold ``count`` (``inf`` when they cannot)."""
    if count <= 0:
        return 0
    total = 0
    for i, free in enumerate(free_most_first):
        total += free
        if total >= count:
            return i + 1
    return math.inf


ProgressCallback = Callable[[float, int, int], None]


class Simulator:
    """One run of a workload on a cluster under a scheduler.

    ``run`` blocks until every job has finished, the scheduler stalls (pending jobs, nothing running,
    nothing left to arrive, :data:`STALL_ROUNDS` rounds in a row), or ``config.max_time_s`` of simulated
    time has passed; unfinished jobs have ``completion_s`` None.
    """

    def __init__(
        self,
        workload: Sequence[JobSpec],
        cluster: ClusterConfig,
        scheduler: Scheduler,
        *,
        catalog: TraceCatalog | None = None,
        config: SimConfig | None = None,
        workload_name: str = "workload",
    ) -> None:
        """Prepare a run.

        Raises:
            ValueError: the workload is empty or has duplicate job names.
            UnknownApplicationError: a job trains an application without traces.
            TraceDataError: an application's traces are malformed.
        """
        if not workload:
            raise ValueError("the workload has no jobs")
        names = [j.name for j in workload]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"duplicate job name {dup!r} in the workload")
        self.cluster = cluster
        self.scheduler = scheduler
        self.config = config or SimConfig()
        self.workload_name = workload_name
        catalog = catalog or TraceCatalog()
        specs = sorted(workload, key=lambda j: j.arrival_s)
        self._jobs = [_Job(s, catalog.get(s.application), cluster, self.config.default_max_replicas) for s in specs]

    def run(self, progress: ProgressCallback | None = None) -> SimResult:
        """Simulate to the end and return the result; ``progress(now_s, finished, total)`` is called each round.

        Raises:
            SchedulerError: the scheduler answered an unknown job, a worker count outside the job's
                limits, or more GPUs than the cluster has.
        """
        wall0 = time.perf_counter()
        cfg = self.config
        jobs = self._jobs
        by_name = {j.spec.name: j for j in jobs}
        nodes = _Nodes(self.cluster)
        active: list[_Job] = []
        heap: list[tuple[float, int, str, int]] = []
        seq = 0
        util: list[UtilSample] = []
        changes: list[AllocationChange] = []
        next_arrival = 0
        next_tick = math.inf
        finished = 0
        rounds = 0
        stalled = 0
        now = jobs[0].spec.arrival_s

        while finished < len(jobs):
            t_arrival = jobs[next_arrival].spec.arrival_s if next_arrival < len(jobs) else math.inf
            while heap and by_name[heap[0][2]].version != heap[0][3]:
                heapq.heappop(heap)
            t_done = heap[0][0] if heap else math.inf
            t_next = min(t_arrival, t_done, next_tick if active else math.inf)
            if t_next == math.inf or t_next > cfg.max_time_s:
                break
            now = t_next
            while heap and heap[0][0] <= now:
                _, _, name, version = heapq.heappop(heap)
                job = by_name[name]
                if job.version != version:
                    continue
                job.advance(now)
                job.progress = job.app.target_progress
                job.completion_s = now
                nodes.shrink(job, job.workers)
                job.workers = 0
                job.version += 1
                active.remove(job)
                changes.append(AllocationChange(now, name, 0, job.batch))
                self.scheduler.job_finished(name)
                finished += 1
            while next_arrival < len(jobs) and jobs[next_arrival].spec.arrival_s <= now:
                job = jobs[next_arrival]
                job.t = job.spec.arrival_s
                active.append(job)
                next_arrival += 1
            if not active:
                if util and util[-1].allocated_gpus:
                    util.append(UtilSample(now, 0, 0, 0))
                continue
            next_tick = (math.floor(now / cfg.interval_s) + 1) * cfg.interval_s
            for job in active:
                job.advance(now)
            view = ClusterView(
                now,
                self.cluster,
                nodes.total_free,
                tuple(self._view(j, now) for j in active),
                cfg.costs,
                str(cfg.batch_rule),
            )
            decisions = self.scheduler.allocate(view)
            rounds += 1
            for job in self._apply(decisions, active, by_name, nodes, now, changes):
                seq += 1
                heapq.heappush(heap, (job.finish_time(), seq, job.spec.name, job.version))
            running = sum(1 for j in active if j.workers)
            allocated = self.cluster.total_gpus - nodes.total_free
            if not util or (util[-1].allocated_gpus, util[-1].running_jobs, util[-1].pending_jobs) != (
                allocated,
                running,
                len(active) - running,
            ):
                util.append(UtilSample(now, allocated, running, len(active) - running))
            stalled = stalled + 1 if not running and next_arrival == len(jobs) else 0
            if stalled >= STALL_ROUNDS:
                log.warning(
                    "%s left %d job(s) pending with the cluster idle and nothing left to arrive; stopping",
                    self.scheduler.name,
                    len(active),
                )
                break
            if progress is not None:
                progress(now, finished, len(jobs))

        wall = time.perf_counter() - wall0
        end = max((j.completion_s for j in jobs if j.completion_s is not None), default=now)
        if util and util[-1].time_s < end:
            util.append(UtilSample(end, 0, 0, 0))
        results = tuple(self._result(j) for j in jobs)
        return SimResult(self._summary(results, util, rounds, wall), results, tuple(util), tuple(changes))

    # --- one round -------------------------------------------------------------------------------
    def _view(self, job: _Job, now: float) -> JobView:
        app = job.app
        metric, history, efficiency, noise_scale = job.epoch_values()
        return JobView(
            name=job.spec.name,
            application=job.spec.application,
            arrival_s=job.spec.arrival_s,
            requested_replicas=job.spec.num_replicas,
            requested_batch_size=job.spec.batch_size,
            min_replicas=job.min_replicas,
            max_replicas=job.max_replicas,
            workers=job.workers,
            batch_size=job.batch,
            progress=job.progress / job.target_progress,
            attained_gpu_s=job.gpu_s,
            run_s=job.run_s,
            epoch=job.epoch,
            metric=metric,
            throughput=job.throughput_view,
            efficiency=efficiency,
            resizing=job.workers > 0 and job.pause_until > now,
            last_resize_s=job.last_resize_s,
            steps=int(job.steps),
            steps_at=MappingProxyType({k: int(v) for k, v in job.steps_at.items()}),
            metric_history=history,
            metric_higher_is_better=job.higher_is_better,
            noise_scale=noise_scale,
            remaining_examples=(job.target_progress - job.progress) * app.init_batch_size,
            min_batch_size=app.init_batch_size,
            max_batch_size=app.max_batch_size,
            max_local_batch=max(1, int(app.max_local_bsz)),
            configurations=job.measured_steps(),
            placement=job.placed,
            queue=job.spec.queue,
        )

    def _apply(
        self,
        decisions: Mapping[str, Allocation],
        active: list[_Job],
        by_name: dict[str, _Job],
        nodes: _Nodes,
        now: float,
        changes: list[AllocationChange],
    ) -> list[_Job]:
        if not isinstance(decisions, Mapping):
            raise SchedulerError(f"{self.scheduler.name} answered {type(decisions).__name__}, not a mapping")
        targets: dict[str, Allocation] = {}
        for name, alloc in decisions.items():
            job = by_name.get(name)
            if job is None or job.completion_s is not None or job.spec.arrival_s > now:
                raise SchedulerError(f"{self.scheduler.name} allocated to {name!r}, which is not an active job")
            if not isinstance(alloc, Allocation):
                raise SchedulerError(f"{self.scheduler.name} answered {alloc!r} for {name!r}, not an Allocation")
            if alloc.workers and not job.min_replicas <= alloc.workers <= job.max_replicas:
                raise SchedulerError(
                    f"{self.scheduler.name} gave {name!r} {alloc.workers} workers, outside its limits "
                    f"{job.min_replicas}..{job.max_replicas}"
                )
            targets[name] = alloc
        total = sum(targets[j.spec.name].workers if j.spec.name in targets else j.workers for j in active)
        if total > self.cluster.total_gpus:
            raise SchedulerError(
                f"{self.scheduler.name} allocated {total} workers at t={now:.0f}s but the cluster has "
                f"{self.cluster.total_gpus} GPUs"
            )
        changed: list[_Job] = []
        # shrinks first; then jobs placed as asked, the largest first (they need whole free nodes), then the rest
        order = sorted(
            (j for j in active if j.spec.name in targets), key=lambda j: self._order(j, targets[j.spec.name])
        )
        for job in order:
            alloc = targets[job.spec.name]
            batch = self._batch(job, alloc)
            tighter = alloc.nodes is not None and job.workers > 0 and alloc.nodes < len(job.nodes)
            if alloc.workers == job.workers and (batch == job.batch or not job.workers) and not tighter:
                continue
            old = job.workers
            moved = False
            if alloc.workers < old:
                nodes.shrink(job, old - alloc.workers)
            if alloc.workers and alloc.nodes is not None:
                moved = nodes.place(job, alloc.workers, alloc.nodes) and old > 0
            elif alloc.workers > old:
                nodes.grow(job, alloc.workers - old)
            if alloc.workers != old or moved:
                job.last_resize_s = now
            job.workers = alloc.workers
            pause = self.config.costs.move() if moved else self.config.costs.cost(old, alloc.workers)
            if pause:
                job.pause_until = max(job.pause_until, now + pause)
            if old and alloc.workers and old != alloc.workers:
                job.resizes += 1
            elif old and not alloc.workers:
                job.preemptions += 1
            job.moves += moved
            if alloc.workers and job.start_s is None:
                job.start_s = now
            job.peak_workers = max(job.peak_workers, alloc.workers)
            job.reconfigure(batch)
            job.version += 1
            changes.append(AllocationChange(now, job.spec.name, job.workers, job.batch))
            changed.append(job)
        return changed

    @staticmethod
    def _order(job: _Job, alloc: Allocation) -> tuple[int, int]:
        delta = alloc.workers - job.workers
        if delta < 0:
            return (0, delta)
        return (1, -alloc.workers) if alloc.nodes is not None else (2, delta)

    def _batch(self, job: _Job, alloc: Allocation) -> float:
        if alloc.batch_size is not None:
            return job.app.clamp_batch(alloc.batch_size)
        if self.config.batch_rule is BatchRule.FIXED_GLOBAL or not alloc.workers:
            return job.batch if not alloc.workers else job.app.clamp_batch(job.spec.batch_size)
        return job.app.clamp_batch(job.local_bsz * alloc.workers)

    # --- results ---------------------------------------------------------------------------------
    @staticmethod
    def _result(job: _Job) -> JobResult:
        return JobResult(
            name=job.spec.name,
            application=job.spec.application,
            arrival_s=job.spec.arrival_s,
            requested_replicas=job.spec.num_replicas,
            requested_batch_size=job.spec.batch_size,
            start_s=job.start_s,
            completion_s=job.completion_s,
            gpu_s=job.gpu_s,
            resizes=job.resizes,
            preemptions=job.preemptions,
            max_workers=job.peak_workers,
            final_batch_size=job.batch,
            moves=job.moves,
        )

    def _summary(self, results: tuple[JobResult, ...], util: list[UtilSample], rounds: int, wall: float) -> SimSummary:
        jcts = np.array([r.jct_s for r in results if r.jct_s is not None], dtype=float)
        queueing = [r.queueing_s for r in results if r.queueing_s is not None]
        first = min(r.arrival_s for r in results)
        done = [r.completion_s for r in results if r.completion_s is not None]
        last = max(done) if done else first
        busy = sum((b.time_s - a.time_s) * a.allocated_gpus for a, b in zip(util, util[1:], strict=False))
        span = last - first
        return SimSummary(
            scheduler=self.scheduler.name,
            workload=self.workload_name,
            cluster=str(self.cluster),
            jobs=len(results),
            finished=len(done),
            mean_jct_s=float(jcts.mean()) if len(jcts) else math.nan,
            median_jct_s=float(np.median(jcts)) if len(jcts) else math.nan,
            p99_jct_s=float(np.percentile(jcts, 99)) if len(jcts) else math.nan,
            makespan_s=span,
            mean_queueing_s=float(np.mean(queueing)) if queueing else math.nan,
            mean_utilisation=busy / (span * self.cluster.total_gpus) if span > 0 else 0.0,
            resizes=sum(r.resizes for r in results),
            moves=sum(r.moves for r in results),
            preemptions=sum(r.preemptions for r in results),
            rounds=rounds,
            wall_s=wall,
            resize_costs=self.config.costs,
        )


def simulate(
    workload: Sequence[JobSpec],
    cluster: ClusterConfig,
    scheduler: Scheduler,
    *,
    catalog: TraceCatalog | None = None,
    config: SimConfig | None = None,
    workload_name: str = "workload",
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Build a :class:`Simulator` and run it (see there for what blocks and what is raised)."""
    sim = Simulator(workload, cluster, scheduler, catalog=catalog, config=config, workload_name=workload_name)
    return sim.run(progress)
