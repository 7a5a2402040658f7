"""A job's goodput as a function of its configuration, fitted online from its own step times.

Goodput is the useful progress per second: throughput times statistical efficiency (Pollux, Qiao et
al., OSDI 2021). Both halves are modelled from what the job reports; nothing here reads a clock or
keeps state between calls, so the job policy and the arbiter that use it stay pure.

**Throughput.** A step of ``k`` workers on ``n`` nodes, each running ``s + 1`` micro-batches of ``m``
samples (``s`` gradient-accumulation steps) before one synchronisation, takes::

    T(k, n, m, s) = (s + 1) * (a + b * m) + sync(k, n)
    sync(k, n)    = 0                          for k = 1
                  = c_node + d_node * (k - 2)  for k > 1 on one node
                  = c_net  + d_net  * (k - 2)  for k > 1 on several nodes

a compute part linear in the micro-batch and a synchronisation part linear in the workers, measured
apart for one node and for several: placement counts where the measurements show it matters. The six
coefficients are fitted by non-negative least squares to :class:`~submarine_elastic.policy.api.StepTime`
measurements (the compute and synchronisation parts separately when the synchronisation was measured
apart, jointly otherwise). Where nothing measured a coefficient, the model takes an optimistic prior, so
that the job is tried there and measured (as Pollux does):

* one micro-batch size measured: ``a`` is pinned at half the measured compute time of a micro-batch and
  ``b`` takes the other half, so a larger micro-batch is predicted faster per sample (half the measured
  time could be fixed), while a smaller one takes only its share of the measured time (all of it could
  be per-sample): optimistic both ways until a second size is measured;
* micro-batch sizes within :data:`SIZE_SPREAD` of each other (a global batch split unevenly) count as one;
* no step of several workers measured: no synchronisation cost; no two worker counts: no slope; no step of
  one worker measured: no synchronisation cost either, as a step of one worker count cannot tell its
  synchronisation from its compute (a coefficient whose column the measurements make a multiple of one fitted
  before it keeps its prior, 0, rather than a least-norm share of their time);
* several nodes never measured: one node's synchronisation times :data:`NETWORK_PRIOR`; one node never
  measured (every multi-worker step crossed nodes): the several nodes' figures.

Throughput is ``k * m * (s + 1) / T`` samples per second.

**Statistical efficiency.** With the gradient noise scale ``B_noise`` (samples), a sample in a batch
of ``B`` makes ``E(B) = (B_noise + B_min) / (B_noise + B)`` of the progress it makes in the smallest
allowed batch ``B_min`` (McCandlish et al. 2018). ``E(B_min) = 1``.

**Best configuration.** For ``k`` workers, the global batch ``B`` in the job's allowed range that
maximises ``throughput * E(B)``, with the fewest accumulation steps that keep the micro-batch within
the job's ``max_local_batch``. Candidates are a geometric grid of :data:`BATCH_CANDIDATES` sizes across
the range, plus ``k`` times each measured micro-batch (the batch of a configuration already measured).

**Exploring.** Where the model rests on a prior it is uncertain, and optimistic: a job's best
configuration lies there when it may be faster, and the job is tried there (the arbiter charges the
change like any resize). How far: at most :data:`EXPLORE_FACTOR` times the most workers the job was
measured at, and micro-batches within that factor of the measured ones. How often: a configuration
outside what was measured (more workers than ever, or a micro-batch outside the measured range) is
chosen only while exploring is allowed (the policy allows it once per ``explore_interval_s`` per job);
otherwise the job stays within what it has run at.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .api import JobView, StepTime

__all__ = [
    "BATCH_CANDIDATES",
    "EXPLORE_FACTOR",
    "NETWORK_PRIOR",
    "BestConfigs",
    "GoodputModel",
    "ThroughputModel",
    "worker_cap",
]

#: A job runs at most this factor more workers, and this factor larger or smaller micro-batches, than
#: it has been measured at: the model's extrapolation is trusted that far and no farther.
EXPLORE_FACTOR = 2.0
#: With no step across nodes measured, a synchronisation across nodes is taken to cost this factor more
#: than one on a node (its prior: placement matters a little until measured).
NETWORK_PRIOR = 1.1
#: Global batch sizes tried per worker count (a geometric grid across the job's allowed range).
BATCH_CANDIDATES = 24
#: At a worker count, a job keeps its current global batch unless another batch's modelled goodput is at least
#: this fraction higher: a noise scale measured anew every few steps moves a flat optimum back and forth, and
#: each batch change costs a commit and a learning-rate ramp.
BATCH_HYSTERESIS = 0.1
#: Micro-batch sizes measured count as several (a per-sample slope fitted between them) only when the largest
#: is at least this factor of the smallest: a global batch split unevenly (293 and 292 samples a worker) has
#: two sizes whose step times differ by noise alone, and a slope fitted there is noise.
SIZE_SPREAD = 1.25
#: Two model columns whose cosine is within this of 1 (or -1) count as one (a multiple of the other).
COLLINEAR_TOLERANCE = 1e-9

Floats = NDArray[np.float64]


def _nnls(columns: list[Floats], y: Floats) -> list[float]:
    """Least squares with every coefficient >= 0: solve, drop the most negative, solve again. A column that is a
    multiple of one before it (on every row measured so far) is not fitted: its coefficient keeps its prior, 0,
    rather than a least-norm share of what the other explains (with every step at one worker count, such a
    split put most of the step into synchronisation, and one worker was predicted many times faster)."""
    active: list[int] = []
    for i, column in enumerate(columns):
        norm = float(np.linalg.norm(column))
        if norm == 0 or any(
            1 - abs(float(column @ columns[j])) / (norm * float(np.linalg.norm(columns[j]))) < COLLINEAR_TOLERANCE
            for j in active
        ):
            continue
        active.append(i)
    coef = [0.0] * len(columns)
    while active:
        a = np.stack([columns[i] for i in active], axis=1)
        sol, *_ = np.linalg.lstsq(a, y, rcond=None)
        worst = int(np.argmin(sol))
        if sol[worst] >= 0:
            for i, v in zip(active, sol, strict=True):
                coef[i] = float(v)
            break
        del active[worst]
    return coef


@dataclass(frozen=True)
class ThroughputModel:
    """The step-time model of the module docstring (seconds; ``b`` per sample, slopes per worker). ``measured_local``:
    the one micro-batch measured, where only one was (below it, compute scales with the micro-batch)."""

    a: float = 0.0
    b: float = 1.0
    c_node: float = 0.0
    d_node: float = 0.0
    c_net: float = 0.0
    d_net: float = 0.0
    measured_local: float | None = None

    @classmethod
    def fit(cls, measured: Sequence[StepTime]) -> ThroughputModel | None:
        """The model fitted to ``measured``; None with no measurement."""
        if not measured:
            return None
        k = np.array([m.workers for m in measured], dtype=float)
        n = np.array([m.nodes for m in measured], dtype=float)
        mb = np.array([m.local_batch for m in measured], dtype=float)
        reps = np.array([m.accum_steps + 1 for m in measured], dtype=float)
        t = np.array([m.seconds for m in measured], dtype=float)
        multi = k > 1
        node = (multi & (n == 1)).astype(float)
        net = (n > 1).astype(float)
        two_sizes = bool(mb.max() >= SIZE_SPREAD * mb.min())
        size = float(np.mean(mb))  # the one size measured, when not several
        if not two_sizes:
            mb = np.full_like(mb, size)
        sync_cols = [node, node * (k - 2), net, net * (k - 2)]
        if all(m.sync_seconds is not None for m in measured):
            sync = np.array([m.sync_seconds for m in measured], dtype=float)
            compute = (t - sync) / reps
            if two_sizes:
                a, b = _nnls([np.ones_like(mb), mb], compute)
            else:
                a = float(np.mean(compute)) / 2
                b = float(np.mean((compute - a) / mb))
            c_node, d_node, c_net, d_net = _nnls(sync_cols, sync) if np.any(multi) else [0.0] * 4
        else:
            cols = [reps, reps * mb] if two_sizes else [reps * mb]
            coef = _nnls(cols + sync_cols, t)
            if two_sizes:
                a, b = coef[0], coef[1]
            else:  # the fitted compute of the one size, half of it fixed
                a = float(np.mean(coef[0] * mb)) / 2
                b = coef[0] - a / size
            c_node, d_node, c_net, d_net = coef[-4:]
        if b <= 0:  # all compute fitted as fixed: keep a tiny per-sample cost so throughput stays finite
            b = max(a, 1e-9) * 1e-6
        has_node, has_net = bool(np.any(node)), bool(np.any(net))
        if has_node and not has_net:
            c_net, d_net = c_node * NETWORK_PRIOR, d_node * NETWORK_PRIOR
        elif has_net and not has_node:
            c_node, d_node = c_net, d_net
        return cls(a, b, c_node, d_node, c_net, d_net, None if two_sizes else size)

    def step_seconds(self, workers: Floats, nodes: Floats, local: Floats, accum: Floats) -> Floats:
        """``T(k, n, m, s)`` elementwise (arrays broadcast)."""
        many = workers > 1
        one_node = nodes <= 1
        sync = np.where(one_node, self.c_node + self.d_node * (workers - 2), self.c_net + self.d_net * (workers - 2))
        compute = self.a + self.b * local
        if self.measured_local is not None:  # the prior is optimistic both ways from the one size measured
            compute = np.minimum(compute, (self.a + self.b * self.measured_local) * local / self.measured_local)
        result: Floats = (accum + 1) * compute + np.where(many, np.maximum(sync, 0.0), 0.0)
        return result


@functools.lru_cache(maxsize=1024)
def _fit(rows: tuple[tuple[int, int, float, int, float, float | None], ...]) -> ThroughputModel | None:
    """:meth:`ThroughputModel.fit` of the measurements these rows describe, each set fitted once."""
    return ThroughputModel.fit([StepTime(*row) for row in rows])


@dataclass(frozen=True)
class BestConfigs:
    """The best configuration of a job at each worker count ``k`` (index ``k``; index 0 is unused).

    Attributes:
        goodput: ``throughput * E(B)`` at the best batch, samples/s of ``B_min``-equivalent progress.
        batch: the best global batch size.
        accum: its gradient-accumulation steps.
    """

    goodput: Floats
    batch: NDArray[np.int64]
    accum: NDArray[np.int64]

    def speedup(self) -> Floats:
        """Goodput at each count over goodput at one worker (0 where one worker makes no progress)."""
        base = float(self.goodput[1]) if len(self.goodput) > 1 else 0.0
        if base <= 0:
            return np.zeros_like(self.goodput)
        result: Floats = self.goodput / base
        return result


@dataclass(frozen=True)
class _Layout:
    """The candidates of :meth:`GoodputModel._evaluate` for some rows (worker counts on node counts), one column per
    batch: each batch, its accumulation, samples per second (``batch / seconds``), whether it may be chosen (allowed
    and trusted), per row the allowed one closest to what was measured, and the current batch's column (None when it
    is not a candidate)."""

    batch: Floats
    accum: Floats
    rate: Floats
    usable: NDArray[np.bool_]
    nearest: NDArray[np.intp]
    current_at: int | None


#: Layouts already made, by everything they depend on (a cache: the oldest is dropped past :data:`_LAYOUT_CACHE`).
_layouts: dict[tuple[object, ...], _Layout] = {}
_LAYOUT_CACHE = 256


@functools.lru_cache(maxsize=1024)
def _batch_grid(low: int, high: int) -> Floats:
    """The candidate global batches from ``low`` to ``high`` (geometric, rounded), made once per range: read-only."""
    grid = np.unique(np.round(np.geomspace(low, high, BATCH_CANDIDATES)))
    grid.setflags(write=False)
    return grid


class GoodputModel:
    """One job's goodput model, built from its :class:`~submarine_elastic.policy.api.JobView` and the step
    times measured so far (the view's own, or a longer history a policy kept).

    ``explore``: whether configurations outside what was measured may be chosen (see the module docstring).
    """

    def __init__(
        self, job: JobView, measured: Sequence[StepTime], slots_per_node: int | None, *, explore: bool = True
    ) -> None:
        self.job = job
        self.measured = tuple(measured)
        self.slots_per_node = slots_per_node
        self.explore = explore
        self.throughput = _fit(
            tuple((m.workers, m.nodes, m.local_batch, m.accum_steps, m.seconds, m.sync_seconds) for m in self.measured)
        )
        metrics = job.metrics
        current = metrics.batch_size
        if (
            job.min_batch_size is not None
            and job.max_batch_size is not None
            and metrics.gradient_noise_scale is not None
        ):
            self.batch_range: tuple[int, int] = (job.min_batch_size, job.max_batch_size)
            self.noise: float | None = metrics.gradient_noise_scale
        else:
            fixed = current or job.min_batch_size or 1
            if job.min_batch_size is not None and job.max_batch_size is not None:
                # a job started outside the range policies may set is brought into it, never sent outside it
                fixed = min(max(fixed, job.min_batch_size), job.max_batch_size)
            self.batch_range = (fixed, fixed)
            self.noise = None

    @property
    def fitted(self) -> bool:
        """Whether any step time was measured (else the model is a prior: linear scaling)."""
        return self.throughput is not None

    def efficiency(self, batch: Floats) -> Floats:
        """``E(B)`` of the module docstring (1 without a noise scale)."""
        if self.noise is None:
            return np.ones_like(batch)
        low = float(self.batch_range[0])
        result: Floats = (self.noise + low) / (self.noise + batch)
        return result

    def nodes_for(self, workers: Floats) -> Floats:
        """Nodes ``k`` workers span when packed (one node when the slots per node are unknown)."""
        if self.slots_per_node is None:
            return np.ones_like(workers)
        result: Floats = np.ceil(workers / self.slots_per_node)
        return result

    def _candidates(self) -> Floats:
        low, high = self.batch_range
        if high <= low:
            return np.array([float(low)])
        grid = _batch_grid(low, high)
        current = self.job.metrics.batch_size
        if current is not None and low <= current <= high:
            grid = np.unique(np.append(grid, float(current)))
        return grid

    def best(self, max_workers: int) -> BestConfigs:
        """The best configuration at every count from 1 to ``max_workers``, each packed on the fewest nodes."""
        size = max(1, max_workers)
        if self.throughput is None:  # nothing measured: linear scaling, the batch as it is
            kept = self.job.metrics.batch_size or self.batch_range[0]
            return BestConfigs(
                np.arange(size + 1, dtype=float),
                np.full(size + 1, kept, dtype=np.int64),
                np.zeros(size + 1, dtype=np.int64),
            )
        workers = np.arange(1, size + 1, dtype=float)
        goodput, batch, accum = self._evaluate(self.throughput, workers, self.nodes_for(workers), ("best", size))
        return BestConfigs(
            np.concatenate(([0.0], goodput)),
            np.concatenate(([0], batch)),
            np.concatenate(([0], accum)),
        )

    def at(self, workers: int, nodes: int) -> tuple[float, int, int]:
        """Goodput, global batch and accumulation of the best configuration of ``workers`` on ``nodes``
        nodes (the placement a job has, where it is not packed). Zero goodput with nothing measured."""
        if self.throughput is None:
            return 0.0, self.job.metrics.batch_size or self.batch_range[0], 0
        goodput, batch, accum = self._evaluate(
            self.throughput, np.array([float(workers)]), np.array([float(nodes)]), ("at", workers, nodes)
        )
        return float(goodput[0]), int(batch[0]), int(accum[0])

    def _evaluate(
        self, model: ThroughputModel, workers: Floats, nodes: Floats, rows_key: tuple[object, ...]
    ) -> tuple[Floats, NDArray[np.int64], NDArray[np.int64]]:
        """Per row (a worker count on a node count, ``rows_key`` naming them): the best goodput, its batch and its
        accumulation."""
        layout = self._layout(model, workers, nodes, rows_key)
        modelled = layout.rate * self.efficiency(layout.batch)
        goodput = np.where(layout.usable, modelled, -np.inf)
        pick = np.argmax(goodput, axis=1)
        rows = np.arange(len(workers))
        best = goodput[rows, pick]
        if layout.current_at is not None:
            # keep the current batch wherever the best is not BATCH_HYSTERESIS better
            at = layout.current_at
            keep = np.isfinite(goodput[:, at]) & (goodput[:, at] * (1.0 + BATCH_HYSTERESIS) >= best)
            pick = np.where(keep, at, pick)
            best = goodput[rows, pick]
        # no trusted batch at some count: the allowed one closest to what was measured, at its goodput
        untrusted = ~np.isfinite(best)
        pick = np.where(untrusted, layout.nearest, pick)
        best = np.where(untrusted, modelled[rows, pick], best)
        return best, layout.batch[rows, pick].astype(np.int64), layout.accum[rows, pick].astype(np.int64)

    def _layout(self, model: ThroughputModel, workers: Floats, nodes: Floats, rows_key: tuple[object, ...]) -> _Layout:
        """What :meth:`_evaluate` reads that the noise scale does not change, made once per everything it depends
        on: a job's noise scale changes every epoch, its configurations and batch far less often."""
        locals_ = np.unique([m.local_batch for m in self.measured])
        current = self.job.metrics.batch_size
        key: tuple[object, ...] = (model, tuple(locals_.tolist()), self.batch_range, current, self.job.max_local_batch)
        key += (self.explore, self.slots_per_node, rows_key)
        found = _layouts.get(key)
        if found is not None:
            return found
        low, high = self.batch_range
        grid = self._candidates()
        k = workers[:, None]
        batch = np.concatenate((np.broadcast_to(grid, (len(workers), len(grid))), np.round(k * locals_)), axis=1)
        allowed = (batch >= low) & (batch <= high)
        per_worker = batch / k
        limit = self.job.max_local_batch
        if limit is not None:
            accum = np.maximum(np.ceil(per_worker / limit - 1e-9) - 1, 0)
        else:
            accum = np.zeros_like(per_worker)
        local = per_worker / (accum + 1)
        seconds = model.step_seconds(k, nodes[:, None], local, accum)
        current_at = None
        if current is not None and len(grid) > 1 and float(current) in grid:
            current_at = int(np.flatnonzero(grid == float(current))[0])
        mid = self._measured_local_mid()
        distance = np.where(allowed, np.abs(np.log(np.where(allowed, local, mid) / mid)), np.inf)
        found = _Layout(
            batch, accum, batch / seconds, allowed & self._trusted(local), np.argmin(distance, axis=1), current_at
        )
        for array in (found.batch, found.accum, found.rate, found.usable, found.nearest):
            array.setflags(write=False)  # shared by every model that finds it
        if len(_layouts) >= _LAYOUT_CACHE:
            del _layouts[next(iter(_layouts))]
        _layouts[key] = found
        return found

    def _measured_local_mid(self) -> float:
        sizes = [m.local_batch for m in self.measured]
        return math.sqrt(min(sizes) * max(sizes))

    def _trusted(self, local: Floats) -> NDArray[np.bool_]:
        sizes = [m.local_batch for m in self.measured]
        factor = EXPLORE_FACTOR if self.explore else 1.0
        low, high = min(sizes) / factor, max(sizes) * factor
        result: NDArray[np.bool_] = (local >= low * (1 - 1e-9)) & (local <= high * (1 + 1e-9))
        return result


def worker_cap(job: JobView, measured: Iterable[StepTime], initial: int, *, explore: bool = True) -> int:
    """The most workers a job may have now: :data:`EXPLORE_FACTOR` times the most it was measured at (the
    most it was measured at, when not ``explore``), and at least the count it was submitted with
    (``initial`` when it gives none); within its limits, never below what it holds. Before its first
    measurement, exactly that count: a job submitted with one worker is not spread over a node before
    anything shows it gains from it."""
    most = max((m.workers for m in measured), default=0)
    initial = job.requested_workers or initial
    factor = EXPLORE_FACTOR if explore else 1.0
    cap = initial if most == 0 else max(initial, math.floor(most * factor))
    return max(job.min_workers, min(job.max_workers, max(cap, job.holding)))
