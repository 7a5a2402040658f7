"""Runs a Horovod example script unchanged but for its data, and logs when each of its commits ended.

    python benchmarks/_generated_mnist.py --log-dir DIR EXAMPLE.py [its arguments]

- ``tf.keras.datasets.mnist.load_data`` returns generated arrays of MNIST's shapes and types (60,000 +
  10,000 images of 28 x 28 uint8, labels 0-9; each class a fixed pattern plus noise, so it is learnable):
  the example's model, batch, steps and callbacks are its own, only the download is gone;
- every ``state.commit()`` of Horovod's elastic state first appends ``{"time", "step", "rank", "size"}`` to
  ``DIR/steps-<pid>.jsonl`` (``step``: the optimizer's iterations, the same on every rank), which is what
  ``bench_elastic`` reads a resize's pause from; a Keras example committing every batch logs every step;
- the first ``hvd.init()`` call writes its time to ``DIR/init-<pid>.json``: where a joiner is ready to join
  (under the job's agent it then waits inside the call for its slot).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from typing import Any, TextIO

import numpy as np

TRAIN, TEST, SIDE, CLASSES = 60_000, 10_000, 28, 10


def generated_mnist(path: str = "mnist.npz") -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """MNIST's ``load_data`` without the download: the same shapes and dtypes, deterministic."""
    del path
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 192, size=(CLASSES, SIDE, SIDE), dtype=np.uint8)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:  # as quick as reading MNIST's file (a fraction of a second)
        labels = rng.integers(0, CLASSES, size=n, dtype=np.uint8)
        return patterns[labels] + rng.integers(0, 64, size=(n, SIDE, SIDE), dtype=np.uint8), labels

    return split(TRAIN), split(TEST)


def log_commits(log_dir: str) -> None:
    """Makes every commit of Horovod's elastic state log the time it ended (see the module doc)."""
    from horovod.common import elastic

    os.makedirs(log_dir, exist_ok=True)
    out: list[TextIO] = []
    commit = elastic.State.commit

    def logged(self: Any) -> None:
        import horovod.tensorflow as hvd

        optimizer = getattr(self, "optimizer", None)
        step = int(optimizer.iterations.numpy()) if optimizer is not None else -1
        if not out:
            out.append(open(os.path.join(log_dir, f"steps-{os.getpid()}.jsonl"), "a"))  # noqa: SIM115
        out[0].write(json.dumps({"time": time.time(), "step": step, "rank": hvd.rank(), "size": hvd.size()}) + "\n")
        out[0].flush()
        commit(self)  # saves, then raises HostsUpdatedInterrupt when the ring is to re-form

    elastic.State.commit = logged  # type: ignore[method-assign]


def log_first_init(log_dir: str) -> None:
    """Makes the first ``hvd.init()`` call of this process write when it was called (see the module doc)."""
    from horovod.common.basics import HorovodBasics

    init = HorovodBasics.init

    def logged(self: Any, *args: Any, **kwargs: Any) -> Any:
        path = os.path.join(log_dir, f"init-{os.getpid()}.json")
        if not os.path.exists(path):
            with open(path, "w") as out:
                json.dump({"time": time.time()}, out)
        return init(self, *args, **kwargs)

    HorovodBasics.init = logged  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[0] != "--log-dir":
        sys.exit("usage: _generated_mnist.py --log-dir DIR EXAMPLE.py [ARGS...]")
    log_dir, example, args = argv[1], argv[2], argv[3:]
    import tensorflow as tf

    tf.keras.datasets.mnist.load_data = generated_mnist
    log_commits(log_dir)
    log_first_init(log_dir)  # before the example imports a binding, which binds init at import
    sys.argv = [example, *args]
    runpy.run_path(example, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
