"""Horovod elastic state that holds TensorFlow variables, for Keras 3 models and custom loops.

Horovod's own ``TensorFlowState`` does not broadcast in eager mode and deadlocks a joining worker, and
its Keras states fail under Keras 3. This state keeps host copies of the variables on every commit,
assigns them back on a rollback, and broadcasts them from rank 0 on every sync (after each ring
re-form), together with the plain Python attributes given as keyword arguments (epoch, cursor, ...).
Rank 0 after a re-form is always a worker of the previous ring (Horovod keeps existing hosts first),
so a joiner never overwrites what the job has learned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.common.elastic import ObjectState


class ElasticState(ObjectState):
    """Committed training state: TensorFlow variables plus picklable attributes.

    Args:
        variables: every variable that must agree across ranks (model weights and optimizer slots;
            build the optimizer first so its slots exist); tf.Variables or Keras 3 variables.
        **attrs: plain values (epoch, cursor, step, ...) exposed as attributes and committed with
            the variables.
    """

    def __init__(self, variables: Sequence[tf.Variable], **attrs: Any) -> None:
        if not variables:
            raise ValueError("variables must not be empty: pass the model's and the optimizer's variables")
        # Keras 3 variables wrap a tf.Variable (``.value``); Horovod broadcasts tf.Variables.
        self.variables = [v if isinstance(v, tf.Variable) else v.value for v in variables]
        self._values = [v.numpy() for v in self.variables]
        super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank, **attrs)

    def save(self) -> None:
        self._values = [v.numpy() for v in self.variables]
        super().save()

    def restore(self) -> None:
        for var, value in zip(self.variables, self._values, strict=True):
            var.assign(value)
        super().restore()

    def sync(self) -> None:
        hvd.broadcast_variables(self.variables, root_rank=0)
        self._values = [v.numpy() for v in self.variables]
        super().sync()
