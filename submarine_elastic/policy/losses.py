"""The loss window a job policy reads (:attr:`JobMetrics.loss_window`), built one way by the controller and by
the simulator, so that a policy sees the same window in a simulated run as in a live one.

Each entry is one point of training, oldest first: a step in the controller (every rank reports its own loss for
a step, and the entry is their mean, so the window does not interleave the ranks), an epoch in the simulator (its
validation metric). The window holds the most recent :data:`LOSS_WINDOW` of them; a metric where higher is better
is negated, so that lower is always better, as for a loss.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["LOSS_WINDOW", "loss_window", "step_mean"]

#: Entries in a job's loss window (the convergence policy compares the last 20 of them by default).
LOSS_WINDOW = 32


def loss_window(samples: Iterable[tuple[int, float]], *, higher_is_better: bool = False) -> tuple[float, ...]:
    """The loss window of ``samples``, ``(step or epoch, value)`` pairs in any order, several per step allowed:
    one entry per step, the mean of its values, for the newest :data:`LOSS_WINDOW` steps, oldest first; each
    negated when ``higher_is_better``."""
    by_step: dict[int, list[float]] = {}
    for step, value in samples:
        by_step.setdefault(step, []).append(value)
    sign = -1.0 if higher_is_better else 1.0
    newest = sorted(by_step)[-LOSS_WINDOW:]
    return tuple(sign * step_mean(by_step[step]) for step in newest)


def step_mean(values: Collection[float]) -> float:
    """One entry of a loss window: the mean of a step's values, summed in the order given (a window kept between
    rounds, :class:`~submarine_elastic.controller.jobmetrics.LossWindow`, gives the very floats a new one would)."""
    return sum(values) / len(values)
