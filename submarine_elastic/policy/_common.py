"""Small helpers the built-in policies share."""

from __future__ import annotations

import math

from .api import Decision, JobMetrics, JobView, PolicyConfigError


def hold(job: JobView, reason: str) -> Decision:
    """A decision that keeps the job where it is (within its limits)."""
    return Decision(job.job_id, max(job.min_workers, min(job.max_workers, job.current_workers)), reason)


def steady(job: JobView) -> bool:
    """True when the job runs within its limits with no resize in flight: the only state in which the
    size-changing built-ins judge it (otherwise they have no opinion, and the engine keeps or clamps it)."""
    return not job.waiting and job.pending_workers == 0 and job.current_workers <= job.max_workers


def measured(metrics: JobMetrics, world_size: int, min_steps: int) -> float | None:
    """Throughput at ``world_size`` if measured over at least ``min_steps`` steps, else None."""
    point = metrics.throughput.get(world_size)
    if point is None or point.steps < min_steps:
        return None
    return point.samples_per_second


def scaling_efficiency(k: int, r_k: float, k2: int, r_k2: float) -> float:
    """s = (ΔR/Δk) / (R_k/k): what each added worker brings, relative to what each worker made at k.

    1 is linear scaling, 0 no gain, below 0 a slowdown. From ``k`` to ``k2 > k``.
    """
    per_worker = r_k / k
    gain = (r_k2 - r_k) / (k2 - k)
    if per_worker <= 0:
        return math.inf if gain > 0 else 0.0
    return gain / per_worker


def check_number(
    owner: str, name: str, value: object, *, low: float | None = None, high: float | None = None, strict: bool = False
) -> float:
    """``value`` as a float, or PolicyConfigError naming the parameter (``strict``: bounds excluded)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PolicyConfigError(f"{owner}: {name} must be a finite number, got {value!r}")
    if low is not None and (value <= low if strict else value < low):
        raise PolicyConfigError(f"{owner}: {name} must be {'>' if strict else '>='} {low}, got {value!r}")
    if high is not None and (value >= high if strict else value > high):
        raise PolicyConfigError(f"{owner}: {name} must be {'<' if strict else '<='} {high}, got {value!r}")
    return float(value)


def check_int(owner: str, name: str, value: object, *, low: int) -> int:
    """``value`` as an int >= ``low``, or PolicyConfigError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PolicyConfigError(f"{owner}: {name} must be an int >= {low}, got {value!r}")
    return value
