"""Checkpoints of the elastic helpers with real TensorFlow and Horovod (one process, a ring of one): a job
lost as a whole resumes from its last checkpoint with the same weights and the data where it was, a
checkpoint is written off the training thread and never makes a step wait, an unreadable one stops the job
naming it, and a failing disk does not stop training.

The ``tf.GradientTape`` loop (:class:`ElasticState`) runs in this process; the Keras trainer under Keras 3
and Keras 2 runs in a fresh Python each (which Keras ``tf.keras`` is gets fixed for a process).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")
hvd = pytest.importorskip("horovod.tensorflow", reason="Horovod is not installed (pip install -e '.[horovod]')")

import numpy as np  # noqa: E402  (TensorFlow brings it)

from tf_hooks.elastic import data  # noqa: E402
from tf_hooks.elastic.checkpoint import (  # noqa: E402
    Checkpointer,
    CheckpointReadError,
    file_name,
    read_checkpoint,
    write_checkpoint,
)
from tf_hooks.elastic.state import ElasticState  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SAMPLES, BATCH = 40, 8  # 5 steps an epoch
K = 4  # commits between checkpoints; a step is one commit
X = np.random.default_rng(0).normal(size=(SAMPLES, 4)).astype("float32")
Y = (X.sum(axis=1) > 0).astype("int32")
LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.fixture(autouse=True)
def ring_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_EVERY", raising=False)
    hvd.init()


class Job:
    """One incarnation of a small elastic ``tf.GradientTape`` job: a model, its optimizer and its state,
    built afresh as a relaunched job would (``seed`` gives other initial weights)."""

    def __init__(self, checkpoint: Any, seed: int = 0, units: int = 2) -> None:
        tf.keras.utils.set_random_seed(seed)
        self.model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(units)])
        self.opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
        self.opt.build(self.model.trainable_variables)
        self.state = ElasticState(self.model.variables + self.opt.variables, checkpoint=checkpoint, epoch=0, cursor=0)
        self.steps: list[list[int]] = []  # the sample ids of every step, in order
        self.weights_at: dict[int, list[np.ndarray]] = {}  # committed weights by commit count
        self.started_at: int | None = None
        self.start_weights: list[np.ndarray] = []

    def train(self, until_commit: int, after_commit: Callable[[int], None] | None = None) -> None:
        @hvd.elastic.run
        def run(state: ElasticState) -> None:
            if self.started_at is None:
                self.started_at = state.commits
                self.start_weights = [v.numpy() for v in state.variables]
            while state.commits < until_commit:
                permutation = data.epoch_permutation(SAMPLES, state.epoch)
                ids = data.shard(permutation, state.cursor, BATCH, hvd.rank(), hvd.size())
                with tf.GradientTape() as tape:
                    loss = LOSS(Y[ids], self.model(X[ids], training=True))
                grads = tape.gradient(loss, self.model.trainable_variables)
                self.opt.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
                state.cursor += data.step_length(SAMPLES, state.cursor, BATCH)
                if state.cursor == SAMPLES:
                    state.epoch, state.cursor = state.epoch + 1, 0
                self.steps.append(ids.tolist())
                state.commit()
                self.weights_at[state.commits] = [v.numpy() for v in state.variables]
                if after_commit is not None:
                    after_commit(state.commits)

        run(self.state)

    def wait_for_writer(self, commits: int) -> None:
        """Lets each write end before the next is due, so that no checkpoint is skipped in a test that
        counts them (a slow disk would skip some, which another test shows)."""
        assert self.state.checkpointer is not None
        assert self.state.checkpointer.wait(60), "the checkpoint writer did not finish in 60 s"


def test_a_rollback_tells_its_restore_callbacks_first_then_brings_back_the_committed_weights() -> None:
    """What Horovod's run wrapper does after a peer failed: ``state.restore()``. A script's callback (a log of
    when its ring failed) runs before the weights go back to their last commit."""
    job = Job(checkpoint=False)
    job.train(until_commit=2)
    committed = [v.numpy() for v in job.state.variables]
    seen: list[list[np.ndarray]] = []
    job.state.register_restore_callbacks([lambda: seen.append([v.numpy() for v in job.state.variables])])
    for v in job.state.variables:
        v.assign_add(tf.ones_like(v))  # a step that was never committed
    job.state.restore()
    assert len(seen) == 1
    assert all(np.array_equal(got, want + 1) for got, want in zip(seen[0], committed, strict=True))
    assert all(np.array_equal(v.numpy(), want) for v, want in zip(job.state.variables, committed, strict=True))


def test_a_new_job_resumes_from_the_last_checkpoint_with_its_weights_and_data_position(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    reference = Job(checkpoint=False)
    reference.train(until_commit=5 * K)

    written_on: list[int] = []

    def recorded(directory: Path, commits: int, values: Any, attrs: bytes) -> Path:
        written_on.append(threading.get_ident())
        return write_checkpoint(directory, commits, values, attrs)

    lost = Job(checkpoint=Checkpointer(tmp_path / "ckpt", every=K, write=recorded))
    with caplog.at_level(logging.INFO, logger="tf_hooks.elastic"):
        lost.train(until_commit=3 * K + 2, after_commit=lost.wait_for_writer)  # then every process is lost
    assert lost.started_at == 0 and "training starts fresh" in caplog.text
    assert lost.state.checkpointer is not None and lost.state.checkpointer.written == [K, 2 * K, 3 * K]
    assert len(written_on) == 3 and threading.get_ident() not in written_on  # off the training thread
    assert sorted(os.listdir(tmp_path / "ckpt")) == [file_name(2 * K), file_name(3 * K)]  # the newest two
    assert lost.steps == reference.steps[: 3 * K + 2]

    caplog.clear()
    resumed = Job(checkpoint=Checkpointer(tmp_path / "ckpt", every=K), seed=1)  # other initial weights
    with caplog.at_level(logging.WARNING, logger="tf_hooks.elastic"):
        resumed.train(until_commit=5 * K, after_commit=resumed.wait_for_writer)
    assert resumed.started_at == 3 * K
    assert f"resuming from commit {3 * K}: checkpoint {tmp_path / 'ckpt' / file_name(3 * K)}" in caplog.text
    for got, want in zip(resumed.start_weights, lost.weights_at[3 * K], strict=True):
        np.testing.assert_array_equal(got, want)
    # The data goes on exactly where the checkpoint was: the two steps lost with the job are done again,
    # and no step is skipped or done twice.
    assert lost.steps[: 3 * K] + resumed.steps == reference.steps
    assert (resumed.state.epoch, resumed.state.cursor) == (reference.state.epoch, reference.state.cursor)
    for got, want in zip(resumed.state.variables, reference.state.variables, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert sorted(os.listdir(tmp_path / "ckpt")) == [file_name(4 * K), file_name(5 * K)]


def test_a_slow_disk_never_makes_a_step_wait_and_checkpoints_due_meanwhile_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    release = threading.Event()
    writes: list[tuple[int, int]] = []

    def held(directory: Path, commits: int, values: Any, attrs: bytes) -> Path:
        writes.append((commits, threading.get_ident()))
        release.wait(120)  # a disk that takes as long as the test lets it
        return write_checkpoint(directory, commits, values, attrs)

    checkpoints = Checkpointer(tmp_path, every=K, write=held)
    job = Job(checkpoint=checkpoints)
    with caplog.at_level(logging.WARNING, logger="tf_hooks.elastic.checkpoint"):
        job.train(until_commit=3 * K)
    # Training went 2 K commits past the first checkpoint while its write was still held.
    assert job.state.commits == 3 * K and checkpoints.writing == K
    assert checkpoints.skipped == [2 * K, 3 * K]
    assert f"checkpoint of commit {2 * K} skipped: the one of commit {K} is still being written" in caplog.text
    release.set()
    assert checkpoints.wait(60)
    assert [c for c, _ in writes] == [K] and writes[0][1] != threading.get_ident()
    saved = read_checkpoint(tmp_path / file_name(K))
    for got, want in zip(saved.values, job.weights_at[K], strict=True):
        np.testing.assert_array_equal(got, want)  # the state of its commit, not of a later step
    job.train(until_commit=4 * K)  # the next one due is written again
    assert checkpoints.wait(60) and checkpoints.written == [K, 4 * K]


def _garbage(directory: Path) -> Path:
    directory.mkdir()
    path = directory / file_name(2 * K)
    path.write_bytes(b"\x00" * 64)
    return path


def _truncated(directory: Path) -> Path:
    job = Job(checkpoint=Checkpointer(directory, every=K))
    job.train(2 * K, after_commit=job.wait_for_writer)
    path = directory / file_name(2 * K)
    path.write_bytes(path.read_bytes()[:200])
    return path


def _other_model(directory: Path) -> Path:
    job = Job(checkpoint=Checkpointer(directory, every=K), units=3)
    job.train(2 * K, after_commit=job.wait_for_writer)
    return directory / file_name(2 * K)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_garbage, "it is not a zip archive"),
        (_truncated, "it is not a zip archive"),
        (_other_model, r"variable 0 \(.*\) is float32\[4, 3\] there and float32\[4, 2\] here"),
    ],
    ids=["garbage", "truncated", "another-model"],
)
def test_a_checkpoint_that_cannot_be_resumed_from_stops_the_job_naming_it(
    tmp_path: Path, make: Callable[[Path], Path], reason: str
):
    path = make(tmp_path / "ckpt")
    job = Job(checkpoint=Checkpointer(tmp_path / "ckpt", every=K), seed=1)
    before = [v.numpy() for v in job.state.variables]
    with pytest.raises(CheckpointReadError, match=f"cannot resume from the checkpoint {path}: {reason}"):
        job.train(until_commit=K)
    assert job.steps == []  # never trained from scratch instead
    for got, want in zip(job.state.variables, before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def _read_only(directory: Path) -> Callable[[int], None]:
    directory.mkdir()
    directory.chmod(0o555)
    return lambda commits: None


def _file_in_the_way(directory: Path) -> Callable[[int], None]:
    # The directory is gone after the start and a file holds its name: every write fails, also as root.
    def replace(commits: int) -> None:
        if commits == 1:
            directory.write_text("not a directory")

    return replace


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            _read_only,
            marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory"),
            id="read-only-directory",
        ),
        pytest.param(_file_in_the_way, id="a-file-in-the-way"),
    ],
)
def test_a_checkpoint_that_cannot_be_written_is_logged_and_training_goes_on(
    tmp_path: Path, make: Callable[[Path], Callable[[int], None]], caplog: pytest.LogCaptureFixture
):
    directory = tmp_path / "ckpt"
    before_commit = make(directory)
    job = Job(checkpoint=Checkpointer(directory, every=K))

    def after(commits: int) -> None:
        job.wait_for_writer(commits)
        before_commit(commits)

    with caplog.at_level(logging.ERROR, logger="tf_hooks.elastic.checkpoint"):
        job.train(until_commit=3 * K, after_commit=after)
    assert job.state.commits == 3 * K and len(job.steps) == 3 * K
    checkpoints = job.state.checkpointer
    assert checkpoints is not None and (checkpoints.written, checkpoints.failed) == ([], [K, 2 * K, 3 * K])
    assert f"checkpoint of commit {K} could not be written to {directory} (training goes on)" in caplog.text


# -- the Keras trainer, Keras 3 and Keras 2 ---------------------------------------------------------------

KERAS = {"keras3": ("0", 3), "keras2": ("1", 2)}

KERAS_JOB = """
import json, sys
import numpy as np, tensorflow as tf
import horovod.tensorflow as hvd
from tf_hooks.elastic.keras import ElasticKerasTrainer
from tf_hooks.elastic.rules import BatchRule

LOSE_AT = int(sys.argv[1])  # the batch whose end the job does not survive (0: it finishes)
OUT = sys.argv[3]  # each rank writes what it saw to OUT/rank<r>.json
hvd.init()
x = np.random.default_rng(0).normal(size=(80, 4)).astype("float32")  # 5 batches of 16 an epoch
y = (x.sum(axis=1) > 0).astype("int32")
tf.keras.utils.set_random_seed(int(sys.argv[2]))
layers = tf.keras.layers
model = tf.keras.Sequential([tf.keras.Input((4,)), layers.Dense(8, activation="relu"), layers.Dense(2)])
trainer = ElasticKerasTrainer(
    model, tf.keras.optimizers.SGD(0.1, momentum=0.9),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), x=x, y=y,
    rule=BatchRule("fixed_global", 16, 0.1), batches_per_commit=1, metrics_callback=False)  # the job's checkpoints


class Lost(Exception):
    pass


class Watch(tf.keras.callbacks.Callback):
    # Runs after the trainer's bookkeeping and before its commit: the data position of every batch, and the
    # weights the commit takes. Lets each checkpoint write end before the next is due (none is skipped).
    def __init__(self):
        super().__init__()
        self.positions, self.weights, self.start = [], {}, None

    def on_train_begin(self, logs=None):
        if self.start is None:
            self.start = [trainer.state.commits, [w.tolist() for w in model.get_weights()]]

    def on_train_batch_end(self, batch, logs=None):
        state = trainer.state
        self.positions.append([state.epoch, state.cursor])
        self.weights[state.commits + 1] = [w.tolist() for w in model.get_weights()]
        if state.checkpointer is not None:
            state.checkpointer.wait(60)
        if len(self.positions) == LOSE_AT:
            raise Lost()


watch = Watch()
try:
    history = trainer.fit(4, callbacks=[watch])
except Lost:
    history = None
trainer.close(60)
checkpointer = trainer.state.checkpointer
with open(f"{OUT}/rank{hvd.rank()}.json", "w") as out:
    json.dump({
    "keras": trainer.keras.__version__,
    "start": watch.start,
    "positions": watch.positions,
    "weights": watch.weights,
    "final": [w.tolist() for w in model.get_weights()],
    "epochs": None if history is None else [r["epoch"] for r in history],
    "steps": int(trainer.optimizer.iterations.numpy()),
    "written": None if checkpointer is None else checkpointer.written,
    "resumed_from": None if trainer.state.resumed_from is None else trainer.state.resumed_from.commits,
    "size": hvd.size(),
    }, out)
"""


def run_keras_job(
    legacy: str, lose_at: int, seed: int, checkpoints: Path | None, out: Path, ranks: int = 1
) -> list[dict[str, Any]]:
    """Runs the job in a fresh Python (``ranks`` > 1: under ``horovodrun``); what each rank saw, by rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_", "KERAS_BACKEND"))}
    env["TF_USE_LEGACY_KERAS"] = legacy
    if checkpoints is not None:  # as `submarine job run --checkpoint_path ... --checkpoint_every 4` sets them
        env.update(SUBMARINE_CHECKPOINT_PATH=str(checkpoints), SUBMARINE_CHECKPOINT_EVERY="4")
    launcher = [sys.executable]
    if ranks > 1:
        horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
        if horovodrun is None:
            pytest.skip("horovodrun is not installed (pip install -e '.[horovod]')")
        launcher = [horovodrun, "-np", str(ranks), "--gloo", "--network-interface", "lo", sys.executable]
    out.mkdir()
    result = subprocess.run(
        [*launcher, "-c", KERAS_JOB, str(lose_at), str(seed), str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    for outcome in outcomes:
        outcome["log"] = result.stdout + result.stderr
    return outcomes


@pytest.mark.parametrize("keras", sorted(KERAS))
def test_a_lost_keras_job_resumes_mid_epoch_from_its_checkpoint_and_ends_as_if_never_lost(tmp_path: Path, keras: str):
    legacy, major = KERAS[keras]
    [reference] = run_keras_job(legacy, lose_at=0, seed=0, checkpoints=None, out=tmp_path / "reference")
    assert reference["keras"].split(".")[0] == str(major)
    assert reference["steps"] == 20 and reference["epochs"] == [0, 1, 2, 3]

    directory = tmp_path / "ckpt"
    [lost] = run_keras_job(legacy, lose_at=14, seed=0, checkpoints=directory, out=tmp_path / "lost")  # 13 commits
    assert lost["written"] == [4, 8, 12]
    assert sorted(os.listdir(directory)) == [file_name(8), file_name(12)]

    [resumed] = run_keras_job(legacy, lose_at=0, seed=1, checkpoints=directory, out=tmp_path / "resumed")
    assert resumed["resumed_from"] == 12
    assert f"resuming from commit 12: checkpoint {directory / file_name(12)}" in resumed["log"]
    commits, weights = resumed["start"]
    assert commits == 12
    for got, want in zip(weights, lost["weights"]["12"], strict=True):
        np.testing.assert_array_equal(np.array(got), np.array(want))
    # Commit 12 is the 2nd batch of epoch 2 (cursor 32 of 80): the resumed job goes on with the 13th batch.
    assert lost["positions"][11] == [2, 32] and resumed["positions"][0] == [2, 48]
    assert lost["positions"][:12] + resumed["positions"] == reference["positions"]
    assert resumed["epochs"] == [0, 1, 2, 3] and resumed["steps"] == 20
    for got, want in zip(resumed["final"], reference["final"], strict=True):
        np.testing.assert_array_equal(np.array(got), np.array(want))
    assert resumed["written"] == [16, 20]


def test_a_job_lost_with_one_worker_resumes_in_a_ring_of_two_from_rank_0s_read(tmp_path: Path):
    """Rank 0 reads the checkpoint and the first sync gives it to rank 1, which reads nothing: both start
    from the checkpoint's weights and data position, and train on in step."""
    directory = tmp_path / "ckpt"
    [lost] = run_keras_job("0", lose_at=14, seed=0, checkpoints=directory, out=tmp_path / "lost")
    ranks = run_keras_job("0", lose_at=0, seed=1, checkpoints=directory, out=tmp_path / "resumed", ranks=2)
    assert [r["size"] for r in ranks] == [2, 2]
    assert [r["resumed_from"] for r in ranks] == [12, None]  # only rank 0 read the file
    assert ranks[0]["log"].count(f"resuming from commit 12: checkpoint {directory / file_name(12)}") == 2
    for rank in ranks:
        commits, weights = rank["start"]
        assert commits == 12
        for got, want in zip(weights, lost["weights"]["12"], strict=True):
            np.testing.assert_array_equal(np.array(got), np.array(want))
        # The rest of epoch 2 from cursor 32, then epoch 3: 16 samples a step, split over the two ranks.
        assert rank["positions"] == [[2, 48], [2, 64], [2, 80]] + [[3, c] for c in (16, 32, 48, 64, 80)]
        assert rank["steps"] == 20 and rank["epochs"] == [0, 1, 2, 3]
    for got, want in zip(ranks[0]["final"], ranks[1]["final"], strict=True):
        np.testing.assert_array_equal(np.array(got), np.array(want))
    assert ranks[0]["written"] == [16, 20] and ranks[1]["written"] == []
