"""The goodput job policy and arbiter: workers, batch size and gradient accumulation chosen together
(as in Pollux, OSDI 2021).

Per job, :class:`~submarine_elastic.policy.goodput_model.GoodputModel` fits a throughput model to the
step times the job measured in each configuration (kept here, :data:`MAX_CONFIGURATIONS` per job, in
``state_dict()``), multiplies it by the statistical efficiency of the gradient noise scale, and gives
for each worker count the batch and accumulation of the most goodput. A job's *speedup* at ``k``
workers is its best goodput at ``k`` over its best goodput at one worker.

:class:`GoodputArbiter` chooses every job's worker count at once to maximise the power mean with
``p = -1`` of the jobs' speedups (minimise ``sum(weight / speedup)``, the weight below), which favours giving each job a
share before giving any job more: a job waiting at no workers counts :data:`WAITING_PENALTY` (older
jobs a little more), so as many jobs run as fit. A change of a running job's workers is charged its
cost: its speedup at any other count is multiplied by ``(1 - cost / horizon) * (1 - hysteresis)``, the
cost being ``resize_cost_s`` when given, else the job's measured ``resize_cost_s``, else
:data:`DEFAULT_RESIZE_COST_S`; the horizon the job's remaining time when it reports its remaining work
(see below: a resize costs a job near its end most), else its age, at least :data:`MIN_HORIZON_S` (a
job that has run long is expected to run long); and the hysteresis :data:`RESIZE_HYSTERESIS`. The choice
is exact: dynamic programming over the jobs and the slots, over counts that pack on nodes (a divisor of a node's
slots or whole nodes), up to what the job's policy asked for rounded up to such a count. The arbiter gives
each job the batch and accumulation of its best configuration at the count it gets (a job policy's batch
applies only at the count it asked for it with: the engine's rule). Jobs in their cooldown, and jobs that are
not elastic, keep what they hold, except that a waiting job may start with workers taken from a job in its cooldown
that was not shrunk within it (the engine's rule; the arbiter allows such shrinks only in a round in which
a waiting job starts). A job grows at most :data:`~submarine_elastic.policy.goodput_model.EXPLORE_FACTOR`
times past the most workers it was measured at; before its first measurement, to the count it was
submitted with, or ``initial_workers`` (one node's slots by default) when that is not known. Where the
model is uncertain it is optimistic (see :mod:`~submarine_elastic.policy.goodput_model`), so a job is tried
at configurations it has not run in; once it ran in one (more workers or another micro-batch than ever
before), it is given no other for ``explore_interval_s`` (default :data:`EXPLORE_INTERVAL_S`).

Each job's inverse speedup is weighted by its rank in remaining work, shortest-remaining-first in flavour
(as heSRPT, Berg et al. 2020, orders malleable jobs: the share depends on the order of the jobs, not on how
far apart they are): of the ``m`` jobs that report remaining work, the one with the ``i``-th most (``i`` from 1)
weighs ``(i / m) ** remaining_exponent`` (default :data:`REMAINING_EXPONENT`), the remaining work measured
as its ``remaining_samples`` over its modelled goodput at the count it was submitted with (one worker when that
is not known): not at what it holds, so that a job shrunk does not weigh less for it and is not shrunk again, and
not at one worker, where a job that scales well would count as long as one that does not. A job near its end
gets workers before one far from it; a job that reports no remaining work weighs 1. Slots no job is given go to
running jobs predicted faster with them by more than the resize costs, whatever they hold.

A job without step times per configuration (a controller that reports only throughput by world size)
is modelled as before: throughput interpolated between the measured world sizes, with its per-worker
batch kept, times the efficiency of the noise scale (:func:`estimated_throughput`,
:func:`statistical_efficiency`); its batch is left alone.

:class:`GoodputPolicy` is the job side: it asks for the count of its best speedup within the same
exploration cap, with the batch of that count.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ._common import check_int, check_number
from .api import (
    Allocation,
    ClusterArbiter,
    Decision,
    JobPolicy,
    JobView,
    PolicyConfigError,
    PolicyStateError,
    Request,
    Snapshot,
    StepTime,
)
from .goodput_history import MAX_CONFIGURATIONS, StepHistory
from .goodput_model import BestConfigs, GoodputModel, worker_cap
from .goodput_programme import programme

__all__ = [
    "DEFAULT_RESIZE_COST_S",
    "EXPLORE_INTERVAL_S",
    "MAX_CONFIGURATIONS",
    "MAX_REMAINING_EXPONENT",
    "MIN_HORIZON_S",
    "MIN_REMAINING_S",
    "REMAINING_EXPONENT",
    "RESIZE_HYSTERESIS",
    "WAITING_PENALTY",
    "GoodputArbiter",
    "GoodputPolicy",
    "estimated_throughput",
    "statistical_efficiency",
]

_M = TypeVar("_M")

#: Seconds a resize is taken to cost when neither the arbiter nor the job's metrics say.
DEFAULT_RESIZE_COST_S = 30.0
#: The shortest horizon over which a resize's cost is spread (seconds).
MIN_HORIZON_S = 600.0
#: A running job's speedup at any other count is also multiplied by ``1 - RESIZE_HYSTERESIS``: a resize
#: must gain this fraction more than its measured cost (arrivals and departures shift every job's best
#: count by a worker or two; without it every job would follow).
RESIZE_HYSTERESIS = 0.15
#: What a job waiting at no workers adds to the sum of inverse speedups (plus one per second of age).
WAITING_PENALTY = 1e6
#: Default of how strongly a job's rank in remaining work weighs in the arbiter's objective: the inverse speedup
#: of the job with the ``i``-th most of ``m`` is multiplied by ``(i / m) ** REMAINING_EXPONENT`` (0: the plain
#: power mean), so that jobs near their end get workers first, as shortest-remaining-first would.
REMAINING_EXPONENT = 3.0
#: The largest ``remaining_exponent`` accepted (a larger one orders jobs strictly, starving long ones).
MAX_REMAINING_EXPONENT = 4.0
#: Remaining times below this count as this (a job about to finish is not weighted without bound).
MIN_REMAINING_S = 60.0
#: Default of how often a job may be given a configuration outside what it was measured at (seconds from
#: the round its last such configuration was first measured).
EXPLORE_INTERVAL_S = 120.0
_STATE_VERSION = 2
_log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ without step times


def estimated_throughput(job: JobView, k: int) -> float:
    """Samples/s at ``k`` workers from throughput by world size: measured, interpolated linearly between
    measured sizes, extrapolated past the largest with its last marginal gain (at most its per-worker
    rate), scaled down linearly below the smallest; linear scaling with nothing measured."""
    points = {size: p.samples_per_second for size, p in job.metrics.throughput.items()}
    if k <= 0:
        return 0.0
    if not points:
        return float(k)
    if k in points:
        return points[k]
    sizes = sorted(points)
    lo, hi = sizes[0], sizes[-1]
    if k < lo:
        return points[lo] * k / lo
    if k > hi:
        marginal = points[hi] / hi
        if len(sizes) >= 2:
            prev = sizes[-2]
            marginal = min(marginal, (points[hi] - points[prev]) / (hi - prev))
        return max(0.0, points[hi] + (k - hi) * marginal)
    below = max(s for s in sizes if s < k)
    above = min(s for s in sizes if s > k)
    return points[below] + (points[above] - points[below]) * (k - below) / (above - below)


def statistical_efficiency(job: JobView, k: int) -> float:
    """Efficiency at ``k`` workers with the per-worker batch kept: ``(B_noise + b) / (B_noise + b * k)``;
    1.0 without a noise scale or batch size."""
    noise = job.metrics.gradient_noise_scale
    batch = job.metrics.batch_size
    if noise is None or batch is None or k <= 0:
        return 1.0
    local = batch / max(1, job.current_workers)
    return (noise + local) / (noise + local * k)


# ------------------------------------------------------------------------------------ per-job table


@dataclass(frozen=True)
class _Here:
    """A running job on the placement it has, where that is not the packed one its table assumes."""

    nodes: int
    goodput: float
    speedup: float
    batch: int
    accum: int


@dataclass(frozen=True)
class _Table:
    """What the arbiter knows of one job: speedup, batch and accumulation per worker count (index k), each
    packed on the fewest nodes; the most workers it may have now; and, for a running job spread wider than
    that, the same on its placement."""

    speedup: np.ndarray
    batch: np.ndarray | None
    accum: np.ndarray | None
    cap: int
    goodput: np.ndarray | None = None
    here: _Here | None = None


#: What goodput models already gave, by everything it depends on: the best configurations at every count (a round
#: asks for each job's twice, and most jobs' inputs do not change between rounds), and the configuration where a job
#: runs spread wider than packed (the same, round after round, until it moves or is measured anew). A cache, not
#: state: past :data:`_CACHE_SIZE` entries the least recently used goes (emptied at once, it had every job's models
#: made again in the round after, at 1,000 jobs some 40 ms more).
_model_cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_SIZE = 4096


def _model_key(job: JobView, measured: tuple[StepTime, ...], slots: int | None, explore: bool) -> tuple[Any, ...]:
    """Everything a :class:`GoodputModel` of ``job`` reads."""
    m = job.metrics
    fitted = tuple((t.workers, t.nodes, t.local_batch, t.accum_steps, t.seconds, t.sync_seconds) for t in measured)
    key: tuple[Any, ...] = (fitted, m.gradient_noise_scale, m.batch_size, job.min_batch_size, job.max_batch_size)
    return key + (job.max_local_batch, slots, explore)


def _cached(key: tuple[Any, ...], make: Callable[[], _M]) -> _M:
    found: _M | None = _model_cache.get(key)
    if found is not None:
        _model_cache.move_to_end(key)
        return found
    made = _model_cache[key] = make()
    if len(_model_cache) > _CACHE_SIZE:
        _model_cache.popitem(last=False)
    return made


def _best(job: JobView, measured: tuple[StepTime, ...], slots: int | None, cap: int, explore: bool) -> BestConfigs:
    key = (*_model_key(job, measured, slots, explore), "best", cap)
    return _cached(key, lambda: GoodputModel(job, measured, slots, explore=explore).best(cap))


def _at(
    job: JobView, measured: tuple[StepTime, ...], slots: int | None, explore: bool, workers: int, nodes: int
) -> tuple[float, int, int]:
    """:meth:`GoodputModel.at`, made once per model and placement."""
    key = (*_model_key(job, measured, slots, explore), "at", workers, nodes)
    return _cached(key, lambda: GoodputModel(job, measured, slots, explore=explore).at(workers, nodes))


#: The last tables made, by the identity of the job's view (held, so the id is not reused) and what else they
#: depend on: a round asks for each job's twice (its job policy's proposal, then the arbiter; two instances
#: where both are goodput), on the same view. A cache, not state: the least recently used goes past
#: :data:`_CACHE_SIZE` (emptied at once, it lost the tables of the round being decided).
_table_cache: OrderedDict[tuple[int, int | None, int, bool], tuple[JobView, tuple[StepTime, ...], _Table]] = (
    OrderedDict()
)


def _table(job: JobView, measured: Sequence[StepTime], slots: int | None, initial: int, explore: bool) -> _Table:
    """:func:`_made_table`, made once per job view and measured configurations."""
    measured = tuple(measured)
    key = (id(job), slots, initial, explore)
    hit = _table_cache.get(key)
    if hit is not None and hit[0] is job and hit[1] == measured:
        _table_cache.move_to_end(key)
        return hit[2]
    table = _made_table(job, measured, slots, initial, explore)
    _table_cache[key] = (job, measured, table)
    _table_cache.move_to_end(key)
    if len(_table_cache) > _CACHE_SIZE:
        _table_cache.popitem(last=False)
    return table


def _made_table(job: JobView, measured: Sequence[StepTime], slots: int | None, initial: int, explore: bool) -> _Table:
    cap = worker_cap(job, measured, initial, explore=explore)
    if measured:
        best = _best(job, tuple(measured), slots, cap, explore)
        here = None
        spread = job.nodes
        if spread is not None and job.current_workers and spread > _packed(job.current_workers, slots):
            rate, batch, accum = _at(job, tuple(measured), slots, explore, job.current_workers, spread)
            base = float(best.goodput[1])
            here = _Here(spread, rate, rate / base if base > 0 else 0.0, batch, accum)
        return _Table(best.speedup(), best.batch, best.accum, cap, best.goodput, here)
    if job.metrics.throughput:
        cap = job.max_workers
    goodput = np.array([estimated_throughput(job, k) * statistical_efficiency(job, k) for k in range(cap + 1)])
    base = goodput[1] if cap >= 1 else 0.0
    speedup = goodput / base if base > 0 else np.zeros_like(goodput)
    return _Table(speedup, None, None, cap)


def _speedup_at(table: _Table, k: int) -> float:
    """The table's speedup at ``k`` workers (its last entry past its end)."""
    return float(table.speedup[min(k, len(table.speedup) - 1)])


def _packed(workers: int, slots: int | None) -> int:
    """Nodes ``workers`` span packed (one when the slots per node are unknown)."""
    return 1 if slots is None else max(1, -(-workers // slots))


def _remaining_s(job: JobView, table: _Table) -> float | None:
    """The job's remaining time at the modelled goodput of what it holds (at least one worker, where it runs),
    at least :data:`MIN_REMAINING_S`; None without ``remaining_samples`` or a goodput model."""
    remaining = job.metrics.remaining_samples
    if remaining is None or table.goodput is None or len(table.goodput) < 2:
        return None
    if table.here is not None and job.holding == job.current_workers:
        rate = table.here.goodput
    else:
        rate = float(table.goodput[min(max(job.holding, 1), len(table.goodput) - 1)])
    if rate <= 0:
        return None
    return max(remaining / rate, MIN_REMAINING_S)


def _remaining_as_submitted_s(job: JobView, table: _Table) -> float | None:
    """The job's remaining work as seconds at the modelled goodput of the count it was submitted with (one worker
    when that is not known); None without ``remaining_samples`` or a goodput model."""
    remaining = job.metrics.remaining_samples
    if remaining is None or table.goodput is None or len(table.goodput) < 2:
        return None
    rate = float(table.goodput[min(max(job.requested_workers or 1, 1), len(table.goodput) - 1)])
    return remaining / rate if rate > 0 else None


def _batch_changes(job: JobView, table: _Table, k: int, stays: bool = False) -> tuple[int | None, int | None]:
    """The batch and accumulation of ``k`` workers packed (``stays``: on the placement the job has); at the count the
    job holds, only where they differ from the job's ((None, None) where they do not). At another count they are
    given even where they are the job's: the batch is chosen for the count, not left to follow it."""
    if table.batch is None or table.accum is None or k < 1 or k >= len(table.batch):
        return None, None
    if stays and table.here is not None:
        batch, accum = table.here.batch, table.here.accum
    else:
        batch, accum = int(table.batch[k]), int(table.accum[k])
    if k == job.holding and batch == job.metrics.batch_size and (job.metrics.accum_steps in (None, accum)):
        return None, None
    return batch, accum


def _packs(k: int, min_workers: int, max_workers: int, holding: int, slots: int | None) -> bool:
    """:meth:`GoodputArbiter._fits` of a job with these limits holding ``holding``."""
    if slots is None or k in (min_workers, max_workers, holding):
        return True
    return (slots % k == 0) if k < slots else (k % slots == 0)


@functools.lru_cache(maxsize=4096)
def _packing_counts(
    low: int, top: int, min_workers: int, max_workers: int, holding: int, slots: int | None
) -> tuple[int, ...]:
    """The counts from ``low`` to ``top`` that :func:`_packs`, made once per job's limits: the arbiter asks for every
    job's each round."""
    return tuple(k for k in range(low, top + 1) if _packs(k, min_workers, max_workers, holding, slots))


# --------------------------------------------------------------------------------------- job policy


class GoodputPolicy(JobPolicy):
    """A job asks for the worker count of its best speedup (within the exploration cap), with the batch
    and accumulation of that count.

    Args:
        initial_workers: the most workers a job gets before its first step time is measured, unless it
            was submitted with more (default: the snapshot's ``slots_per_node``, else 1).
        explore_interval_s: a job is given a configuration outside what it was measured at (more workers, or
            another micro-batch) at most once per this many seconds (default :data:`EXPLORE_INTERVAL_S`).

    Raises:
        PolicyConfigError: ``initial_workers`` is below 1, or ``explore_interval_s`` is negative or not finite.
    """

    name = "goodput"

    def __init__(self, initial_workers: int | None = None, explore_interval_s: float = EXPLORE_INTERVAL_S) -> None:
        owner = type(self).__name__
        self.initial_workers = (
            None if initial_workers is None else check_int(owner, "initial_workers", initial_workers, low=1)
        )
        self.explore_interval_s = check_number(owner, "explore_interval_s", explore_interval_s, low=0.0)
        self.resize_cost_s: float | None = None  # the arbiter's, when it is one (see GoodputArbiter)
        self.min_horizon_s = MIN_HORIZON_S
        self._history = StepHistory()

    def state_dict(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "history": self._history.state(), "explored": dict(self._history.explored)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (also a version 1 state, which has no exploration times).

        Raises:
            PolicyStateError: ``state`` is not goodput state.
        """
        if not isinstance(state, Mapping) or state.get("version") not in (1, _STATE_VERSION):
            raise PolicyStateError(f"{self.display_name}: not goodput state: {state!r}")
        keys = {"version", "history"} | ({"explored"} if state["version"] == _STATE_VERSION else set())
        if set(state) != keys:
            raise PolicyStateError(f"{self.display_name}: not goodput state: {state!r}")
        self._history.load(self.display_name, state["history"], state.get("explored", {}))

    def _job_table(self, job: JobView, snapshot: Snapshot) -> _Table:
        """The job's table this round, its history updated with what it reported."""
        measured = self._history.update(job, snapshot.now)
        explore = self._history.may_explore(job.job_id, snapshot.now, self.explore_interval_s)
        return _table(job, measured, snapshot.slots_per_node, self._initial(snapshot), explore)

    def _initial(self, snapshot: Snapshot) -> int:
        if self.initial_workers is not None:
            return self.initial_workers
        return snapshot.slots_per_node or 1

    def after_train(self, job_id: str, snapshot: Snapshot) -> None:
        self._history.forget(job_id)

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        table = self._job_table(job, snapshot)
        low = job.min_workers
        top = max(low, min(job.max_workers, table.cap, len(table.speedup) - 1))
        window = table.speedup[low : top + 1]
        k = low + int(np.argmax(window)) if len(window) else low
        speedup = float(table.speedup[k]) if k < len(table.speedup) else 0.0
        if not job.waiting and k < job.holding <= job.max_workers:
            # Fewer workers than it holds, for its own sake: only on what it measured where it runs, and only
            # where they are predicted faster by the resize's cost, the margin a job at its minimum grows by.
            shrink = self._shrink_reason(job, table, k)
            if shrink is not None and speedup * self._paid(job, table, snapshot.now) < _speedup_at(table, job.holding):
                return Decision(
                    job.job_id,
                    job.holding,
                    f"goodput: keeps {job.holding} workers: {k} are predicted faster by less than a resize costs "
                    f"(speedup {speedup:.2f} at {k}, {_speedup_at(table, job.holding):.2f} at {job.holding})",
                )
            if shrink is None:
                return Decision(
                    job.job_id,
                    job.holding,
                    f"goodput: keeps {job.holding} workers until measured there "
                    f"(predicted speedup {speedup:.2f} at {k}, {_speedup_at(table, job.holding):.2f} at {job.holding})",
                )
            reason = shrink
        else:
            reason = f"goodput: most speedup ({speedup:.2f}) at {k} workers"
            if k == top and top < job.max_workers:
                reason += f", at most {top} until measured there"
        batch, accum = _batch_changes(job, table, k)
        if batch is not None and batch != job.metrics.batch_size:
            reason += f", batch {batch}"
        nodes = _packed(k, snapshot.slots_per_node) if k != job.holding and snapshot.slots_per_node else None
        return Decision(job.job_id, k, reason, batch_size=batch, accum_steps=accum, nodes=nodes)

    def _paid(self, job: JobView, table: _Table, now: float) -> float:
        """What is left of a job's speedup at another count after the resize's cost: ``1 - cost / horizon``."""
        horizon = _remaining_s(job, table) or max(now - job.submitted_at, self.min_horizon_s)
        return max(0.0, 1.0 - self._cost(job) / horizon)

    def _cost(self, job: JobView) -> float:
        if self.resize_cost_s is not None:
            return self.resize_cost_s
        if job.metrics.resize_cost_s is not None:
            return job.metrics.resize_cost_s
        return DEFAULT_RESIZE_COST_S

    def _shrink_reason(self, job: JobView, table: _Table, k: int) -> str | None:
        """Why the job gives up workers for its own sake, with the figures it measured at the count it holds
        and the goodput predicted at ``k``; None when it has no step time measured at that count (it keeps
        them until it has)."""
        held = [m for m in self._history.jobs.get(job.job_id, {}).values() if m.workers == job.holding]
        if not held or table.goodput is None:
            return None
        m = max(held, key=lambda t: t.steps)
        rate = m.workers * m.local_batch * (m.accum_steps + 1) / m.seconds
        held_goodput = float(table.goodput[min(job.holding, len(table.goodput) - 1)])
        return (
            f"goodput: fewer workers are as fast: predicted at {k}: {float(table.goodput[k]):.0f} useful samples/s "
            f"(speedup {_speedup_at(table, k):.2f}); measured at {job.holding} workers {rate:.0f} samples/s "
            f"({m.seconds * 1e3:.0f} ms a step of {m.workers * m.local_batch * (m.accum_steps + 1):.0f}), at best "
            f"{held_goodput:.0f} useful there (speedup {_speedup_at(table, job.holding):.2f})"
        )


# ------------------------------------------------------------------------------------------ arbiter


class GoodputArbiter(GoodputPolicy, ClusterArbiter):
    """Workers to maximise the ``p = -1`` power mean of the jobs' speedups, each resize charged its cost,
    and each job's batch and accumulation chosen for the count it gets (see the module docstring).

    It is also a :class:`GoodputPolicy`, so that the one name ``goodput`` loads as the job policy
    (``--policy goodput``) and as the arbiter (``--arbiter goodput``).

    Args:
        resize_cost_s: seconds every resize costs (``30`` for a checkpoint-restart system); None: the
            job's measured cost, else :data:`DEFAULT_RESIZE_COST_S`.
        min_horizon_s: the shortest horizon a resize's cost is spread over, for a job that reports no
            remaining work (default :data:`MIN_HORIZON_S`).
        hysteresis: the fraction of speedup a resize must gain beyond its cost, in [0, 1)
            (default :data:`RESIZE_HYSTERESIS`).
        initial_workers: as for :class:`GoodputPolicy`.
        explore_interval_s: as for :class:`GoodputPolicy`.
        remaining_exponent: how strongly a job's rank in remaining work weighs, in [0, :data:`MAX_REMAINING_EXPONENT`]
            (default :data:`REMAINING_EXPONENT`; 0: the plain power mean).

    Raises:
        PolicyConfigError: a parameter is negative or not finite, ``hysteresis`` is 1 or more,
            ``remaining_exponent`` is above :data:`MAX_REMAINING_EXPONENT`, or ``initial_workers`` is below 1.
    """

    name = "goodput"

    def __init__(
        self,
        resize_cost_s: float | None = None,
        min_horizon_s: float = MIN_HORIZON_S,
        hysteresis: float = RESIZE_HYSTERESIS,
        initial_workers: int | None = None,
        remaining_exponent: float = REMAINING_EXPONENT,
        explore_interval_s: float = EXPLORE_INTERVAL_S,
    ) -> None:
        super().__init__(initial_workers, explore_interval_s)
        owner = type(self).__name__
        self.resize_cost_s = (
            None if resize_cost_s is None else check_number(owner, "resize_cost_s", resize_cost_s, low=0.0)
        )
        self.min_horizon_s = check_number(owner, "min_horizon_s", min_horizon_s, low=0.0, strict=True)
        self.hysteresis = check_number(owner, "hysteresis", hysteresis, low=0.0)
        if self.hysteresis >= 1.0:
            raise PolicyConfigError(f"{owner}: hysteresis must be < 1.0, got {hysteresis!r}")
        self.remaining_exponent = check_number(owner, "remaining_exponent", remaining_exponent, low=0.0)
        if self.remaining_exponent > MAX_REMAINING_EXPONENT:
            raise PolicyConfigError(
                f"{owner}: remaining_exponent must be <= {MAX_REMAINING_EXPONENT}, got {remaining_exponent!r}"
            )
        self._stays: dict[str, str] = {}  # what was last logged of each job left at its minimum beside free slots

    def _grow_into_free_slots(
        self,
        requests: Sequence[Request],
        tables: Sequence[_Table],
        counts: list[int],
        now: float,
        capacity: int,
        slots: int | None,
    ) -> None:
        """Slots no job was given go to running jobs left at what they hold where more workers are predicted faster
        by more than the resize costs (the hysteresis, there against churn between jobs, is not charged for slots
        nobody else takes): no job is parked beside free slots that would make it faster. In ``counts``, in
        place. A job left at its minimum there is logged with what its model predicts (once per change): the
        record that it was not parked."""
        left = capacity - sum(counts)
        for i, (request, table) in enumerate(zip(requests, tables, strict=True)):
            job = request.job
            low = job.holding
            if left <= 0:
                return
            if not job.elastic or request.settled or job.waiting or counts[i] != low or low < job.min_workers:
                continue
            here = table.here.speedup if table.here is not None else _speedup_at(table, low)
            top = min(low + left, self._reach(request, table, slots), len(table.speedup) - 1)
            paid = self._paid(job, table, now)
            best = max(
                (k for k in range(low + 1, top + 1) if self._fits(k, job, slots)),
                key=lambda k: _speedup_at(table, k),
                default=None,
            )
            if best is not None and _speedup_at(table, best) * paid > here:
                counts[i] = best
                left -= best - low
            elif low == job.min_workers:
                self._log_stays(request, table, here, paid, min(low + left, len(table.speedup) - 1), left, slots)

    def _log_stays(
        self, request: Request, table: _Table, here: float, paid: float, top: int, free: int, slots: int | None
    ) -> None:
        """Log that a job stays at its minimum beside ``free`` slots, with the most speedup its model predicts at
        a larger count up to ``top`` and the least a resize needs (and its request, where that holds it)."""
        job = request.job
        low = job.min_workers
        larger = max(
            (k for k in range(low + 1, top + 1) if self._fits(k, job, slots)),
            key=lambda k: _speedup_at(table, k),
            default=None,
        )
        needs = here / paid if paid > 0 else math.inf
        text = (
            f"goodput: {job.job_id} stays at its minimum of {low} beside {free} free slots: speedup {here:.2f} there, "
        )
        text += (
            f"at most {_speedup_at(table, larger):.2f} predicted at {larger}"
            if larger is not None
            else f"no larger count within its cap of {table.cap}"
        )
        text += f", a resize needs more than {needs:.2f}"
        if larger is not None and _speedup_at(table, larger) > needs:
            text += f"; held: {request.reason}"
        if self._stays.get(job.job_id) != text:
            self._stays[job.job_id] = text
            _log.info("%s", text)

    def _weights(self, requests: Sequence[Request], tables: Sequence[_Table]) -> list[float]:
        """How much each job's inverse speedup counts: ``(i / m) ** remaining_exponent`` for the job with the
        ``i``-th most remaining work at its submitted count of the ``m`` that report it (ties in the jobs' order);
        1.0 for a job that reports no remaining work or has no goodput model."""
        weights = [1.0] * len(requests)
        if not self.remaining_exponent:
            return weights
        work = [
            (-seconds, i)
            for i, (request, table) in enumerate(zip(requests, tables, strict=True))
            if (seconds := _remaining_as_submitted_s(request.job, table)) is not None
        ]
        for rank, (_, i) in enumerate(sorted(work), start=1):
            weights[i] = (rank / len(work)) ** self.remaining_exponent
        return weights

    @staticmethod
    def _fits(k: int, job: JobView, slots: int | None) -> bool:
        """Whether ``k`` workers pack without leaving pieces of nodes no other job fits: a divisor of a node's
        slots or whole nodes (and the job's limits and what it holds, whatever they are)."""
        return _packs(k, job.min_workers, job.max_workers, job.holding, slots)

    @staticmethod
    def _fitting(low: int, top: int, job: JobView, slots: int | None) -> list[int]:
        """The counts from ``low`` to ``top`` that :meth:`_fits`."""
        return list(_packing_counts(low, top, job.min_workers, job.max_workers, job.holding, slots))

    def _reach(self, request: Request, table: _Table, slots: int | None) -> int:
        """The most workers the job may be given: what it asked for, rounded up to the next count that packs
        (within its cap and maximum) where it does not (a job asking for 7 of 4-GPU nodes may get 8: rounded
        down to 4 it could never grow past the count it holds)."""
        job = request.job
        top = max(job.min_workers, min(request.desired, table.cap))
        bound = max(top, min(table.cap, job.max_workers))
        return next((k for k in range(top, bound + 1) if self._fits(k, job, slots)), top)

    def _options(
        self,
        request: Request,
        table: _Table,
        now: float,
        slots: int | None,
        preempt: bool = False,
        weight: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The counts a job may end at, the value of each (its inverse speedup times ``weight``; lower is better) and
        whether it moves the job's workers closer together. With ``preempt``, a job in its cooldown may also
        shrink (for a waiting job). Every count but the one a job holds, and a move, is charged a resize."""
        job = request.job
        holding = job.holding
        if not job.elastic:
            ks = [holding, job.min_workers] if job.waiting else [holding]
        elif request.settled and not job.waiting:
            shrinks = preempt and self._preemptible(request)
            ks = self._fitting(job.min_workers, holding, job, slots) if shrinks else [holding]
        else:
            top = self._reach(request, table, slots)
            ks = ([holding] if job.waiting else []) + self._fitting(job.min_workers, top, job, slots)
        keep = self._paid(job, table, now) * (1.0 - self.hysteresis)
        movable = job.elastic and not request.settled
        values = []
        moves = []
        for k in ks:
            if k < job.min_workers:  # stays waiting with what it holds
                values.append(WAITING_PENALTY + max(0.0, now - job.submitted_at))
                moves.append(False)
                continue
            s = float(table.speedup[min(k, len(table.speedup) - 1)])
            move = False
            if holding and k != holding:
                s *= keep
            elif holding and table.here is not None:  # where it runs, or packed for the cost of a move
                move = movable and s * keep > table.here.speedup
                s = s * keep if move else table.here.speedup
            values.append(weight / s if s > 0 else WAITING_PENALTY / 2)
            moves.append(move)
        return np.array(ks, dtype=np.int64), np.array(values, dtype=float), np.array(moves, dtype=bool)

    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        ids = {r.job_id for r in requests}
        self._history.keep_only(ids)
        self._stays = {j: text for j, text in self._stays.items() if j in ids}
        if not requests:
            return []
        tables = [self._job_table(r.job, snapshot) for r in requests]
        capacity = max(snapshot.available, sum(r.holding for r in requests if not r.job.elastic or r.settled))
        preempt = any(r.job.waiting for r in requests) and any(self._preemptible(r) for r in requests)
        slots = snapshot.slots_per_node
        solved = self._solve(requests, tables, snapshot.now, capacity, slots, preempt)
        if solved is not None and preempt and not self._admits(requests, solved[0]):
            solved = self._solve(requests, tables, snapshot.now, capacity, slots, False)
        if solved is None:
            return []
        counts = solved[0]
        self._grow_into_free_slots(requests, tables, counts, snapshot.now, capacity, slots)
        gainers = [r.job_id for r, k in zip(requests, counts, strict=True) if k > r.holding]
        out = []
        for request, table, k, move in zip(requests, tables, *solved, strict=True):
            job = request.job
            if not job.elastic and not (job.waiting and k):
                continue
            stays = k == job.holding and not move
            batch, accum = _batch_changes(job, table, k, stays) if k >= job.min_workers else (None, None)
            if stays and batch is None:
                continue
            nodes = None if stays or not slots or k < 1 else _packed(k, slots)
            reason = self._reason(job, table, k, batch, accum, nodes if move else None)
            if k < job.holding:
                others = sorted(j for j in gainers if j != job.job_id)
                own = None if others else self._shrink_reason(job, table, k)
                reason += f"; for {', '.join(others)}" if others else f"; {own or request.reason}"
            out.append(Allocation(job.job_id, k, reason, batch, accum, nodes))
        return out

    @staticmethod
    def _preemptible(request: Request) -> bool:
        """A job in its cooldown that may still give workers to a waiting job."""
        job = request.job
        return job.elastic and request.settled and request.preemptible and not job.waiting and job.holding > 0

    @staticmethod
    def _admits(requests: Sequence[Request], counts: Sequence[int]) -> bool:
        """Whether a job in its cooldown shrinks only where a waiting job starts."""
        shrinks = any(r.settled and k < r.holding for r, k in zip(requests, counts, strict=True))
        starts = any(r.job.waiting and k >= max(1, r.job.min_workers) for r, k in zip(requests, counts, strict=True))
        return starts or not shrinks

    def _solve(
        self,
        requests: Sequence[Request],
        tables: Sequence[_Table],
        now: float,
        capacity: int,
        slots: int | None,
        preempt: bool,
    ) -> tuple[list[int], list[bool]] | None:
        """Every job's count and whether it moves, by dynamic programming over the jobs and the slots; None if
        nothing fits."""
        options = [
            self._options(request, table, now, slots, preempt, weight)
            for request, table, weight in zip(requests, tables, self._weights(requests, tables), strict=True)
        ]
        return programme(options, capacity)

    @staticmethod
    def _reason(
        job: JobView, table: _Table, k: int, batch: int | None, accum: int | None, moved_to: int | None = None
    ) -> str:
        if moved_to is not None and table.here is not None:
            s = float(table.speedup[min(k, len(table.speedup) - 1)])
            text = (
                f"goodput: moves its {k} workers from {table.here.nodes} nodes to {moved_to}, "
                f"speedup {table.here.speedup:.2f} -> {s:.2f}"
            )
        else:
            size = f"{job.holding} -> {k} workers" if k != job.holding else f"keeps {k} workers"
            here = table.here is not None and k == job.holding
            s = (
                table.here.speedup
                if here and table.here is not None
                else float(table.speedup[min(k, len(table.speedup) - 1)])
            )
            text = f"goodput: {size}, speedup {s:.2f}"
        if batch is not None and batch != job.metrics.batch_size:
            text += f"; batch {job.metrics.batch_size or '?'} -> {batch}"
            if accum:
                text += f" ({accum + 1} micro-batches a step)"
        return text
