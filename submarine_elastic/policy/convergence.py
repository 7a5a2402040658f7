"""Convergence job policy: a job whose loss has plateaued gives its workers back, down to its minimum.

Over the last ``window`` entries of the job's loss window it compares the median of the first half
with the median of the second half (medians, so a noisy step does not decide):

    improvement = (median(first half) - median(second half)) / |median(first half)|

Below ``tolerance`` the job is marked converged and asked to run at ``min_workers``. It is unmarked
only when the improvement climbs above ``resume_tolerance`` (hysteresis: a plateau that wobbles does
not bring the workers back). The marks are the policy's state (:meth:`state_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from typing import Any

from ._common import check_int, check_number, steady
from .api import Decision, JobPolicy, JobView, PolicyConfigError, PolicyStateError, Snapshot

__all__ = ["ConvergencePolicy"]

_TINY = 1e-12


def relative_improvement(losses: tuple[float, ...]) -> float:
    """Median of the first half minus median of the second half, relative to the first."""
    half = len(losses) // 2
    first = median(losses[:half])
    last = median(losses[-half:])
    return (first - last) / max(abs(first), _TINY)


class ConvergencePolicy(JobPolicy):
    """Shrink a job to its minimum once its loss stops improving.

    Args:
        window: loss-window entries compared (default 20, at least 4).
        tolerance: relative improvement over the window below which the loss has plateaued (default 0.01).
        resume_tolerance: relative improvement above which a converged job counts as learning again
            (default ``3 * tolerance``; at least ``tolerance``).

    Raises:
        PolicyConfigError: a parameter is out of range.
    """

    name = "convergence"

    def __init__(self, window: int = 20, tolerance: float = 0.01, resume_tolerance: float | None = None) -> None:
        owner = type(self).__name__
        self.window = check_int(owner, "window", window, low=4)
        self.tolerance = check_number(owner, "tolerance", tolerance, low=0.0)
        if resume_tolerance is None:
            resume_tolerance = 3 * self.tolerance
        self.resume_tolerance = check_number(owner, "resume_tolerance", resume_tolerance, low=0.0)
        if self.resume_tolerance < self.tolerance:
            raise PolicyConfigError(
                f"{owner}: resume_tolerance ({resume_tolerance!r}) must be >= tolerance ({tolerance!r})"
            )
        self._converged: set[str] = set()

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        losses = job.metrics.loss_window[-self.window :]
        if len(losses) < self.window:
            return None
        improvement = relative_improvement(losses)
        if job.job_id in self._converged:
            if improvement > self.resume_tolerance:
                self._converged.discard(job.job_id)
                return None
        elif improvement < self.tolerance:
            self._converged.add(job.job_id)
        else:
            return None
        if not steady(job):
            return None
        return Decision(
            job.job_id,
            job.min_workers,
            f"loss plateaued: {improvement:+.2%} over the last {self.window} windows "
            f"(tolerance {self.tolerance:.2%}): back to its minimum of {job.min_workers}",
        )

    def after_train(self, job_id: str, snapshot: Snapshot) -> None:
        self._converged.discard(job_id)

    def state_dict(self) -> dict[str, Any]:
        return {"converged": sorted(self._converged)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        converged = state.get("converged") if isinstance(state, Mapping) else None
        if not isinstance(converged, list) or not all(isinstance(j, str) for j in converged):
            raise PolicyStateError(f"convergence: state must be {{'converged': [job ids]}}, got {state!r}")
        self._converged = set(converged)
