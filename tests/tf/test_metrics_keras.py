"""MetricsCallback in a real Keras ``fit`` against a real in-process metrics service on port 0."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

import numpy as np  # noqa: E402  (TensorFlow brings it)

from submarine_elastic.metrics.server import MetricsServer  # noqa: E402
from submarine_elastic.metrics.store import InMemoryStore  # noqa: E402
from tf_hooks import MetricsCallback, callback_class  # noqa: E402
from tf_hooks.api import MetricsSink, NullSink, SenderStats, StepRecord  # noqa: E402

TOKEN = "keras-test-token"
FAST = {"flush_interval": 0.02, "backoff_initial": 0.02, "backoff_max": 0.1, "rpc_timeout": 5.0}

rng = np.random.default_rng(0)
X = rng.normal(size=(64, 4)).astype("float32")
Y = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def model_for(keras: ModuleType, lr: float = 0.05) -> Any:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", metrics=["mae"])
    return model


def recorder_for(keras: ModuleType) -> Any:
    class Recorder(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        """What Keras itself reports per batch, to compare with what the service received."""

        def __init__(self) -> None:
            super().__init__()
            self.loss: list[float] = []
            self.mae: list[float] = []

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.loss.append(float(logs["loss"]))
            self.mae.append(float(logs["mae"]))

    return Recorder()


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(token=TOKEN).start()
    yield srv
    srv.stop(grace=0)


def check_run(server: MetricsServer, job: str, recorder: Any, stats: SenderStats, steps: int) -> None:
    points = server.store.series(job, 10_000)
    assert [p.point.step for p in points] == list(range(1, steps + 1))
    assert [p.point.loss for p in points] == recorder.loss
    assert [p.point.user_metrics["mae"] for p in points] == recorder.mae
    assert {(p.world_size, p.worker.rank, p.worker.instance, p.point.batch_size) for p in points} == {
        (1, 0, "worker-0", 16)
    }
    assert all(p.point.learning_rate == pytest.approx(0.05) for p in points)
    assert all(p.point.step_time_seconds > 0 for p in points)
    assert all(p.point.examples_per_second == pytest.approx(16 / p.point.step_time_seconds) for p in points)
    assert (stats.recorded, stats.acked, stats.dropped, stats.rejected) == (steps, steps, 0, 0)


@pytest.mark.parametrize("flavour", ["tf.keras", "tf_keras"])
def test_fit_reports_every_step_in_order_with_keras_losses(server: MetricsServer, flavour: str) -> None:
    if flavour == "tf.keras":
        keras, callback_type = tf.keras, MetricsCallback
    else:
        keras = pytest.importorskip("tf_keras", reason="tf_keras is not installed (the tensorflow extra has it)")
        callback_type = callback_class(keras)
    assert isinstance(callback_type(), keras.callbacks.Callback)
    model = model_for(keras)
    job = "keras-" + flavour.replace(".", "-").replace("_", "-")
    metrics = callback_type(
        endpoint=server.address, job_id=job, instance="worker-0", token=TOKEN, batch_size=16, **FAST
    )
    recorder = recorder_for(keras)
    model.fit(X, Y, batch_size=16, epochs=3, verbose=0, shuffle=False, callbacks=[metrics, recorder])
    # on_train_end flushed: everything is in the store already
    check_run(server, job, recorder, metrics.sink.stats(), steps=12)
    assert metrics.errors == 0
    metrics.close()
    # fit again: steps continue from the optimizer's iterations
    model.fit(X, Y, batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=[metrics])
    assert metrics.sink.stats().dropped == 4  # closed sink: counted, not sent


def test_every_n_samples_steps(server: MetricsServer) -> None:
    model = model_for(tf.keras)
    metrics = MetricsCallback(endpoint=server.address, job_id="every-n", token=TOKEN, every_n=5, batch_size=16, **FAST)
    model.fit(X, Y, batch_size=16, epochs=5, verbose=0, shuffle=False, callbacks=[metrics])
    metrics.close()
    points = server.store.series("every-n", 100)
    assert [p.point.step for p in points] == [5, 10, 15, 20]
    # a sampled point covers the steps since the previous one
    assert all(p.point.examples_per_second == pytest.approx(16 / p.point.step_time_seconds) for p in points)


def test_steps_lost_in_the_callbacks_own_queue_are_counted_and_leave_a_gap(server: MetricsServer) -> None:
    metrics = MetricsCallback(
        endpoint=server.address, job_id="overflow", token=TOKEN, batch_size=16, queue_size=8, **FAST
    )
    metrics.on_train_begin()
    with metrics.sink._pull_lock:  # noqa: SLF001  (the sender cannot take anything: the queue overflows)
        for batch in range(500):
            metrics.on_train_batch_end(batch, {"loss": float(batch), "mae": 0.5})
    stats = metrics.close()
    summary = server.store.summary("overflow")
    assert (stats.recorded, stats.acked, stats.dropped) == (500, 8, 492)
    assert (summary.points_received, summary.points_missing) == (8, 492)
    points = server.store.series("overflow", 100)
    assert [p.point.step for p in points] == list(range(493, 501))  # the newest were kept
    assert all(p.point.loss == p.point.step - 1 for p in points)  # each with its own step's values
    assert metrics.errors == 0


def test_service_restart_mid_fit_resumes_without_doubles() -> None:
    store = InMemoryStore()
    service = MetricsServer(store, token=TOKEN).start()
    port = service.port
    model = model_for(tf.keras)
    metrics = MetricsCallback(
        endpoint=service.address,
        job_id="restart",
        instance="worker-0",
        token=TOKEN,
        batch_size=16,
        queue_size=16,
        max_stream_points=16,
        **FAST,
    )
    recorder = recorder_for(tf.keras)
    services = [service]

    class Outage(tf.keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        """Stops the service after step 40 and starts a new one (same port, same store) after step 140."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            step = int(self.model.optimizer.iterations.numpy())
            if step == 40:
                wait_for(lambda: metrics.sink.stats().acked >= 30)
                services[0].stop(grace=0)
            elif step == 140:
                wait_for(lambda: metrics.sink.stats().failed_streams >= 1)
                services.append(MetricsServer(store, port=port, token=TOKEN).start())

    try:
        model.fit(
            np.tile(X, (10, 1)),
            np.tile(Y, (10, 1)),
            batch_size=16,
            epochs=5,
            verbose=0,
            shuffle=False,
            callbacks=[Outage(), metrics, recorder],
        )
        stats = metrics.close()
    finally:
        for s in services:
            s.stop(grace=0)
    assert len(services) == 2
    points = store.series("restart", 10_000)
    steps = [p.point.step for p in points]
    assert steps == sorted(set(steps)), "a point arrived twice or out of order"
    assert steps[-1] == 200
    assert all(p.point.loss == recorder.loss[p.point.step - 1] for p in points)
    summary = store.summary("restart")
    # 100 steps while down; 48 places to keep them: the callback's queue, the sender's, one stream in flight
    assert stats.dropped >= 100 - 48
    assert stats.dropped == summary.points_missing
    assert summary.points_received + summary.points_missing == 200
    assert (stats.acked, stats.duplicates) == (summary.points_received, summary.points_duplicate)


def test_an_absent_service_never_holds_training_back_and_its_steps_are_counted_dropped() -> None:
    """The callback hands steps to a bounded queue and never waits on the network: with every connection
    refused, three fits of 200 steps end, each step is recorded, and what the queue could not keep is counted
    dropped, not silently lost. (What the callback costs a step, service up or down, is measured side by side
    in benchmarks/bench_hook_overhead.py.)"""
    with socket.socket() as s:  # bound, not listening: every connection is refused
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        x = np.tile(X, (50, 1))
        y = np.tile(Y, (50, 1))
        model = model_for(tf.keras)
        metrics = MetricsCallback(endpoint=dead, job_id="absent", batch_size=16, queue_size=64, **FAST)
        for _ in range(3):
            history = model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[metrics])
            assert len(history.history["loss"]) == 1
        stats = metrics.close(timeout=0.5)
    assert stats.recorded == 3 * 200 and stats.acked == 0 and stats.failed_streams >= 1
    assert stats.dropped == stats.recorded, "every step was refused, so every step is counted dropped"
    assert metrics.errors == 0


class ExplodingSink(MetricsSink):
    def record(self, record: StepRecord) -> None:
        raise RuntimeError("boom")

    def flush(self, timeout: float) -> bool:
        raise RuntimeError("boom")

    def close(self, timeout: float) -> SenderStats:
        return SenderStats()

    def stats(self) -> SenderStats:
        return SenderStats()


def test_a_failing_sink_never_reaches_the_training_loop() -> None:
    model = model_for(tf.keras)
    metrics = MetricsCallback(sink=ExplodingSink())
    history = model.fit(X, Y, batch_size=16, epochs=2, verbose=0, callbacks=[metrics])
    assert len(history.history["loss"]) == 2
    assert metrics.errors == 8 + 1  # every step, and the flush at the end


def test_without_endpoint_the_callback_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_METRICS_ENDPOINT", raising=False)
    metrics = MetricsCallback()
    assert isinstance(metrics.sink, NullSink)
    model_for(tf.keras).fit(X, Y, batch_size=16, epochs=1, verbose=0, callbacks=[metrics])
    assert metrics.sink.stats().recorded == 4
