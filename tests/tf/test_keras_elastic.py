"""The Keras elastic trainer with real TensorFlow: Keras 3 refused, Keras 2 trained, alone and in a ring.

Which Keras ``tf.keras`` is gets fixed for a process the first time it is used, so every case that
needs one or the other runs the example (or a few lines) in a fresh Python.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

from tf_hooks.elastic import keras as ekeras  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_keras_elastic.py"


def run(args: list[str], legacy: str | None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_"))}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy is not None:
        env["TF_USE_LEGACY_KERAS"] = legacy
    return subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_the_example_refuses_keras_3_with_the_way_out():
    result = run([sys.executable, str(EXAMPLE), "--epochs", "1"], legacy="0")
    assert result.returncode != 0
    assert "KerasVersionError: tf.keras is Keras 3." in result.stderr
    assert "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported" in result.stderr
    assert "tf_hooks.elastic.state.ElasticState" in result.stderr


def test_a_keras_3_model_is_refused_even_with_tf_keras_selected():
    code = (
        "import sys, keras, numpy as np\n"
        "from tf_hooks.elastic.keras import ElasticKerasTrainer, KerasVersionError\n"
        "from tf_hooks.elastic.rules import BatchRule\n"
        "model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
        "x = np.zeros((4, 2), np.float32)\n"
        "try:\n"
        "    ElasticKerasTrainer(model, keras.optimizers.SGD(0.1), loss='mse', x=x, y=x[:, :1],\n"
        "                        rule=BatchRule('fixed_global', 2, 0.1))\n"
        "except KerasVersionError as exc:\n"
        "    print(exc)\n"
        "    print(sorted(m for m in sys.modules if m.startswith('horovod.tensorflow.keras')))\n"
    )
    result = run([sys.executable, "-c", code], legacy="1")
    assert result.returncode == 0, result.stderr
    message, horovod_keras = result.stdout.strip().splitlines()
    assert "not a tf.keras model" in message and "(Keras 3." in message
    assert horovod_keras == "[]", "Horovod's Keras module was imported before the guard refused"


def test_require_keras2_matches_this_process():
    """tf.keras here is Keras 3 unless the shell selected tf_keras; the guard says the same."""
    if (ekeras._major(ekeras.keras_version(tf.keras)) or 3) >= 3:
        with pytest.raises(ekeras.KerasVersionError, match="Keras 3"):
            ekeras.require_keras2()
    else:
        assert ekeras.require_keras2() is tf.keras


def final_of(log: Path) -> tuple[list[dict], list[dict], list[np.lib.npyio.NpzFile]]:
    history = json.loads((log / "history.json").read_text())
    finals = [json.loads(p.read_text()) for p in sorted(log.glob("final-rank*.json"))]
    weights = [np.load(p) for p in sorted(log.glob("weights-rank*.npz"))]
    return history, finals, weights


def test_two_ranks_train_exactly_as_one_and_end_identical(tmp_path: Path):
    """With the trainer's loss weighting a step is the mean over the global batch whatever the split:
    two ranks (uneven last step included) follow the same path as one process."""
    args = ["--epochs", "3", "--samples", "1000", "--global-batch", "48"]
    alone = run([sys.executable, str(EXAMPLE), *args, "--log-dir", str(tmp_path / "one")], legacy="1")
    assert alone.returncode == 0, alone.stderr[-3000:]
    history_one, finals_one, _ = final_of(tmp_path / "one")
    assert [r["workers"] for r in history_one] == [1, 1, 1]
    assert finals_one[0]["accuracy"] >= 0.95
    assert history_one[-1]["loss"] < history_one[0]["loss"] / 5

    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    if horovodrun is None:
        pytest.skip("horovodrun is not installed (pip install -e '.[horovod]')")
    cmd = [horovodrun, "-np", "2", "--gloo", "--network-interface", "lo", sys.executable, str(EXAMPLE)]
    ring = run([*cmd, *args, "--log-dir", str(tmp_path / "two")], legacy="1")
    assert ring.returncode == 0, ring.stdout[-3000:] + ring.stderr[-3000:]
    history_two, finals_two, weights = final_of(tmp_path / "two")
    assert [r["workers"] for r in history_two] == [2, 2, 2]
    assert len(weights) == 2
    for key in weights[0].files:
        np.testing.assert_array_equal(weights[0][key], weights[1][key])
    np.testing.assert_allclose([r["loss"] for r in history_two], [r["loss"] for r in history_one], rtol=1e-3)
    assert all(f["accuracy"] == finals_one[0]["accuracy"] for f in finals_two)


RESIZES = """
import json, os, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
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
}))
"""


def test_a_resize_at_an_epochs_last_batch_or_mid_epoch_loses_and_repeats_nothing():
    result = run([sys.executable, "-c", RESIZES], legacy="1")
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["resets"] == [["HostsUpdatedInterrupt", 1, 1]] * 2
    assert outcome["epochs"] == [0, 1, 2]
    assert outcome["steps"] == 3 * 4  # 64 samples, 16 a step: no step repeated or skipped
