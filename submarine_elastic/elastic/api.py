"""Errors, names and value types of the elastic job runtime (driver, agents, job specs)."""

from __future__ import annotations

from dataclasses import dataclass

DRIVER_COMPONENT = "driver"
WORKER_COMPONENT = "worker"


class ElasticError(Exception):
    """Base of every error raised by ``submarine_elastic.elastic``."""


class DriverUnreachableError(ElasticError):
    """The job's driver could not be located or did not answer."""


class FlexRefusedError(ElasticError):
    """A resize outside the job's limits, or while the job cannot resize."""


@dataclass(frozen=True)
class Limits:
    """A job's worker limits: it starts with ``num`` and stays within ``[min, max]``.

    Raises:
        ValueError: a count below 1, or ``min <= num <= max`` violated (naming the flag).
    """

    num: int
    min: int
    max: int

    def __post_init__(self) -> None:
        for flag, value in (("--num_workers", self.num), ("--min_workers", self.min), ("--max_workers", self.max)):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        if not self.min <= self.num <= self.max:
            raise ValueError(
                f"--num_workers {self.num} must lie within --min_workers {self.min} and --max_workers {self.max}"
            )

    def check_target(self, workers: int) -> None:
        """Raises FlexRefusedError naming the limit ``workers`` breaks."""
        if workers > self.max:
            raise FlexRefusedError(f"{workers} workers is above the job's --max_workers {self.max}")
        if workers < self.min:
            raise FlexRefusedError(f"{workers} workers is below the job's --min_workers {self.min}")
