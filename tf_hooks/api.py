"""Interfaces, value types and errors of the training-side metrics path.

A :class:`MetricsSink` takes one :class:`StepRecord` per reported step from the training thread, or
:class:`StepBlock` columns in bulk from a hook's own queue (:meth:`MetricsSink.add_source`).
:class:`NullSink` (the default when no endpoint is configured) drops everything; the gRPC sink in
``tf_hooks.sender`` queues and streams from a background thread. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

logger = logging.getLogger(__name__)

#: A number, or something the sender turns into one off the training thread: a TensorFlow tensor
#: or NumPy scalar (anything ``float()`` accepts), or a zero-argument callable returning one.
Lazy = Any


class TfHooksError(Exception):
    """Base of every error raised by ``tf_hooks``."""


class MetricsConfigError(TfHooksError, ValueError):
    """A metrics setting (argument or environment variable) is unusable; the message names it."""


class NoiseSource(Protocol):
    """Where a hook reads the gradient noise estimate from (``tf_hooks.noise.GradientNoiseScale``)."""

    def record_fields(self) -> Mapping[str, float]:
        """The estimate now as :class:`StepRecord` keywords (``grad_sq_norm``, ``grad_variance``,
        ``gradient_noise_scale``); empty when there is none. May read the device: called off the
        training thread where the hook can."""
        ...


class StepRecord(NamedTuple):
    """One reported step, as the training thread hands it over.

    ``loss``, ``learning_rate`` and the values of ``user_metrics`` may be lazy (see :data:`Lazy`);
    the sender converts them, so the training thread never waits for the device on our account.
    """

    step: int
    wall_time: float
    rank: int
    world_size: int
    loss: Lazy = None
    examples_per_second: float | None = None
    step_time_seconds: float | None = None
    batch_size: int | None = None
    learning_rate: Lazy = None
    user_metrics: Mapping[str, Lazy] | None = None
    #: The gradient noise estimate at this step (``tf_hooks.noise``): smoothed |G|^2, tr(Sigma) and
    #: their ratio, in samples. None where the step has none (one worker, no accumulation).
    grad_sq_norm: Lazy = None
    grad_variance: Lazy = None
    gradient_noise_scale: Lazy = None


@dataclass(frozen=True)
class StepBlock:
    """Consecutive reported steps of one (rank, world size), column by column: row ``i`` of every
    column is one step. What a source hands a sink in bulk (:meth:`MetricsSink.add_source`).

    Float columns hold NaN where a step lacks the value, ``batch_size`` holds 0; a column that is
    None is absent for every step. The sink applies the service's rules (out-of-range values become
    absent, a bad wall time becomes now), so a source only converts.
    """

    rank: int
    world_size: int
    step: np.ndarray  # int64
    wall_time: np.ndarray  # float64
    loss: np.ndarray | None = None
    examples_per_second: np.ndarray | None = None
    step_time_seconds: np.ndarray | None = None
    batch_size: np.ndarray | None = None  # int64
    learning_rate: np.ndarray | None = None
    user_metrics: Mapping[str, np.ndarray] = field(default_factory=dict)
    grad_sq_norm: np.ndarray | None = None
    grad_variance: np.ndarray | None = None
    gradient_noise_scale: np.ndarray | None = None
    #: Steps the source lost just before each row (int64); None when it lost none.
    lost_before: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.step)


def as_floats(values: Sequence[Lazy], cache: dict[int, float] | None = None) -> np.ndarray:
    """``values`` as a float64 array, NaN for None and for anything that is not a number.

    Plain numbers, NumPy scalars and TensorFlow tensors convert in one NumPy call. A zero-argument
    callable is called and its result converted, once per callable while ``cache`` is kept: keep it
    no longer than the objects in ``values`` live (it is keyed by ``id``).
    """
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        pass
    if cache is None:
        cache = {}
    out = np.empty(len(values), dtype=np.float64)
    for i, value in enumerate(values):
        if callable(value):
            key = id(value)
            if key not in cache:
                cache[key] = _as_float(value)
            out[i] = cache[key]
        else:
            out[i] = _as_float(value)
    return out


def _as_float(value: Lazy) -> float:
    global _warned_conversion
    try:
        if callable(value):
            value = value()
        return math.nan if value is None else float(value)
    except Exception:  # noqa: BLE001  (a user's metric object may raise anything; it is absent then)
        logger.debug("a metric value could not be turned into a number; omitted", exc_info=True)
        if not _warned_conversion:
            _warned_conversion = True
            logger.warning("a metric value could not be turned into a number; omitted")
        return math.nan


_warned_conversion = False


@dataclass(frozen=True)
class SenderStats:
    """Counters of one sink since it was created.

    ``recorded == acked + dropped + rejected + pending`` at any moment.
    """

    recorded: int = 0
    acked: int = 0
    dropped: int = 0
    rejected: int = 0
    pending: int = 0
    duplicates: int = 0
    streams: int = 0
    failed_streams: int = 0
    incarnation: str = ""
    last_error: str | None = None


class MetricsSink(ABC):
    """Where the hooks put records. :meth:`record` is called on the training thread."""

    @abstractmethod
    def record(self, record: StepRecord) -> None:
        """Hands ``record`` over. Never blocks on I/O and never raises."""

    @abstractmethod
    def flush(self, timeout: float) -> bool:
        """Blocks until every record handed over so far is acknowledged by the service, dropped or
        rejected (True), or until ``timeout`` seconds pass or a send fails (False). Returns False at
        once while the last send failed: an unreachable service costs at most one attempt, never the
        whole timeout. Records stay queued either way. Never raises."""

    @abstractmethod
    def close(self, timeout: float) -> SenderStats:
        """Keeps sending (with retries) for up to ``timeout`` seconds, then stops; what is left and
        later records are counted as dropped.

        Blocks up to ``timeout`` seconds plus the time to tear the channel down. Never raises.
        """

    @abstractmethod
    def stats(self) -> SenderStats:
        """The counters now. Never blocks for long."""

    def add_source(self, drain: Callable[[], list[StepBlock | int]]) -> Callable[[], None] | None:
        """Lets a hook hand steps over in bulk instead of through :meth:`record` on every step.

        The sink calls ``drain`` from its own thread (and from :meth:`flush`, :meth:`close` and
        :meth:`stats`), one call at a time; it returns the steps since the last call as blocks, in
        order, with an int ``n`` where ``n`` steps were lost (counted as dropped, and their seq numbers
        skipped). Returns a function the hook calls to ask for a drain soon, or None when this sink
        takes records only through :meth:`record`.
        """
        return None


class NullSink(MetricsSink):
    """Drops every record: what the hooks use when no metrics endpoint is configured."""

    def __init__(self) -> None:
        self._recorded = 0

    def record(self, record: StepRecord) -> None:
        self._recorded += 1

    def flush(self, timeout: float) -> bool:
        return True

    def close(self, timeout: float) -> SenderStats:
        return self.stats()

    def stats(self) -> SenderStats:
        return SenderStats(recorded=self._recorded, dropped=self._recorded)


def resolve(value: int | Callable[[], int] | None, default: int) -> int:
    """``value`` itself, or what it returns when it is callable; ``default`` for None."""
    if value is None:
        return default
    return value() if callable(value) else value
