"""An elastic TensorFlow training script, trained with a custom ``tf.GradientTape`` loop and Horovod elastic,
that survives any number of resizes. Two data sets: ``--data digits``, a small convolutional network on the
handwritten digits scikit-learn ships (1,797 8x8 images: 1,500 to train on, the rest held out; no download),
which learns as real training does (loss, accuracy and gradient noise scale move for some epochs); and
``--data blobs`` (the default), a few dense units on generated Gaussian blobs, learnt within a second: the
cheapest job there is, for tests that only need one.

What makes it elastic (compare with a plain Horovod script):

    hvd = ring.init_horovod()                                  # 1. join the ring when the driver says so
    state = ElasticState(model.variables + opt.variables, epoch=0, cursor=0, step=0)  # 2.
    @hvd.elastic.run                                           # 3. re-form, restore, go on
    def train(state): ...  state.commit() every --commit-every steps

Data is exactly-once per epoch across resizes (tf_hooks.elastic.data): every step takes the next
global batch after the committed cursor and splits it over the current ranks. The loss of a step is
the exact mean over the whole global batch whatever the split (local sums, gradients summed).

The job's batch may be set while it runs (its controller's goodput policy, or `submarine job flex
--batch_size`): from the commit at which the ranks take it (ElasticState.batch_setting), each step takes
that global batch, in accum_steps + 1 micro-batches whose gradients are summed before one allreduce, and the
learning rate ramps to the one the setting gives (or the batch rule's: BatchRule.lr_for_batch).

Each step also measures the gradient noise scale (tf_hooks.noise: this rank's gradient before the sum over
the ring and the summed one, every SUBMARINE_NOISE_EVERY steps) and reports it with the step's record, so a
controller running `--policy goodput` sees it and can choose the job's batch. Nothing is measured with one
worker: a step's gradient is then its only one.

With `job run --tensorboard` (SUBMARINE_TENSORBOARD_DIR) rank 0's steps also go to the job's TensorBoard run
(tf_hooks.tensorboard, through make_sink); with `--saved_model_path` (SUBMARINE_SAVED_MODEL_PATH) rank 0 exports
the trained model there as a SavedModel once training ends (tf_hooks.saved_model; the path is checked first).

Run it on the pseudo-cluster:
    submarine job run --name demo --elastic --num_workers 2 --min_workers 1 --max_workers 3 \\
        --worker_launch_cmd 'python examples/train_elastic.py --epochs 20'
or locally without YARN: horovodrun -np 2 python examples/train_elastic.py
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tf_hooks.api import StepRecord
from tf_hooks.config import MetricsConfig
from tf_hooks.elastic import data as edata
from tf_hooks.elastic import rules
from tf_hooks.elastic.optimizer import NOISE_OP_NAME
from tf_hooks.elastic.ring import init_horovod
from tf_hooks.emulate import EmulatedAccelerator
from tf_hooks.saved_model import export, export_path
from tf_hooks.sender import make_sink

if TYPE_CHECKING:
    import tensorflow as tf

FEATURES = 16
CLASSES = 4
BLOBS_SAMPLES = 4096
#: The digits data set: the first 1,500 images are trained on, the other 297 held out for the accuracy.
DIGITS_TRAIN = 1500


def make_dataset(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs around 4 class centres: learnable to >95% accuracy by a small MLP."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, size=samples)
    x = centres[labels] + rng.normal(0.0, 1.0, size=(samples, FEATURES))
    return x.astype(np.float32), labels.astype(np.int32)


def load_digits(samples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits as 8x8x1 images in [0, 1]: the first ``samples`` of the training
    part, and the held-out part. The order is the data set's, so every rank and every run sees the same."""
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    x = (digits.images[..., None] / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return x[:samples], y[:samples], x[DIGITS_TRAIN:], y[DIGITS_TRAIN:]


def load_data(name: str, samples: int | None, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training inputs and labels, then the ones the final accuracy is measured on (for the blobs, the same).

    Raises:
        SystemExit: ``samples`` is out of the data set's range.
    """
    limit = DIGITS_TRAIN if name == "digits" else None
    if samples is not None and (samples < 1 or (limit is not None and samples > limit)):
        raise SystemExit(f"--samples must be in 1..{limit or 'any'} for --data {name}, got {samples}")
    if name == "digits":
        return load_digits(samples or DIGITS_TRAIN)
    x, y = make_dataset(samples or BLOBS_SAMPLES, seed)
    return x, y, x, y


def build_model(name: str, input_shape: tuple[int, ...]) -> tf.keras.Model:
    """For the digits, two 3x3 convolutions (16 and 32 filters, the first pooled) and a dense layer over the
    10 classes (9.9k weights); for the blobs, one hidden dense layer of 32."""
    import tensorflow as tf

    layers = tf.keras.layers
    if name == "digits":
        return tf.keras.Sequential(
            [
                tf.keras.Input(input_shape),
                layers.Conv2D(16, 3, padding="same", activation="relu"),
                layers.MaxPooling2D(2),
                layers.Conv2D(32, 3, padding="same", activation="relu"),
                layers.Flatten(),
                layers.Dense(10),
            ]
        )
    return tf.keras.Sequential(
        [tf.keras.Input(input_shape), layers.Dense(32, activation="relu"), layers.Dense(CLASSES)]
    )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--data", choices=("blobs", "digits"), default="blobs", help="what is trained [blobs]")
    p.add_argument(
        "--samples", type=int, default=None, help=f"samples per epoch [blobs {BLOBS_SAMPLES}, digits {DIGITS_TRAIN}]"
    )
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--commit-every", type=int, default=4, help="commit the elastic state every K steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds per step (to watch resizes)")
    p.add_argument(
        "--emulate",
        metavar="APP",
        default=None,
        help="hold each step for the device time of APP's measured GPU profile (cifar10, bert, ...; "
        "tf_hooks.emulate): the worker's container must hold a GPU; the run's outputs say 'emulated'",
    )
    p.add_argument(
        "--total-samples",
        type=int,
        default=None,
        help="end once this many samples were trained (at a commit, whatever the epoch), at most --epochs",
    )
    p.add_argument(
        "--until-file",
        type=Path,
        default=None,
        help="train whole epochs until this file exists (then finish the epoch), at most --epochs",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="write every step (ring size, sample ids, loss) and the final weights here",
    )
    args = p.parse_args()
    if args.total_samples is not None and args.total_samples < 1:
        p.error(f"--total-samples must be at least 1, got {args.total_samples}")
    return args


def main() -> None:
    args = parse_args()
    # Refused before TensorFlow loads: an emulated accelerator needs a profile and a GPU in the container.
    device = EmulatedAccelerator.for_job(args.emulate) if args.emulate else None
    saved_model = export_path()  # submarine job run --saved_model_path: refused now if it cannot be written
    import tensorflow as tf

    x_all, y_all, x_eval, y_eval = load_data(args.data, args.samples, args.seed)
    samples = len(x_all)
    tf.keras.utils.set_random_seed(args.seed)
    model = build_model(args.data, x_all.shape[1:])
    input_spec = tf.TensorSpec([None, *x_all.shape[1:]], tf.float32)
    opt = tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)
    opt.build(model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    rule = rules.BatchRule("fixed_global", args.global_batch, args.lr)

    import horovod.tensorflow as hvd
    from horovod.common.exceptions import HostsUpdatedInterrupt

    from tf_hooks.elastic.state import ElasticState
    from tf_hooks.noise import GradientNoiseScale

    # This rank's gradient is its samples' summed gradient over the step's length: local/step_len times the
    # mean gradient of its part (the scale set_batch is told); the sum over the ranks is the step's mean.
    noise = GradientNoiseScale()

    def observe_noise(local: list[tf.Tensor], summed: list[tf.Tensor]) -> tf.Tensor:
        # Every rank runs the noise allreduce on every step, measured or not (see tf_hooks.noise).
        return noise.observe(
            local,
            summed,
            step=opt.iterations,
            average=lambda v: hvd.allreduce(v, op=hvd.Average, name=NOISE_OP_NAME),
        )

    @tf.function(
        input_signature=[
            input_spec,
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.float32),
        ]
    )
    def train_step(x: tf.Tensor, y: tf.Tensor, step_len: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            # Sum over this rank's part, divided by the whole step's length: summing over ranks
            # gives the exact mean over the global batch, however unevenly it was split.
            loss = tf.reduce_sum(loss_fn(y, model(x, training=True))) / step_len
        local = tape.gradient(loss, model.trainable_variables)
        grads = [hvd.allreduce(g, op=hvd.Sum) for g in local]
        measured = observe_noise(local, grads)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return hvd.allreduce(loss, op=hvd.Sum), measured

    # With gradient accumulation (a batch setting with accum_steps > 0): the micro-batches' gradients of this
    # rank are summed, then allreduced and applied once.
    @tf.function(
        input_signature=[
            input_spec,
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.float32),
        ]
    )
    def micro_step(x: tf.Tensor, y: tf.Tensor, step_len: tf.Tensor) -> tuple[list[tf.Tensor], tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(loss_fn(y, model(x, training=True))) / step_len
        return tape.gradient(loss, model.trainable_variables), loss

    def accumulated_step(parts: list[np.ndarray], step_len: float) -> tuple[float, bool]:
        length = tf.constant(step_len, tf.float32)
        total_grads, total_loss = micro_step(x_all[parts[0]], y_all[parts[0]], length)
        total_loss = float(total_loss)
        for ids in parts[1:]:
            grads, loss = micro_step(x_all[ids], y_all[ids], length)
            total_grads = [a + b for a, b in zip(total_grads, grads, strict=True)]
            total_loss += float(loss)
        summed = [hvd.allreduce(g, op=hvd.Sum) for g in total_grads]
        measured = bool(observe_noise(total_grads, summed))
        opt.apply_gradients(zip(summed, model.trainable_variables, strict=True))
        return float(hvd.allreduce(tf.constant(total_loss, tf.float32), op=hvd.Sum)), measured

    if os.environ.get("HOROVOD_ELASTIC") == "1":
        # Elastic Horovod reads the ring size at run time, so the step can be traced before the
        # process joins a ring: a joiner then costs the running workers no tracing time.
        train_step.get_concrete_function()
    init_horovod()  # everything above ran before this process joined a ring

    metrics = make_sink(MetricsConfig.from_env())
    # lr_ramp: (step of the last batch setting, learning rate then, learning rate it goes to)
    state = ElasticState(
        model.variables + opt.variables,
        optional=("samples",),
        epoch=0,
        cursor=0,
        step=0,
        samples=0,
        lr_ramp=(0, args.lr, args.lr),
    )
    if device is not None:
        state.register_reset_callbacks([device.reset])  # a re-formed ring may have another placement

    def done() -> bool:
        return args.total_samples is not None and (state.samples or 0) >= args.total_samples

    def learning_rate() -> float:
        changed_at, from_lr, to_lr = state.lr_ramp
        return rules.ramp_lr(state.step, changed_at, from_lr, to_lr, rule.ramp_steps)

    def on_batch_setting(_old: rules.BatchSetting | None, new: rules.BatchSetting) -> None:
        # Called on every rank at the same commit: the rate ramps from where it is to the setting's.
        state.lr_ramp = (state.step, learning_rate(), new.learning_rate or rule.lr_for_batch(new.batch_size))

    state.register_batch_callbacks([on_batch_setting])
    # With --log-dir, each step's record is written when the step is committed: a step rolled back
    # by a failure is recomputed and logged once, so the log shows exactly what the model learned from.
    pending: list[str] = []
    state.register_reset_callbacks([pending.clear])
    log = phases = None
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        log = (args.log_dir / f"steps-{os.getpid()}.jsonl").open("a", buffering=1)
        # When this process's ring was interrupted (hosts updated at a commit, a peer failed), re-initialised
        # (Horovod's rendezvous and Gloo's mesh: the reset callbacks run), and when it began its first step after
        # that (the state synced): where a re-form's pause goes (benchmarks/bench_scale.py).
        phases = (args.log_dir / f"phases-{os.getpid()}.jsonl").open("a", buffering=1)
    resumed = [True]  # the next step is the first since this process joined a ring or its ring re-formed

    def phase(name: str) -> None:
        if phases is not None:
            phases.write(json.dumps({"phase": name, "time": time.time()}) + "\n")

    def reset() -> None:
        phase("reset")
        resumed[0] = True

    state.register_reset_callbacks([reset])
    state.register_restore_callbacks([lambda: phase("failure")])  # a peer failed: back to the last commit

    def commit() -> None:
        if log is not None:
            log.write("".join(pending))
            pending.clear()
        try:
            state.commit()
        except HostsUpdatedInterrupt:
            phase("interrupt")
            raise

    @hvd.elastic.run
    def train(state: ElasticState) -> None:
        while state.epoch < args.epochs and not done():
            perm = edata.epoch_permutation(samples, state.epoch, args.seed)
            while state.cursor < samples and not done():
                size, rank = hvd.size(), hvd.rank()
                setting = state.batch_setting
                global_batch = setting.batch_size if setting is not None else rule.global_batch(size)
                micro = setting.micro_batches if setting is not None else 1
                step_len = edata.step_length(samples, state.cursor, global_batch)
                lr = learning_rate()
                if abs(float(opt.learning_rate) - lr) > 1e-12 * lr:
                    opt.learning_rate = lr
                if resumed[0]:
                    phase("synced")
                    resumed[0] = False
                started = time.perf_counter()
                if micro == 1:
                    ids = edata.shard(perm, state.cursor, global_batch, rank, size)
                    noise.set_batch(len(ids), step_len, len(ids) / step_len if len(ids) else 1.0)
                    step_loss, step_measured = train_step(x_all[ids], y_all[ids], tf.constant(step_len, tf.float32))
                    loss, measured = float(step_loss), bool(step_measured)
                else:
                    parts = edata.micro_shards(perm, state.cursor, global_batch, micro, rank, size)
                    ids = np.concatenate(parts)
                    noise.set_batch(len(ids), step_len, len(ids) / step_len if len(ids) else 1.0)
                    loss, measured = accumulated_step(parts, float(step_len))
                if device is not None:
                    device.hold(started, step_len, micro)
                took = time.perf_counter() - started
                # To the metrics service when the job names one (SUBMARINE_METRICS_ENDPOINT); else a no-op.
                metrics.record(
                    StepRecord(
                        step=state.step,
                        wall_time=time.time(),
                        rank=rank,
                        world_size=size,
                        loss=loss,
                        examples_per_second=len(ids) / took,
                        step_time_seconds=took,
                        batch_size=max(1, len(ids)),
                        learning_rate=lr,
                        # The smoothed estimate, on the steps that measured once there is one.
                        **(noise.record_fields() if measured else {}),
                    )
                )
                if log is not None:
                    record = {
                        "epoch": state.epoch,
                        "step": state.step,
                        "rank": rank,
                        "size": size,
                        "ids": ids.tolist(),
                        "global_batch": global_batch,
                        "accum_steps": micro - 1,
                        "lr": lr,
                        # The whole step's ids: a step is committed once any rank committed it, so the
                        # log stays complete even when a rank dies before writing its own records.
                        "batch": perm[state.cursor : state.cursor + step_len].tolist(),
                        "loss": loss,
                        "time": time.time(),
                    }
                    if measured:
                        record["noise"] = noise.record_fields()
                    pending.append(json.dumps(record) + "\n")
                state.cursor += step_len
                state.samples = (state.samples or 0) + step_len
                state.step += 1
                if args.step_sleep:
                    time.sleep(args.step_sleep)
                if state.step % args.commit_every == 0 or done():
                    commit()
            if state.cursor >= samples:
                state.epoch += 1
                state.cursor = 0
            commit()
            if args.until_file is not None and args.until_file.exists():
                break

    train(state)
    if saved_model is not None and hvd.rank() == 0:
        export(model, saved_model)  # after the last commit: the weights every rank ends with
    state.close(timeout=60.0)  # a checkpoint still being written (submarine job run --checkpoint_path)
    metrics.close(timeout=5.0)
    logits = model(x_eval, training=False)
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_eval))
    if hvd.rank() == 0:
        print(f"finished: {state.step} steps, {state.epoch} epochs, accuracy {accuracy:.3f}", flush=True)
        if device is not None:
            print(device.stats.summary(), flush=True)
    if args.log_dir is not None:
        np.savez(args.log_dir / f"weights-rank{hvd.rank()}.npz", *[v.numpy() for v in model.trainable_variables])
        (args.log_dir / f"final-rank{hvd.rank()}.json").write_text(
            json.dumps(
                {
                    "accuracy": accuracy,
                    "step": state.step,
                    "epoch": state.epoch,
                    "samples": state.samples,
                    "size": hvd.size(),
                    **({"emulated": args.emulate, "emulation": vars(device.stats)} if device is not None else {}),
                }
            )
        )


if __name__ == "__main__":
    main()
