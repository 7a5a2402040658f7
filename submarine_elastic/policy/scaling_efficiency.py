"""Scaling-efficiency job policy (the AutoScaling Engine's rule).

With ``k`` workers giving aggregate throughput ``R_k`` (per worker ``r_k = R_k / k``), adding ``d``
workers is worth it while

    s_{k,d} = ((R_{k+d} - R_k) / d) / r_k  >  S

``s`` is 1 under linear scaling and falls as communication dominates. The policy probes: after ``K``
steps measured at the current size it asks for ``d`` more; once the larger size is measured over
``K`` steps it keeps the new workers if ``s > S`` and goes back otherwise. Throughput by world size
comes in the snapshot, so the policy keeps no state and never re-probes a size already measured to
scale badly; it grows into an already-measured size only when ``s > S + hysteresis``.
"""

from __future__ import annotations

from ._common import check_int, check_number, hold, measured, scaling_efficiency, steady
from .api import Decision, JobPolicy, JobView, Snapshot

__all__ = ["ScalingEfficiencyPolicy"]


class ScalingEfficiencyPolicy(JobPolicy):
    """Grow by ``probe_workers`` every ``probe_every_steps`` steps while the scaling efficiency stays above S.

    Args:
        threshold: S in [0, 1]; keep added workers while s > S (default 0.7).
        probe_workers: d, workers added per probe (default 1).
        probe_every_steps: K, steps a size must be measured over before it is judged or probed from
            (default 50).
        hysteresis: margin above S needed to grow back into an already-measured size (default 0.05).

    Raises:
        PolicyConfigError: a parameter is out of range.
    """

    name = "scaling-efficiency"

    def __init__(
        self,
        threshold: float = 0.7,
        probe_workers: int = 1,
        probe_every_steps: int = 50,
        hysteresis: float = 0.05,
    ) -> None:
        owner = type(self).__name__
        self.threshold = check_number(owner, "threshold", threshold, low=0.0, high=1.0)
        self.probe_workers = check_int(owner, "probe_workers", probe_workers, low=1)
        self.probe_every_steps = check_int(owner, "probe_every_steps", probe_every_steps, low=1)
        self.hysteresis = check_number(owner, "hysteresis", hysteresis, low=0.0, high=1.0)

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        if not steady(job):
            return None
        k = job.current_workers
        metrics = job.metrics
        r_k = measured(metrics, k, self.probe_every_steps)
        if r_k is None:
            return hold(job, f"measuring throughput at {k} workers")
        s_min = self.threshold

        below = [
            j
            for j, point in metrics.throughput.items()
            if job.min_workers <= j < k and point.steps >= self.probe_every_steps
        ]
        if below:
            j = max(below)
            r_j = metrics.throughput[j].samples_per_second
            s = scaling_efficiency(j, r_j, k, r_k)
            if s <= s_min:
                return Decision(job.job_id, j, f"scaling efficiency s={s:.2f} from {j} to {k} is not above S={s_min:g}")

        up = min(k + self.probe_workers, job.max_workers)
        if up <= k:
            return hold(job, f"at its maximum of {job.max_workers}")
        r_up = measured(metrics, up, self.probe_every_steps)
        if r_up is None:
            return Decision(job.job_id, up, f"probing {k} -> {up} workers after {self.probe_every_steps} steps at {k}")
        s_up = scaling_efficiency(k, r_k, up, r_up)
        if s_up > s_min + self.hysteresis:
            return Decision(job.job_id, up, f"scaling efficiency s={s_up:.2f} from {k} to {up} is above S={s_min:g}")
        return hold(job, f"scaling efficiency s={s_up:.2f} from {k} to {up} is not above S={s_min:g}")
