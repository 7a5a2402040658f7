"""Interfaces, value types and errors of the training-side metrics path.

A :class:`MetricsSink` takes one :class:`StepRecord` per reported step from the training thread.
:class:`NullSink` (the default when no endpoint is configured) drops everything; the gRPC sink in
``tf_hooks.sender`` queues and streams from a background thread. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

#: The same rule the metrics service applies to job ids (YARN service names).
JOB_ID_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,63}")
INSTANCE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

#: A number, or something the sender turns into one off the training thread: a TensorFlow tensor
#: or NumPy scalar (anything ``float()`` accepts), or a zero-argument callable returning one.
Lazy = Any


class TfHooksError(Exception):
    """Base of every error raised by ``tf_hooks``."""


class MetricsConfigError(TfHooksError, ValueError):
    """A metrics setting (argument or environment variable) is unusable; the message names it."""


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

    def add_source(self, drain: Callable[[], list[StepRecord | int]]) -> Callable[[], None] | None:
        """Lets a hook hand records over in bulk instead of through :meth:`record` on every step.

        The sink calls ``drain`` from its own thread (and from :meth:`flush` and :meth:`close`), one
        call at a time; it returns the records in order, with an int ``n`` where ``n`` records were
        lost (counted as dropped, and their seq numbers skipped). Returns a function the hook calls to
        ask for a drain soon, or None when this sink takes records only through :meth:`record`.
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
