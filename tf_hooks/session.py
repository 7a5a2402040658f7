"""``MetricsHook``: a ``tf.compat.v1.train.SessionRunHook`` reporting graph-mode training steps.

It adds its fetches (loss, learning rate, extra tensors) to the training ``run`` through
``SessionRunArgs`` only on the steps it reports, so it costs no extra ``session.run`` and works
under ``MonitoredTrainingSession``. One ``run`` of the session is one training step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Unpack

import tensorflow as tf

from tf_hooks._hook import ReportingHook
from tf_hooks.api import StepRecord
from tf_hooks.config import ReportingOptions


class MetricsHook(ReportingHook, tf.compat.v1.train.SessionRunHook):
    """Reports every (or every N-th) ``session.run`` to the metrics service."""

    def __init__(
        self,
        loss: Any = None,
        *,
        learning_rate: Any = None,
        extra_tensors: Mapping[str, Any] | None = None,
        global_step: Any = None,
        **options: Unpack[ReportingOptions],
    ) -> None:
        """Reads the settings not given from the environment (``submarine_elastic.env``); with no endpoint
        anywhere the hook reports nothing. Starts the sender thread when there is one.

        ``loss``, ``learning_rate`` (a tensor or a float) and ``extra_tensors`` (reported as user
        metrics) are fetched with the training op on reported steps. ``global_step`` (default: the
        graph's) gives the step number at session creation; the hook counts runs from there.
        ``rank`` and ``world_size`` default to Horovod's when it is initialized, else 0 and 1.

        Raises:
            MetricsConfigError: a setting is unusable (names it).
        """
        self._init_reporting(options)
        self._loss = loss
        self._learning_rate = learning_rate
        self._extra = dict(extra_tensors or {})
        self._global_step_arg = global_step
        self._every_n = self.config.every_n
        self._fetches: dict[str, Any] = {}
        self._global_step: Any = None
        self._step = 0
        self._step_prev = 0
        self._t_prev = time.perf_counter()
        self._ring = (0, 1)
        self._current_batch_size: int | None = None

    def begin(self) -> None:
        try:
            self._global_step = self._global_step_arg or tf.compat.v1.train.get_global_step()
            fetches: dict[str, Any] = {}
            if self._loss is not None:
                fetches["loss"] = self._loss
            if self._learning_rate is not None and not isinstance(self._learning_rate, float | int):
                fetches["learning_rate"] = self._learning_rate
            if self._extra:
                fetches["extra"] = self._extra
            self._fetches = fetches
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()

    def after_create_session(self, session: Any, coord: Any) -> None:
        try:
            self._step = int(session.run(self._global_step)) if self._global_step is not None else self._step
            self._step_prev = self._step
            self._t_prev = time.perf_counter()
            rank, world_size, self._current_batch_size = self._ring_now()
            self._ring = (rank, world_size)
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()

    def before_run(self, run_context: Any) -> Any:
        if self._fetches and (self._step + 1) % self._every_n == 0:
            return tf.compat.v1.train.SessionRunArgs(self._fetches)
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        try:
            self._step += 1
            step = self._step
            if step % self._every_n:
                return
            now = time.perf_counter()
            steps = step - self._step_prev
            elapsed = now - self._t_prev
            self._t_prev = now
            self._step_prev = step
            step_time = elapsed / steps if steps > 0 and elapsed > 0 else None
            batch_size = self._current_batch_size
            eps = batch_size / step_time if batch_size and step_time else None
            results = run_values.results or {}
            learning_rate = results.get("learning_rate", self._learning_rate)
            rank, world_size = self._ring
            self.sink.record(
                StepRecord(
                    step,
                    time.time(),
                    rank,
                    world_size,
                    results.get("loss"),
                    eps,
                    step_time,
                    batch_size,
                    learning_rate,
                    results.get("extra"),
                )
            )
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()

    def end(self, session: Any) -> None:
        try:
            self.sink.flush(self.config.close_timeout)
        except Exception:  # noqa: BLE001  (_failed logs it with its traceback)
            self._failed()
