"""The gradient noise scale measured in the step (tf_hooks.noise): the estimator against the per-example
gradient statistics of a known problem, computed directly on one process; and both elastic helpers (the
Keras trainer, a GradientTape loop with average_over_ring) reporting it with their steps from a real ring
of two to a real metrics service."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install -e '.[tensorflow]')")

from submarine_elastic.metrics.server import MetricsServer  # noqa: E402
from tf_hooks.noise import GradientNoiseScale, NoiseConfigError, square_norm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# A linear model y = x.w* + noise, the loss 1/2 (x.w - y)^2, looked at in w = 0: each example's gradient
# is (x.w - y) x, so |G|^2 and tr(Sigma) follow from the examples' gradients of the whole data set.
SAMPLES, FEATURES = 20_000, 8


def problem() -> tuple[np.ndarray, np.ndarray, float, float]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=FEATURES) + rng.normal(scale=2.0, size=SAMPLES)).astype(np.float32)
    per_example = (-y)[:, None] * x  # each example's gradient at w = 0
    mean = per_example.astype(np.float64).mean(axis=0)
    return x, y, float(mean @ mean), float(per_example.astype(np.float64).var(axis=0).sum())


def test_the_estimate_matches_the_per_example_gradient_statistics() -> None:
    x, y, true_sq_norm, true_variance = problem()
    w = tf.Variable(tf.zeros(FEATURES))
    noise = GradientNoiseScale(every=1, smoothing=0.995)
    local, total = 16, 64  # a rank's 16 samples of a global batch of 64: four ranks, simulated
    noise.set_batch(local, total)

    def gradient(xb: tf.Tensor, yb: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(0.5 * tf.square(tf.linalg.matvec(xb, w) - yb))
        return tape.gradient(loss, [w])

    @tf.function
    def step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
        return noise.observe(gradient(xb[:local], yb[:local]), gradient(xb, yb))

    rng = np.random.default_rng(1)
    for _ in range(2000):
        ids = rng.choice(SAMPLES, total, replace=False)
        assert bool(step(x[ids], y[ids]))
    estimate = noise.estimate()
    assert estimate is not None
    assert estimate.grad_sq_norm == pytest.approx(true_sq_norm, rel=0.15)
    assert estimate.grad_variance == pytest.approx(true_variance, rel=0.15)
    assert estimate.gradient_noise_scale == pytest.approx(true_variance / true_sq_norm, rel=0.2)
    fields = noise.record_fields()
    assert fields["gradient_noise_scale"] == estimate.gradient_noise_scale
    assert (fields["grad_sq_norm"], fields["grad_variance"]) == (estimate.grad_sq_norm, estimate.grad_variance)


def test_one_worker_without_accumulation_measures_and_reports_nothing() -> None:
    noise = GradientNoiseScale(every=1)
    noise.set_batch(32, 32)
    grads = [tf.constant([1.0, 2.0])]
    assert not any(bool(noise.observe(grads, grads)) for _ in range(5))
    assert noise.estimate() is None
    assert noise.record_fields() == {}


def test_every_nth_step_is_measured_and_the_local_scale_undoes_a_loss_weight() -> None:
    noise = GradientNoiseScale(every=3, smoothing=0.5)
    noise.set_batch(1, 2, local_scale=2.0)  # the local gradient is twice its part's mean
    local, averaged = [tf.constant([4.0, 0.0])], [tf.constant([1.0, 1.0])]
    measured = [bool(noise.observe(local, averaged)) for _ in range(7)]
    assert measured == [True, False, False, True, False, False, True]
    # |g_b|^2 = |(2, 0)|^2 = 4, |g_B|^2 = 2 with b = 1, B = 2: |G|^2 = (2*2 - 4) / 1 = 0 and tr(Sigma) = 4:
    # no positive |G|^2 to divide by, so no estimate.
    assert noise.estimate() is None
    noise.set_batch(1, 2, local_scale=4.0)  # |g_b|^2 = 1: |G|^2 = 3, tr(Sigma) = -2 -> still none
    noise.observe(local, averaged)
    assert noise.estimate() is None


def test_square_norm_counts_sparse_rows_as_their_dense_form() -> None:
    sparse = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1, 1]), tf.constant([3, 2]))
    assert float(square_norm([sparse, None, tf.constant([2.0])])) == (1 + 3) ** 2 + (2 + 4) ** 2 + 4


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"every": 0}, None, "every must be a positive integer, got 0"),
        ({"smoothing": 1.0}, None, "smoothing must lie in (0, 1), got 1.0"),
        ({}, "ten", "SUBMARINE_NOISE_EVERY must be a positive integer, got 'ten'"),
    ],
)
def test_bad_settings_are_refused_naming_them(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict, env: str | None, message: str
) -> None:
    if env is not None:
        monkeypatch.setenv("SUBMARINE_NOISE_EVERY", env)
    with pytest.raises(NoiseConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GradientNoiseScale(**kwargs)


def ring(np_: int, script: list[str], server: MetricsServer, job: str) -> subprocess.Popen[str]:
    """Starts ``script`` in a Horovod ring of ``np_`` reporting to ``server`` as ``job`` (each ring with a
    rendezvous of its own, so rings may run side by side); :func:`finished` waits for it."""
    found = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("horovodrun is not installed (pip install -e '.[horovod]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_", "TF_USE_LEGACY"))}
    env.update(
        SUBMARINE_METRICS_ENDPOINT=server.address,
        SUBMARINE_JOB_ID=job,
        SUBMARINE_METRICS_TOKEN=TOKEN,
        SUBMARINE_INSECURE="1",
        SUBMARINE_NOISE_EVERY="1",
    )
    return subprocess.Popen(
        [found, "-np", str(np_), "--gloo", "--network-interface", "lo", sys.executable, *script],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> None:
    """Waits for a ring :func:`ring` started; fails with its output."""
    try:
        out, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        pytest.fail(f"the ring did not end within 300 s: {out[-3000:]}")
    assert process.returncode == 0, out[-6000:]


TOKEN = "noise-test-token"


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    srv = MetricsServer(token=TOKEN).start()
    yield srv
    srv.stop(grace=0)


def test_both_helpers_report_the_noise_scale_with_their_steps_in_a_ring_and_none_alone(server: MetricsServer) -> None:
    """A ring of two: the Keras trainer's steps and a GradientTape loop's (average_over_ring) carry the
    estimate, and the service's summary (what job show and the controller read) has it; one process
    alone reports steps without it."""
    keras_args = [str(REPO / "examples" / "train_keras_elastic.py"), "--epochs", "2", "--samples", "512"]
    rings = [
        ring(2, keras_args, server, "keras-two"),
        ring(2, [str(Path(__file__).parent / "noise_loop.py")], server, "loop-two"),
        ring(1, keras_args, server, "keras-one"),
    ]
    for process in rings:
        finished(process)
    for job in ("keras-two", "loop-two"):
        points = server.store.series(job, 10_000)
        noisy = [p.point for p in points if p.point.HasField("gradient_noise_scale")]
        assert noisy, f"{job}: no step carries the noise scale"
        ranks = {p.worker.rank for p in points if p.point.HasField("gradient_noise_scale")}
        assert ranks == {0, 1}, (
            f"{job}: {[(p.worker.rank, p.point.step, p.point.gradient_noise_scale) for p in points]}"
        )
        for point in noisy:
            assert point.gradient_noise_scale == pytest.approx(point.grad_variance / point.grad_sq_norm)
            assert point.gradient_noise_scale > 0
        noise = server.store.summary(job).noise
        assert noise is not None and noise.gradient_noise_scale > 0
    alone = server.store.series("keras-one", 10_000)
    assert alone and not any(p.point.HasField("gradient_noise_scale") for p in alone)
    assert server.store.summary("keras-one").noise is None
