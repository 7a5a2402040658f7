"""Drive the live policy engine, unchanged, from the simulator.

Each scheduling round the simulator's :class:`~submarine_elastic.sim.api.ClusterView` becomes a
:class:`submarine_elastic.policy.Snapshot` (the same type the controller builds from YARN and the metrics
service), :meth:`PolicyEngine.decide` runs, and each returned :class:`~submarine_elastic.policy.Decision`
becomes a target :class:`~submarine_elastic.sim.api.Allocation`. What the snapshot carries per job:

- ``min_workers`` / ``max_workers``: the workload's limits, else 1 and the simulator's cap (elastic
  runs); the requested count for both with ``elastic=False``.
- ``current_workers``: its workers (the simulator has no pending containers: ``pending_workers`` is 0).
- ``submitted_at`` / ``last_resize_at``: its arrival, and the last change of its workers.
- ``metrics.step`` / ``metrics.throughput``: iterations run; examples/s and iterations at every world
  size it ran at.
- ``metrics.loss_window``: the validation metric after each of the last
  :data:`~submarine_elastic.policy.LOSS_WINDOW` epochs, negated where higher is better (so that lower is better,
  like a loss): :func:`~submarine_elastic.policy.loss_window`, as the controller builds it from steps.
- ``metrics.gradient_noise_scale``: ``B0 * var / sqr`` of the current epoch (see
  :mod:`~submarine_elastic.sim.physics`).
- ``metrics.batch_size`` / ``metrics.remaining_samples``: the current global batch; the remaining work
  in examples at the initial batch size.
- ``metrics.configurations`` / ``metrics.accum_steps``: the iteration time (and its sync part) of each
  configuration the job ran in (workers, nodes, per-GPU micro-batch, accumulation), the most recent
  :data:`~submarine_elastic.sim.engine.MEASURED_CONFIGURATIONS`; the current accumulation.
- ``metrics.resize_cost_s``: the pause the run charges for a resize (the larger of scale-out and scale-in;
  every change costs the same with ``--restart-cost``).
- ``min_batch_size`` / ``max_batch_size``: the application's validated range of global batch sizes under
  the ``fixed-local`` rule (a policy may choose the batch); none under ``fixed-global`` (the batch stays
  what the user asked for). ``max_local_batch``: the largest per-GPU micro-batch measured.
- ``placement``: its workers on each node it uses, most first.
- ``Snapshot.slots_per_node``: the cluster's GPUs per node.
- ``Snapshot.queues`` / ``queue``: the run's queues (``sim run --queues``), and each job's queue from the
  workload (a job that names none is in the first queue). The engine splits the GPUs among the queues and
  arbitrates within each, as the controller does. No queues: the cluster is one pool, as live without
  queues, and the workload's queues are not looked at.

A decision's ``batch_size`` is applied to the simulated job at once, without a pause (a live job applies
it at a commit boundary, without a restart); its accumulation follows from the batch, the workers and
``max_local_batch`` as the decision's does. A decision's ``nodes`` goes to the simulator, which packs the
workers on that many nodes where it can (moving them, for the cost of a restart, where they span more).
Not modelled: per-worker step times (no stragglers: ``step_times`` is empty and a ``replace`` is ignored)
and learning rates (a ``learning_rate`` decision is ignored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from submarine_elastic.policy import (
    DEFAULT_QUEUE,
    JobMetrics,
    PolicyError,
    QueueShare,
    Snapshot,
    StepTime,
    Throughput,
    loss_window,
)
from submarine_elastic.policy import JobView as PolicyJobView
from submarine_elastic.policy.engine import PolicyEngine
from submarine_elastic.sim.api import Allocation, ClusterView, JobView, MeasuredStep, Scheduler, SchedulerError

#: StepTime already built per simulated measurement (a cache: most do not change between rounds).
_step_times: dict[MeasuredStep, StepTime] = {}
_STEP_TIME_CACHE = 8192


def _step_time(m: MeasuredStep) -> StepTime:
    found = _step_times.get(m)
    if found is None:
        if len(_step_times) >= _STEP_TIME_CACHE:
            _step_times.clear()
        sync = min(m.sync_seconds, m.seconds)
        found = _step_times[m] = StepTime(m.workers, m.nodes, m.local_batch, m.accum_steps, m.seconds, sync, m.steps)
    return found


#: Each job's configurations last converted, by its name, with the StepTimes they became: most of a job's are the
#: same objects round after round (the simulator rebuilds only the one it runs in, the last), and converting every
#: one again hashed each (a cache: cleared past :data:`_STEP_TIME_CACHE` jobs).
_converted: dict[str, tuple[tuple[MeasuredStep, ...], tuple[StepTime, ...]]] = {}


def _configurations(name: str, given: tuple[MeasuredStep, ...]) -> tuple[StepTime, ...]:
    last = _converted.get(name)
    if last is not None and last[0] is given:
        return last[1]
    if last is not None and given and len(last[0]) == len(given) and given[:-1] == last[0][:-1]:
        # all but the newest as last converted: those StepTimes again (equal ones, where the MeasuredSteps are)
        newest = last[1][-1] if given[-1] is last[0][-1] else _step_time(given[-1])
        out = (*last[1][:-1], newest)
    else:
        out = tuple(_step_time(m) for m in given)
    if len(_converted) >= _STEP_TIME_CACHE:
        _converted.clear()
    _converted[name] = (given, out)
    return out


#: Each job's throughput by world size last given, by its name: a round changes the iterations of the size it runs
#: at, the others are the same Throughput again (a cache: cleared past :data:`_STEP_TIME_CACHE` jobs).
_throughputs: dict[str, dict[int, Throughput]] = {}


def _throughput(name: str, rates: Mapping[int, float], steps_at: Mapping[int, int]) -> dict[int, Throughput]:
    known = _throughputs.get(name, {})
    out = {}
    for size, rate in rates.items():
        steps = steps_at.get(size, 0)
        found = known.get(size)
        if found is None or found.samples_per_second != rate or found.steps != steps:
            found = Throughput(rate, steps)
        out[size] = found
    if len(_throughputs) >= _STEP_TIME_CACHE:
        _throughputs.clear()
    _throughputs[name] = out
    return out


#: Loss windows already made, by the metric history and whether higher is better: a job's history changes once an
#: epoch, and the copies of a workload's job share theirs (a cache, cleared past :data:`_STEP_TIME_CACHE`).
_loss_windows: dict[tuple[tuple[float, ...], bool], tuple[float, ...]] = {}


def _loss_window(history: tuple[float, ...], higher_is_better: bool) -> tuple[float, ...]:
    key = (history, higher_is_better)
    found = _loss_windows.get(key)
    if found is None:
        if len(_loss_windows) >= _STEP_TIME_CACHE:
            _loss_windows.clear()
        found = _loss_windows[key] = loss_window(enumerate(history), higher_is_better=higher_is_better)
    return found


def to_snapshot(view: ClusterView, elastic: bool = True, queues: Sequence[QueueShare] = ()) -> Snapshot:
    """The policy snapshot of one simulated round (see the module docstring for the mapping).

    Raises:
        SchedulerError: a value of the view is refused by the policy API (names the job and value: a queue
            that is not one of ``queues``, say).
    """
    first = queues[0].name if queues else None
    try:
        return Snapshot(
            now=view.now_s,
            capacity=view.cluster.total_gpus,
            free=view.free_gpus,
            jobs=tuple(_job(j, view, elastic, first) for j in view.jobs),
            slots_per_node=view.cluster.gpus_per_node,
            queues=tuple(queues),
        )
    except PolicyError as exc:
        raise SchedulerError(f"cannot build the policy snapshot at t={view.now_s:.0f}s: {exc}") from exc


def _job(job: JobView, view: ClusterView, elastic: bool, first_queue: str | None) -> PolicyJobView:
    if elastic:
        low, high = job.min_replicas, job.max_replicas
    else:
        low = high = min(job.requested_replicas, view.cluster.total_gpus, job.max_replicas)
    configurations = _configurations(job.name, job.configurations)
    metrics = JobMetrics(
        step=job.steps,
        throughput=_throughput(job.name, job.throughput, job.steps_at),
        loss_window=_loss_window(job.metric_history, job.metric_higher_is_better),
        gradient_noise_scale=job.noise_scale,
        batch_size=max(1, round(job.batch_size)),
        remaining_samples=max(0.0, job.remaining_examples),
        configurations=configurations,
        accum_steps=configurations[-1].accum_steps if configurations and job.workers else None,
        resize_cost_s=max(view.costs.scale_out_s, view.costs.scale_in_s),
    )
    adaptive = view.batch_rule != "fixed-global"
    return PolicyJobView(
        job_id=job.name,
        min_workers=low,
        max_workers=high,
        elastic=elastic,
        current_workers=job.workers,
        submitted_at=job.arrival_s,
        last_resize_at=job.last_resize_s,
        metrics=metrics,
        min_batch_size=job.min_batch_size if adaptive else None,
        max_batch_size=max(job.min_batch_size, job.max_batch_size) if adaptive else None,
        max_local_batch=job.max_local_batch,
        requested_workers=max(low, min(high, job.requested_replicas)),
        placement=job.placement,
        queue=(job.queue or first_queue) if first_queue is not None else DEFAULT_QUEUE,
    )


class PolicyScheduler(Scheduler):
    """A :class:`~submarine_elastic.sim.api.Scheduler` that asks a :class:`PolicyEngine` each round.

    ``elastic=False`` presents every job as fixed-size at its requested workers, so the same engine acts
    as a static scheduler (what the design-space exploration calls "fixed"). ``queues``: the cluster's
    queues, the engine decides within each (see the module docstring).
    """

    def __init__(
        self,
        engine: PolicyEngine,
        name: str | None = None,
        *,
        elastic: bool = True,
        queues: Sequence[QueueShare] = (),
    ) -> None:
        """Raises:
        TypeError: ``engine`` is not a :class:`PolicyEngine`.
        """
        if not isinstance(engine, PolicyEngine):
            raise TypeError(f"engine must be a PolicyEngine, got {type(engine).__name__}")
        self.engine = engine
        self.elastic = elastic
        self.queues = tuple(queues)
        self.name = name or f"{engine.job_policy.display_name}+{engine.arbiter.display_name}"
        self.refusals = 0

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        """Run one policy round.

        Raises:
            SchedulerError: the snapshot cannot be built, or a decision cannot be applied.
        """
        decisions = self.engine.decide(to_snapshot(view, self.elastic, self.queues))
        self.refusals += len(self.engine.last_refusals)
        out: dict[str, Allocation] = {}
        for d in decisions:
            try:
                out[d.job_id] = Allocation(d.target_workers, d.batch_size, d.nodes)
            except ValueError as exc:
                raise SchedulerError(f"{self.name}: decision for {d.job_id!r} cannot be applied: {exc}") from exc
        return out
