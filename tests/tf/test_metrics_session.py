"""MetricsHook under a real MonitoredTrainingSession against a real in-process metrics service."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

import numpy as np  # noqa: E402  (TensorFlow brings it)

from submarine_elastic.metrics.server import MetricsServer  # noqa: E402
from tf_hooks import MetricsHook  # noqa: E402

TOKEN = "session-test-token"
FAST = {"flush_interval": 0.02, "backoff_initial": 0.02, "backoff_max": 0.1}


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(token=TOKEN).start()
    yield srv
    srv.stop(grace=0)


def train(steps: int, make_hook: Any) -> tuple[list[float], Any]:
    """Linear regression in graph mode; returns the loss of every run as the training loop saw it."""
    rng = np.random.default_rng(0)
    x_data = rng.normal(size=(16, 3)).astype("float32")
    y_data = x_data @ np.array([[1.0], [2.0], [-1.0]], dtype="float32")
    losses: list[float] = []
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.constant(x_data)
        w = tf.compat.v1.get_variable("w", shape=(3, 1), initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y_data))
        lr = tf.constant(0.1)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss, global_step=global_step)
        hook = make_hook(loss, lr)
        hooks = [hook, tf.compat.v1.train.StopAtStepHook(last_step=steps)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, save_checkpoint_steps=None) as session:
            while not session.should_stop():
                _, value = session.run([train_op, loss])
                losses.append(float(value))
    return losses, hook


def test_every_run_is_reported_in_order_with_its_loss(server: MetricsServer) -> None:
    losses, hook = train(
        20,
        lambda loss, lr: MetricsHook(
            loss,
            learning_rate=lr,
            extra_tensors={"loss_x2": loss * 2},
            endpoint=server.address,
            job_id="graph-job",
            instance="worker-1",
            token=TOKEN,
            batch_size=16,
            rank=1,
            world_size=2,
            **FAST,
        ),
    )
    stats = hook.close()
    points = server.store.series("graph-job", 100)
    assert len(losses) == 20
    assert [p.point.step for p in points] == list(range(1, 21))
    assert [p.point.loss for p in points] == losses
    assert [p.point.user_metrics["loss_x2"] for p in points] == [2 * v for v in losses]
    assert all(p.point.learning_rate == pytest.approx(0.1) for p in points)
    assert {(p.worker.instance, p.worker.rank, p.world_size, p.point.batch_size) for p in points} == {
        ("worker-1", 1, 2, 16)
    }
    assert (stats.recorded, stats.acked, hook.errors) == (20, 20, 0)


def test_every_n_fetches_only_on_reported_steps(server: MetricsServer) -> None:
    fetched: list[bool] = []

    class CountingHook(MetricsHook):
        def before_run(self, run_context: Any) -> Any:
            args = super().before_run(run_context)
            fetched.append(args is not None)
            return args

    losses, hook = train(
        20,
        lambda loss, lr: CountingHook(
            loss, endpoint=server.address, job_id="sampled", token=TOKEN, every_n=5, learning_rate=0.1, **FAST
        ),
    )
    hook.close()
    points = server.store.series("sampled", 100)
    assert [p.point.step for p in points] == [5, 10, 15, 20]
    assert [p.point.loss for p in points] == [losses[i - 1] for i in (5, 10, 15, 20)]
    assert all(p.point.learning_rate == 0.1 for p in points)
    assert fetched == [(i + 1) % 5 == 0 for i in range(20)]
