"""Fair-share arbiter: arrivals start at once by taking from elastic jobs above their minimum, and
the rest is split max-min fairly (equal worker counts, capped by what each job wants)."""

from __future__ import annotations

from collections.abc import Sequence

from ._alloc import Share, admit, allocations, free_slots, give_free, initial_shares
from .api import Allocation, ClusterArbiter, Request, Snapshot

__all__ = ["FairShareArbiter"]


class FairShareArbiter(ClusterArbiter):
    """Max-min fair shares of worker slots, with no head-of-line blocking.

    1. Waiting jobs start at their minimum in order of submission; when the cluster is full, workers
       come from the elastic job holding the most (then the latest submitted), never below its minimum.
    2. Free slots (after a departure, say) go one at a time to the job holding the fewest among those
       that want more.
    3. Jobs that are not settled are levelled: while one that wants more holds at least two fewer than
       another above its minimum, one worker moves.

    Settled jobs (in their cooldown) are left alone except in step 1; jobs that are not elastic never move.
    """

    name = "fair-share"

    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        shares = initial_shares(requests)
        available = snapshot.available
        admit(shares, available, donor_key=lambda s: (not s.movable, -s.workers, -s.job.submitted_at, s.job_id))
        give_free(shares, available, pick=lambda c: min(c, key=lambda s: (s.workers, s.order)))
        if free_slots(shares, available) >= 0:  # over-committed: nobody grows
            self._level(shares)
        return allocations(shares, "fair share", lambda s: f"fair share: {s.workers} of the {s.desired} it wants")

    @staticmethod
    def _level(shares: list[Share]) -> None:
        while True:
            receivers = [s for s in shares if s.admitted and s.movable and s.workers < s.desired]
            donors = [s for s in shares if s.admitted and s.movable and s.workers > s.job.min_workers]
            if not receivers or not donors:
                return
            receiver = min(receivers, key=lambda s: (s.workers, s.order))
            donor = max(donors, key=lambda s: (s.workers, s.order))
            if donor is receiver or donor.workers - receiver.workers < 2:
                return
            donor.workers -= 1
            donor.gave[receiver.job_id] += 1
            receiver.workers += 1
            receiver.took[donor.job_id] += 1
