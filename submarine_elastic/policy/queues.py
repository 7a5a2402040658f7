"""Queues: how the worker slots of one round are split among YARN CapacityScheduler queues.

A queue is guaranteed a share of the cluster and may grow to a maximum share while other queues leave theirs
idle. The policy engine gives each queue its slots by one rule, then runs the job policies and the arbiter
within each queue on that queue's slots alone (:meth:`~submarine_elastic.policy.PolicyEngine.decide`):

1. shares become slots of the round's available slots, rounded down: ``guaranteed`` and ``maximum``;
2. each queue first gets its guarantee, as far as its own jobs ask for it (its *demand*);
3. the slots still idle go, one at a time, to the queues whose demand is not met and that are below their
   maximum, the one holding the least for its guaranteed share first (YARN's order: lowest used over
   guaranteed capacity; ties in the queues' order).

A queue's demand is what the arbiter could give its jobs at most: a job's wish (``Request.desired``), or what
it holds when it may not grow (in its cooldown, or not elastic). So a queue never gets more than its
maximum, gets its guarantee back as soon as its jobs ask for it (the borrower's jobs are shrunk to fit), and
lends what it does not use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .api import QueueShare

__all__ = ["split_slots"]


def split_slots(available: int, queues: Sequence[QueueShare], demand: Mapping[str, int]) -> dict[str, int]:
    """The slots each queue may hold this round, by the rule of the module docstring.

    Args:
        available: the slots the jobs may hold in total.
        queues: the queues, in the order ties are broken in.
        demand: slots each queue's jobs ask for (a missing queue asks none).

    Returns:
        slots by queue name; their sum is at most ``available`` and each at most the queue's maximum.
    """
    bounds = {q.name: q.slots(available) for q in queues}
    given = {q.name: min(bounds[q.name][0], max(0, demand.get(q.name, 0))) for q in queues}
    idle = available - sum(given.values())
    order = {q.name: i for i, q in enumerate(queues)}
    share = {q.name: q.guaranteed for q in queues}
    while idle > 0:
        wanting = [n for n in given if given[n] < min(demand.get(n, 0), bounds[n][1])]
        if not wanting:
            break
        chosen = min(wanting, key=lambda n: (given[n] / share[n] if share[n] else math.inf, order[n]))
        given[chosen] += 1
        idle -= 1
    return given
