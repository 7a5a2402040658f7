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

A running job's batch may also be *set* (:class:`BatchSetting`: a global batch and gradient-accumulation
steps, decided by the job's controller or an operator): it then takes the place of the rule's batch, and
the learning rate follows it (:meth:`BatchRule.lr_for_batch`): AdaScale's gain when the gradient noise
scale is known, else the rule's scaling, reached through the same momentum ramp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from submarine_elastic.limits import batch_setting_problem

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


def adascale_gain(batch: float, base_batch: float, noise_scale: float) -> float:
    """AdaScale's gain of a global batch ``batch`` over ``base_batch``, with gradient noise scale ``noise_scale``
    (in samples): ``(B_noise/B0 + 1) / (B_noise/B + 1)``, between 1 (noise-free gradients: a larger batch buys
    nothing) and ``batch/base_batch`` (pure noise: the linear rule).

    Raises:
        ValueError: a batch <= 0 or a negative noise scale.
    """
    if batch <= 0 or base_batch <= 0:
        raise ValueError(f"batch sizes must be > 0, got {batch} and {base_batch}")
    if not noise_scale >= 0:
        raise ValueError(f"noise_scale must be >= 0, got {noise_scale}")
    return (noise_scale / base_batch + 1.0) / (noise_scale / batch + 1.0)


def ramp_lr(step: int, changed_at: int, from_lr: float, to_lr: float, ramp_steps: int) -> float:
    """The learning rate at ``step`` on the way from ``from_lr`` to ``to_lr`` after a change at ``changed_at``:
    the momentum-compensation ramp (:func:`momentum_gamma`); ``from_lr`` 0 or ``ramp_steps`` 0: ``to_lr`` at once."""
    if ramp_steps == 0 or from_lr <= 0 or from_lr == to_lr:
        return to_lr
    return from_lr * momentum_gamma(step, changed_at, to_lr / from_lr, ramp_steps)


@dataclass(frozen=True)
class BatchSetting:
    """A batch set for a running job: its global batch and gradient accumulation, decided by its controller
    (a policy's :class:`~submarine_elastic.policy.Decision`) or an operator (``job flex --batch_size``), and
    relayed to each training process by its agent.

    Each step then runs ``accum_steps + 1`` micro-batches and applies one update for ``batch_size`` samples
    of the whole job: each of ``k`` ranks takes about ``batch_size / (k * (accum_steps + 1))`` per micro-batch.

    Attributes:
        batch_size: the global batch, samples per optimizer step (>= 1).
        accum_steps: micro-batches per step beyond the first (>= 0).
        learning_rate: the learning rate to use, or None for the job's rule (:meth:`BatchRule.lr_for_batch`).
        version: the version its job's driver gave the target that set it (the newest wins).
        reason: why it was chosen.

    Raises:
        ValueError: a value out of range, naming it.
    """

    batch_size: int
    accum_steps: int = 0
    learning_rate: float | None = None
    version: int = 0
    reason: str = ""

    def __post_init__(self) -> None:
        problem = batch_setting_problem(self.batch_size, self.accum_steps, self.learning_rate)
        if problem is not None:
            raise ValueError(problem)
        if not isinstance(self.version, int) or self.version < 0:
            raise ValueError(f"version must be an int >= 0, got {self.version!r}")

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimizer step."""
        return self.accum_steps + 1

    @classmethod
    def from_target(cls, target: Any) -> BatchSetting:
        """The batch part of a job's target (``elastic.proto``'s ``Target``, as the agent hands it over); an
        unset accumulation is 0 and an unset learning rate the rule's.

        Raises:
            ValueError: the target sets no batch, or a value is out of range (naming it).
        """
        if not target.HasField("batch_size"):
            raise ValueError(f"target {target.version} sets no batch")
        return cls(
            batch_size=target.batch_size,
            accum_steps=target.accum_steps,
            learning_rate=target.learning_rate if target.HasField("learning_rate") else None,
            version=target.version,
            reason=target.reason,
        )


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

    def lr_for_batch(self, global_batch: int, noise_scale: float | None = None) -> float:
        """The learning rate for a global batch set for the job (:class:`BatchSetting`), relative to the rule's
        own batch at ``base_workers``: ``base_lr`` times AdaScale's gain when the gradient noise scale is known,
        else times the rule's scaling of the batch ratio (``linear``, ``sqrt``; ``none`` keeps ``base_lr``).

        Raises:
            ValueError: ``global_batch`` < 1.
        """
        if global_batch < 1:
            raise ValueError(f"global_batch must be >= 1, got {global_batch}")
        base = self.global_batch(self.base_workers)
        if noise_scale is not None and noise_scale > 0:
            return self.base_lr * adascale_gain(global_batch, base, noise_scale)
        if self.lr_scaling == "none":
            return self.base_lr
        ratio = global_batch / base
        return self.base_lr * (ratio if self.lr_scaling == "linear" else math.sqrt(ratio))

    def lr_at(self, step: int, resized_at: int, from_lr: float, workers: int) -> float:
        """The learning rate at ``step`` after a resize to ``workers`` at step ``resized_at``, when the
        rate was ``from_lr``: a ramp from ``from_lr`` to :meth:`target_lr` over ``ramp_steps`` steps.

        ``from_lr`` is the rate in effect at the resize, so a resize in the middle of a ramp goes on
        from where the rate was rather than jumping; 0 (no rate yet) means no ramp.
        """
        return ramp_lr(step, resized_at, from_lr, self.target_lr(workers), self.ramp_steps)


def _check_workers(workers: int) -> None:
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
