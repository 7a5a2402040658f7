"""Interfaces, value types and errors of design-space exploration.

A :class:`Space` names parameters (each with a finite list of levels), how to sample points from them,
settings every point shares, the backend that measures a point, and the metric to optimise. A
:class:`Backend` turns one :class:`Point` into metrics; the runner records one row per point and never
measures a point twice; the report reads the rows back.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from submarine_elastic.submit.jobspec import JobRequest

#: A parameter level or fixed setting: what YAML scalars give.
Value = str | int | float | bool


class DseError(Exception):
    """Base of every error raised by ``submarine_elastic.dse``."""


class SpaceError(DseError, ValueError):
    """A space file or definition is invalid; the message names the file and the key."""


class BackendError(DseError):
    """A backend cannot measure a point (bad parameter for it, failed command); names the point."""


class ResultsError(DseError):
    """A results file cannot be read or does not belong to this space."""


class Strategy(StrEnum):
    """How points are drawn: every combination, uniform draws, or a Latin hypercube (both seeded)."""

    FACTORIAL = "factorial"
    RANDOM = "random"
    LHS = "lhs"


@dataclass(frozen=True)
class Parameter:
    """A parameter and its levels, in order (ranges are discretised when the space is loaded)."""

    name: str
    levels: tuple[Value, ...]

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise SpaceError(f"parameter name must be an identifier, got {self.name!r}")
        if not self.levels:
            raise SpaceError(f"parameter {self.name!r} has no levels")
        if len(set(map(_key, self.levels))) != len(self.levels):
            raise SpaceError(f"parameter {self.name!r} repeats a level: {list(self.levels)}")


@dataclass(frozen=True)
class Point:
    """One configuration: a level for every parameter, plus the shared settings.

    ``point_id`` is a stable hash of the parameter values, so the same configuration gets the same id in
    every run and every process (what resuming relies on).
    """

    values: Mapping[str, Value]
    fixed: Mapping[str, Value] = field(default_factory=dict)

    @property
    def point_id(self) -> str:
        text = json.dumps({k: _key(v) for k, v in sorted(self.values.items())}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def settings(self) -> dict[str, Value]:
        """Shared settings overridden by this point's values."""
        return {**self.fixed, **self.values}


@dataclass(frozen=True)
class Space:
    """A design space: parameters, sampling, shared settings, backend and objective."""

    name: str
    parameters: tuple[Parameter, ...]
    strategy: Strategy = Strategy.FACTORIAL
    samples: int | None = None
    seed: int = 0
    fixed: Mapping[str, Value] = field(default_factory=dict)
    backend: str = "simulator"
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    objective: str = "mean_jct_s"
    minimize: bool = True

    def __post_init__(self) -> None:
        names = [p.name for p in self.parameters]
        if not names:
            raise SpaceError(f"space {self.name!r} has no parameters")
        if len(set(names)) != len(names):
            raise SpaceError(f"space {self.name!r} names a parameter twice: {names}")
        clash = sorted(set(names) & set(self.fixed))
        if clash:
            raise SpaceError(f"space {self.name!r}: {', '.join(clash)} is both a parameter and fixed")
        if self.strategy is not Strategy.FACTORIAL and (self.samples is None or self.samples < 1):
            raise SpaceError(f"space {self.name!r}: sampling {self.strategy.value} needs samples >= 1")

    @property
    def size(self) -> int:
        """Points in the full factorial."""
        return math.prod(len(p.levels) for p in self.parameters)


@dataclass(frozen=True)
class PointResult:
    """What measuring one point gave: its metrics (``status`` ``ok``), or the error (``failed``)."""

    point: Point
    metrics: Mapping[str, float]
    status: str = "ok"
    error: str = ""
    wall_s: float = 0.0


class Backend(ABC):
    """Measures points. Implementations must be picklable: the runner may measure in worker processes."""

    #: Name used in space files (``backend: simulator``).
    name: str = "backend"

    @abstractmethod
    def parameters(self) -> frozenset[str] | None:
        """Setting names this backend understands (None: any). The space is checked against it first."""

    @abstractmethod
    def metrics(self) -> tuple[str, ...]:
        """Names of the metrics :meth:`measure` returns (the results file's metric columns)."""

    @abstractmethod
    def measure(self, point: Point) -> dict[str, float]:
        """Measure one point and return its metrics. Blocks for as long as the measurement takes.

        Raises:
            BackendError: the point cannot be measured (bad value for this backend, failed run).
        """

    def check_ready(self) -> None:  # noqa: B027 - optional hook; most backends need nothing outside
        """Confirm what the backend needs outside this process (a cluster) is there. The runner calls it
        once before measuring, and only when there is a point to measure. Blocks for a request at most.

        Raises:
            BackendError: the backend cannot measure now (the message says what is missing).
        """


@dataclass(frozen=True)
class JobState:
    """What the cluster says of a submitted job: running, or ended cleanly (``ok``) or not.

    ``detail`` is a one-line description for messages (state, containers, diagnostics).
    """

    ended: bool
    ok: bool = True
    detail: str = ""


class JobRunner(ABC):
    """The cluster edge of the ``pseudo-cluster`` backend: submits, watches and kills real jobs.

    The backend owns one runner per point and closes it when the point is done; tests inject a fake.
    """

    @abstractmethod
    def submit(self, request: JobRequest) -> None:
        """Submit the job and return without waiting for it to start (one request).

        Raises:
            BackendError: the job cannot be submitted (bad spec, the RM refused it or cannot be reached).
        """

    @abstractmethod
    def state(self, name: str) -> JobState:
        """The job's state now (one request). A job the cluster no longer knows has ended, not ok.

        Raises:
            BackendError: the cluster cannot be asked.
        """

    @abstractmethod
    def describe(self, name: str) -> str:
        """A line for a failure message: the job's state and its ring as far as they can be learnt in a few
        seconds. Never raises; what cannot be learnt is said in the line."""

    @abstractmethod
    def kill(self, name: str) -> None:
        """Stop the job and remove it, blocking until it is gone; a job already gone is fine.

        Raises:
            BackendError: the job could not be removed.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections. Never raises."""


def _key(value: Value) -> Value:
    """A level's identity: ``1`` and ``1.0`` are the same level, ``True`` is not ``1``."""
    if isinstance(value, bool) or not isinstance(value, float):
        return value
    return int(value) if value.is_integer() else value
