"""Fair-share arbiter: arrivals start at once by taking from elastic jobs above their minimum, and
the rest is split max-min fairly (equal worker counts, capped by what each job wants)."""

from __future__ import annotations

import heapq
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
        give_free(shares, available, key=lambda s: (s.workers, s.order))
        if free_slots(shares, available) >= 0:  # over-committed: nobody grows
            self._level(shares)
        return allocations(shares, "fair share", lambda s: f"fair share: {s.workers} of the {s.desired} it wants")

    @staticmethod
    def _level(shares: list[Share]) -> None:
        """While the movable job below its wish holding the fewest (the earliest on a tie) holds at least two fewer
        than the movable job above its minimum holding the most (the latest on a tie), one worker moves between
        them. Both are kept in heaps (an entry whose job's count has changed since is skipped), so a round costs
        the moves times the log of the jobs rather than the moves times the jobs."""
        by_rank = sorted(shares, key=lambda s: s.order)  # a job's rank in this order names it in the heaps
        rank = {id(s): r for r, s in enumerate(by_rank)}
        movable = [s for s in shares if s.admitted and s.movable]
        receivers = [(s.workers, rank[id(s)]) for s in movable if s.workers < s.desired]
        donors = [(-s.workers, -rank[id(s)]) for s in movable if s.workers > s.job.min_workers]
        heapq.heapify(receivers)
        heapq.heapify(donors)

        def top(heap: list[tuple[int, int]], sign: int) -> Share | None:
            while heap and sign * heap[0][0] != by_rank[sign * heap[0][1]].workers:
                heapq.heappop(heap)  # its count changed since: its entry of now is in the heap too, if it qualifies
            return by_rank[sign * heap[0][1]] if heap else None

        while True:
            receiver, donor = top(receivers, 1), top(donors, -1)
            if receiver is None or donor is None:
                return
            if donor is receiver or donor.workers - receiver.workers < 2:
                return
            donor.workers -= 1
            donor.gave[receiver.job_id] += 1
            receiver.workers += 1
            receiver.took[donor.job_id] += 1
            for moved in (donor, receiver):
                if moved.workers < moved.desired:
                    heapq.heappush(receivers, (moved.workers, rank[id(moved)]))
                if moved.workers > moved.job.min_workers:
                    heapq.heappush(donors, (-moved.workers, -rank[id(moved)]))
