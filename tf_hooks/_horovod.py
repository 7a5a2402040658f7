"""Horovod's view of the ring, when the training process uses Horovod (never imports it)."""

from __future__ import annotations

import sys


def horovod_ring() -> tuple[int, int] | None:
    """(rank, size) from Horovod's TensorFlow binding when it is imported and initialized, else None."""
    for name in ("horovod.tensorflow.keras", "horovod.tensorflow"):
        hvd = sys.modules.get(name)
        if hvd is not None:
            try:
                if hvd.is_initialized():
                    return int(hvd.rank()), int(hvd.size())
            except Exception:  # noqa: BLE001 (any failure means: Horovod cannot tell us)
                return None
    return None
