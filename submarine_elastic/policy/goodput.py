"""Goodput arbiter: each worker goes where it adds the most goodput (as in Pollux).

Goodput is throughput times statistical efficiency, ``G(k) = T(k) * E(k)``:

* ``T(k)``, samples/s at ``k`` workers: measured when the job ran at ``k``; between two measured
  sizes, interpolated linearly; above the largest measured size K, ``T(K)`` plus the last measured
  marginal throughput per added worker (at most the per-worker throughput at K); below the smallest
  measured size k0, ``T(k0) * k / k0``. A job with nothing measured is taken to scale linearly.
* ``E(k)``, statistical efficiency: with gradient noise scale ``B_noise`` reported and the job keeping
  its per-worker batch ``b`` (global batch ``B(k) = b * k``),

      E(k) = (B_noise + B0) / (B_noise + B(k)),   B0 = b

  the fraction of a sample's progress at batch ``b`` that a sample still makes at batch ``B(k)``
  (McCandlish et al. 2018; Pollux, OSDI 2021). ``E(1) = 1``. Without a noise scale, ``E = 1``.

Gains are compared as speedups, ``G(k) / G(1)``, so a job of cheap samples does not win just by
counting more of them. Allocation: waiting jobs start at their minimum (taking from the jobs that
lose the least goodput); free slots go one at a time to the largest speedup gain, if above
``min_gain``; then a worker moves from one job to another while the receiver gains more than the
donor loses by ``swap_margin``. Settled jobs only give workers to arrivals; jobs that are not elastic
never move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._alloc import Share, admit, allocations, free_slots, give_free, initial_shares
from ._common import check_number
from .api import Allocation, ClusterArbiter, JobView, Request, Snapshot

__all__ = ["GoodputArbiter", "estimated_throughput", "statistical_efficiency"]


def estimated_throughput(job: JobView, k: int) -> float:
    """``T(k)`` of the module docstring: measured, interpolated or extrapolated samples/s (>= 0)."""
    points = {size: p.samples_per_second for size, p in job.metrics.throughput.items()}
    if k <= 0:
        return 0.0
    if not points:
        return float(k)
    if k in points:
        return points[k]
    sizes = sorted(points)
    lo, hi = sizes[0], sizes[-1]
    if k < lo:
        return points[lo] * k / lo
    if k > hi:
        marginal = points[hi] / hi
        if len(sizes) >= 2:
            prev = sizes[-2]
            marginal = min(marginal, (points[hi] - points[prev]) / (hi - prev))
        return max(0.0, points[hi] + (k - hi) * marginal)
    below = max(s for s in sizes if s < k)
    above = min(s for s in sizes if s > k)
    return points[below] + (points[above] - points[below]) * (k - below) / (above - below)


def statistical_efficiency(job: JobView, k: int) -> float:
    """``E(k)`` of the module docstring; 1.0 without a gradient noise scale or batch size."""
    noise = job.metrics.gradient_noise_scale
    batch = job.metrics.batch_size
    if noise is None or batch is None or k <= 0:
        return 1.0
    local = batch / max(1, job.current_workers)
    return (noise + local) / (noise + local * k)


class GoodputArbiter(ClusterArbiter):
    """Give each worker to the job whose speedup (throughput x statistical efficiency) gains most.

    Args:
        min_gain: smallest speedup gain worth a free worker (default 0.05: 5 % of one worker's goodput).
        swap_margin: a worker moves between running jobs only if the receiver gains this much more
            speedup than the donor loses (default 0.1; hysteresis against ping-pong).

    Raises:
        PolicyConfigError: a parameter is negative or not finite.
    """

    name = "goodput"

    def __init__(self, min_gain: float = 0.05, swap_margin: float = 0.1) -> None:
        owner = type(self).__name__
        self.min_gain = check_number(owner, "min_gain", min_gain, low=0.0)
        self.swap_margin = check_number(owner, "swap_margin", swap_margin, low=0.0)

    @staticmethod
    def speedup(job: JobView, k: int) -> float:
        """``G(k) / G(1)``; 0 when a worker makes no progress."""
        base = estimated_throughput(job, 1) * statistical_efficiency(job, 1)
        if base <= 0:
            return 0.0
        return estimated_throughput(job, k) * statistical_efficiency(job, k) / base

    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        shares = initial_shares(requests)
        available = snapshot.available
        speedups = _Speedups(self.speedup)
        admit(shares, available, donor_key=lambda s: (not s.movable, speedups.loss(s), -s.job.submitted_at, s.job_id))
        give_free(shares, available, pick=lambda candidates: self._best_receiver(candidates, speedups))
        if free_slots(shares, available) >= 0:  # over-committed: nobody grows
            self._swap(shares, speedups)
        return allocations(shares, "goodput", lambda share: self._grow_reason(share, speedups))

    @staticmethod
    def _grow_reason(share: Share, speedups: _Speedups) -> str:
        return (
            f"goodput: {share.request.holding} -> {share.workers} of the {share.desired} it wants; "
            f"worker {share.workers} adds {speedups.loss(share):.2f} speedup"
        )

    def _best_receiver(self, candidates: list[Share], speedups: _Speedups) -> Share | None:
        best = min(candidates, key=lambda s: (-speedups.gain(s), s.workers, s.order))
        return best if speedups.gain(best) > self.min_gain else None

    def _swap(self, shares: list[Share], speedups: _Speedups) -> None:
        for _ in range(sum(s.workers for s in shares) + 1):
            receivers = [s for s in shares if s.admitted and s.movable and s.workers < s.desired]
            donors = [s for s in shares if s.admitted and s.movable and s.workers > s.job.min_workers]
            if not receivers or not donors:
                return
            receiver = min(receivers, key=lambda s: (-speedups.gain(s), s.workers, s.order))
            donor = min(
                (d for d in donors if d is not receiver), key=lambda s: (speedups.loss(s), s.order), default=None
            )
            if donor is None or speedups.gain(receiver) <= speedups.loss(donor) + self.swap_margin:
                return
            donor.workers -= 1
            donor.gave[receiver.job_id] += 1
            receiver.workers += 1
            receiver.took[donor.job_id] += 1


class _Speedups:
    """The speedups of one allocation round, each computed once (a round asks for the same ones often)."""

    def __init__(self, speedup: Callable[[JobView, int], float]) -> None:
        self._speedup = speedup
        self._known: dict[tuple[str, int], float] = {}

    def of(self, share: Share, k: int) -> float:
        key = (share.job_id, k)
        value = self._known.get(key)
        if value is None:
            value = self._known[key] = self._speedup(share.job, k)
        return value

    def gain(self, share: Share) -> float:
        """What one more worker adds."""
        return self.of(share, share.workers + 1) - self.of(share, share.workers)

    def loss(self, share: Share) -> float:
        """What the last worker adds (lost if it goes)."""
        return self.of(share, share.workers) - self.of(share, share.workers - 1)
