"""A Horovod elastic Keras script as written for ``horovodrun``: nothing of submarine-elastic in it.

It runs unchanged under ``submarine job run --elastic`` (its own ``hvd.init()`` joins the job's ring)
and under ``horovodrun -np 2 --host-discovery-script ...``. Keras 2 only, as Horovod's Keras helpers
need: run it with ``TF_USE_LEGACY_KERAS=1`` (``--env TF_USE_LEGACY_KERAS=1``) and tf_keras installed.

    submarine job run --name plain-keras --elastic --num_workers 2 --min_workers 1 --max_workers 3 \\
        --env TF_USE_LEGACY_KERAS=1 --worker_launch_cmd 'python examples/horovod/keras_elastic.py'

``--log-dir`` (for the tests) writes each rank's steps and ring sizes and its final weights.
"""

import argparse
import json
import os
import time

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description="Horovod elastic Keras example")
parser.add_argument("--epochs", type=int, default=24)
parser.add_argument("--batches-per-epoch", type=int, default=32)
parser.add_argument("--batches-per-commit", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--step-sleep", type=float, default=0.0)
parser.add_argument("--until-file", default=None, help="stop at the first epoch end after this file exists")
parser.add_argument("--checkpoint-dir", default="checkpoints")
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
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
model.compile(
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=opt,
    metrics=["accuracy"],
    experimental_run_tf_function=False,
)


def on_state_reset():
    tf.keras.backend.set_value(state.model.optimizer.lr, args.lr * hvd.size())


state = hvd.elastic.KerasState(model, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])

steps_log = open(os.path.join(args.log_dir, f"steps-{os.getpid()}.jsonl"), "a") if args.log_dir else None


class StopWhenAsked(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        asked = bool(args.until_file and os.path.exists(args.until_file)) if hvd.rank() == 0 else False
        if hvd_tf.broadcast_object(asked, root_rank=0, name="stop"):
            self.model.stop_training = True
            state.epoch = args.epochs


class Record(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if steps_log:
            step = int(opt.iterations.numpy())
            record = {"time": time.time(), "step": step, "rank": hvd.rank(), "size": hvd.size()}
            steps_log.write(json.dumps(record) + "\n")
            steps_log.flush()
        if args.step_sleep:
            time.sleep(args.step_sleep)


callbacks = [
    hvd.callbacks.MetricAverageCallback(),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state),
    Record(),
    StopWhenAsked(),
    hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
]
if hvd.rank() == 0:
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.h5")))


@hvd.elastic.run
def train(state):
    model.fit(
        dataset,
        steps_per_epoch=args.batches_per_epoch,
        callbacks=callbacks,
        epochs=args.epochs - state.epoch,
        verbose=0,
    )


train(state)

if args.log_dir:
    rank = hvd.rank()
    np.savez(os.path.join(args.log_dir, f"weights-rank{rank}.npz"), *[v.numpy() for v in model.trainable_variables])
if hvd.rank() == 0:
    print(f"finished: {int(opt.iterations.numpy())} steps at size {hvd.size()}", flush=True)
