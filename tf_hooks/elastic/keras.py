"""Keras ``fit`` under Horovod elastic, with Keras 3 (``tf.keras`` from TensorFlow 2.16) or Keras 2 (``tf_keras``).

Horovod 0.28's Keras integration is written for Keras 2: under Keras 3 its ``KerasState`` and callbacks
fail and its ``DistributedOptimizer`` silently skips the allreduce in ``fit``, so the ranks train apart.
:class:`ElasticKerasTrainer` uses none of it, and takes the same path under both Keras versions:

- the gradients are averaged over the ring by :func:`tf_hooks.elastic.optimizer.allreduce_gradients`,
  which wraps the optimizer's own update (``apply`` in Keras 3, ``apply_gradients`` in Keras 2), with
  the optimizer's slots built up front (a joiner then has the same variables as the ring it joins);
- the elastic state is :class:`tf_hooks.elastic.state.ElasticState` over every variable of the model and
  of the optimizer (host copies at every commit, assigned back on a rollback, broadcast from rank 0 at
  every re-form), with epoch, data cursor, ring size, learning-rate ramp and history as attributes,
  checkpointed every K commits when the job has a checkpoint path (and resumed from when the whole job was lost);
- its own callbacks, built on the model's Keras: the metrics averaged over the ranks at every epoch end;
  the cursor, the learning rate of a :class:`~tf_hooks.elastic.rules.BatchRule` after every resize (with
  the momentum-compensation ramp), the history and the weights check; and the commit every K batches,
  last, so that a commit records everything the other callbacks did for that batch (the last batch of an
  epoch is committed at the epoch end, after the epoch's bookkeeping);
- exactly-once data within an epoch (:mod:`tf_hooks.elastic.data`), each rank's loss weighted so that
  a step optimises the exact mean over the global batch, however it is split;
- the :class:`~tf_hooks.MetricsCallback`;
- a check at every epoch end that all ranks hold the same weights (fails loudly otherwise);
- a batch set while the job runs (:class:`~tf_hooks.elastic.rules.BatchSetting`), applied from the commit
  at which the state takes it (see :class:`ElasticKerasTrainer`).

Keras 3 must run on its TensorFlow backend (the default; ``KERAS_BACKEND``), where Horovod's ops are.
A script (the three elastic lines are marked)::

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

The guard of the first half of this module (:func:`keras_problem`) is for plain Horovod scripts: it says
why Horovod's own Keras helpers cannot be used in this process (:mod:`tf_hooks.elastic.autojoin`).
"""

from __future__ import annotations

import inspect
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
from tf_hooks.elastic.checkpoint import Checkpointer
from tf_hooks.elastic.optimizer import allreduce_gradients, is_allreducing
from tf_hooks.elastic.rules import BatchRule, BatchSetting, ramp_lr

logger = logging.getLogger(__name__)

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
#: The collectives whose failure Horovod's ``elastic.run`` turns into a ring re-form.
_HOROVOD_OP = re.compile(r"Horovod(Allreduce|Allgather|Broadcast)")
#: The values TensorFlow's lazy ``tf.keras`` loader takes as "use tf_keras".
_LEGACY_ON = ("1", "true", "True")


class ElasticKerasError(TfHooksError):
    """Base of the errors of the Keras elastic helpers."""


class KerasVersionError(ElasticKerasError):
    """The Keras in use cannot run what was asked: Horovod's Keras helpers under Keras 3, or the trainer
    with a model of a Keras it does not run (not Keras 2 or 3, or Keras 3 off its TensorFlow backend)."""


class RanksDivergedError(ElasticKerasError):
    """The ranks hold different weights at an epoch end: the gradients were not allreduced."""


# -- the guard of Horovod's own Keras helpers (plain scripts) ----------------------------------


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
            f"(pip install tf_keras matching TensorFlow, e.g. tf_keras==2.21.0 for TensorFlow 2.21), or the "
            f"variable was set after tf.keras was first used in this process"
        )
    else:
        cause = f"tf.keras is {found} ({LEGACY_KERAS_ENV} is not set)"
    return (
        f"{cause}. Horovod's Keras helpers need Keras 2: under Keras 3 its KerasState and callbacks fail and "
        f"its DistributedOptimizer does not allreduce in fit, so the ranks would train unsynchronised. "
        f"Either set {LEGACY_KERAS_ENV}=1 before TensorFlow is imported (submarine job run --env "
        f"{LEGACY_KERAS_ENV}=1, or os.environ.setdefault('{LEGACY_KERAS_ENV}', '1') at the top of the script) "
        f"with tf_keras installed, and build the model with tf.keras; or train Keras 3 with "
        f"tf_hooks.elastic.keras.ElasticKerasTrainer (fit, see examples/train_keras_elastic.py) or with a custom "
        f"tf.GradientTape loop and tf_hooks.elastic.state.ElasticState (see examples/train_elastic.py)."
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


def _major(version: str | None) -> int | None:
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


# -- the trainer -------------------------------------------------------------------------------


def model_keras(model: Any) -> ModuleType:
    """The Keras package ``model`` belongs to: ``keras`` (Keras 3) or ``tf_keras`` (Keras 2).

    Whatever ``tf.keras`` resolves to in this process, the trainer follows the model: a ``tf_keras`` model
    trains with Keras 2 callbacks even with Keras 3 imported, and the other way round.

    Raises:
        KerasVersionError: ``model`` is not a Keras model, its Keras is older than 2 or newer than 3, or it
            is Keras 3 on a backend other than TensorFlow; the message names the model's class and Keras.
    """
    kind = type(model)
    package = sys.modules.get(kind.__module__.split(".")[0])
    version = _package_version(kind.__module__)
    what = f"the model is a {kind.__module__}.{kind.__qualname__}"
    if package is None or not isinstance(model, getattr(package, "Model", ())):
        raise KerasVersionError(f"{what}, not a Keras model (build it with tf.keras, keras or tf_keras)")
    major = _major(version)
    if major not in (2, 3):
        raise KerasVersionError(f"{what} of Keras {version}: the trainer runs Keras 2 (tf_keras) and Keras 3")
    if major == 3:
        backend = package.backend.backend()
        if backend != "tensorflow":
            raise KerasVersionError(
                f"{what} of Keras {version} on the {backend!r} backend: Horovod's ops are TensorFlow's, so the "
                f"trainer needs Keras 3 on its TensorFlow backend (unset KERAS_BACKEND, or set it to tensorflow)"
            )
    return package


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
    """Keras ``fit`` under Horovod elastic, Keras 3 or Keras 2: one object that holds the state and callbacks.

    Build it before :func:`tf_hooks.elastic.ring.init_horovod` (a joiner then does this work while
    the ring keeps training), then call :meth:`fit` after.

    A batch set for the running job (:class:`~tf_hooks.elastic.rules.BatchSetting`, by its controller or
    ``submarine job flex --batch_size``) is applied from the commit at which the state takes it, on every
    rank at once: the ``model.fit`` running then ends after that batch, and the next one goes on from the
    committed cursor with the setting's global batch (split over the ranks, whatever their number, until a
    newer setting); a joiner gets it with the state. An epoch cut short this way is still one epoch: its
    end (epoch count, history, metrics average, commit) comes when its data is exhausted. The learning rate
    ramps (momentum compensation) from the rate in effect to the setting's, or to
    :meth:`~tf_hooks.elastic.rules.BatchRule.lr_for_batch` of its batch with rank 0's gradient noise scale
    when there is one. Gradient accumulation (``accum_steps`` > 0) is not available in ``fit``, which
    applies one update per batch: each rank trains its whole part of a step as one batch. The update is the
    same (the mean gradient over the step's global batch), but it takes the memory of the whole part, not
    of a micro-batch; a warning says so once. The metrics report the batch each rank trains (its whole
    part), so the global batch the controller reads is the setting's.

    Args:
        model: a built Keras model (Keras 3 on TensorFlow, or ``tf_keras``); compiled here.
        optimizer: an optimizer of the model's Keras with a float learning rate (the rule sets it), that
            has not trained yet; replaced by :func:`~tf_hooks.elastic.optimizer.allreduce_gradients`'s copy
            (:attr:`optimizer`) unless it already averages over the ring.
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
        gradient_noise: True: measure the gradient noise scale in the step (:mod:`tf_hooks.noise`, every
            ``SUBMARINE_NOISE_EVERY`` steps, from each rank's gradients before and after the average)
            and report it with the metrics (not with Horovod's ``DistributedOptimizer``, which hides the
            local gradients); a :class:`~tf_hooks.noise.GradientNoiseScale`; or False. Alone in a ring
            (one rank's batch is the global one) nothing is measured or reported.
        checkpoint: where rank 0 checkpoints the committed state every K commits, and where a job that
            lost every worker resumes from (:class:`~tf_hooks.elastic.state.ElasticState`): None, the
            job's ``SUBMARINE_CHECKPOINT_PATH`` if set; False, never; a directory; or a
            :class:`~tf_hooks.elastic.checkpoint.Checkpointer`.
        saved_model_path: where rank 0 exports the trained model as a SavedModel at the end of :meth:`fit`
            (:mod:`tf_hooks.saved_model`): None, the job's ``SUBMARINE_SAVED_MODEL_PATH`` if set; False,
            never; a directory. Checked here, before training.
        compile_kwargs: more arguments to ``model.compile``.

    Raises:
        KerasVersionError: as :func:`model_keras`.
        ValueError: unusable data, ``batches_per_commit`` < 1, or a learning-rate schedule (the rule
            and the schedule would both set the rate).
        CheckpointConfigError: an unusable checkpoint setting (named).
        SavedModelError: the saved model's path cannot be written (named).
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
        checkpoint: Checkpointer | str | os.PathLike[str] | bool | None = None,
        gradient_noise: Any = True,
        saved_model_path: str | os.PathLike[str] | bool | None = None,
        **compile_kwargs: Any,
    ) -> None:
        from tf_hooks.saved_model import export_path

        self.saved_model_path = export_path(saved_model_path)
        keras = model_keras(model)
        if len(x) != len(y) or len(x) < 1:
            raise ValueError(f"x and y must hold the same number (>= 1) of samples, got {len(x)} and {len(y)}")
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        if isinstance(getattr(optimizer, "learning_rate", None), keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("optimizer: pass a float learning rate; the BatchRule sets it on every resize")
        import horovod.tensorflow as hvd
        import tensorflow as tf

        from tf_hooks.elastic.state import ElasticState

        self._tf, self._hvd = tf, hvd
        self.keras = keras
        self.model = model
        self.rule = rule
        self.x, self.y = x, y
        self.seed = seed
        self.check_sync = check_sync
        self.resets: list[ResetTiming] = []

        if gradient_noise is True:
            from tf_hooks.noise import GradientNoiseScale

            # Horovod's own DistributedOptimizer averages inside, where the local gradients are never seen.
            ours = not is_allreducing(optimizer) or getattr(type(optimizer), "_submarine_allreduce", False)
            gradient_noise = GradientNoiseScale() if ours else None
        self.noise = gradient_noise or None
        self.optimizer = allreduce_gradients(optimizer, noise=self.noise)
        model.compile(optimizer=self.optimizer, loss=loss, metrics=list(metrics or []), **compile_kwargs)
        _build_slots(self.optimizer, model.trainable_variables)
        self.state = ElasticState(
            [*model.variables, *_optimizer_variables(self.optimizer)],
            epoch=0,
            batch=0,
            cursor=0,
            workers=0,
            ramp_from_lr=0.0,
            resized_at=0,
            lr_target=None,  # the rate a batch setting ramps to; None: the rule's for the ring size
            history=[],
            checkpoint=checkpoint,
            optional=("lr_target",),
        )
        self.state.register_reset_callbacks([self._on_reset])
        self.state.register_batch_callbacks([self._on_batch_setting])
        self._warned_accumulation = False

        types = _callback_types(keras)
        self.metrics_callback: Any = None
        if metrics_callback is True:
            from tf_hooks.keras import callback_class

            self.metrics_callback = callback_class(keras)(batch_size=self._local_batch, gradient_noise=self.noise)
        elif metrics_callback is not False:
            self.metrics_callback = metrics_callback
        self._before_user = [types.MetricAverage(hvd, self._epoch_cut_short), types.Progress(self)]
        if self.metrics_callback is not None:
            self._before_user.append(self.metrics_callback)
        self._commit = types.Commit(self.state, batches_per_commit, self._epoch_cut_short)
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

        Blocks until then. One ``model.fit`` per epoch (or rest of an epoch, after a resize or a
        batch setting), on this rank's share of the data from the committed cursor. ``callbacks`` run
        after the trainer's and before the commit (their ``on_epoch_end`` also runs at the end of a
        ``fit`` that a batch setting cut short). ``stop``, asked on rank 0 after each epoch, ends
        training early on every rank when it returns True. With a saved model path, rank 0 then exports the
        trained model there (blocking while TensorFlow writes it).

        Returns the per-epoch history (committed with the state, so a joiner has it too): the
        epoch, ring size, global batch, learning rate, wall time and the rank-averaged logs.

        With a checkpoint directory that holds a checkpoint, a job whose every process is new starts
        from it: the epoch, the data cursor and the weights go on from its commit.

        Raises:
            RanksDivergedError: the ranks' weights differ at an epoch end.
            ElasticKerasError: TensorFlow failed in ``fit`` other than in a Horovod collective.
            CheckpointReadError: the newest checkpoint cannot be read or does not fit this model.
            SavedModelError: the trained model cannot be exported (named).
            Whatever else ``model.fit`` raises that is not a resize or a lost peer.
        """
        from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

        hvd = self._hvd
        all_callbacks = [*self._before_user, *callbacks, self._commit]

        @hvd.elastic.run
        def train(state: Any) -> list[dict[str, Any]]:
            while state.epoch < epochs:
                epoch = state.epoch
                try:
                    dataset, steps = self._epoch_dataset()
                    # shuffle=False: the data is this epoch's permutation already.
                    self.model.fit(
                        dataset,
                        steps_per_epoch=steps,
                        epochs=1,
                        shuffle=False,
                        verbose=verbose,
                        callbacks=all_callbacks,
                    )
                except (HostsUpdatedInterrupt, HorovodInternalError, self._tf.errors.UnknownError) as exc:
                    left = time.monotonic()
                    if isinstance(exc, self._tf.errors.UnknownError) and not _HOROVOD_OP.search(exc.message):
                        # Horovod's elastic.run would swallow it and return None: training would just end.
                        raise ElasticKerasError(f"model.fit failed: {exc.message}") from exc
                    self.resets.append(ResetTiming(type(exc).__name__, size_before=hvd.size(), left_fit=left))
                    raise
                if stop is not None and state.epoch > epoch:
                    verdict = bool(stop()) if hvd.rank() == 0 else False
                    if hvd.broadcast_object(verdict, root_rank=0, name="elastic_keras_stop"):
                        break
            history: list[dict[str, Any]] = state.history
            return history

        history = train(self.state)
        if self.saved_model_path is not None and hvd.rank() == 0:
            from tf_hooks.saved_model import export

            export(self.model, self.saved_model_path)
        return history

    def close(self, timeout: float | None = None) -> None:
        """Waits for the checkpoint being written, if any, then flushes and stops the metrics callback's
        sender (each blocks at most ``timeout`` s). Never raises."""
        if not self.state.close(timeout):
            logger.warning("the checkpoint being written was not finished within %s s", timeout)
        if self.metrics_callback is not None and hasattr(self.metrics_callback, "close"):
            self.metrics_callback.close(timeout)

    # -- helpers ------------------------------------------------------------------------------

    def _global_batch(self, size: int) -> int:
        """The global batch now: the batch setting's if one is in force, else the rule's for ``size`` ranks."""
        setting = self.state.batch_setting
        return setting.batch_size if setting is not None else self.rule.global_batch(size)

    def _local_batch(self) -> int:
        """This rank's part of a whole step, as :func:`~tf_hooks.elastic.data.shard` splits it."""
        hvd = self._hvd
        size, rank = hvd.size(), hvd.rank()
        base, extra = divmod(self._global_batch(size), size)
        return base + (1 if rank < extra else 0)

    def _lr_at(self, step: int) -> float:
        """The learning rate at ``step``: on the ramp from the last resize or batch setting to its target."""
        state = self.state
        target = state.lr_target if state.lr_target is not None else self.rule.target_lr(state.workers)
        return ramp_lr(step, state.resized_at, state.ramp_from_lr, target, self.rule.ramp_steps)

    def _epoch_cut_short(self) -> bool:
        """Whether the epoch has data left: at the end of a ``fit`` that a batch setting ended early (the
        cursor is the same on every rank). At a whole epoch's end it is the epoch's length before the
        epoch's bookkeeping and 0 after."""
        return 0 < self.state.cursor < len(self.x)

    def _on_batch_setting(self, _old: BatchSetting | None, new: BatchSetting) -> None:
        """On every rank at the same commit (or right after a re-form's sync): the learning rate ramps from
        the one in effect to the setting's, and the running ``fit`` ends after this batch."""
        state = self.state
        step = int(self.optimizer.iterations.numpy())
        from_lr = self._lr_at(step) if state.workers else 0.0
        target = new.learning_rate
        if target is None:
            estimate = self.noise.estimate() if self.noise is not None else None
            target = self.rule.lr_for_batch(new.batch_size, estimate.gradient_noise_scale if estimate else None)
            # Rank 0's: a joiner's noise estimate has seen fewer steps than the ring's.
            target = float(self._hvd.broadcast_object(target, root_rank=0, name="elastic_keras_setting_lr"))
        state.ramp_from_lr, state.resized_at, state.lr_target = from_lr, step, target
        self.model.stop_training = True

    def _epoch_dataset(self) -> tuple[Any, int]:
        """This rank's share of the rest of the committed epoch, one element per step; and the steps."""
        hvd, tf = self._hvd, self._tf
        size, rank = hvd.size(), hvd.rank()
        n = len(self.x)
        global_batch = self._global_batch(size)
        setting = self.state.batch_setting
        if setting is not None and setting.accum_steps and not self._warned_accumulation:
            self._warned_accumulation = True
            logger.warning(
                "batch setting %d asks for %d micro-batches a step; Keras fit applies one update per batch, so "
                "each rank trains its whole part of a step (up to %d samples) as one batch: the same update, "
                "with the memory of the whole part",
                setting.version,
                setting.micro_batches,
                -(-global_batch // size),
            )
        perm = edata.epoch_permutation(n, self.state.epoch, self.seed)
        start = self.state.cursor
        x, y = self.x, self.y

        def steps() -> Any:
            cursor = start
            while cursor < n:
                step_len = edata.step_length(n, cursor, global_batch)
                ids = edata.shard(perm, cursor, global_batch, rank, size)
                # Keras averages the loss over this rank's part and the allreduce over the ranks; with this
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

        probe = iter(tf.data.Dataset.from_generator(empty, output_signature=self._element_spec))
        self.model.make_train_function()
        trace = traced_step(self.model.train_function)
        if trace is None:
            logger.info("the train step cannot be traced ahead (run_eagerly?): it traces at the first step")
            return
        trace(probe)

    def _on_reset(self) -> None:
        if self.resets and self.resets[-1].reformed is None:
            self.resets[-1].reformed = time.monotonic()
            self.resets[-1].size_after = self._hvd.size()


def traced_step(train_function: Any) -> Callable[[Any], Any] | None:
    """What traces a Keras train function for an iterator without running it, or None when it is not traced.

    Keras 2's ``train_function`` is the ``tf.function`` itself. Keras 3's is a Python function around
    ``multi_step_on_iterator``, the ``tf.function`` that ``fit`` calls; calling the outer one on an empty
    iterator would run the step's ops that wait for no data (``optimizer.iterations`` and the seed
    generators count a step; ``HorovodSize`` fails before ``hvd.init``), so the inner one is traced.
    """
    trace = getattr(train_function, "get_concrete_function", None)
    if trace is None and train_function is not None:
        inner = inspect.getclosurevars(train_function).nonlocals.get("multi_step_on_iterator")
        trace = getattr(inner, "get_concrete_function", None)
    return trace


def _build_slots(optimizer: Any, variables: Sequence[Any]) -> None:
    """Creates the optimizer's slots for ``variables`` now, as its first step would (Keras 3 and Keras 2
    optimizers: ``build``, once; Keras 2 legacy optimizers: ``_create_all_weights``)."""
    if hasattr(optimizer, "build"):
        if not (getattr(optimizer, "built", False) or getattr(optimizer, "_built", False)):
            optimizer.build(variables)
    elif hasattr(optimizer, "_create_all_weights"):
        optimizer._create_all_weights(variables)


def _optimizer_variables(optimizer: Any) -> list[Any]:
    """Every variable of the optimizer: a list in Keras 3, a callable list in Keras 2, a method in legacy ones."""
    variables = optimizer.variables
    return list(variables() if callable(variables) and not isinstance(variables, list) else variables)


def _fingerprint_problem(fingerprints: np.ndarray) -> str | None:
    """None when every rank's row equals rank 0's, else which ranks differ."""
    differ = [r for r in range(1, len(fingerprints)) if not np.array_equal(fingerprints[r], fingerprints[0])]
    if not differ:
        return None
    return (
        f"ranks {differ} hold other weights than rank 0 at an epoch end (fingerprints "
        f"{fingerprints.tolist()}): the gradients were not averaged over the ring (an optimizer whose updates "
        f"bypass tf_hooks.elastic.optimizer.allreduce_gradients, or Horovod's DistributedOptimizer under Keras 3)"
    )


class _CallbackTypes:
    """The trainer's callback classes, built on ``Callback`` of the model's Keras once it is known."""

    def __init__(self, keras: ModuleType) -> None:
        class MetricAverage(keras.callbacks.Callback):  # type: ignore[name-defined]
            """Every numeric log of the epoch averaged over the ranks (one allreduce), in place; not at the
            end of a ``fit`` that a batch setting cut short."""

            def __init__(self, hvd: ModuleType, cut_short: Callable[[], bool]) -> None:
                super().__init__()
                self.hvd = hvd
                self.cut_short = cut_short

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                if not logs or self.cut_short():
                    return
                names = sorted(logs)
                values = np.array([float(logs[name]) for name in names], np.float64)
                averaged = self.hvd.allreduce(values, op=self.hvd.Average, name="elastic_keras_metrics").numpy()
                logs.update(zip(names, (float(v) for v in averaged), strict=True))

        class Commit(keras.callbacks.Callback):  # type: ignore[name-defined]
            """Commits the state every K batches and at every epoch end; a commit is where a resize is noticed.

            The last batch of an epoch is committed at the epoch end only: a resize noticed there leaves
            ``fit`` at once, which would skip the epoch's end (epoch count, history) and commit an epoch
            with no batch left in it. The end of a ``fit`` that a batch setting cut short commits nothing:
            the setting was taken at the commit of its last batch.
            """

            def __init__(self, state: Any, batches_per_commit: int, cut_short: Callable[[], bool]) -> None:
                super().__init__()
                self.state = state
                self.batches_per_commit = batches_per_commit
                self.cut_short = cut_short
                self._left = batches_per_commit

            def on_train_begin(self, logs: Any = None) -> None:
                self._left = self.batches_per_commit  # the same on every rank after a re-form

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                if batch + 1 == self.params.get("steps"):
                    return
                self._left -= 1
                if self._left == 0:
                    self._left = self.batches_per_commit
                    self.state.commit()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                if not self.cut_short():
                    self.state.commit()

        class Progress(keras.callbacks.Callback):  # type: ignore[name-defined]
            """Epoch, batch, cursor, learning rate, history and the weights check; runs before the commit."""

            def __init__(self, trainer: ElasticKerasTrainer) -> None:
                super().__init__()
                self.trainer = trainer
                self._step = 0
                self._first_batch = 0
                self._global_batch = 1
                self._lr: float | None = None
                self._ring = (0, 1)

            def on_train_begin(self, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                size = trainer._hvd.size()
                self._ring = (trainer._hvd.rank(), size)
                self._global_batch = trainer._global_batch(size)
                self._step = int(trainer.optimizer.iterations.numpy())
                self._first_batch = state.batch
                if state.workers != size:
                    if state.batch_setting is None:
                        # Ramp from the rate in effect now, even in the middle of the last resize's ramp.
                        state.ramp_from_lr = trainer._lr_at(self._step) if state.workers else 0.0
                        state.resized_at = self._step
                    # (under a batch setting the global batch and its rate stay whatever the ring size)
                    state.workers = size
                self._lr = None
                self._set_lr()

            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                rule, state = self.trainer.rule, self.trainer.state
                if self._step - state.resized_at <= rule.ramp_steps:
                    self._set_lr()
                if self.trainer.noise is not None:
                    self._noise_batch()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                state.cursor += edata.step_length(len(trainer.x), state.cursor, self._global_batch)
                state.batch = self._first_batch + batch + 1
                self._step += 1
                if trainer.resets and trainer.resets[-1].resumed is None:
                    trainer.resets[-1].resumed = time.monotonic()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                trainer, state = self.trainer, self.trainer.state
                if trainer._epoch_cut_short():
                    return  # a batch setting ended this fit: the epoch goes on in the next one
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
                state.epoch += 1
                state.cursor = 0
                state.batch = self._first_batch = 0

            def _noise_batch(self) -> None:
                """This step's split for the noise estimate: this rank's part of the step (shorter at the
                epoch's end), and its gradient's factor over its part's mean (the loss weight)."""
                rank, size = self._ring
                step_len = edata.step_length(len(self.trainer.x), self.trainer.state.cursor, self._global_batch)
                base, extra = divmod(step_len, size)
                local = base + (1 if rank < extra else 0)
                self.trainer.noise.set_batch(  # type: ignore[union-attr]
                    local, step_len, size * local / step_len if local else 1.0
                )

            def _set_lr(self) -> None:
                lr = self.trainer._lr_at(self._step)
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

        self.MetricAverage = MetricAverage
        self.Commit = Commit
        self.Progress = Progress


_types: dict[ModuleType, _CallbackTypes] = {}


def _callback_types(keras: ModuleType) -> _CallbackTypes:
    if keras not in _types:
        _types[keras] = _CallbackTypes(keras)
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
    "model_keras",
]
