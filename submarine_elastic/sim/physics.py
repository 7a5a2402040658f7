"""Job physics from measured data: how fast a training job runs, and how much each step is worth.

The data are the measurements published with Pollux (Qiao et al., "Pollux: Co-adaptive Cluster
Scheduling for Goodput-Optimized Deep Learning", OSDI 2021; artifact repository petuum/adaptdl, branch
osdi21-artifact, folder simulator/, Apache License 2.0), shipped in ``submarine_elastic/sim/data/pollux``
(see its README and :func:`submarine_elastic.env.pollux_data_dir`). Per application ``<app>``:

``traces/<app>/placements.csv`` (``placement,local_bsz,step_time,sync_time``)
    Measured time of one training iteration (and the gradient-sync part of it) for a GPU placement (the
    string ``124`` means one GPU on one node, two on another and four on a third) and a per-GPU batch.
``traces/<app>/scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,sync_time``)
    The same for larger jobs (6-16 nodes, up to 64 GPUs), by node and replica count.
``traces/<app>/validation-<B>.csv`` (``progress,iteration,metric,grad_sqr,grad_var``)
    A full training run at global batch size ``B``: one row per epoch, with the validation metric and the
    gradient statistics measured during that epoch.

The model (the one the Pollux simulator uses, re-derived here; assumptions in *italics*):

* **Iteration time.** A job with ``k`` workers on placement ``p`` and global batch ``B`` computes a local
  batch ``B/k`` per GPU. If ``p`` (as the smallest rotation of its per-node counts) was measured, the
  iteration time is interpolated linearly in the local batch along that placement's rows. Otherwise it is
  interpolated over (node count, replica count, local batch) in the averaged placement rows and the
  scalability rows: linearly in the local batch on each measured (nodes, replicas) curve, then in the
  replica count at the two measured node counts that bracket the job's, then in the node count.
  *Outside the measured ranges values are clamped*: node counts above 16, replica counts beyond the largest
  measured at a node count (a node with more than 4 GPUs), and local batches below the smallest measured
  take the nearest measured value. A local batch above the largest measured is run with gradient
  accumulation: ``a`` extra micro-steps of size ``B/(k(a+1))``, each costing the step time minus the sync time.
* **Statistical efficiency.** Progress is counted in iterations at the application's initial batch size
  ``B0`` (the smallest validated): an iteration at batch ``B`` is worth
  ``gain = (var + sqr) / (var / s + sqr)`` of them, with ``s = B / B0`` and ``sqr``, ``var`` the squared
  norm and variance of the gradient measured in the current epoch (the gradient noise scale,
  McCandlish et al. 2018), interpolated linearly between the two validated batch sizes that bracket ``B``
  (*clamped outside them*). Gain is ``s`` when gradients are all noise and ``1`` when they are noise-free.
* **Completion.** Epoch ``e`` ends when progress reaches the smallest progress any validation run recorded
  at its ``e``-th row; a job is done after the last epoch that every run recorded (2 for bert, 100 for
  cifar10, ...). *A job trains to the same statistical target whatever its batch size and worker count*;
  goodput (progress per second) = gain / iteration time, constant within an epoch.
* *Batch sizes above the largest validated one are capped to it.* *Jobs do not interfere with each other*;
  *the network is the one the measurements were made on* (16 nodes x 4 GPUs in the paper's testbed).
"""

from __future__ import annotations

import csv
import functools
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from submarine_elastic import env
from submarine_elastic.sim.api import TraceDataError, UnknownApplicationError

Placement = tuple[int, ...]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class _Curve:
    """Step and sync time against local batch size, sorted by batch size."""

    bsz: FloatArray
    step: FloatArray
    sync: FloatArray

    def at(self, local_bsz: float) -> tuple[float, float]:
        return float(np.interp(local_bsz, self.bsz, self.step)), float(np.interp(local_bsz, self.bsz, self.sync))


@dataclass(frozen=True)
class IterationCost:
    """One training iteration of a job: wall seconds, and the per-GPU micro-batch and accumulation it runs."""

    seconds: float
    atomic_bsz: float
    accum_steps: int


class Application:
    """The measured model of one application (see the module docstring for the model)."""

    def __init__(
        self,
        name: str,
        placements: dict[Placement, _Curve],
        groups: dict[tuple[int, int], _Curve],
        validation: dict[int, dict[str, FloatArray]],
    ) -> None:
        if not placements and not groups:
            raise TraceDataError(f"{name}: no step-time measurements")
        if not validation:
            raise TraceDataError(f"{name}: no validation-<batch>.csv runs")
        self.name = name
        self._placements = placements
        self._groups = groups
        self._node_counts = sorted({n for n, _ in groups})
        self._replicas_at = {n: sorted(r for m, r in groups if m == n) for n in self._node_counts}
        self.batch_sizes: tuple[int, ...] = tuple(sorted(validation))
        self.epochs = min(len(run["progress"]) for run in validation.values())
        runs = [validation[b] for b in self.batch_sizes]
        self._sqr = np.array([run["grad_sqr"][: self.epochs] for run in runs])
        self._var = np.array([run["grad_var"][: self.epochs] for run in runs])
        self._metric = np.array([run["metric"][: self.epochs] for run in runs])
        self.epoch_progress: FloatArray = np.min([run["progress"][: self.epochs] for run in runs], axis=0)
        if np.any(np.diff(self.epoch_progress) <= 0) or self.epoch_progress[0] <= 0:
            raise TraceDataError(f"{name}: validation progress must increase from epoch to epoch")
        all_bsz = np.concatenate([c.bsz for c in (*placements.values(), *groups.values())])
        self.min_local_bsz = float(all_bsz.min())
        self.max_local_bsz = float(all_bsz.max())
        self._gains: dict[float, FloatArray] = {}
        self._metrics: dict[float, FloatArray] = {}
        self._gradients: dict[float, tuple[FloatArray, FloatArray]] = {}

    # --- sizes -----------------------------------------------------------------------------------
    @property
    def init_batch_size(self) -> int:
        """``B0``: the smallest validated batch size; progress is counted in its iterations."""
        return self.batch_sizes[0]

    @property
    def max_batch_size(self) -> int:
        """The largest validated batch size; larger ones are capped to it."""
        return self.batch_sizes[-1]

    @property
    def target_progress(self) -> float:
        """Progress at which a job of this application is done."""
        return float(self.epoch_progress[-1])

    def max_useful_replicas(self) -> int:
        """Most workers that still get at least the smallest measured local batch of the largest batch."""
        return max(1, int(self.max_batch_size // self.min_local_bsz))

    @property
    def metric_higher_is_better(self) -> bool:
        """Whether the validation metric rises as training goes on (accuracy) rather than falls (error)."""
        return bool(self._metric[0, -1] >= self._metric[0, 0])

    def clamp_batch(self, batch_size: float) -> float:
        return min(max(float(batch_size), 1.0), float(self.max_batch_size))

    # --- speed -----------------------------------------------------------------------------------
    def step_time(self, placement: Placement, local_bsz: float) -> tuple[float, float]:
        """(iteration seconds, sync seconds) of one step on ``placement`` at ``local_bsz`` per GPU.

        Raises:
            ValueError: the placement is empty or has a non-positive count.
        """
        if not placement or min(placement) < 1:
            raise ValueError(f"placement must be positive GPU counts per node, got {placement}")
        return self._step_time(_canonical(placement), float(local_bsz))

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - applications live as long as the process
    def _step_time(self, placement: Placement, local_bsz: float) -> tuple[float, float]:
        curve = self._placements.get(placement)
        if curve is not None:
            return curve.at(local_bsz)
        return self._interpolate(len(placement), sum(placement), local_bsz)

    def _interpolate(self, nodes: int, replicas: int, local_bsz: float) -> tuple[float, float]:
        counts = self._node_counts
        n = min(max(nodes, counts[0]), counts[-1])
        hi = next(i for i, c in enumerate(counts) if c >= n)
        lo = hi if counts[hi] == n else hi - 1
        a = self._at_nodes(counts[lo], replicas, local_bsz)
        if lo == hi:
            return a
        b = self._at_nodes(counts[hi], replicas, local_bsz)
        w = (n - counts[lo]) / (counts[hi] - counts[lo])
        return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])

    def _at_nodes(self, nodes: int, replicas: int, local_bsz: float) -> tuple[float, float]:
        rs = self._replicas_at[nodes]
        r = min(max(replicas, rs[0]), rs[-1])
        hi = next(i for i, c in enumerate(rs) if c >= r)
        lo = hi if rs[hi] == r else hi - 1
        a = self._groups[nodes, rs[lo]].at(local_bsz)
        if lo == hi:
            return a
        b = self._groups[nodes, rs[hi]].at(local_bsz)
        w = (r - rs[lo]) / (rs[hi] - rs[lo])
        return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])

    def iteration(self, placement: Placement, batch_size: float) -> IterationCost:
        """Cost of one iteration of global batch ``batch_size`` on ``placement`` (with accumulation if needed).

        Raises:
            ValueError: the placement is empty or has a non-positive count.
        """
        workers = sum(placement)
        local = self.clamp_batch(batch_size) / max(workers, 1)
        accum = max(0, math.ceil(local / self.max_local_bsz - 1e-9) - 1)
        atomic = local / (accum + 1)
        step, sync = self.step_time(placement, atomic)
        return IterationCost(step + accum * (step - sync), atomic, accum)

    def samples_to_finish(self, batch_size: float) -> float:
        """Samples a job trains to its end at a fixed global batch ``batch_size`` (capped as every batch is):
        each epoch's progress divided by the batch's gain in that epoch, in iterations of that batch."""
        widths = np.diff(self.epoch_progress, prepend=0.0)
        return float(np.sum(widths / self.gains(batch_size))) * self.clamp_batch(batch_size)

    def throughput(self, placement: Placement, batch_size: float) -> float:
        """Examples per second of the whole job.

        Raises:
            ValueError: the placement is empty or has a non-positive count.
        """
        return self.clamp_batch(batch_size) / self.iteration(placement, batch_size).seconds

    # --- statistical efficiency ----------------------------------------------------------------
    def gains(self, batch_size: float) -> FloatArray:
        """Progress per iteration at ``batch_size``, for every epoch (read-only array of ``epochs`` values)."""
        b = self.clamp_batch(batch_size)
        cached = self._gains.get(b)
        if cached is not None:
            return cached
        sqr, var = self._gradient_stats(b)
        scale = b / self.init_batch_size
        denom = var / scale + sqr
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        gain.setflags(write=False)
        self._gains[b] = gain
        return gain

    def efficiency(self, batch_size: float, epoch: int) -> float:
        """Statistical efficiency in (0, 1]: gain per unit of batch-size scale in ``epoch``."""
        b = self.clamp_batch(batch_size)
        e = min(max(epoch, 0), self.epochs - 1)
        return float(self.gains(b)[e] / (b / self.init_batch_size))

    def noise_scale(self, batch_size: float, epoch: int) -> float | None:
        """Gradient noise scale ``B0 * var / sqr`` in examples during ``epoch`` (None when ``sqr`` is 0).

        With it, ``gain = (1 + Bn/B0) / (1 + Bn/B)``: the form policies estimate from live gradients.
        """
        b = self.clamp_batch(batch_size)
        e = min(max(epoch, 0), self.epochs - 1)
        sqrs, variances = self._gradient_stats(b)
        sqr = float(sqrs[e])
        return None if sqr <= 0 else self.init_batch_size * float(variances[e]) / sqr

    def _gradient_stats(self, b: float) -> tuple[FloatArray, FloatArray]:
        """``grad_sqr`` and ``grad_var`` of every epoch at the (clamped) batch ``b``, interpolated once per batch:
        the simulator reads a job's noise scale every round."""
        cached = self._gradients.get(b)
        if cached is None:
            cached = self._gradients[b] = (self._bracket(b, self._sqr), self._bracket(b, self._var))
        return cached

    def metrics(self, batch_size: float) -> FloatArray:
        """Validation metric after every epoch at ``batch_size`` (read-only array of ``epochs`` values)."""
        b = self.clamp_batch(batch_size)
        cached = self._metrics.get(b)
        if cached is None:
            cached = np.array(self._bracket(b, self._metric))
            cached.setflags(write=False)
            self._metrics[b] = cached
        return cached

    def metric(self, batch_size: float, epoch: int) -> float:
        """Validation metric after ``epoch`` (0-based) at ``batch_size`` (interpolated between validated runs)."""
        e = min(max(epoch, 0), self.epochs - 1)
        return float(self._bracket(self.clamp_batch(batch_size), self._metric)[e])

    def _bracket(self, b: float, table: FloatArray) -> FloatArray:
        sizes = self.batch_sizes
        if b <= sizes[0]:
            return table[0]
        if b >= sizes[-1]:
            return table[-1]
        hi = next(i for i, s in enumerate(sizes) if s >= b)
        if sizes[hi] == b:
            return table[hi]
        w = (b - sizes[hi - 1]) / (sizes[hi] - sizes[hi - 1])
        result: FloatArray = table[hi - 1] + w * (table[hi] - table[hi - 1])
        return result

    # --- loading ---------------------------------------------------------------------------------
    @classmethod
    def from_dir(cls, path: Path) -> Application:
        """Load ``placements.csv``, ``scalability.csv`` and ``validation-*.csv`` from a trace folder.

        ``scalability.csv`` is optional (placements alone cover up to 4 nodes).

        Raises:
            TraceDataError: a file is missing, unreadable, or lacks a column or a number (named).
        """
        placements_rows = _read_csv(path / "placements.csv", ("placement", "local_bsz", "step_time", "sync_time"))
        by_placement: dict[Placement, list[tuple[float, float, float]]] = defaultdict(list)
        by_group: dict[tuple[int, int, float], list[tuple[float, float]]] = defaultdict(list)
        for line, row in placements_rows:
            text = row["placement"].strip()
            if not text.isdigit() or "0" in text:
                raise TraceDataError(f"{path / 'placements.csv'} line {line}: bad placement {text!r}")
            p = tuple(int(c) for c in text)
            bsz, step, sync = (
                _float(row, k, path / "placements.csv", line) for k in ("local_bsz", "step_time", "sync_time")
            )
            by_placement[p].append((bsz, step, sync))
            by_group[len(p), sum(p), bsz].append((step, sync))
        group_rows: dict[tuple[int, int], list[tuple[float, float, float]]] = defaultdict(list)
        for (n, r, bsz), values in by_group.items():
            group_rows[n, r].append(
                (bsz, sum(v[0] for v in values) / len(values), sum(v[1] for v in values) / len(values))
            )
        scal = path / "scalability.csv"
        if scal.exists():
            for line, row in _read_csv(scal, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")):
                n, r = int(_float(row, "num_nodes", scal, line)), int(_float(row, "num_replicas", scal, line))
                bsz, step, sync = (_float(row, k, scal, line) for k in ("local_bsz", "step_time", "sync_time"))
                group_rows[n, r].append((bsz, step, sync))
        validation: dict[int, dict[str, FloatArray]] = {}
        for vpath in sorted(path.glob("validation-*.csv")):
            try:
                batch = int(vpath.stem.split("-", 1)[1])
            except ValueError:
                raise TraceDataError(f"{vpath}: the name must be validation-<batch size>.csv") from None
            rows = _read_csv(vpath, ("progress", "metric", "grad_sqr", "grad_var"))
            validation[batch] = {
                k: np.array([_float(row, k, vpath, line) for line, row in rows])
                for k in ("progress", "metric", "grad_sqr", "grad_var")
            }
            if not rows:
                raise TraceDataError(f"{vpath}: no rows")
        return cls(
            path.name,
            {_canonical(p): _curve(v) for p, v in by_placement.items()},
            {k: _curve(v) for k, v in group_rows.items()},
            validation,
        )


def _canonical(placement: Placement) -> Placement:
    """The smallest rotation of the per-node counts: the form the measurements are keyed by."""
    return min(placement[i:] + placement[:i] for i in range(len(placement)))


def _curve(rows: list[tuple[float, float, float]]) -> _Curve:
    merged: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for bsz, step, sync in rows:
        merged[bsz].append((step, sync))
    keys = sorted(merged)
    steps = [sum(v[0] for v in merged[k]) / len(merged[k]) for k in keys]
    syncs = [sum(v[1] for v in merged[k]) / len(merged[k]) for k in keys]
    return _Curve(np.array(keys, dtype=float), np.array(steps, dtype=float), np.array(syncs, dtype=float))


def _read_csv(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise TraceDataError(f"{path}: missing column(s) {', '.join(missing)}")
            return [(reader.line_num, row) for row in reader]
    except OSError as exc:
        raise TraceDataError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _float(row: dict[str, str], key: str, path: Path, line: int) -> float:
    try:
        value = float(row[key])
    except (TypeError, ValueError):
        raise TraceDataError(f"{path} line {line}: {key} must be a number, got {row.get(key)!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceDataError(f"{path} line {line}: {key} must be a finite number >= 0, got {row.get(key)!r}")
    return value


class TraceCatalog:
    """The applications under ``<data>/traces`` (default: :func:`submarine_elastic.env.pollux_data_dir`).

    Applications are loaded on first use and shared by every catalog of the same folder in the process.
    """

    def __init__(self, data_dir: Path | None = None) -> None:
        self.data_dir = (data_dir if data_dir is not None else env.settings().pollux_data_directory()).resolve()
        self.traces_dir = self.data_dir / "traces"

    def names(self) -> tuple[str, ...]:
        """Application names with a trace folder.

        Raises:
            TraceDataError: the traces folder does not exist.
        """
        if not self.traces_dir.is_dir():
            raise TraceDataError(
                f"no traces folder {self.traces_dir}; set SUBMARINE_POLLUX_DATA to the Pollux data directory"
            )
        return tuple(sorted(p.name for p in self.traces_dir.iterdir() if (p / "placements.csv").is_file()))

    def get(self, name: str) -> Application:
        """The application ``name``.

        Raises:
            UnknownApplicationError: no trace folder of that name.
            TraceDataError: its files are missing or malformed.
        """
        if name not in self.names():
            raise UnknownApplicationError(name, self.names())
        return _load(self.traces_dir / name)


@functools.lru_cache(maxsize=64)
def _load(path: Path) -> Application:
    return Application.from_dir(path)
