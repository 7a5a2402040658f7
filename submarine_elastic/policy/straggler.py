"""Straggler-replacement job policy: a worker persistently slower than its peers is replaced.

For each worker instance the policy takes the median of its last ``window`` step times (one slow
step does not count: more than half of the window must be slow). Across instances it takes the median
M and the median absolute deviation MAD of those per-instance medians, and flags instance i when

    (m_i - M) / max(1.4826 * MAD, mad_floor * M)  >  threshold     and     m_i >= min_ratio * M

1.4826 * MAD estimates the standard deviation of normal data; the floor keeps a few identical peers
(MAD = 0) from flagging a worker that is 1 % slower. It needs ``min_peers`` instances with a full window.
Flagged instances (the slowest first, at most ``max_replacements``) are named in
``Decision.replace``: the controller decommissions them by name and asks for as many fresh ones.
When the snapshot lists the job's running ``instances``, step times of other names (stale reports of
workers already gone) are ignored. The policy keeps no state.
"""

from __future__ import annotations

from statistics import median

from ._common import check_int, check_number, hold, steady
from .api import Decision, JobPolicy, JobView, Snapshot

__all__ = ["StragglerPolicy"]

_MAD_TO_SIGMA = 1.4826


class StragglerPolicy(JobPolicy):
    """Name the worker whose step time is a robust outlier, to be decommissioned and replaced.

    Args:
        window: step times per instance the statistic covers (default 10).
        threshold: robust z-score above which an instance is slow (default 3.0).
        min_ratio: and its median step time must be at least this multiple of the peers' (default 1.5).
        min_peers: instances with a full window needed before judging (default 3).
        max_replacements: instances named per decision (default 1).
        mad_floor: lower bound of the spread, as a fraction of the median (default 0.05).

    Raises:
        PolicyConfigError: a parameter is out of range.
    """

    name = "straggler"

    def __init__(
        self,
        window: int = 10,
        threshold: float = 3.0,
        min_ratio: float = 1.5,
        min_peers: int = 3,
        max_replacements: int = 1,
        mad_floor: float = 0.05,
    ) -> None:
        owner = type(self).__name__
        self.window = check_int(owner, "window", window, low=1)
        self.threshold = check_number(owner, "threshold", threshold, low=0.0, strict=True)
        self.min_ratio = check_number(owner, "min_ratio", min_ratio, low=1.0)
        self.min_peers = check_int(owner, "min_peers", min_peers, low=3)
        self.max_replacements = check_int(owner, "max_replacements", max_replacements, low=1)
        self.mad_floor = check_number(owner, "mad_floor", mad_floor, low=0.0, strict=True)

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        if not steady(job):
            return None
        running = set(job.instances)
        medians = {
            name: median(times[-self.window :])
            for name, times in job.metrics.step_times.items()
            if len(times) >= self.window and (not running or name in running)
        }
        if len(medians) < self.min_peers:
            return None
        m = median(medians.values())
        if m <= 0:
            return None
        mad = median(abs(v - m) for v in medians.values())
        scale = max(_MAD_TO_SIGMA * mad, self.mad_floor * m)
        slow = sorted(
            (
                (v / m, name)
                for name, v in medians.items()
                if (v - m) / scale > self.threshold and v >= self.min_ratio * m
            ),
            key=lambda item: (-item[0], item[1]),
        )[: self.max_replacements]
        if not slow:
            return None
        names = tuple(name for _, name in slow)
        worst_ratio, worst = slow[0]
        base = hold(job, "replace stragglers")
        return Decision(
            job.job_id,
            base.target_workers,
            f"{worst} steps in {medians[worst]:.3g}s, {worst_ratio:.1f}x the median {m:.3g}s of "
            f"{len(medians)} workers: replace {', '.join(names)}",
            replace=names,
        )
