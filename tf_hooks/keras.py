"""``MetricsCallback``: reports every (or every N-th) Keras training step to the metrics service.

Which Keras:

* :class:`MetricsCallback` subclasses ``tf.keras.callbacks.Callback``. With TensorFlow 2.18 that is
  Keras 3, unless ``TF_USE_LEGACY_KERAS=1`` is set, in which case ``tf.keras`` is Keras 2 from the
  ``tf_keras`` package: what Horovod's Keras integration needs (docs/jobs.md, "Keras `fit` jobs").
* :func:`callback_class` builds the same callback on another Keras module, for a script that
  imports ``tf_keras`` directly without setting the variable: ``callback_class(tf_keras)(...)``.

The training thread only reads a clock and appends to a deque (about 2.5 µs a step in a real
``fit``); everything else, values that need the device included (the loss as a tensor under
Keras 2, the learning rate variable), is worked out on the sender thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import time
from collections import deque
from collections.abc import Mapping, Sequence
from time import perf_counter
from types import ModuleType
from typing import Any, NamedTuple, Unpack

import numpy as np
import tensorflow as tf

from tf_hooks._hook import ReportingHook
from tf_hooks.api import StepBlock, StepRecord, as_floats
from tf_hooks.config import ReportingOptions


class _Span(NamedTuple):
    """What holds from one ``fit`` or epoch start to the next, fixed when it begins."""

    base: int  # the optimizer's iterations at the start: step = base + batch + 1
    t0: float  # perf_counter() at the start
    wall_offset: float  # time.time() - perf_counter() at the start
    rank: int
    world_size: int
    batch_size: int | None


class _MetricsCallbackLogic(ReportingHook):
    """The callback's behaviour; :func:`callback_class` mixes it into a Keras ``Callback``.

    On each reported step the training thread appends one tuple (a counter, the batch index, the
    clock, Keras's logs and the current span) to a bounded deque, and nothing else; the sink's
    sender thread turns all the tuples it finds into one :class:`~tf_hooks.api.StepBlock` per span,
    column by column (step number, step time, examples per second, wall time, loss, learning rate
    and user metrics). A full deque drops its oldest tuples, which the counter
    shows as a gap: counted as dropped, their seq numbers skipped. With a sink that takes records
    only one by one (a user's own :class:`~tf_hooks.api.MetricsSink`), the same conversion runs on
    the training thread instead.
    """

    model: Any

    def __init__(
        self,
        *,
        user_metrics: bool | Sequence[str] = True,
        learning_rate: bool = True,
        **options: Unpack[ReportingOptions],
    ) -> None:
        """Reads the settings not given from the environment (``submarine_elastic.env``); with no endpoint
        anywhere the callback reports nothing. Starts the sender thread when there is one.

        ``options`` are :class:`~tf_hooks.config.ReportingOptions` (``batch_size``, ``endpoint``,
        ``every_n``, ``queue_size``, ...); ``rank`` and ``world_size`` are read again at every epoch and
        every ``fit``. ``user_metrics``: also report the other logs (True), only these names, or none.

        Raises:
            MetricsConfigError: a setting is unusable (names it).
        """
        super().__init__()
        self._init_reporting(options)
        config = self.config
        # Keras 2 (tf_keras): hand the logs over as tensors instead of converting them on this thread.
        self._supports_tf_logs = True
        self._user_metrics = user_metrics
        self._lr = self._read_learning_rate if learning_rate else None
        self._every_n = config.every_n
        t0 = perf_counter()
        self._span = _Span(0, t0, time.time() - t0, 0, 1, None)  # until the first fit begins
        self._prev = (self._span, 0, self._span.t0)  # the last converted step: its span, step and clock
        self._count = itertools.count()
        self._next_index = 0
        self._steps: deque[tuple[int, int, float, Any, _Span]] = deque(maxlen=config.queue_size)
        self._put = self._steps.append
        self._wake_at = min(config.max_stream_points, config.queue_size)
        self._wake = self.sink.add_source(self._drain)
        if self._wake is None:  # a sink without bulk hand-over: convert and record on this thread
            self._put = self._record_now

    # -- Keras hooks --------------------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self._guard(self._begin)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._guard(self._begin)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        try:
            span = self._span
            if self._every_n > 1 and (span.base + batch + 1) % self._every_n:
                return
            self._put((next(self._count), batch, perf_counter(), logs, span))
            if len(self._steps) == self._wake_at:
                self._wake()  # type: ignore[misc]
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()

    def on_train_end(self, logs: Any = None) -> None:
        self._guard(lambda: self.sink.flush(self.config.close_timeout))

    # -- helpers --------------------------------------------------------------------------------

    def _begin(self) -> None:
        self._span = self._new_span(self._iterations())

    def _new_span(self, base: int) -> _Span:
        rank, world_size, batch_size = self._ring_now()
        t0 = perf_counter()
        return _Span(base, t0, time.time() - t0, rank, world_size, batch_size)

    def _iterations(self) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        return int(iterations.numpy()) if iterations is not None else self._prev[1]

    def _drain(self) -> list[StepBlock | int]:
        """The sink's thread: the steps the training thread appended, as blocks (see the class)."""
        steps = self._steps
        # C-level loops only where a loop runs per step: this thread shares the core with training.
        items = list(map(operator.call, itertools.repeat(steps.popleft, len(steps))))
        if not items:
            return []
        indexes, batches, clocks, logs, spans = zip(*items, strict=True)
        learning_rate = as_floats([self._lr])[0] if self._lr is not None else math.nan  # once per drain
        noise = self._read_noise() if self._noise is not None else None  # once per drain
        out: list[StepBlock | int] = []
        if spans.count(spans[0]) == len(spans):  # the usual case: one span (identity is checked first)
            stops = [len(spans)]
        else:
            stops = [*(i for i in range(1, len(spans)) if spans[i] is not spans[i - 1]), len(spans)]
        start = 0
        for stop in stops:
            first, last = indexes[start], indexes[stop - 1]
            if first == self._next_index and last - first == stop - start - 1:
                lost = None  # the deque dropped nothing (checked without a loop over the steps)
            else:
                lost = np.diff(np.array(indexes[start:stop], dtype=np.int64), prepend=self._next_index - 1) - 1
            self._next_index = last + 1
            try:
                block = self._block(
                    spans[start], batches[start:stop], clocks[start:stop], logs[start:stop], learning_rate
                )
            except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
                self._failed("failed to convert steps; skipped")
                out.append((0 if lost is None else int(lost.sum())) + stop - start)
            else:
                if lost is not None and lost.any():
                    block = dataclasses.replace(block, lost_before=lost)
                out.append(block)
            start = stop
        if noise and isinstance(out[-1], StepBlock):
            out[-1] = _with_noise(out[-1], noise)
        return out

    def _block(
        self, span: _Span, batches: Sequence[int], clocks: Sequence[float], logs: Sequence[Any], learning_rate: float
    ) -> StepBlock:
        """Steps of one span as columns: step number, wall time, step time, examples per second (from
        the clock readings), loss and user metrics (from Keras's logs), ``learning_rate`` (NaN: none)."""
        if batches[-1] - batches[0] == len(batches) - 1:  # consecutive batches, as fit runs them
            step = np.arange(batches[0], batches[-1] + 1, dtype=np.int64) + (span.base + 1)
        else:
            step = np.array(batches, dtype=np.int64) + (span.base + 1)
        clock = np.array(clocks, dtype=np.float64)
        prev_span, prev_step, prev_clock = self._prev
        if prev_span is not span:
            prev_step, prev_clock = span.base, span.t0
        self._prev = (span, int(step[-1]), float(clock[-1]))
        steps = np.diff(step, prepend=prev_step)
        elapsed = np.diff(clock, prepend=prev_clock)
        timed = (steps > 0) & (elapsed > 0)
        step_time = np.where(timed, elapsed / np.where(timed, steps, 1), np.nan)
        batch_size = span.batch_size
        loss = user = None
        if any(logs):
            if not all(logs):  # some steps came without logs
                logs = [entry or {} for entry in logs]
            loss = as_floats(_values(logs, "loss"))
            if self._user_metrics:
                if self._user_metrics is True:
                    names = sorted(set().union(*logs) - {"loss"})
                else:
                    names = list(dict.fromkeys(self._user_metrics))
                user = {name: as_floats(_values(logs, name)) for name in names}
        return StepBlock(
            span.rank,
            span.world_size,
            step,
            span.wall_offset + clock,
            loss=loss,
            examples_per_second=batch_size / step_time if batch_size else None,
            step_time_seconds=step_time,
            batch_size=np.full(len(step), batch_size, dtype=np.int64) if batch_size else None,
            learning_rate=None if math.isnan(learning_rate) else np.full(len(step), learning_rate),
            user_metrics=user or {},
        )

    def _record_now(self, item: tuple[int, int, float, Any, _Span]) -> None:
        record = self._convert(*item[1:])
        noise = self._read_noise() if self._noise is not None else None
        self.sink.record(record._replace(**noise) if noise else record)  # type: ignore[arg-type]

    def _convert(self, batch: int, t: float, logs: Any, span: _Span) -> StepRecord:
        step = span.base + batch + 1
        prev_span, prev_step, prev_t = self._prev
        if prev_span is not span:
            prev_step, prev_t = span.base, span.t0
        self._prev = (span, step, t)
        steps, elapsed = step - prev_step, t - prev_t
        step_time = elapsed / steps if steps > 0 and elapsed > 0 else None
        batch_size = span.batch_size
        loss = user = None
        if logs:
            loss = logs.get("loss")
            if self._user_metrics:
                user = self._select(logs)
        return StepRecord(
            step,
            span.wall_offset + t,
            span.rank,
            span.world_size,
            loss,
            batch_size / step_time if batch_size and step_time else None,
            step_time,
            batch_size,
            self._lr,
            user,
        )

    def _select(self, logs: Any) -> dict[str, Any]:
        if self._user_metrics is True:
            return {k: v for k, v in logs.items() if k != "loss"}
        return {k: logs[k] for k in self._user_metrics if k in logs}  # type: ignore[union-attr]

    def _read_noise(self) -> Mapping[str, float] | None:
        """Runs on the sender thread, once per drain: the gradient noise estimate now (None: none, or unread)."""
        try:
            return self._noise.record_fields()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed("failed to read the gradient noise estimate; omitted")
            return None

    def _read_learning_rate(self) -> float | None:
        """Runs on the sender thread, once per flush: the optimizer's learning rate now."""
        optimizer = getattr(self.model, "optimizer", None)
        rate = getattr(optimizer, "learning_rate", None)
        if rate is None:
            return None
        if callable(rate) and not hasattr(rate, "numpy"):  # a schedule object
            rate = rate(optimizer.iterations)  # type: ignore[union-attr]
        return float(rate)


def _with_noise(block: StepBlock, noise: Mapping[str, float]) -> StepBlock:
    """``block`` with the noise estimate read at a drain on its last step (the estimate as of then)."""
    n = len(block)
    columns = {}
    for name, value in noise.items():
        column = np.full(n, np.nan)
        column[-1] = value
        columns[name] = column
    return dataclasses.replace(block, **columns)  # type: ignore[arg-type]


def _values(logs: Sequence[Any], name: str) -> list[Any]:
    """``logs[i].get(name)`` for every step (a C-level loop when the logs are dicts, as Keras's are)."""
    try:
        return list(map(dict.get, logs, itertools.repeat(name)))
    except TypeError:  # another mapping type
        return [entry.get(name) for entry in logs]


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
