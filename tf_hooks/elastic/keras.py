"""Keras ``fit`` under Horovod elastic, with Keras 2 (``tf_keras``) only.

Horovod 0.28's Keras integration is written for Keras 2. From TensorFlow 2.16 ``tf.keras`` is Keras 3
unless ``TF_USE_LEGACY_KERAS=1`` is set (with ``tf_keras`` installed), and under Keras 3 Horovod's
``KerasState`` and callbacks fail while its ``DistributedOptimizer`` silently skips the allreduce in
``fit``: the ranks train apart. :func:`require_keras2` refuses that case with a message that says
what to do, and :class:`ElasticKerasTrainer` calls it before it imports anything of
``horovod.tensorflow.keras``. Keras 3 users train elastically with a custom ``tf.GradientTape`` loop
and :class:`tf_hooks.elastic.state.ElasticState` (``examples/train_elastic.py``).

:class:`ElasticKerasTrainer` wires up what a ``fit`` script needs under elastic Horovod:

- the model compiled with Horovod's ``DistributedOptimizer``, its slots built up front (a joiner then
  has the same variables as the ring it joins);
- ``hvd.elastic.KerasState`` holding model, optimizer, epoch, batch, data cursor, ring size and history;
- Horovod's callbacks: ``UpdateBatchStateCallback`` / ``UpdateEpochStateCallback`` (the batch counted
  from the committed one), ``MetricAverageCallback``, and ``CommitStateCallback`` last, so a commit
  records everything the other callbacks did for that batch (the last batch of an epoch is
  committed at the epoch end, after the epoch's bookkeeping);
- the learning rate of a :class:`~tf_hooks.elastic.rules.BatchRule` after every resize, with the
  momentum-compensation ramp;
- exactly-once data within an epoch (:mod:`tf_hooks.elastic.data`), each rank's loss weighted so that
  a step optimises the exact mean over the global batch, however it is split;
- the :class:`~tf_hooks.MetricsCallback`;
- a check at every epoch end that all ranks hold the same weights (fails loudly otherwise).

A script (the three elastic lines are marked)::

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")     # before TensorFlow is imported
    import tensorflow as tf
    from tf_hooks.elastic.keras import ElasticKerasTrainer
    from tf_hooks.elastic.ring import init_horovod
    from tf_hooks.elastic.rules import BatchRule

    model = tf.keras.Sequential([...])
    trainer = ElasticKerasTrainer(                         # 1. state, callbacks, traced step
        model, tf.keras.optimizers.SGD(0.05, momentum=0.9), loss=..., metrics=["accuracy"],
        x=x, y=y, rule=BatchRule("fixed_global", 64, 0.05), batches_per_commit=4)
    init_horovod()                                         # 2. join the ring
    history = trainer.fit(epochs=10)                       # 3. fit, re-formed on every resize
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tf_hooks.api import TfHooksError
from tf_hooks.elastic import data as edata
from tf_hooks.elastic.rules import BatchRule

logger = logging.getLogger(__name__)

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
#: The collectives whose failure Horovod's ``elastic.run`` turns into a ring re-form.
_HOROVOD_OP = re.compile(r"Horovod(Allreduce|Allgather|Broadcast)")
#: The values TensorFlow's lazy ``tf.keras`` loader takes as "use tf_keras".
_LEGACY_ON = ("1", "true", "True")


class ElasticKerasError(TfHooksError):
    """Base of the errors of the Keras elastic helpers."""


class KerasVersionError(ElasticKerasError):
    """The Keras in use is not Keras 2: Horovod's Keras helpers would fail or train unsynchronised."""


class RanksDivergedError(ElasticKerasError):
    """The ranks hold different weights at an epoch end: the gradients were not allreduced."""


# -- the guard ---------------------------------------------------------------------------------


def keras_problem(keras_version: str | None, legacy_env: str | None) -> str | None:
    """Why Horovod's Keras helpers cannot be used, or None when they can.

    ``keras_version`` is the version of the Keras that ``tf.keras`` resolved to (None: unknown);
    ``legacy_env`` the value of ``TF_USE_LEGACY_KERAS``. Pure: reads nothing.
    """
    major = _major(keras_version)
    if major is not None and major < 3:
        return None
    found = f"Keras {keras_version}" if major is not None else f"a Keras of unknown version ({keras_version!r})"
    if legacy_env in _LEGACY_ON:
        cause = (
            f"{LEGACY_KERAS_ENV}={legacy_env} is set but tf.keras is {found}: tf_keras is not installed "
            f"(pip install tf_keras matching TensorFlow, e.g. tf_keras==2.18.0), or the variable was set "
            f"after tf.keras was first used in this process"
        )
    else:
        cause = f"tf.keras is {found} ({LEGACY_KERAS_ENV} is not set)"
    return (
        f"{cause}. Horovod's Keras helpers need Keras 2: under Keras 3 its KerasState and callbacks fail and "
        f"its DistributedOptimizer does not allreduce in fit, so the ranks would train unsynchronised. "
        f"Either set {LEGACY_KERAS_ENV}=1 before TensorFlow is imported (submarine job run --env "
        f"{LEGACY_KERAS_ENV}=1, or os.environ.setdefault('{LEGACY_KERAS_ENV}', '1') at the top of the script) "
        f"with tf_keras installed, and build the model with tf.keras; or train with a custom tf.GradientTape "
        f"loop and tf_hooks.elastic.state.ElasticState (see examples/train_elastic.py)."
    )


def keras_version(keras: Any) -> str | None:
    """The version of the Keras package behind a Keras module (``tf.keras``, ``tf_keras``, ``keras``)."""
    model = getattr(keras, "Model", None)
    return _package_version(model.__module__) if model is not None else None


def _package_version(module: str) -> str | None:
    version = getattr(sys.modules.get(module.split(".")[0]), "__version__", None)
    return str(version) if version else None


def keras_problem_now() -> str | None:
    """:func:`keras_problem` for the ``tf.keras`` of this process (resolves it; imports TensorFlow)."""
    import tensorflow as tf

    return keras_problem(keras_version(tf.keras), os.environ.get(LEGACY_KERAS_ENV))


def require_keras2(model: Any = None) -> ModuleType:
    """Returns ``tf.keras`` when it is Keras 2 (and ``model``, if given, is one of its models).

    Call it before anything of ``horovod.tensorflow.keras`` is imported: that module binds to
    whatever ``tf.keras`` is at import time. Resolves ``tf.keras`` if nothing has yet.

    Raises:
        KerasVersionError: ``tf.keras`` is Keras 3, or ``model`` is not a ``tf.keras`` model; the
            message says how to get Keras 2 or which path to take instead.
    """
    import tensorflow as tf

    keras: ModuleType = tf.keras
    problem = keras_problem(keras_version(keras), os.environ.get(LEGACY_KERAS_ENV))
    if problem is not None:
        raise KerasVersionError(problem)
    if model is not None and not isinstance(model, keras.Model):
        kind = type(model)
        raise KerasVersionError(
            f"the model is a {kind.__module__}.{kind.__qualname__} (Keras {_package_version(kind.__module__)}), not a "
            f"tf.keras model: with {LEGACY_KERAS_ENV}=1 build it with tf.keras (or tf_keras), not with the "
            f"keras package, which is Keras 3; or train it with a custom tf.GradientTape loop and "
            f"tf_hooks.elastic.state.ElasticState (see examples/train_elastic.py)."
        )
    return keras


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


# -- the trainer -------------------------------------------------------------------------------


@dataclass
class ResetTiming:
    """One ring re-form as this process saw it (``time.monotonic`` seconds; None: not reached).

    ``left_fit``: the interrupt (a resize or a lost peer) left ``model.fit``; ``reformed``: Horovod
    shut down and initialised the new ring (reset callbacks run); ``resumed``: the first batch at
    the new size ended.
    """

    reason: str
    size_before: int
    left_fit: float | None = None
    reformed: float | None = None
    size_after: int | None = None
    resumed: float | None = None


class ElasticKerasTrainer:
    """Keras 2 ``fit`` under Horovod elastic: one object that holds the state and the callbacks.

    Build it before :func:`tf_hooks.elastic.ring.init_horovod` (a joiner then does this work while
    the ring keeps training), then call :meth:`fit` after.

    Args:
        model: a built ``tf.keras`` (Keras 2) model; compiled here.
        optimizer: a ``tf.keras`` optimizer with a float learning rate (the rule sets it); wrapped in
            Horovod's ``DistributedOptimizer`` (as :attr:`optimizer`) unless it is one already.
        loss: the Keras loss, with its default reduction (the per-rank weighting relies on it).
        x, y: the whole training set as arrays (every rank has it); each step takes its share.
        rule: batch size and learning rate per ring size; its ``base_lr`` overrides the optimizer's.
        metrics: Keras metrics, as for ``compile``; averaged over the ranks at every epoch end.
        seed: seed of the per-epoch permutation.
        batches_per_commit: commit the state every K batches (and at every epoch end). A commit is
            where a resize is noticed, and what a lost peer costs at most.
        metrics_callback: True: a :class:`~tf_hooks.MetricsCallback` configured from the environment;
            a callback instance; or False for none.
        check_sync: compare a fingerprint of the weights across the ranks at every epoch end.
        compile_kwargs: more arguments to ``model.compile``.

    Raises:
        KerasVersionError: as :func:`require_keras2`.
        ValueError: unusable data, ``batches_per_commit`` < 1, or a learning-rate schedule (the rule
            and the schedule would both set the rate).
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any,
        *,
        loss: Any,
        x: np.ndarray,
        y: np.ndarray,
        rule: BatchRule,
        metrics: Sequence[Any] | None = None,
        seed: int = 0,
        batches_per_commit: int = 1,
        metrics_callback: Any = True,
        check_sync: bool = True,
        **compile_kwargs: Any,
    ) -> None:
        keras = require_keras2(model)
        if len(x) != len(y) or len(x) < 1:
            raise ValueError(f"x and y must hold the same number (>= 1) of samples, got {len(x)} and {len(y)}")
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        if isinstance(getattr(optimizer, "learning_rate", None), keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("optimizer: pass a float learning rate; the BatchRule sets it on every resize")
        import horovod.tensorflow as hvd
        import horovod.tensorflow.keras as hvd_keras
        import tensorflow as tf

        self._tf, self._hvd = tf, hvd
        self.model = model
        self.rule = rule
        self.x, self.y = x, y
        self.seed = seed
        self.check_sync = check_sync
        self.resets: list[ResetTiming] = []

        if not hasattr(optimizer, "_allreduce_grads"):
            optimizer = hvd_keras.DistributedOptimizer(optimizer)
        self.optimizer = optimizer
        model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics or []), **compile_kwargs)
        optimizer.build(model.trainable_variables)
        self.state = hvd_keras.elastic.KerasState(
            model, optimizer, epoch=0, batch=0, cursor=0, workers=0, ramp_from_lr=0.0, resized_at=0, history=[]
        )
        self.state.register_reset_callbacks([self._on_reset])

        types = _callback_types(keras, hvd_keras)
        self._progress = types.Progress(self)
        # Horovod's callbacks take the backend of the Keras its module imported (Keras 3 under TF 2.18).
        average = hvd_keras.callbacks.MetricAverageCallback()
        average.backend = keras.backend
        self.metrics_callback: Any = None
        if metrics_callback is True:
            from tf_hooks.keras import callback_class

            self.metrics_callback = callback_class(keras)(batch_size=self._local_batch)
        elif metrics_callback is not False:
            self.metrics_callback = metrics_callback
        self._before_user = [
            average,
            self._progress,
            types.BatchState(self.state),
            hvd_keras.elastic.UpdateEpochStateCallback(self.state),
        ]
        if self.metrics_callback is not None:
            self._before_user.append(self.metrics_callback)
        self._commit = types.Commit(self.state, batches_per_commit=batches_per_commit)
        self._element_spec = (
            tf.TensorSpec((None, *x.shape[1:]), tf.as_dtype(x.dtype)),
            tf.TensorSpec((None, *y.shape[1:]), tf.as_dtype(y.dtype)),
            tf.TensorSpec((None,), tf.float32),
        )
        self._warm_up()

    @property
    def callbacks(self) -> list[Any]:
        """The callbacks :meth:`fit` passes, in order, for a script that runs its own loop."""
        return [*self._before_user, self._commit]

    def fit(
        self,
        epochs: int,
        *,
        callbacks: Sequence[Any] = (),
        stop: Callable[[], bool] | None = None,
        verbose: int = 0,
    ) -> list[dict[str, Any]]:
        """Trains until the committed epoch count reaches ``epochs``, through any number of resizes.

        Blocks until then. One ``model.fit`` per epoch (or rest of an epoch, after a resize), on
        this rank's share of the data from the committed cursor. ``callbacks`` run after the
        trainer's and before the commit. ``stop``, asked on rank 0 after each epoch, ends training
        early on every rank when it returns True.

        Returns the per-epoch history (committed with the state, so a joiner has it too): the
        epoch, ring size, global batch, learning rate, wall time and the rank-averaged logs.

        Raises:
            RanksDivergedError: the ranks' weights differ at an epoch end.
            ElasticKerasError: TensorFlow failed in ``fit`` other than in a Horovod collective.
            Whatever else ``model.fit`` raises that is not a resize or a lost peer.
        """
        from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

        hvd = self._hvd
        all_callbacks = [*self._before_user, *callbacks, self._commit]

        @hvd.elastic.run
        def train(state: Any) -> list[dict[str, Any]]:
            while state.epoch < epochs:
                try:
                    dataset, steps = self._epoch_dataset()
                    self.model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=verbose, callbacks=all_callbacks)
                except (HostsUpdatedInterrupt, HorovodInternalError, self._tf.errors.UnknownError) as exc:
                    left = time.monotonic()
                    if isinstance(exc, self._tf.errors.UnknownError) and not _HOROVOD_OP.search(exc.message):
                        # Horovod's elastic.run would swallow it and return None: training would just end.
                        raise ElasticKerasError(f"model.fit failed: {exc.message}") from exc
                    self.resets.append(ResetTiming(type(exc).__name__, size_before=hvd.size(), left_fit=left))
                    raise
                if stop is not None:
                    verdict = bool(stop()) if hvd.rank() == 0 else False
                    if hvd.broadcast_object(verdict, root_rank=0, name="elastic_keras_stop"):
                        break
            history: list[dict[str, Any]] = state.history
            return history

        return train(self.state)

    def close(self, timeout: float | None = None) -> None:
        """Flushes and stops the metrics callback's sender (blocks at most ``timeout`` s). Never raises."""
        if self.metrics_callback is not None and hasattr(self.metrics_callback, "close"):
            self.metrics_callback.close(timeout)

    # -- helpers ------------------------------------------------------------------------------

    def _local_batch(self) -> int:
        hvd = self._hvd
        return self.rule.local_batch(hvd.size(), hvd.rank())

    def _epoch_dataset(self) -> tuple[Any, int]:
        """This rank's share of the rest of the committed epoch, one element per step; and the steps."""
        hvd, tf = self._hvd, self._tf
        size, rank = hvd.size(), hvd.rank()
        n = len(self.x)
        global_batch = self.rule.global_batch(size)
        perm = edata.epoch_permutation(n, self.state.epoch, self.seed)
        start = self.state.cursor
        x, y = self.x, self.y

        def steps() -> Any:
            cursor = start
            while cursor < n:
                step_len = edata.step_length(n, cursor, global_batch)
                ids = edata.shard(perm, cursor, global_batch, rank, size)
                # Keras averages the loss over this rank's part and Horovod over the ranks; with this
                # weight the result is the mean over the whole step, also for uneven (or empty) parts.
                weight = np.full(len(ids), size * len(ids) / step_len, np.float32)
                yield x[ids], y[ids], weight
                cursor += step_len

        count = -(-(n - start) // global_batch)
        return tf.data.Dataset.from_generator(steps, output_signature=self._element_spec), count

    def _warm_up(self) -> None:
        """Traces the train step now when Horovod allows it, so a joiner does not trace in the ring.

        Before ``hvd.init`` that needs ``HOROVOD_ELASTIC=1`` (the job spec sets it): the gradient
        average then reads the ring size at run time instead of baking it into the trace.
        """
        if os.environ.get("HOROVOD_ELASTIC") != "1" and not self._hvd.is_initialized():
            return
        tf = self._tf

        def empty() -> Any:
            return iter(())

        probe = tf.data.Dataset.from_generator(empty, output_signature=self._element_spec)
        self.model.make_train_function()
        self.model.train_function.get_concrete_function(iter(probe))

    def _on_reset(self) -> None:
        if self.resets and self.resets[-1].reformed is None:
            self.resets[-1].reformed = time.monotonic()
            self.resets[-1].size_after = self._hvd.size()


def _fingerprint_problem(fingerprints: np.ndarray) -> str | None:
    """None when every rank's row equals rank 0's, else which ranks differ."""
    differ = [r for r in range(1, len(fingerprints)) if not np.array_equal(fingerprints[r], fingerprints[0])]
    if not differ:
        return None
    return (
        f"ranks {differ} hold other weights than rank 0 at an epoch end (fingerprints "
        f"{fingerprints.tolist()}): the gradients were not allreduced; under Keras 3 Horovod's "
        f"DistributedOptimizer does that silently (see tf_hooks.elastic.keras)"
    )


class _CallbackTypes:
    """The trainer's callback classes, built on the Keras 2 module's ``Callback`` once it is known."""

    def __init__(self, keras: ModuleType, hvd_keras: ModuleType) -> None:
        class BatchState(hvd_keras.elastic.UpdateBatchStateCallback):  # type: ignore[name-defined]
            """``state.batch``: the batches done in this epoch, counted from the committed one.

            Horovod's stores Keras's batch index, which restarts at 0 in the ``fit`` after a reset,
            and shortens ``params['steps']``, which only the progress bar reads; the trainer's data
            already starts at the committed cursor.
            """

            def on_train_begin(self, logs: Any = None) -> None:
                self._start = self.state.batch

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                pass

            def on_batch_end(self, batch: int, logs: Any = None) -> None:
                self.state.batch = self._start + batch + 1

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                self._start = 0
                super().on_epoch_end(epoch, logs)

        class Commit(hvd_keras.elastic.CommitStateCallback):  # type: ignore[name-defined]
            """Horovod's, except that the last batch of the epoch is committed at the epoch end.

            A resize noticed in a commit leaves ``fit`` at once: at the last batch that would skip
            the epoch's end (epoch count, history) and commit an epoch with no batch left in it.
            """

            def on_batch_end(self, batch: int, logs: Any = None) -> None:
                if batch + 1 != self.params.get("steps"):
                    super().on_batch_end(batch, logs)

        class Progress(keras.callbacks.Callback):  # type: ignore[name-defined]
            """Cursor, learning rate, history and the weights check; runs before the commit."""

            def __init__(self, trainer: ElasticKerasTrainer) -> None:
                super().__init__()
                self.trainer = trainer
                self._step = 0
                self._global_batch = 1
                self._lr: float | None = None

            def on_train_begin(self, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                size = trainer._hvd.size()
                self._global_batch = trainer.rule.global_batch(size)
                self._step = int(trainer.optimizer.iterations.numpy())
                if state.workers != size:
                    # Ramp from the rate in effect now, even in the middle of the last resize's ramp.
                    state.ramp_from_lr = (
                        trainer.rule.lr_at(self._step, state.resized_at, state.ramp_from_lr, state.workers)
                        if state.workers
                        else 0.0
                    )
                    state.resized_at = self._step
                    state.workers = size
                self._lr = None
                self._set_lr()

            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                rule, state = self.trainer.rule, self.trainer.state
                if self._step - state.resized_at <= rule.ramp_steps:
                    self._set_lr()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                state.cursor += edata.step_length(len(trainer.x), state.cursor, self._global_batch)
                self._step += 1
                if trainer.resets and trainer.resets[-1].resumed is None:
                    trainer.resets[-1].resumed = time.monotonic()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                if trainer.check_sync:
                    self._check_sync()
                record = {
                    "epoch": state.epoch,
                    "workers": state.workers,
                    "global_batch": self._global_batch,
                    "learning_rate": self._lr,
                    "time": time.time(),
                }
                record.update({k: float(v) for k, v in (logs or {}).items()})
                state.history = [*state.history, record]  # a new list: the committed copy must not change
                state.cursor = 0

            def _set_lr(self) -> None:
                rule, state = self.trainer.rule, self.trainer.state
                lr = rule.lr_at(self._step, state.resized_at, state.ramp_from_lr, state.workers)
                if lr != self._lr:
                    self.trainer.optimizer.learning_rate = lr
                    self._lr = lr

            def _check_sync(self) -> None:
                tf, hvd = self.trainer._tf, self.trainer._hvd
                values = [tf.cast(v, tf.float64) for v in self.trainer.model.trainable_variables]
                fingerprint = tf.stack(
                    [tf.add_n([tf.reduce_sum(v) for v in values]), tf.add_n([tf.reduce_sum(v * v) for v in values])]
                )
                everyone = hvd.allgather(tf.reshape(fingerprint, (1, 2)), name="elastic_keras_weights").numpy()
                problem = _fingerprint_problem(everyone)
                if problem is not None:
                    raise RanksDivergedError(problem)

        self.BatchState = BatchState
        self.Commit = Commit
        self.Progress = Progress


_types: dict[ModuleType, _CallbackTypes] = {}


def _callback_types(keras: ModuleType, hvd_keras: ModuleType) -> _CallbackTypes:
    if keras not in _types:
        _types[keras] = _CallbackTypes(keras, hvd_keras)
    return _types[keras]


__all__ = [
    "ElasticKerasError",
    "ElasticKerasTrainer",
    "KerasVersionError",
    "LEGACY_KERAS_ENV",
    "RanksDivergedError",
    "ResetTiming",
    "keras_problem",
    "keras_problem_now",
    "keras_version",
    "require_keras2",
]
