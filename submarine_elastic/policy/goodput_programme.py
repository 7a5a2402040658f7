"""The goodput arbiter's dynamic programme (:class:`~submarine_elastic.policy.goodput.GoodputArbiter`): every job's
worker count, of least total value in the cluster's slots, each job choosing among a few counts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["cheapest", "programme"]


#: Rooms x options up to which :func:`cheapest` takes the least of a matrix (fewer numpy calls: a few rooms, the
#: simulator's clusters) rather than one pass over the rooms per option (less memory traffic: thousands of rooms).
MATRIX_CELLS = 4096


def cheapest(dp: np.ndarray, ks: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of the arbiter's dynamic programme: for every room ``c``, the least ``dp[c - ks[j]] + values[j]``
    (inf where no option fits) and the first ``j`` that gives it. One pass over the rooms per option (a job has
    a few), not a rooms x options matrix, except where the matrix is small (:data:`MATRIX_CELLS`): the same floats
    and the same first ``j`` either way."""
    n = len(dp)
    if n * len(ks) <= MATRIX_CELLS:
        top = int(ks.max())
        padded = np.concatenate((np.full(top, np.inf), dp))  # padded[top + c - k] = dp[c - k], inf for c < k
        matrix = padded[(top - ks)[:, None] + np.arange(n)] + values[:, None]
        pick = matrix.argmin(axis=0)
        return matrix[pick, np.arange(n)], pick
    best = np.full(n, np.inf)
    pick = np.zeros(n, dtype=np.int64)
    cand = np.empty(n)  # scratch, written in place: no arrays made per option, no fancy indexing
    better = np.empty(n, dtype=bool)
    for j, (k, value) in enumerate(zip(ks.tolist(), values.tolist(), strict=True)):
        if k >= n:
            continue
        c, b = cand[: n - k], better[: n - k]
        np.add(dp[: n - k], value, out=c)
        np.less(c, best[k:], out=b)
        np.copyto(best[k:], c, where=b)
        np.copyto(pick[k:], j, where=b)
    return best, pick


def programme(
    options: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], capacity: int
) -> tuple[list[int], list[bool]] | None:
    """The arbiter's dynamic programme: given each job's counts, their values and whether each moves the job
    (:meth:`.goodput.GoodputArbiter._options`), the counts of least total value in ``capacity`` slots (the first
    option of a job on a tie) and whether each moves; None if nothing fits.

    After the ``i``-th job, the programme's least value for ``c`` rooms matters only for the rooms the jobs after it
    can leave the ``i``-th: from ``capacity`` less the most they can take to ``capacity`` less the fewest; and it is
    flat from the most the jobs so far can take. Each job's step is made over those rooms alone (at 1,000 jobs on
    4,000 slots, 40 % of a programme over every room for every job), each room's value the very float the whole
    programme gives it, so the same counts come out."""
    after_most = [0] * len(options)  # the most, and the fewest, slots the jobs after each can take
    after_fewest = [0] * len(options)
    for i in range(len(options) - 1, 0, -1):
        ks = options[i][0]
        after_most[i - 1] = after_most[i] + int(ks.max())
        after_fewest[i - 1] = after_fewest[i] + int(ks.min())
    dp, dp_low = np.zeros(1), 0  # the least values of rooms dp_low.. (flat past its end), before any job
    most = 0  # the most slots the jobs so far can take
    steps = []
    for (ks, values, moves), more, fewer in zip(options, after_most, after_fewest, strict=True):
        top, bottom = int(ks.max()), int(ks.min())
        most = min(capacity, most + top)
        high = min(most, capacity - fewer)
        low = min(max(0, capacity - more), high)
        # the rooms low - top .. high - bottom of the programme so far, given to the step from low - top on
        given = np.full(high - low + top + 1, np.inf)
        start = max(low - top, dp_low)
        end = min(high - bottom, dp_low + len(dp) - 1)
        if end >= start:
            given[start - (low - top) : end - (low - top) + 1] = dp[start - dp_low : end - dp_low + 1]
        if high - bottom > end:
            given[max(end + 1, low - top) - (low - top) : high - bottom - (low - top) + 1] = dp[-1]
        best, pick = cheapest(given, ks, values)
        dp, dp_low = best[top:], low
        steps.append((ks, moves, pick[top:], low))
    if not math.isfinite(dp[min(capacity - dp_low, len(dp) - 1)]):
        return None
    counts: list[int] = []
    moved: list[bool] = []
    left = capacity
    for ks, moves, pick, low in reversed(steps):
        j = pick[min(left - low, len(pick) - 1)]
        counts.append(int(ks[j]))
        moved.append(bool(moves[j]))
        left -= counts[-1]
    counts.reverse()
    moved.reverse()
    return counts, moved
