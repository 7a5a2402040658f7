"""A batch set for a running job (tf_hooks.elastic.rules.BatchSetting) applied by the Keras trainer
(``ElasticKerasTrainer``) under ``horovodrun -np 2``, Keras 3 and Keras 2: only rank 0's agent relays the
settings, a first one (global batch 96, learning rate 0.08) in the middle of epoch 0 and a second one with
gradient accumulation (global batch 64, accum_steps 2, the rule's learning rate) later. Both ranks take each
at the same commit; from there every step has its global batch, the learning rate ramps to its rate, each
epoch trains every sample exactly once (the samples the model itself counted), the epoch cut short by the
change stays one epoch, the metrics report the batch trained, and the ranks end with the same weights.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")
pytest.importorskip("horovod.tensorflow", reason="Horovod is not installed (pip install -e '.[horovod]')")

from tests.tf.conftest import KERAS, horovodrun, run  # noqa: E402
from tf_hooks.elastic.rules import BatchRule, ramp_lr  # noqa: E402

SAMPLES, EPOCHS, COMMIT_EVERY = 512, 3, 2
RULE = BatchRule("fixed_global", 32, 0.05, ramp_steps=4)
#: (rank 0's broadcasts after which its agent has relayed it, global batch, accum_steps, learning rate)
SETTINGS = [(5, 96, 0, 0.08), (10, 64, 2, None)]

# Each rank: an agent channel stand-in that has relayed the settings only on rank 0, after so many of the
# state's broadcasts (one per commit, after the first sync); a metrics sink that keeps the StepRecords of the
# trainer's MetricsCallback; a layer that counts, in a variable of its own, the samples each step trains on
# (a sample's id is its last feature), read after every batch: what the model really learned from.
SCRIPT = f"""
import json, sys
from pathlib import Path
import numpy as np, tensorflow as tf
import horovod.tensorflow as hvd
import tf_hooks._hook
from tf_hooks.api import MetricsSink, SenderStats
from tf_hooks.elastic import ring
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule, BatchSetting

SAMPLES = {SAMPLES}
SETTINGS = [
    (after, BatchSetting(batch, accum, lr, version=i + 1, reason="goodput: test"))
    for i, (after, batch, accum, lr) in enumerate({SETTINGS!r})
]

class Relayed:
    calls = 0
    @property
    def batch(self):
        Relayed.calls += 1
        relayed = [s for after, s in SETTINGS if hvd.rank() == 0 and Relayed.calls > after]
        return relayed[-1] if relayed else None

ring._channel = Relayed()

class Recorded(MetricsSink):
    def __init__(self):
        self.records = []
    def record(self, r):
        self.records.append({{"step": r.step, "rank": r.rank, "batch_size": r.batch_size}})
    def flush(self, timeout):
        return True
    def close(self, timeout):
        return SenderStats()
    def stats(self):
        return SenderStats()

sink = Recorded()
tf_hooks._hook.make_sink = lambda config: sink

class Seen(tf.keras.layers.Layer):
    def build(self, shape):
        self.count = self.add_weight(name="seen", shape=(SAMPLES,), initializer="zeros", trainable=False)
    def call(self, x, training=False):
        if training:
            ids = tf.cast(x[:, -1], tf.int32)
            self.count.assign_add(tf.math.bincount(ids, minlength=SAMPLES, maxlength=SAMPLES, dtype=tf.float32))
        return x[:, :-1]

rng = np.random.default_rng(0)
x = rng.normal(size=(SAMPLES, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
x = np.concatenate([x, np.arange(SAMPLES, dtype="float32")[:, None]], axis=1)
tf.keras.utils.set_random_seed(0)
seen = Seen()
model = tf.keras.Sequential([tf.keras.Input((5,)), seen, tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(2)])
trainer = ElasticKerasTrainer(
    model, tf.keras.optimizers.SGD(0.05, momentum=0.9),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), x=x, y=y,
    rule=BatchRule("fixed_global", {RULE.batch}, {RULE.base_lr}, ramp_steps={RULE.ramp_steps}),
    batches_per_commit={COMMIT_EVERY})
steps = []

class Log(tf.keras.callbacks.Callback):
    before = np.zeros(SAMPLES)
    def on_train_batch_end(self, batch, logs=None):
        count = np.asarray(seen.count.numpy())
        trained = np.rint(count - Log.before).astype(int)
        Log.before = count
        setting = trainer.state.batch_setting
        steps.append({{
            "step": int(trainer.optimizer.iterations.numpy()),
            "epoch": trainer.state.epoch,
            "cursor": trainer.state.cursor,
            "commits": trainer.state.commits,
            "version": setting.version if setting else 0,
            "ids": np.repeat(np.arange(SAMPLES), trained).tolist(),
            "lr": float(np.asarray(trainer.optimizer.learning_rate)),
        }})

hvd.init()
history = trainer.fit({EPOCHS}, callbacks=[Log()])
rank = hvd.rank()
out = Path(sys.argv[1])
np.savez(out / f"weights-rank{{rank}}.npz", *[v.numpy() for v in model.trainable_variables])
(out / f"rank{{rank}}.json").write_text(json.dumps({{
    "steps": steps, "history": history, "records": sink.records, "lr_target": trainer.state.lr_target,
    "keras": trainer.keras.__version__,
}}))
"""


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_both_ranks_take_rank_0s_batch_settings_at_one_commit_with_every_sample_once(
    tmp_path: Path, keras: str
) -> None:
    legacy, major = KERAS[keras]
    script = tmp_path / "train.py"  # horovodrun passes its command through a shell: no multi-line -c
    script.write_text(SCRIPT)
    started = time.monotonic()
    result = run([*horovodrun(), str(script), str(tmp_path)], legacy=legacy)
    took = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["keras"].split(".")[0] == str(major) for r in ranks)
    steps = [r["steps"] for r in ranks]
    assert [s["step"] for s in steps[0]] == [s["step"] for s in steps[1]] == list(range(1, len(steps[0]) + 1))

    # Both ranks ran every step with the same setting, epoch, cursor and learning rate; a step's samples are
    # the two ranks' parts of it.
    for a, b in zip(*steps, strict=True):
        assert (a["version"], a["epoch"], a["cursor"], a["commits"], a["lr"]) == (
            b["version"],
            b["epoch"],
            b["cursor"],
            b["commits"],
            b["lr"],
        )
        assert not set(a["ids"]) & set(b["ids"])
    batch = [len(a["ids"]) + len(b["ids"]) for a, b in zip(*steps, strict=True)]
    nominal = {0: RULE.batch, **{i + 1: s[1] for i, s in enumerate(SETTINGS)}}
    for i, s in enumerate(steps[0]):
        ends_epoch = s["cursor"] == SAMPLES
        want = nominal[s["version"]]
        assert batch[i] == want or (ends_epoch and batch[i] < want), (i, s["version"], batch[i])
    versions = [s["version"] for s in steps[0]]
    assert versions == sorted(versions) and set(versions) == {0, 1, 2}

    # Each setting is taken at a commit: the steps on each side of the change are one commit apart, and the
    # log names that commit. The first comes in the middle of epoch 0, so that fit is cut short.
    for version in (1, 2):
        first = versions.index(version)
        before, after = steps[0][first - 1], steps[0][first]
        assert after["commits"] == before["commits"] + 1, (version, before, after)
        assert f"batch setting {version} from commit {after['commits']}:" in output
    first = versions.index(1)
    assert steps[0][first - 1]["epoch"] == steps[0][first]["epoch"] == 0
    assert 0 < steps[0][first - 1]["cursor"] < SAMPLES

    # Exactly once: each epoch's steps trained every sample once, across the changes of batch.
    for epoch in range(EPOCHS):
        ids = sorted(i for r in (0, 1) for s in steps[r] if s["epoch"] == epoch for i in s["ids"])
        assert ids == list(range(SAMPLES)), f"epoch {epoch}"

    # One history record per epoch (the epoch cut short is one epoch), with the batch and rate at its end.
    for r in (0, 1):
        history = ranks[r]["history"]
        assert [h["epoch"] for h in history] == list(range(EPOCHS))
        ends = [max((s for s in steps[0] if s["epoch"] == e), key=lambda s: s["step"]) for e in range(EPOCHS)]
        assert [h["global_batch"] for h in history] == [nominal[s["version"]] for s in ends]
        assert [h["learning_rate"] for h in history] == pytest.approx([s["lr"] for s in ends])
    untimed = [[{k: v for k, v in h.items() if k != "time"} for h in ranks[r]["history"]] for r in (0, 1)]
    assert untimed[0] == untimed[1]

    # The learning rate: the rule's, then a ramp (momentum compensation) to the first setting's 0.08, then
    # from there to the rule's rate for the second setting's batch (AdaScale's gain with rank 0's noise scale
    # when it had one: between the rule's own rate and its linear scaling).
    lrs = [s["lr"] for s in steps[0]]
    first, second = versions.index(1), versions.index(2)
    assert lrs[:first] == pytest.approx([RULE.base_lr] * first)
    assert lrs[first:second] == pytest.approx([ramp_lr(k, 0, RULE.base_lr, 0.08, 4) for k in range(second - first)])
    target = ranks[0]["lr_target"]
    assert target == ranks[1]["lr_target"]
    assert RULE.base_lr <= target <= RULE.lr_for_batch(64)
    from_lr = ramp_lr(second - first, 0, RULE.base_lr, 0.08, 4)
    assert lrs[second:] == pytest.approx([ramp_lr(k, 0, from_lr, target, 4) for k in range(len(lrs) - second)])

    # Gradient accumulation in fit: each rank's whole part of a step as one batch, said once per rank.
    assert output.count("Keras fit applies one update per batch") == 2

    # The metrics report each rank's part of the global batch in force: the controller reads their sum.
    reported = {r: {x["step"]: x["batch_size"] for x in ranks[r]["records"]} for r in (0, 1)}
    assert reported[0].keys() == reported[1].keys() == set(range(1, len(steps[0]) + 1))
    for s in steps[0]:
        assert reported[0][s["step"]] + reported[1][s["step"]] == nominal[s["version"]], s["step"]

    weights = [np.load(tmp_path / f"weights-rank{r}.npz") for r in (0, 1)]
    for name in weights[0].files:
        np.testing.assert_array_equal(weights[0][name], weights[1][name])
    assert took < 120, f"took {took:.0f} s"
