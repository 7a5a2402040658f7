"""An elastic Keras ``fit`` script: a small classifier on a generated dataset, trained with Horovod
elastic, that survives any number of resizes. Keras 3 (``tf.keras`` of TensorFlow 2.21) or Keras 2
(``tf_keras``, with ``TF_USE_LEGACY_KERAS=1`` in the environment): the trainer follows the model.

What makes it elastic (compare with a plain Keras script):

    trainer = ElasticKerasTrainer(model, optimizer, loss=..., x=x, y=y, rule=BatchRule(...))  # 1.
    init_horovod()                                                                             # 2.
    history = trainer.fit(epochs)                                                              # 3.

Run it on the pseudo-cluster (add ``--env TF_USE_LEGACY_KERAS=1`` for Keras 2):
    submarine job run --name keras-demo --elastic --num_workers 2 --min_workers 1 --max_workers 3 \\
        --worker_launch_cmd 'python examples/train_keras_elastic.py --epochs 20'
or locally without YARN: horovodrun -np 2 python examples/train_keras_elastic.py
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tf_hooks.elastic.ring import init_horovod
from tf_hooks.elastic.rules import BatchRule

FEATURES = 16
CLASSES = 4


def make_dataset(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs around 4 class centres: learnable to >95% accuracy by a small MLP."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, size=samples)
    x = centres[labels] + rng.normal(0.0, 1.0, size=(samples, FEATURES))
    return x.astype(np.float32), labels.astype(np.int32)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--batch-rule", choices=("fixed_global", "fixed_local"), default="fixed_global")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--commit-every", type=int, default=4, help="commit the elastic state every K batches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-sleep", type=float, default=0.0, help="extra seconds per batch (to watch resizes)")
    p.add_argument(
        "--until-file",
        type=Path,
        default=None,
        help="train whole epochs until this file exists (rank 0 decides), at most --epochs",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="write the per-epoch history, each rank's final weights and its resize timings here",
    )
    return p.parse_args()


def main() -> None:
    args = parse_args()
    import tensorflow as tf

    from tf_hooks.elastic.keras import ElasticKerasTrainer

    x, y = make_dataset(args.samples, args.seed)
    tf.keras.utils.set_random_seed(args.seed)
    model = tf.keras.Sequential(
        [tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(32, activation="relu"), tf.keras.layers.Dense(CLASSES)]
    )
    trainer = ElasticKerasTrainer(
        model,
        tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        x=x,
        y=y,
        rule=BatchRule(args.batch_rule, args.global_batch, args.lr),
        batches_per_commit=args.commit_every,
        seed=args.seed,
    )
    hvd = init_horovod()  # everything above ran before this process joined a ring

    callbacks = []
    if args.step_sleep:
        callbacks.append(
            tf.keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: time.sleep(args.step_sleep))
        )
    until = args.until_file
    history = trainer.fit(args.epochs, callbacks=callbacks, stop=(lambda: until.exists()) if until else None)
    trainer.close()

    logits = model(x, training=False)
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y))
    rank = hvd.rank()
    if rank == 0:
        print(f"finished: {len(history)} epochs, accuracy {accuracy:.3f}", flush=True)
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        np.savez(args.log_dir / f"weights-rank{rank}.npz", *[v.numpy() for v in model.trainable_variables])
        final = {
            "accuracy": accuracy,
            "epochs": len(history),
            "steps": int(trainer.optimizer.iterations.numpy()),
            "size": hvd.size(),
            "keras": trainer.keras.__version__,
            "resets": [asdict(r) for r in trainer.resets],
        }
        (args.log_dir / f"final-rank{rank}.json").write_text(json.dumps(final))
        if rank == 0:
            (args.log_dir / "history.json").write_text(json.dumps(history))


if __name__ == "__main__":
    main()
