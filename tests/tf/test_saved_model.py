"""``--saved_model_path``: the trained model exported by rank 0 when the job ends, loaded back with
``tf.saved_model.load`` and its weights compared with the ones training ended with; a path that cannot be
written refused before training starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

import numpy as np  # noqa: E402  (TensorFlow brings it)

from tests.tf.conftest import KERAS, REPO, run  # noqa: E402

TRAINER = """
import json, sys
import numpy as np, tensorflow as tf
import horovod.tensorflow as hvd
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule

hvd.init()
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3), tf.keras.layers.Dense(2)])
trainer = ElasticKerasTrainer(
    model, tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    x=x, y=y, rule=BatchRule("fixed_global", 16, 0.1), batches_per_commit=2, metrics_callback=False)
trainer.fit(2)
np.savez(sys.argv[1], *[v.numpy() for v in model.variables])
print(json.dumps({"keras": trainer.keras.__version__, "steps": int(trainer.optimizer.iterations.numpy())}))
"""


def load_weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def assert_same(exported: Path, final: list[np.ndarray], variables: str = "variables") -> None:
    loaded = tf.saved_model.load(str(exported))
    got = [v.numpy() for v in getattr(loaded, variables)]
    assert [a.shape for a in got] == [a.shape for a in final]
    assert all(np.array_equal(a, b) for a, b in zip(got, final, strict=True))
    assert any(np.any(a != 0) for a in got)


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_the_keras_trainer_exports_the_final_weights(tmp_path: Path, keras: str) -> None:
    legacy, major = KERAS[keras]
    exported = tmp_path / "export" / "model"
    done = run(
        [sys.executable, "-c", TRAINER, str(tmp_path / "final.npz")],
        legacy=legacy, timeout=240, SUBMARINE_SAVED_MODEL_PATH=str(exported),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert int(report["keras"].split(".")[0]) == major
    assert report["steps"] == 8  # 2 epochs of 64 samples at 16
    assert (exported / "saved_model.pb").is_file()
    assert_same(exported, load_weights(tmp_path / "final.npz"))
    assert [p.name for p in exported.parent.iterdir()] == ["model"]  # no staging directory left behind


def test_the_example_script_exports_its_final_weights(tmp_path: Path) -> None:
    exported = tmp_path / "model"
    logs = tmp_path / "logs"
    done = run(
        [sys.executable, str(REPO / "examples" / "train_elastic.py"), "--epochs", "1", "--log-dir", str(logs)],
        legacy=None, timeout=240, SUBMARINE_SAVED_MODEL_PATH=f"file://{exported}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same(exported, load_weights(logs / "weights-rank0.npz"), "trainable_variables")


def test_a_path_that_cannot_be_written_fails_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = run(
        [sys.executable, str(REPO / "examples" / "train_elastic.py"), "--epochs", "1"],
        legacy=None, timeout=240, SUBMARINE_SAVED_MODEL_PATH=str(blocker / "model"),
    )  # fmt: skip
    assert done.returncode != 0
    assert f"SavedModelError: --saved_model_path {blocker / 'model'}: cannot create {blocker}" in done.stderr
    assert "finished:" not in done.stdout
