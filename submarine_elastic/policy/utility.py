"""Utility-versus-cost job policy: a worker is added while what it adds is worth its price.

Two modes:

* **price**: with ``price_per_worker_hour`` p and ``value_per_sample`` v, the next worker is worth
  adding when its marginal throughput ΔR (samples/s) satisfies ``ΔR * 3600 * v > p * (1 + h)``, and
  the last one is given back when ``ΔR * 3600 * v < p * (1 - h)`` (h: ``hysteresis``). The marginal
  throughput of a size not measured yet is estimated as that of the last worker added (or, with one
  size measured, the per-worker throughput): scaling is taken to be concave, so the estimate is
  optimistic and a measurement corrects it.
* **deadline**: with ``deadline_s`` (seconds after the job's submission) and the job's
  ``remaining_samples``, the job needs ``R* = remaining / time_left``. It grows by one while its
  throughput is below ``R* * (1 + h)``, and shrinks to the smallest measured size whose throughput is
  at least ``R* * (1 + 2h)``: the fewest workers, so the least cost, that still meet the deadline.
"""

from __future__ import annotations

from ._common import check_int, check_number, hold, measured, steady
from .api import Decision, JobPolicy, JobView, PolicyConfigError, Snapshot

__all__ = ["UtilityPolicy"]

_SECONDS_PER_HOUR = 3600.0


class UtilityPolicy(JobPolicy):
    """Add workers while the marginal throughput is worth their price, or while a deadline needs them.

    Args:
        price_per_worker_hour: cost of one worker for an hour (price mode; with ``value_per_sample``).
        value_per_sample: worth of one trained sample, in the same currency (price mode).
        deadline_s: seconds after submission by which the job should be done (deadline mode; needs
            ``remaining_samples`` in the job's metrics). Give either this or the two above.
        hysteresis: relative margin around the break-even point (default 0.1).
        min_steps: steps a size must be measured over before its throughput is trusted (default 20).

    Raises:
        PolicyConfigError: neither or both modes given, or a parameter out of range.
    """

    name = "utility"

    def __init__(
        self,
        price_per_worker_hour: float | None = None,
        value_per_sample: float | None = None,
        deadline_s: float | None = None,
        hysteresis: float = 0.1,
        min_steps: int = 20,
    ) -> None:
        owner = type(self).__name__
        price_mode = price_per_worker_hour is not None or value_per_sample is not None
        if deadline_s is not None and price_mode:
            raise PolicyConfigError(
                f"{owner}: give deadline_s or price_per_worker_hour with value_per_sample, not both"
            )
        if deadline_s is None and (price_per_worker_hour is None or value_per_sample is None):
            raise PolicyConfigError(
                f"{owner}: needs price_per_worker_hour and value_per_sample, or deadline_s "
                f"(got price_per_worker_hour={price_per_worker_hour!r}, value_per_sample={value_per_sample!r})"
            )
        self.deadline_s = (
            None if deadline_s is None else check_number(owner, "deadline_s", deadline_s, low=0, strict=True)
        )
        self.price_per_worker_hour = (
            None
            if price_per_worker_hour is None
            else check_number(owner, "price_per_worker_hour", price_per_worker_hour, low=0)
        )
        self.value_per_sample = (
            None
            if value_per_sample is None
            else check_number(owner, "value_per_sample", value_per_sample, low=0, strict=True)
        )
        self.hysteresis = check_number(owner, "hysteresis", hysteresis, low=0.0, high=1.0)
        if self.hysteresis >= 1.0:
            raise PolicyConfigError(f"{owner}: hysteresis must be < 1, got {hysteresis!r}")
        self.min_steps = check_int(owner, "min_steps", min_steps, low=1)

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        if not steady(job):
            return None
        k = job.current_workers
        r_k = measured(job.metrics, k, self.min_steps)
        if r_k is None:
            return hold(job, f"measuring throughput at {k} workers")
        if self.deadline_s is not None:
            return self._deadline(job, snapshot, k, r_k, self.deadline_s)
        return self._price(job, k, r_k)

    def _below(self, job: JobView, k: int) -> int | None:
        """The largest size below ``k`` (within limits) measured over enough steps."""
        sizes = [
            j for j in job.metrics.throughput if job.min_workers <= j < k and measured(job.metrics, j, self.min_steps)
        ]
        return max(sizes) if sizes else None

    def _price(self, job: JobView, k: int, r_k: float) -> Decision:
        price = self.price_per_worker_hour or 0.0
        value = self.value_per_sample or 0.0
        h = self.hysteresis
        j = self._below(job, k)
        last_gain: float | None = None
        if j is not None:
            r_j = job.metrics.throughput[j].samples_per_second
            last_gain = (r_k - r_j) / (k - j)
            worth = last_gain * _SECONDS_PER_HOUR * value
            if worth < price * (1 - h):
                return Decision(
                    job.job_id, j, f"the workers above {j} add {worth:.3g}/h each, less than their price {price:g}/h"
                )
        if k >= job.max_workers:
            return hold(job, f"at its maximum of {job.max_workers}")
        r_next = measured(job.metrics, k + 1, self.min_steps)
        if r_next is not None:
            gain, how = r_next - r_k, "measured"
        else:
            gain, how = min(r_k / k, last_gain if last_gain is not None else r_k / k), "estimated"
        worth = gain * _SECONDS_PER_HOUR * value
        if worth > price * (1 + h):
            return Decision(
                job.job_id, k + 1, f"worker {k + 1} adds {worth:.3g}/h ({how}), more than its price {price:g}/h"
            )
        return hold(job, f"worker {k + 1} would add {worth:.3g}/h ({how}), not more than its price {price:g}/h")

    def _deadline(self, job: JobView, snapshot: Snapshot, k: int, r_k: float, deadline_s: float) -> Decision:
        remaining = job.metrics.remaining_samples
        if remaining is None:
            return hold(job, "deadline mode needs remaining_samples, which the job does not report")
        left = job.submitted_at + deadline_s - snapshot.now
        if left <= 0:
            if k < job.max_workers:
                return Decision(job.job_id, job.max_workers, "past its deadline: as many workers as allowed")
            return hold(job, "past its deadline, at its maximum")
        need = remaining / left
        h = self.hysteresis
        if r_k < need * (1 + h):
            if k < job.max_workers:
                return Decision(
                    job.job_id, k + 1, f"needs {need:.3g} samples/s to meet its deadline, makes {r_k:.3g} with {k}"
                )
            return hold(job, f"needs {need:.3g} samples/s, makes {r_k:.3g} at its maximum of {k}")
        enough = [
            j
            for j, point in job.metrics.throughput.items()
            if job.min_workers <= j < k
            and point.steps >= self.min_steps
            and point.samples_per_second >= need * (1 + 2 * h)
        ]
        if enough:
            j = min(enough)
            return Decision(job.job_id, j, f"{j} workers make the {need:.3g} samples/s its deadline needs")
        return hold(job, f"on track: needs {need:.3g} samples/s, makes {r_k:.3g}")
