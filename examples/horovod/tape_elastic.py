"""A Horovod elastic ``tf.GradientTape`` script as written for ``horovodrun``: nothing of submarine-elastic in it.

It runs unchanged under ``submarine job run --elastic`` (its own ``hvd.init()`` joins the job's ring).
``hvd.elastic.TensorFlowKerasState`` needs Keras 2: run it with ``TF_USE_LEGACY_KERAS=1`` and tf_keras.

    submarine job run --name plain-tape --elastic --num_workers 2 --min_workers 1 --max_workers 3 \\
        --env TF_USE_LEGACY_KERAS=1 --worker_launch_cmd 'python examples/horovod/tape_elastic.py'

``--log-dir`` (for the tests) writes each rank's steps and ring sizes and its final weights.
"""

import argparse
import json
import os
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description="Horovod elastic GradientTape example")
parser.add_argument("--batches", type=int, default=2000)
parser.add_argument("--batches-per-commit", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--until-file", default=None, help="stop at the next commit after this file exists")
parser.add_argument("--log-dir", default=None)
args = parser.parse_args()
if args.log_dir:
    os.makedirs(args.log_dir, exist_ok=True)

hvd.init()

rng = np.random.default_rng(0)
centres = rng.normal(0.0, 2.0, size=(4, 16))
labels = rng.integers(0, 4, size=4096)
features = (centres[labels] + rng.normal(0.0, 1.0, size=(4096, 16))).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().shuffle(4096, seed=hvd.rank()).batch(32)

tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential(
    [tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(4)]
)
loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)


@tf.function
def training_step(images, labels, allreduce=True):
    with tf.GradientTape() as tape:
        loss_value = loss(labels, model(images, training=True))
    if allreduce:
        tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss_value, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss_value


data = iter(dataset)
# Build the optimizer's slots so every rank holds the same variables to synchronise.
training_step(*next(data), allreduce=False)
state = hvd.elastic.TensorFlowKerasState(model, opt, batch=0)


def on_state_reset():
    opt.lr.assign(args.lr * hvd.size())


state.register_reset_callbacks([on_state_reset])
steps_log = open(os.path.join(args.log_dir, f"steps-{os.getpid()}.jsonl"), "a") if args.log_dir else None


@hvd.elastic.run
def train(state):
    while state.batch < args.batches:
        training_step(*next(data))
        state.batch += 1
        if steps_log:
            record = {"time": time.time(), "step": state.batch, "rank": hvd.rank(), "size": hvd.size()}
            steps_log.write(json.dumps(record) + "\n")
            steps_log.flush()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if state.batch % args.batches_per_commit == 0:
            asked = bool(args.until_file and os.path.exists(args.until_file)) if hvd.rank() == 0 else False
            if hvd.broadcast_object(asked, root_rank=0, name="stop"):
                state.batch = args.batches
            state.commit()


train(state)

if args.log_dir:
    weights = [v.numpy() for v in model.trainable_variables]
    np.savez(os.path.join(args.log_dir, f"weights-rank{hvd.rank()}.npz"), *weights)
if hvd.rank() == 0:
    print(f"finished: {state.batch} batches at size {hvd.size()}", flush=True)
