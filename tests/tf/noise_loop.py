"""A GradientTape loop that measures the gradient noise scale with average_over_ring and reports it with
its steps (run under horovodrun by test_gradient_noise.py): each rank trains a linear model on its own
16 samples of a global batch of 16 * ranks."""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from tf_hooks.api import StepRecord
from tf_hooks.config import MetricsConfig
from tf_hooks.elastic.optimizer import average_over_ring
from tf_hooks.noise import GradientNoiseScale
from tf_hooks.sender import make_sink

LOCAL_BATCH, FEATURES, STEPS = 16, 8, 40


def main() -> None:
    import horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    rng = np.random.default_rng(rank)
    w_true = np.random.default_rng(99).normal(size=FEATURES)
    w = tf.Variable(tf.zeros(FEATURES))
    opt = tf.keras.optimizers.SGD(0.01)
    noise = GradientNoiseScale(every=2)
    noise.set_batch(LOCAL_BATCH, LOCAL_BATCH * size)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(0.5 * tf.square(tf.linalg.matvec(x, w) - y))
        grads = average_over_ring(tape.gradient(loss, [w]), noise=noise, step=opt.iterations)
        opt.apply_gradients(zip(grads, [w], strict=True))
        return loss

    sink = make_sink(MetricsConfig.from_env())
    for i in range(1, STEPS + 1):
        x = rng.normal(size=(LOCAL_BATCH, FEATURES)).astype(np.float32)
        y = (x @ w_true + rng.normal(scale=2.0, size=LOCAL_BATCH)).astype(np.float32)
        loss = step(x, y)
        sink.record(StepRecord(i, time.time(), rank, size, loss=loss, batch_size=LOCAL_BATCH, **noise.record_fields()))
    sink.close(10.0)


if __name__ == "__main__":
    main()
