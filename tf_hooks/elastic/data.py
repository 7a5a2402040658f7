"""Exactly-once data within an epoch, whatever the worker count does.

Every rank computes the same permutation of the epoch's sample ids from ``(seed, epoch)``. A global
cursor counts the samples the job has consumed in this epoch; it is part of the committed elastic
state. One step takes the next ``global_batch`` ids after the cursor and splits them over the ranks
of the *current* ring. After a resize, the ranks restore the committed cursor and go on from there,
so within an epoch no sample is skipped and none is trained on twice (steps rolled back by a failure
are recomputed from the same cursor, and their earlier effect is rolled back with the model).
"""

from __future__ import annotations

import numpy as np


def epoch_permutation(num_samples: int, epoch: int, seed: int = 0) -> np.ndarray:
    """The sample ids of ``epoch`` in the order the job trains on them (same on every rank).

    Raises:
        ValueError: ``num_samples`` < 1 or ``epoch`` < 0.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    return np.random.default_rng([seed, epoch]).permutation(num_samples)


def shard(permutation: np.ndarray, cursor: int, global_batch: int, rank: int, size: int) -> np.ndarray:
    """The ids ``rank`` of ``size`` trains on in the step that starts at ``cursor``.

    The step covers ``permutation[cursor:cursor + global_batch]`` (shorter at the end of the epoch),
    split into ``size`` contiguous parts whose lengths differ by at most one.

    Raises:
        ValueError: a negative cursor, a cursor past the epoch, a batch < 1, or a rank outside ``size``.
    """
    if not 0 <= cursor < len(permutation):
        raise ValueError(f"cursor {cursor} is outside the epoch of {len(permutation)} samples")
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a ring of size {size}")
    step = permutation[cursor : cursor + global_batch]
    return np.array_split(step, size)[rank]


def micro_shards(
    permutation: np.ndarray, cursor: int, global_batch: int, micro_batches: int, rank: int, size: int
) -> list[np.ndarray]:
    """The ids ``rank`` of ``size`` trains on in each micro-batch of the step that starts at ``cursor``, when
    the step accumulates gradients over ``micro_batches`` micro-batches (a set batch with accumulation).

    The step covers the same ``permutation[cursor:cursor + global_batch]`` as :func:`shard` (the cursor counts
    samples, so a change of batch or accumulation between steps keeps every sample exactly once), split into
    ``micro_batches`` contiguous parts, each split over the ranks as :func:`shard` splits a step. With one
    micro-batch it is ``[shard(...)]``.

    Raises:
        ValueError: as :func:`shard`, or ``micro_batches`` < 1.
    """
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    if not 0 <= cursor < len(permutation):
        raise ValueError(f"cursor {cursor} is outside the epoch of {len(permutation)} samples")
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a ring of size {size}")
    step = permutation[cursor : cursor + global_batch]
    return [np.array_split(part, size)[rank] for part in np.array_split(step, micro_batches)]


def step_length(num_samples: int, cursor: int, global_batch: int) -> int:
    """How far the cursor moves after the step that starts at ``cursor``."""
    return min(global_batch, num_samples - cursor)
