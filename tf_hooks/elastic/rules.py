"""Batch size and learning rate on every resize, and the momentum-compensation ramp.

Two batch rules, chosen per job:

- ``fixed_global``: the global batch ``G`` stays; each of ``k`` ranks takes ``G/k`` (the first
  ``G mod k`` ranks one more). The learning rate does not change: the optimisation is the same as
  with any other worker count.
- ``fixed_local``: each rank keeps its batch ``b``; the global batch is ``b·k`` and the learning rate
  follows it from the base (``base_lr`` at ``base_workers``): ``linear`` (× k/k0) or ``sqrt`` (× √(k/k0)).

Momentum compensation (Dynamic Mini-batch SGD): when the global batch changes by a factor ``k`` at
step ``t0``, the step size is not switched at once; it is multiplied by
``γ_t = 1 + (t - t0)/T · (k - 1)`` for ``t - t0 < T`` and by ``k`` after, so the momentum buffer,
built up with the old step size, is not suddenly amplified. ``T = 8`` works in practice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

BatchMode = Literal["fixed_global", "fixed_local"]
LrScaling = Literal["linear", "sqrt", "none"]


def momentum_gamma(t: int, t0: int, k: float, ramp_steps: int = 8) -> float:
    """γ_t of Dynamic Mini-batch SGD: a linear ramp from 1 to ``k`` over ``ramp_steps`` steps after ``t0``.

    Raises:
        ValueError: ``k`` <= 0 or ``ramp_steps`` < 1.
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    if ramp_steps < 1:
        raise ValueError(f"ramp_steps must be >= 1, got {ramp_steps}")
    elapsed = t - t0
    if elapsed < 0:
        return 1.0
    if elapsed < ramp_steps:
        return 1.0 + elapsed / ramp_steps * (k - 1.0)
    return float(k)


@dataclass(frozen=True)
class BatchRule:
    """How a job's batch size and learning rate follow its worker count.

    Args:
        mode: ``fixed_global`` (``batch`` is the global batch) or ``fixed_local`` (``batch`` per rank).
        batch: the global or per-rank batch size.
        base_lr: the learning rate at ``base_workers`` workers.
        base_workers: the worker count ``base_lr`` was tuned for.
        lr_scaling: ``linear``, ``sqrt`` or ``none`` (only used by ``fixed_local``).
        ramp_steps: ``T`` of the momentum-compensation ramp (0 switches at once).

    Raises:
        ValueError: an unknown mode or scaling, or a non-positive number, naming the field.
    """

    mode: BatchMode
    batch: int
    base_lr: float
    base_workers: int = 1
    lr_scaling: LrScaling = "linear"
    ramp_steps: int = 8

    def __post_init__(self) -> None:
        if self.mode not in ("fixed_global", "fixed_local"):
            raise ValueError(f"mode must be 'fixed_global' or 'fixed_local', got {self.mode!r}")
        if self.lr_scaling not in ("linear", "sqrt", "none"):
            raise ValueError(f"lr_scaling must be 'linear', 'sqrt' or 'none', got {self.lr_scaling!r}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not self.base_lr > 0:
            raise ValueError(f"base_lr must be > 0, got {self.base_lr}")
        if self.base_workers < 1:
            raise ValueError(f"base_workers must be >= 1, got {self.base_workers}")
        if self.ramp_steps < 0:
            raise ValueError(f"ramp_steps must be >= 0, got {self.ramp_steps}")

    def global_batch(self, workers: int) -> int:
        _check_workers(workers)
        return self.batch if self.mode == "fixed_global" else self.batch * workers

    def local_batch(self, workers: int, rank: int) -> int:
        """This rank's share of the global batch (they differ by at most one under ``fixed_global``)."""
        _check_workers(workers)
        if not 0 <= rank < workers:
            raise ValueError(f"rank {rank} is not in a ring of {workers}")
        if self.mode == "fixed_local":
            return self.batch
        base, extra = divmod(self.batch, workers)
        return base + (1 if rank < extra else 0)

    def target_lr(self, workers: int) -> float:
        """The learning rate the rule settles on with ``workers`` workers."""
        _check_workers(workers)
        if self.mode == "fixed_global" or self.lr_scaling == "none":
            return self.base_lr
        ratio = workers / self.base_workers
        return self.base_lr * (ratio if self.lr_scaling == "linear" else math.sqrt(ratio))

    def lr_at(self, step: int, resized_at: int, from_lr: float, workers: int) -> float:
        """The learning rate at ``step`` after a resize to ``workers`` at step ``resized_at``, when the
        rate was ``from_lr``: a ramp from ``from_lr`` to :meth:`target_lr` over ``ramp_steps`` steps.

        ``from_lr`` is the rate in effect at the resize, so a resize in the middle of a ramp goes on
        from where the rate was rather than jumping; 0 (no rate yet) means no ramp.
        """
        new = self.target_lr(workers)
        if self.ramp_steps == 0 or from_lr <= 0 or from_lr == new:
            return new
        return from_lr * momentum_gamma(step, resized_at, new / from_lr, self.ramp_steps)


def _check_workers(workers: int) -> None:
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
