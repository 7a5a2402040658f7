"""The Keras elastic trainer with real TensorFlow and Horovod, under Keras 3 (``tf.keras``) and Keras 2
(``tf_keras`` with ``TF_USE_LEGACY_KERAS=1``): trained alone and in a ring of two (the same path, the
same weights on every rank), through resizes, and refusing what would train the ranks apart.

Which Keras ``tf.keras`` is gets fixed for a process the first time it is used, so every case runs the
example (or a few lines) in a fresh Python.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

from tests.tf.conftest import KERAS, horovodrun, run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_keras_elastic.py"


def final_of(log: Path) -> tuple[list[dict], list[dict], list[np.lib.npyio.NpzFile]]:
    history = json.loads((log / "history.json").read_text())
    finals = [json.loads(p.read_text()) for p in sorted(log.glob("final-rank*.json"))]
    weights = [np.load(p) for p in sorted(log.glob("weights-rank*.npz"))]
    return history, finals, weights


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_two_ranks_train_exactly_as_one_and_end_identical(tmp_path: Path, keras: str):
    """With the trainer's loss weighting a step is the mean over the global batch whatever the split:
    two ranks (uneven last step included) follow the same path as one process, and end with the same
    weights (without the allreduce each rank would follow its own half of the data)."""
    legacy, major = KERAS[keras]
    args = ["--epochs", "3", "--samples", "1000", "--global-batch", "48"]
    alone = run([sys.executable, str(EXAMPLE), *args, "--log-dir", str(tmp_path / "one")], legacy=legacy)
    assert alone.returncode == 0, alone.stderr[-3000:]
    history_one, finals_one, _ = final_of(tmp_path / "one")
    assert finals_one[0]["keras"].split(".")[0] == str(major)
    assert [r["workers"] for r in history_one] == [1, 1, 1]
    assert finals_one[0]["accuracy"] >= 0.95
    assert history_one[-1]["loss"] < history_one[0]["loss"] / 5

    ring = run([*horovodrun(), str(EXAMPLE), *args, "--log-dir", str(tmp_path / "two")], legacy=legacy)
    assert ring.returncode == 0, ring.stdout[-3000:] + ring.stderr[-3000:]
    history_two, finals_two, weights = final_of(tmp_path / "two")
    assert [f["keras"] for f in finals_two] == [finals_one[0]["keras"]] * 2
    assert [r["workers"] for r in history_two] == [2, 2, 2]
    assert len(weights) == 2
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])
    np.testing.assert_allclose([r["loss"] for r in history_two], [r["loss"] for r in history_one], rtol=1e-3)
    assert all(f["accuracy"] == finals_one[0]["accuracy"] for f in finals_two)


RESIZES = """
import json, time
import numpy as np, tensorflow as tf
import horovod.tensorflow as hvd
from horovod.runner.elastic.worker import HostUpdateResult
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule

hvd.init()
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
trainer = ElasticKerasTrainer(
    model, tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    x=x, y=y, rule=BatchRule("fixed_global", 16, 0.1), batches_per_commit=2, metrics_callback=False)
announced = set()

class Announce(tf.keras.callbacks.Callback):
    # The driver's "hosts changed" message, as it arrives between two batches: at the last batch of
    # epoch 0 and in the middle of epoch 1. The next commit notices it and Horovod re-forms the ring.
    def on_train_batch_end(self, batch, logs=None):
        at = (trainer.state.epoch, trainer.state.cursor)
        if at in ((0, 64), (1, 32)) and at not in announced:
            announced.add(at)
            trainer.state.on_hosts_updated(time.time(), HostUpdateResult.added)

history = trainer.fit(3, callbacks=[Announce()])
print(json.dumps({
    "epochs": [r["epoch"] for r in history],
    "resets": [[r.reason, r.size_before, r.size_after] for r in trainer.resets],
    "steps": int(trainer.optimizer.iterations.numpy()),
    "keras": trainer.keras.__version__,
}))
"""


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_a_resize_at_an_epochs_last_batch_or_mid_epoch_loses_and_repeats_nothing(keras: str):
    legacy, major = KERAS[keras]
    result = run([sys.executable, "-c", RESIZES], legacy=legacy)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["keras"].split(".")[0] == str(major)
    assert outcome["resets"] == [["HostsUpdatedInterrupt", 1, 1]] * 2
    assert outcome["epochs"] == [0, 1, 2]
    assert outcome["steps"] == 3 * 4  # 64 samples, 16 a step: no step repeated or skipped


# Claims to average over the ring (the marker allreduce_gradients sets) but does not: what Horovod's own
# DistributedOptimizer does under Keras 3. Each rank then trains on its own half of every step.
SKIPS_THE_ALLREDUCE = """
import numpy as np, keras
from tf_hooks.elastic.keras import ElasticKerasTrainer, RanksDivergedError
from tf_hooks.elastic.ring import init_horovod
from tf_hooks.elastic.rules import BatchRule

class LocalSGD(keras.optimizers.SGD):
    _submarine_allreduce = True

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
trainer = ElasticKerasTrainer(model, LocalSGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                              x=x, y=y, rule=BatchRule("fixed_global", 16, 0.1), metrics_callback=False)
hvd = init_horovod()
try:
    trainer.fit(2)
except RanksDivergedError as exc:
    print("diverged", hvd.rank(), exc)
"""


def test_ranks_that_train_apart_are_stopped_at_the_first_epoch_end():
    """The check behind "every rank ends identical": without the allreduce it fails, naming the ranks."""
    result = run([*horovodrun(), "-c", SKIPS_THE_ALLREDUCE], legacy="0")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "diverged" in line]
    assert len(lines) == 2, result.stdout[-3000:]
    assert all("ranks [1] hold other weights than rank 0 at an epoch end" in line for line in lines)


HOROVODS_OWN = """
import keras, numpy as np
import horovod.tensorflow.keras as hvd_keras
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
x = np.zeros((4, 2), np.float32)
try:
    ElasticKerasTrainer(model, hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", x=x,
                        y=x[:, :1], rule=BatchRule("fixed_global", 2, 0.1), metrics_callback=False)
except TypeError as exc:
    print(exc)
"""


def test_horovods_own_keras_3_optimizer_is_refused_up_front():
    result = run([sys.executable, "-c", HOROVODS_OWN], legacy="0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Horovod's DistributedOptimizer of a Keras 3 SGD does not allreduce in fit" in result.stdout
    assert "pass the SGD itself" in result.stdout


OTHER_KERAS = """
import sys, keras, numpy as np, tensorflow as tf
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule
assert tf.keras.Model.__module__.startswith("tf_keras"), tf.keras.Model.__module__  # tf.keras is Keras 2 here
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])  # a Keras 3 model all the same
x = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
trainer = ElasticKerasTrainer(model, keras.optimizers.SGD(0.1), loss="mse", x=x, y=x[:, :1],
                              rule=BatchRule("fixed_global", 8, 0.1), metrics_callback=False)
import horovod.tensorflow as hvd
hvd.init()
history = trainer.fit(2)
print(trainer.keras.__name__, trainer.keras.__version__, len(history))
print(sorted(m for m in sys.modules if m.startswith("horovod.tensorflow.keras")))
"""


def test_a_keras_3_model_trains_as_keras_3_when_tf_keras_is_keras_2():
    result = run([sys.executable, "-c", OTHER_KERAS], legacy="1")
    assert result.returncode == 0, result.stderr[-3000:]
    trained, horovod_keras = result.stdout.strip().splitlines()[-2:]
    name, version, epochs = trained.split()
    assert (name, version.split(".")[0], epochs) == ("keras", "3", "2")
    assert horovod_keras == "[]", "the trainer imported Horovod's Keras helpers"


TRACED_AHEAD = """
import inspect, json, os
import numpy as np, tensorflow as tf
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule

assert os.environ["HOROVOD_ELASTIC"] == "1"  # as in a job: the step may be traced before hvd.init()
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8), tf.keras.layers.Dropout(0.1),
                             tf.keras.layers.Dense(2)])
trainer = ElasticKerasTrainer(
    model, tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    x=x, y=y, rule=BatchRule("fixed_global", 16, 0.1), metrics_callback=False)
step = model.train_function
if not hasattr(step, "experimental_get_tracing_count"):  # Keras 3: the tf.function inside
    step = inspect.getclosurevars(step).nonlocals["multi_step_on_iterator"]
traced, iterations = step.experimental_get_tracing_count(), int(trainer.optimizer.iterations.numpy())
import horovod.tensorflow as hvd
hvd.init()
trainer.fit(2)
print(json.dumps({
    "keras": trainer.keras.__version__,
    "traced_before_init": traced,
    "iterations_before_init": iterations,
    "traced_after_fit": step.experimental_get_tracing_count(),
    "steps": int(trainer.optimizer.iterations.numpy()),
}))
"""


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_the_step_is_traced_before_the_ring_and_not_again(keras: str):
    """A joiner builds and traces before it joins, so the ring does not wait for it; the trace runs nothing
    (no step counted, no collective before hvd.init) and fit reuses it."""
    legacy, major = KERAS[keras]
    result = run([sys.executable, "-c", TRACED_AHEAD], legacy=legacy, HOROVOD_ELASTIC="1")
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["keras"].split(".")[0] == str(major)
    assert (outcome["traced_before_init"], outcome["iterations_before_init"]) == (1, 0)
    assert outcome["traced_after_fit"] == 1
    assert outcome["steps"] == 2 * 4
