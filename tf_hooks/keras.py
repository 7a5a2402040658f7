"""``MetricsCallback``: reports every (or every N-th) Keras training step to the metrics service.

Which Keras:

* :class:`MetricsCallback` subclasses ``tf.keras.callbacks.Callback``. With TensorFlow 2.18 that is
  Keras 3, unless ``TF_USE_LEGACY_KERAS=1`` is set, in which case ``tf.keras`` is Keras 2 from the
  ``tf_keras`` package: what Horovod's Keras integration needs (see DESIGN.md).
* :func:`callback_class` builds the same callback on another Keras module, for a script that
  imports ``tf_keras`` directly without setting the variable: ``callback_class(tf_keras)(...)``.

The training thread only reads a clock, counts and enqueues. Values that need the device (the
loss as a tensor under Keras 2, the learning rate variable) are converted by the sender thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import tensorflow as tf

from tf_hooks._horovod import horovod_ring
from tf_hooks.api import MetricsSink, SenderStats, StepRecord, resolve
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import make_sink

logger = logging.getLogger(__name__)


class _MetricsCallbackLogic:
    """The callback's behaviour; :func:`callback_class` mixes it into a Keras ``Callback``."""

    model: Any

    def __init__(
        self,
        *,
        batch_size: int | Callable[[], int] | None = None,
        rank: int | Callable[[], int] | None = None,
        world_size: int | Callable[[], int] | None = None,
        user_metrics: bool | Sequence[str] = True,
        learning_rate: bool = True,
        endpoint: str | None = None,
        job_id: str | None = None,
        instance: str | None = None,
        token: str | None = None,
        tls_ca: str | Path | None = None,
        every_n: int | None = None,
        sink: MetricsSink | None = None,
        **tuning: float | int,
    ) -> None:
        """Reads the settings not given from the environment (``submarine_elastic.env``); with no endpoint
        anywhere the callback reports nothing. Starts the sender thread when there is one.

        ``batch_size`` (this worker's) gives examples per second; ``rank`` and ``world_size`` default
        to Horovod's when it is initialized, else 0 and 1, and are read again at every epoch and every
        ``fit``. ``user_metrics``: also report the other logs (True), only these names, or none.
        ``tuning`` sets :class:`~tf_hooks.config.MetricsConfig` fields (``queue_size``, ...).

        Raises:
            MetricsConfigError: a setting is unusable (names it).
        """
        super().__init__()
        config = MetricsConfig.from_env(
            endpoint=endpoint,
            job_id=job_id,
            instance=instance,
            token=token,
            tls_ca=tls_ca,
            every_n=every_n,
            **tuning,
        )
        self.config = config
        self.sink: MetricsSink = sink if sink is not None else make_sink(config)
        self.errors = 0
        # Keras 2 (tf_keras): hand the logs over as tensors instead of converting them on this thread.
        self._supports_tf_logs = True
        self._batch_size = batch_size
        self._rank_arg = rank
        self._world_size_arg = world_size
        self._user_metrics = user_metrics
        self._lr = self._read_learning_rate if learning_rate else None
        self._every_n = config.every_n
        self._ring = (0, 1)
        self._current_batch_size: int | None = None
        self._epoch_base = 0
        self._step_prev = 0
        self._t_prev = time.perf_counter()

    # -- Keras hooks --------------------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self._guard(self._begin)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._guard(self._begin)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        try:
            step = self._epoch_base + batch + 1
            if self._every_n > 1 and step % self._every_n:
                return
            now = time.perf_counter()
            steps = step - self._step_prev
            elapsed = now - self._t_prev
            self._t_prev = now
            self._step_prev = step
            step_time = elapsed / steps if steps > 0 and elapsed > 0 else None
            batch_size = self._current_batch_size
            eps = batch_size / step_time if batch_size and step_time else None
            loss = user = None
            if logs:
                loss = logs.get("loss")
                if self._user_metrics:
                    user = self._select(logs)
            rank, world_size = self._ring
            self.sink.record(
                # tuple.__new__: the NamedTuple's own constructor is a Python function (0.4 µs)
                tuple.__new__(
                    StepRecord, (step, time.time(), rank, world_size, loss, eps, step_time, batch_size, self._lr, user)
                )
            )
        except Exception:
            self.errors += 1
            logger.log(self._level(), "MetricsCallback failed; training goes on", exc_info=True)

    def on_train_end(self, logs: Any = None) -> None:
        self._guard(lambda: self.sink.flush(self.config.close_timeout))

    # -- public ---------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> SenderStats:
        """Flushes for up to ``timeout`` seconds (default ``close_timeout``) and stops the sender.

        Blocks at most that long (plus channel teardown). Never raises.
        """
        return self.sink.close(self.config.close_timeout if timeout is None else timeout)

    # -- helpers --------------------------------------------------------------------------------

    def _begin(self) -> None:
        self._epoch_base = self._iterations()
        self._step_prev = self._epoch_base
        self._t_prev = time.perf_counter()
        ring = horovod_ring() if self._rank_arg is None or self._world_size_arg is None else None
        default_rank, default_size = ring or (0, 1)
        self._ring = (resolve(self._rank_arg, default_rank), resolve(self._world_size_arg, default_size))
        self._current_batch_size = resolve(self._batch_size, 0) or None

    def _iterations(self) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        return int(iterations.numpy()) if iterations is not None else self._step_prev

    def _select(self, logs: Any) -> dict[str, Any]:
        if self._user_metrics is True:
            return {k: v for k, v in logs.items() if k != "loss"}
        return {k: logs[k] for k in self._user_metrics if k in logs}  # type: ignore[union-attr]

    def _read_learning_rate(self) -> float | None:
        """Runs on the sender thread, once per flush: the optimizer's learning rate now."""
        optimizer = getattr(self.model, "optimizer", None)
        rate = getattr(optimizer, "learning_rate", None)
        if rate is None:
            return None
        if callable(rate) and not hasattr(rate, "numpy"):  # a schedule object
            rate = rate(optimizer.iterations)  # type: ignore[union-attr]
        return float(rate)

    def _guard(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            self.errors += 1
            logger.log(self._level(), "MetricsCallback failed; training goes on", exc_info=True)

    def _level(self) -> int:
        """WARNING for the first failure, DEBUG after it: a broken hook must not flood the log."""
        return logging.WARNING if self.errors == 1 else logging.DEBUG


_classes: dict[ModuleType, type] = {}


def callback_class(keras_module: ModuleType) -> type:
    """``MetricsCallback`` built on ``keras_module.callbacks.Callback`` (cached per module).

    Use it for a Keras other than ``tf.keras``: ``callback_class(tf_keras)(batch_size=64)``.
    """
    cls = _classes.get(keras_module)
    if cls is None:
        base = keras_module.callbacks.Callback
        cls = type("MetricsCallback", (_MetricsCallbackLogic, base), {"__module__": __name__})
        cls.__doc__ = f"{_MetricsCallbackLogic.__doc__} Built on {base.__module__}.{base.__qualname__}."
        _classes[keras_module] = cls
    return cls


class MetricsCallback(_MetricsCallbackLogic, tf.keras.callbacks.Callback):
    """Reports training steps to the metrics service; built on ``tf.keras`` (see the module docstring)."""


_classes[tf.keras] = MetricsCallback
