"""The gradient noise scale, measured inside the training step from what data-parallel training already has.

A step of data-parallel training computes each rank's gradient over its own ``b`` samples and averages
them into the gradient over the global batch of ``B`` samples. For a gradient over ``n`` samples drawn
from the data, ``E|g_n|^2 = |G|^2 + tr(Sigma) / n`` (``G`` the true gradient, ``Sigma`` the per-sample
covariance), so the two square norms give unbiased estimates (McCandlish et al., "An Empirical Model of
Large-Batch Training", appendix A)::

    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

Each is smoothed by an exponential moving average (bias-corrected, as Adam's moments are), and the
noise scale is their ratio ``tr(Sigma) / |G|^2``, in samples: the batch size beyond which a larger batch
buys little more progress per step.

Choices:

- ``|g_b|^2`` is averaged over the ranks (as ``1/b`` is, for uneven splits: ``E mean_i |g_b_i|^2 =
  |G|^2 + tr(Sigma) mean_i(1/b_i)``): one allreduce of three numbers a step, which Horovod fuses with
  the gradients'. One rank's own ``|g_b|^2`` is unbiased too, but in a ring of two its estimate of
  tr(Sigma) stays negative for dozens of measurements on a small model, where the average over ``k``
  ranks is ``sqrt(k)`` times steadier and the same on every rank. The allreduce runs on every step (a
  collective inside a ``tf.cond`` would hang a ring whose ranks disagree on the branch); the square
  norms only on measured steps, and an estimate is taken only when every rank measured.
- Measured every ``every`` steps (``SUBMARINE_NOISE_EVERY``, default :data:`DEFAULT_NOISE_EVERY`),
  counted by a step all ranks agree on (the optimizer's ``iterations``, which the elastic state restores
  and broadcasts): a measurement costs two square norms over the gradients (one reduction per variable
  each), a visible share of a small model's step (``benchmarks/bench_hook_overhead.py``).
- Undefined where ``B == b`` (one worker, no accumulation): nothing is measured, and nothing reported.
- A rank whose gradient is a scaled mean (a loss weighted so the ranks' parts sum to the global mean)
  passes the scale: ``local gradient = local_scale * g_b``.

Imports TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from submarine_elastic import env
from tf_hooks.api import TfHooksError

#: Measure every N-th step unless ``SUBMARINE_NOISE_EVERY`` or the argument says otherwise.
DEFAULT_NOISE_EVERY = 10
#: Weight of the past in the moving averages, per measurement (about the last 20 measurements count).
DEFAULT_SMOOTHING = 0.95


class NoiseConfigError(TfHooksError, ValueError):
    """An unusable setting of the noise estimator (named in the message)."""


@dataclass(frozen=True)
class NoiseEstimate:
    """The smoothed estimates: ``grad_sq_norm`` ~ |G|^2 (> 0) and ``grad_variance`` ~ tr(Sigma) (>= 0)."""

    grad_sq_norm: float
    grad_variance: float

    @property
    def gradient_noise_scale(self) -> float:
        """tr(Sigma) / |G|^2, in samples."""
        return self.grad_variance / self.grad_sq_norm


def square_norm(grads: Sequence[Any]) -> tf.Tensor:
    """The square norm of the gradients as one vector (float64): None entries are skipped, the rows of a
    ``tf.IndexedSlices`` that name one index twice are summed first (as its dense form would)."""
    parts = []
    for grad in grads:
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            unique, index = tf.unique(grad.indices)
            grad = tf.math.unsorted_segment_sum(grad.values, index, tf.size(unique))
        values = grad if grad.dtype in (tf.float32, tf.float64) else tf.cast(grad, tf.float32)
        parts.append(tf.cast(tf.reduce_sum(tf.square(values)), tf.float64))
    return tf.add_n(parts) if parts else tf.constant(0.0, tf.float64)


class GradientNoiseScale:
    """Estimator state (three TensorFlow variables) updated by :meth:`observe` inside the training step.

    Build it outside any ``tf.function`` (it creates variables). Its variables are not trainable and not
    the model's or the optimizer's: they are neither checkpointed nor broadcast, and a process that
    joins a ring starts its own averages.

    Args:
        every: measure every N-th :meth:`observe` (None: ``SUBMARINE_NOISE_EVERY``, else
            :data:`DEFAULT_NOISE_EVERY`).
        smoothing: weight of the past in the moving averages, in (0, 1).

    Raises:
        NoiseConfigError: ``every`` below 1, ``smoothing`` outside (0, 1), or a malformed
            ``SUBMARINE_NOISE_EVERY``.
    """

    def __init__(self, every: int | None = None, smoothing: float = DEFAULT_SMOOTHING) -> None:
        if every is None:
            try:
                every = env.settings().noise_every or DEFAULT_NOISE_EVERY
            except ValueError as e:
                raise NoiseConfigError(str(e)) from None
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise NoiseConfigError(f"every must be a positive integer, got {every!r}")
        if not 0.0 < smoothing < 1.0:
            raise NoiseConfigError(f"smoothing must lie in (0, 1), got {smoothing!r}")
        self.every = every
        self.smoothing = float(smoothing)
        # Moving averages of |G|^2 and tr(Sigma), and of 1 (the bias correction: 1 - smoothing^t).
        self._ema = tf.Variable(tf.zeros(3, tf.float64), trainable=False, name="gradient_noise_ema")
        # Local batch b, global batch B, local scale.
        self._batch = tf.Variable(
            tf.constant([0.0, 0.0, 1.0], tf.float64), trainable=False, name="gradient_noise_batch"
        )
        self._calls = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="gradient_noise_calls")
        self._batch_now: tuple[float, float, float] | None = None

    def set_batch(self, local_batch: int, global_batch: int, local_scale: float = 1.0) -> None:
        """The batch the next steps run: this rank's ``local_batch`` samples of the step's ``global_batch``
        (``global_batch == local_batch`` measures nothing), and the factor of this rank's gradient over
        the mean gradient of its samples. Cheap when nothing changed (no device write).

        Raises:
            NoiseConfigError: a batch below 0, a local batch above the global one, or a scale that is
                not a positive finite number.
        """
        if local_batch < 0 or global_batch < local_batch:
            raise NoiseConfigError(
                f"the local batch ({local_batch}) must lie in [0, the global batch ({global_batch})]"
            )
        if not (math.isfinite(local_scale) and local_scale > 0):
            raise NoiseConfigError(f"local_scale must be a positive finite number, got {local_scale!r}")
        now = (float(local_batch), float(global_batch), float(local_scale))
        if now != self._batch_now:
            self._batch.assign(now)
            self._batch_now = now

    def observe(
        self,
        local_grads: Sequence[Any],
        global_grads: Sequence[Any],
        *,
        step: Any = None,
        average: Callable[[tf.Tensor], tf.Tensor] | None = None,
    ) -> tf.Tensor:
        """Updates the averages, on every ``every``-th step with a global batch above the local one, from
        this rank's gradients before the average over the ring (``local_grads``) and after it
        (``global_grads``). Returns whether it measured (a boolean tensor).

        Call it inside the traced step, after the gradients' allreduce. ``step``: the step count every
        rank agrees on (the optimizer's ``iterations``); None counts the calls of this object, which a
        process that joins a running ring starts at 0. ``average``: averages a float64 vector over the
        ring (every rank must call it on every step; :func:`tf_hooks.elastic.optimizer.average_over_ring`
        passes Horovod's allreduce); None uses this process's values alone.
        """
        calls = self._calls.assign_add(1)
        count = calls - 1 if step is None else tf.cast(step, tf.int64)
        batch = self._batch.read_value()
        b, big_b, scale = batch[0], batch[1], batch[2]
        due = tf.logical_and(tf.equal(count % self.every, 0), tf.logical_and(b > 0.0, big_b > b))
        local = tf.cond(
            due,
            lambda: square_norm(local_grads) / (scale * scale),
            lambda: tf.constant(0.0, tf.float64),
        )
        zero, one = tf.constant(0.0, tf.float64), tf.constant(1.0, tf.float64)
        stats = tf.stack([local, tf.where(due, one / tf.maximum(b, one), zero), tf.where(due, one, zero)])
        if average is not None:
            stats = average(stats)
        local, inverse_b, measured = stats[0], stats[1], stats[2]
        # Every rank measured (the mean of the flags is 1), and the ranks' parts are smaller than the step.
        every_rank = tf.logical_and(measured > 1.0 - 1e-9, inverse_b > 1.0 / big_b)

        def measure() -> tf.Tensor:
            total = square_norm(global_grads)
            variance = (local - total) / (inverse_b - 1.0 / big_b)
            grad_sq = total - variance / big_b
            sample = tf.stack([grad_sq, variance, tf.constant(1.0, tf.float64)])
            self._ema.assign(self.smoothing * self._ema + (1.0 - self.smoothing) * sample)
            return tf.constant(True)

        return tf.cond(every_rank, measure, lambda: tf.constant(False))

    def estimate(self) -> NoiseEstimate | None:
        """The bias-corrected averages now; None before the first measurement, or while the estimate of
        |G|^2 is not above 0 or that of tr(Sigma) is below 0 (too few measurements to say). Reads the
        variables (a device read): call it off the training thread, or rarely."""
        grad_sq, variance, weight = (float(v) for v in self._ema.numpy())
        if not weight > 0:
            return None
        grad_sq, variance = grad_sq / weight, variance / weight
        if not (math.isfinite(grad_sq) and math.isfinite(variance) and grad_sq > 0 and variance >= 0):
            return None
        return NoiseEstimate(grad_sq, variance)

    def record_fields(self) -> dict[str, float]:
        """:meth:`estimate` as :class:`~tf_hooks.api.StepRecord` keywords; empty when there is none."""
        estimate = self.estimate()
        if estimate is None:
            return {}
        return {
            "grad_sq_norm": estimate.grad_sq_norm,
            "grad_variance": estimate.grad_variance,
            "gradient_noise_scale": estimate.gradient_noise_scale,
        }


__all__ = [
    "DEFAULT_NOISE_EVERY",
    "DEFAULT_SMOOTHING",
    "GradientNoiseScale",
    "NoiseConfigError",
    "NoiseEstimate",
    "square_norm",
]
