"""Horovod elastic state that holds TensorFlow variables, for Keras 3 models and custom loops.

Horovod's own ``TensorFlowState`` does not broadcast in eager mode and deadlocks a joining worker, and
its Keras states fail under Keras 3. This state keeps host copies of the variables on every commit,
assigns them back on a rollback, and broadcasts them from rank 0 on every sync (after each ring
re-form), together with the plain Python attributes given as keyword arguments (epoch, cursor, ...).
Rank 0 after a re-form is always a worker of the previous ring (Horovod keeps existing hosts first),
so a joiner never overwrites what the job has learned.

With a checkpoint directory (:mod:`tf_hooks.elastic.checkpoint`), rank 0 also hands every K-th commit's
host copies to a background writer, and a job whose every process is new (the whole job was lost) starts
from the newest checkpoint: rank 0 reads it at the first sync and the sync's broadcast gives it to every
rank. One reader means one read of the shared filesystem and the same state on every rank even if a
checkpoint is being replaced meanwhile; a joiner of a running ring never reads one (the ring's state is
newer).

The job's batch may be set while it runs (:class:`~tf_hooks.elastic.rules.BatchSetting`, relayed by each
process's agent, :func:`tf_hooks.elastic.ring.batch_setting`). Every broadcast this state makes from rank 0
(the host-update check of each commit, the sync of each re-form) carries rank 0's latest setting too, so
every rank takes the same one at the same commit, with no collective of its own and no re-form: it is the
attribute ``batch_setting`` from then on, committed and checkpointed with the rest, and the callbacks of
:meth:`ElasticState.register_batch_callbacks` run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.common.elastic import ObjectState

from tf_hooks.elastic import ring
from tf_hooks.elastic.checkpoint import Checkpoint, Checkpointer, CheckpointReadError, resolve
from tf_hooks.elastic.rules import BatchSetting

logger = logging.getLogger(__name__)

#: The attribute that counts the job's commits; set by the state itself.
COMMITS = "commits"
#: The attribute that holds the batch setting in effect (None: the script's own batch); set by the state.
BATCH = "batch_setting"
#: What a batch callback is given: the setting before (None: the script's own) and the one taken.
BatchCallback = Callable[[BatchSetting | None, BatchSetting], None]


class ElasticState(ObjectState):
    """Committed training state: TensorFlow variables plus picklable attributes, checkpointed on request.

    Args:
        variables: every variable that must agree across ranks (model weights and optimizer slots;
            build the optimizer first so its slots exist); tf.Variables or Keras 3 variables.
        checkpoint: where to checkpoint (:func:`tf_hooks.elastic.checkpoint.resolve`): None, the job's
            ``SUBMARINE_CHECKPOINT_PATH`` if set; False, never; a directory; or a
            :class:`~tf_hooks.elastic.checkpoint.Checkpointer`. It must be the same on every rank: with
            it, every sync runs one more small allreduce (and a whole job's first, a broadcast).
        optional: names among ``attrs`` that a checkpoint may lack (written before they existed): resuming
            from one, they take None.
        **attrs: plain values (epoch, cursor, step, ...) exposed as attributes and committed with
            the variables. ``commits`` (the number of commits the job has made) and ``batch_setting`` (the
            batch set for the job, or None) are the state's own.

    Raises:
        ValueError: no variables, an attribute named ``commits`` or ``batch_setting``, or an optional name
            that is not among ``attrs``.
        CheckpointConfigError: an unusable checkpoint setting (named).
    """

    _saved_state: dict[str, Any]  # ObjectState's committed attributes

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        *,
        checkpoint: Checkpointer | str | os.PathLike[str] | bool | None = None,
        optional: Collection[str] = (),
        **attrs: Any,
    ) -> None:
        if not variables:
            raise ValueError("variables must not be empty: pass the model's and the optimizer's variables")
        for own in (COMMITS, BATCH):
            if own in attrs:
                raise ValueError(f"{own!r} is the state's own attribute: use another name")
        unknown = sorted(set(optional) - set(attrs))
        if unknown:
            raise ValueError(f"optional attributes {unknown} are not among the state's attributes {sorted(attrs)}")
        # A checkpoint written before batch settings existed has none: the script's own batch.
        self._optional = {BATCH, *optional}
        # Keras 3 variables wrap a tf.Variable (``.value``); Horovod broadcasts tf.Variables.
        self.variables = [v if isinstance(v, tf.Variable) else v.value for v in variables]
        self._values = [v.numpy() for v in self.variables]
        self.checkpointer = resolve(checkpoint)
        #: The checkpoint this process resumed from (None: none, or not rank 0's read).
        self.resumed_from: Checkpoint | None = None
        self._synced = False
        self.commits = 0
        self.batch_setting: BatchSetting | None = None
        #: rank 0's latest batch setting, as its last broadcast carried it (the same on every rank)
        self._offered: BatchSetting | None = None
        self._batch_callbacks: list[BatchCallback] = []
        self._restore_callbacks: list[Callable[[], None]] = []
        super().__init__(bcast_object=self._broadcast, get_rank=hvd.rank, **{COMMITS: 0, BATCH: None}, **attrs)

    def register_batch_callbacks(self, callbacks: Sequence[BatchCallback]) -> None:
        """Calls each of ``callbacks`` with (previous setting, new setting) whenever the state takes a batch
        setting: on every rank at the same commit (or right after a re-form's sync)."""
        self._batch_callbacks.extend(callbacks)

    def register_restore_callbacks(self, callbacks: Sequence[Callable[[], None]]) -> None:
        """Calls each of ``callbacks`` whenever the state rolls back to its last commit (Horovod's ``run``
        wrapper does after a peer failed, before the ring re-forms), before it does."""
        self._restore_callbacks.extend(callbacks)

    def _broadcast(self, obj: Any) -> Any:
        """Horovod's ``broadcast_object`` of ``obj`` from rank 0, carrying rank 0's latest batch setting along."""
        obj, self._offered = hvd.broadcast_object((obj, ring.batch_setting()), root_rank=0, name=type(obj).__name__)
        return obj

    def check_host_updates(self) -> None:
        """Horovod's check of each commit (raises ``HostsUpdatedInterrupt`` on a host change), then takes a
        newer batch setting rank 0 has."""
        super().check_host_updates()
        self._take_offered()

    def _take_offered(self) -> None:
        offered, current = self._offered, self.batch_setting
        if offered is None or (current is not None and offered.version <= current.version):
            return
        self.batch_setting = offered
        # A warning, so that it shows in the training log whatever logging the script sets up.
        logger.warning(
            "batch setting %d from commit %d: batch %d, accumulation %d (%s)",
            offered.version,
            self.commits,
            offered.batch_size,
            offered.accum_steps,
            offered.reason or "no reason given",
        )
        for callback in self._batch_callbacks:
            callback(current, offered)

    def save(self) -> None:
        self.commits += 1
        self._values = [v.numpy() for v in self.variables]
        super().save()
        if self.checkpointer is not None and self.checkpointer.due(self.commits) and hvd.rank() == 0:
            # The host copies just made are never changed (the next commit makes new ones): no copy here.
            self.checkpointer.submit(self.commits, self._values, self._saved_state)

    def restore(self) -> None:
        for callback in self._restore_callbacks:
            callback()
        for var, value in zip(self.variables, self._values, strict=True):
            var.assign(value)
        super().restore()

    def sync(self) -> None:
        """Broadcasts rank 0's variables and attributes; at a whole job's first sync, rank 0 first
        resumes from the newest checkpoint.

        Raises:
            CheckpointReadError: on every rank, when the newest checkpoint cannot be read or does not fit
                this state (the file and the reason named).
            HorovodInternalError: a peer was lost (Horovod's elastic run re-forms and syncs again).
        """
        if self.checkpointer is not None:
            self._resume_if_whole_job_is_new(self.checkpointer)
        hvd.broadcast_variables(self.variables, root_rank=0)
        self._values = [v.numpy() for v in self.variables]
        super().sync()
        self._synced = True
        self._take_offered()

    def close(self, timeout: float | None = None) -> bool:
        """Waits (at most ``timeout`` s) for the checkpoint being written, if any; True when none is left.
        Call it before the process exits: the writer is a daemon thread."""
        return self.checkpointer.wait(timeout) if self.checkpointer is not None else True

    def _resume_if_whole_job_is_new(self, checkpointer: Checkpointer) -> None:
        """Resumes from the newest checkpoint when no rank has synced before; the same collectives on every rank."""
        synced = hvd.allreduce(tf.constant(int(self._synced), tf.int32), op=hvd.Sum, name="elastic_state_synced")
        if int(synced.numpy()) > 0:
            return  # a running ring: its state is newer than any checkpoint
        outcome: tuple[str, str, int] | None = None
        if hvd.rank() == 0:
            try:
                checkpoint = checkpointer.load_latest()
                if checkpoint is None:
                    outcome = ("fresh", str(checkpointer.directory), 0)
                else:
                    self._apply(checkpoint)
                    outcome = ("resumed", str(checkpoint.path), checkpoint.commits)
            except CheckpointReadError as exc:
                outcome = ("failed", str(exc), 0)
        kind, what, commits = hvd.broadcast_object(outcome, root_rank=0, name="elastic_state_checkpoint")
        if kind == "failed":
            raise CheckpointReadError(what)
        if kind == "resumed":
            # A warning, so that it shows in the training log whatever logging the script sets up.
            logger.warning("resuming from commit %d: checkpoint %s", commits, what)
        else:
            logger.info("no checkpoint in %s yet: training starts fresh", what)

    def _apply(self, checkpoint: Checkpoint) -> None:
        """Puts a checkpoint's values and attributes into this state, checked against it first.

        Raises:
            CheckpointReadError: the checkpoint holds other variables or lacks attributes of this state.
        """
        where = f"cannot resume from the checkpoint {checkpoint.path}"
        if len(checkpoint.values) != len(self.variables):
            raise CheckpointReadError(
                f"{where}: it holds {len(checkpoint.values)} variables, this state {len(self.variables)} (the model "
                f"or optimizer differs from the one that wrote it)"
            )
        for i, (var, value) in enumerate(zip(self.variables, checkpoint.values, strict=True)):
            want = (tuple(var.shape), var.dtype.as_numpy_dtype)
            if (value.shape, value.dtype) != (want[0], want[1]):
                raise CheckpointReadError(
                    f"{where}: variable {i} ({var.name}) is {value.dtype}{list(value.shape)} there and "
                    f"{tf.as_dtype(var.dtype).name}{list(want[0])} here (the model or optimizer differs)"
                )
        missing = sorted(set(self._saved_state) - set(checkpoint.attrs) - self._optional)
        if missing:
            raise CheckpointReadError(f"{where}: it lacks the attributes {missing} of this state")
        for var, value in zip(self.variables, checkpoint.values, strict=True):
            var.assign(value)
        self._values = [v.numpy() for v in self.variables]
        self._saved_state = {name: checkpoint.attrs.get(name) for name in self._saved_state}
        self._set_attrs()
        self.resumed_from = checkpoint
