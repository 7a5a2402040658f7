"""A job's TensorBoard run read back through a real TensorBoard process's HTTP API: the scalars a real Keras
``fit``, the example script and the SessionRunHook reported, and the decisions its driver took, with their
reasons. One TensorBoard serves the module, each test writing a run (a subdirectory) of its log directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")
pytest.importorskip("tensorboard", reason="TensorBoard is not installed (pip install tensorboard)")

import numpy as np  # noqa: E402  (TensorFlow brings it)

from submarine_elastic.metrics.server import MetricsServer  # noqa: E402
from submarine_elastic.protocol.proto import elastic_pb2 as pb  # noqa: E402
from tests.tf.conftest import REPO, run  # noqa: E402
from tf_hooks import MetricsCallback, MetricsHook  # noqa: E402
from tf_hooks import tensorboard as tb  # noqa: E402

TOKEN = "tensorboard-test-token"
FAST = {"flush_interval": 0.02, "backoff_initial": 0.02, "backoff_max": 0.1, "rpc_timeout": 5.0}
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 4)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")


class Board:
    """A TensorBoard process over ``logdir`` on a free port, read through its HTTP API."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0",
             "--reload_interval", "1", "--reload_multifile", "true"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            seen.append(line)
            if found := re.search(r"(http://127\.0\.0\.1:\d+)/", line):
                self.url = found.group(1)
                return
        self.process.kill()
        raise AssertionError(f"TensorBoard printed no URL:\n{''.join(seen)}")

    def get(self, path: str, **query: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(query)}", timeout=10) as reply:
            return json.load(reply)

    def scalars(self, run: str, tag: str, count: int, timeout: float = 30) -> list[tuple[int, float, float]]:
        """``(step, value, wall time)`` of ``tag`` once TensorBoard has at least ``count`` of them."""
        return [(int(s), float(v), float(w)) for w, s, v in self._wait("scalars", run, tag, count, timeout)]

    def texts(self, run: str, tag: str, count: int, timeout: float = 30) -> list[tuple[int, str]]:
        return [(int(e["step"]), e["text"]) for e in self._wait("text", run, tag, count, timeout)]

    def _wait(self, plugin: str, run: str, tag: str, count: int, timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        found: list[Any] = []
        while time.monotonic() < deadline:
            tags = self.get(f"/data/plugin/{plugin}/tags")
            if tag in tags.get(run, {}):
                found = self.get(f"/data/plugin/{plugin}/{plugin}", run=run, tag=tag)
                if len(found) >= count:
                    return found
            time.sleep(0.25)
        raise AssertionError(f"TensorBoard has {len(found)} of {count} {tag!r} in run {run!r} after {timeout} s")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    served = Board(tmp_path_factory.mktemp("tensorboard"))
    yield served
    served.stop()


def model() -> Any:
    tf.keras.utils.set_random_seed(0)
    built = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(1)])
    built.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return built


class Recorder(tf.keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """What Keras itself reports per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: list[dict[str, float]] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.logs.append({k: float(v) for k, v in logs.items()})


def as_float32(values: list[float]) -> list[float]:
    """What a TensorBoard scalar holds of each value (single precision)."""
    return [float(np.float32(v)) for v in values]


def test_keras_fit_steps_read_back_from_tensorboard_equal_what_keras_reported(board: Board) -> None:
    server = MetricsServer(token=TOKEN).start()
    try:
        # Both at once: the metrics service and the job's TensorBoard directory get every step.
        callback = MetricsCallback(
            endpoint=server.address, job_id="tb-keras", token=TOKEN, batch_size=16,
            tensorboard_dir=board.logdir / "keras", **FAST,
        )  # fmt: skip
        recorder = Recorder()
        model().fit(X, Y, batch_size=16, epochs=3, verbose=0, shuffle=False, callbacks=[callback, recorder])
        stats = callback.close()
        served = server.store.series("tb-keras", 100)
    finally:
        server.stop(grace=0)
    assert (stats.recorded, stats.acked, stats.dropped) == (12, 12, 0)
    assert [p.point.step for p in served] == list(range(1, 13))
    loss = board.scalars("keras", tb.LOSS, 12)
    assert [s for s, _, _ in loss] == list(range(1, 13))
    assert [v for _, v, _ in loss] == as_float32([logs["loss"] for logs in recorder.logs])
    assert [v for _, v, _ in board.scalars("keras", "train/mae", 12)] == as_float32([lg["mae"] for lg in recorder.logs])
    assert [v for _, v, _ in loss] == as_float32([p.point.loss for p in served])  # what the service holds too
    assert {v for _, v, _ in board.scalars("keras", tb.WORKERS, 12)} == {1.0}
    assert {v for _, v, _ in board.scalars("keras", tb.GLOBAL_BATCH, 12)} == {16.0}
    assert {v for _, v, _ in board.scalars("keras", tb.LEARNING_RATE, 12)} == {float(np.float32(0.05))}
    times = board.scalars("keras", tb.STEP_TIME, 12)
    throughput = board.scalars("keras", tb.THROUGHPUT, 12)
    assert all(t > 0 for _, t, _ in times)
    assert [v for _, v, _ in throughput] == pytest.approx([16 / t for _, t, _ in times], rel=1e-5)
    assert [v for _, v, _ in throughput] == pytest.approx([p.point.examples_per_second for p in served], rel=1e-5)


def test_only_rank_0_writes_and_nothing_without_a_directory(tmp_path: Path) -> None:
    callback = MetricsCallback(batch_size=16, rank=1, world_size=2, tensorboard_dir=tmp_path / "rank1")
    model().fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])
    callback.close()
    assert not (tmp_path / "rank1").exists()
    plain = MetricsCallback(batch_size=16)
    assert plain.config.tensorboard_dir is None
    assert type(plain.sink).__name__ == "NullSink"


def test_session_hook_steps_read_back(board: Board) -> None:
    graph = tf.Graph()
    with graph.as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        weight = tf.compat.v1.get_variable("w", initializer=2.0)
        loss = tf.square(weight) + 0.0 * tf.cast(step, tf.float32)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        hook = MetricsHook(loss, learning_rate=0.1, batch_size=4, tensorboard_dir=board.logdir / "session")
        seen = []
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=[hook]) as session:
            for _ in range(6):
                seen.append(float(session.run([train, loss])[1]))
        hook.close()
    read = board.scalars("session", tb.LOSS, 6)
    assert [s for s, _, _ in read] == list(range(1, 7))
    assert [v for _, v, _ in read] == as_float32(seen)
    assert {v for _, v, _ in board.scalars("session", tb.LEARNING_RATE, 6)} == {float(np.float32(0.1))}


def test_example_script_steps_read_back(board: Board, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = run(
        [sys.executable, str(REPO / "examples" / "train_elastic.py"), "--epochs", "1", "--log-dir", str(logs)],
        legacy=None, timeout=120, SUBMARINE_TENSORBOARD_DIR=str(board.logdir / "example"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(line) for f in sorted(logs.glob("steps-*.jsonl")) for line in f.read_text().splitlines()]
    read = board.scalars("example", tb.LOSS, len(steps))
    assert [s for s, _, _ in read] == [r["step"] for r in steps]
    assert [v for _, v, _ in read] == as_float32([r["loss"] for r in steps])
    assert {v for _, v, _ in board.scalars("example", tb.GLOBAL_BATCH, len(steps))} <= {
        float(r["global_batch"]) for r in steps
    } | {float(len(r["ids"])) for r in steps}


def test_decisions_read_back_with_their_reasons_beside_the_training(board: Board) -> None:
    run_dir = board.logdir / "decisions"
    callback = MetricsCallback(batch_size=16, tensorboard_dir=run_dir)  # the training's file of the same run
    model().fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])
    log = tb.DecisionLog(run_dir)
    log.note(pb.Target(workers=3, reason="goodput: 3 workers 1.8x faster", version=1), 2, wall_time=1000.0)
    log.note(pb.Target(workers=3, batch_size=128, reason="goodput: batch 128", version=2), 3, wall_time=1001.0)
    log.note(pb.Target(workers=2, remove=["worker-2"], reason="an arrival needs room", version=3), 3)
    callback.close()
    assert [(s, v) for s, v, _ in board.scalars("decisions", tb.DECISION_WORKERS, 3)] == [(1, 3.0), (2, 3.0), (3, 2.0)]
    assert [(s, v) for s, v, _ in board.scalars("decisions", tb.DECISION_BATCH, 1)] == [(2, 128.0)]
    texts = board.texts("decisions", tb.DECISION_REASON, 3)
    assert [s for s, _ in texts] == [1, 2, 3]
    assert "target 3 workers (2 in force): goodput: 3 workers 1.8x faster" in texts[0][1]
    assert "target 3 workers (3 in force), global batch 128: goodput: batch 128" in texts[1][1]
    assert "removing worker-2: an arrival needs room" in texts[2][1]
    assert len(board.scalars("decisions", tb.LOSS, 4)) == 4  # the training's steps stay in the run
