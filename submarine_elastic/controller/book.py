"""The controller's record of each job between rounds: one entry per job name, behind one lock.

An entry holds what the controller follows of a job (its pending or stalled decision, whether its driver's
target is still to be adopted, whether a decision is being sent), what it last sent (the batch part of the
target), since when the job asks for more workers than fit, the policy it runs, and the sequence number of
the last point :meth:`~submarine_elastic.controller.service.ControllerService.report_metrics` kept. Every
read and every change goes through :class:`JobBook`, under its lock; a round's step reads a frozen copy
(:class:`Tracked`) and hands back what changes (:class:`Follow`), applied only while the entry still holds
what the step read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from submarine_elastic.controller.api import DecisionRecord, DecisionState
from submarine_elastic.protocol.proto import elastic_pb2 as pb

T = TypeVar("T")


@dataclass(frozen=True)
class Converging:
    """A job's latest decision while it is pending or stalled (what the controller follows each round).

    Attributes:
        decision_id, record: the decision as stored.
        run: the run of the job it is for.
        restarts_cooldown: whether its being applied restarts the job's cooldown (a resize does, a batch or a
            lowered target does not).
        stalled, why: whether it is stalled, and why it has not converged as last read.
    """

    decision_id: int
    record: DecisionRecord
    run: int
    restarts_cooldown: bool = True
    stalled: bool = False
    why: str | None = None


@dataclass(frozen=True)
class Tracked:
    """A frozen copy of one job's entry, for a round's step.

    Attributes:
        converging: its pending or stalled decision, or None.
        unadopted: its driver's target is to be read before any resize (after a restart, or a send that failed).
        sending: a decision of it is being sent to its driver.
        batch_sent: the batch part of the target its driver last took from this controller.
        short_since: ``(run, since)``: since when that run has asked for more workers than fit.
    """

    converging: Converging | None = None
    unadopted: bool = False
    sending: bool = False
    batch_sent: pb.Target | None = None
    short_since: tuple[int, float] | None = None

    @property
    def busy(self) -> bool:
        """No new resize for the job: one is being sent, or is pending, or its driver's target is unknown and a
        resize could undo one the driver took."""
        return self.sending or self.unadopted or (self.converging is not None and not self.converging.stalled)


@dataclass(frozen=True)
class Follow:
    """What following one job came to: its entry moves from ``was`` to ``now``, and the store is told.

    Attributes:
        job_id: the job.
        was, now: the pending or stalled decision the step read, and what replaces it (None: no longer followed).
        adopted: its driver's target was read (or the job ended): it is no longer unadopted.
        finish: ``(state, error)`` the decision ``was`` ends in (applied, or failed with why).
        progress: ``(why, stalled)`` to note on the decision ``was``.
        changes: fields of the job's record to set.
    """

    job_id: str
    was: Converging | None
    now: Converging | None
    adopted: bool = False
    finish: tuple[DecisionState, str | None] | None = None
    progress: tuple[str | None, bool] | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)

    def applied_to(self, tracked: Tracked) -> Tracked:
        """``tracked`` as this leaves it."""
        return replace(tracked, converging=self.now, unadopted=tracked.unadopted and not self.adopted)


@dataclass
class _Entry:
    converging: Converging | None = None
    unadopted: bool = False
    sending: threading.Event | None = None  # set once the send has ended
    batch_sent: pb.Target | None = None
    short_since: tuple[int, float] | None = None
    policy: tuple[int, str | None] | None = None  # (run, policy spec) given to the engine
    reports: int = 0  # seq of the last point report_metrics kept


class JobBook:
    """Every job's entry, behind one lock; no method blocks on I/O while holding it, except :meth:`report`, which
    holds it for one ingest into the in-memory metrics store (so that a job's points reach it in order)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def _entry(self, job_id: str) -> _Entry:
        entry = self._entries.get(job_id)
        if entry is None:
            entry = self._entries[job_id] = _Entry()
        return entry

    def snapshot(self) -> dict[str, Tracked]:
        """Every entry, frozen."""
        with self._lock:
            return {
                job_id: Tracked(e.converging, e.unadopted, e.sending is not None, e.batch_sent, e.short_since)
                for job_id, e in self._entries.items()
            }

    def following(self) -> bool:
        """Whether any job has a decision to follow or a target to adopt."""
        with self._lock:
            return any(e.converging is not None or e.unadopted for e in self._entries.values())

    # ------------------------------------------------------------------ following

    def recover(self, job_id: str, converging: Converging) -> Converging | None:
        """Follow ``converging`` (a decision a previous controller left); returns the one it replaces."""
        with self._lock:
            entry = self._entry(job_id)
            earlier, entry.converging = entry.converging, converging
            return earlier

    def unadopt(self, job_ids: Iterable[str]) -> None:
        """The jobs' drivers' targets are to be read before any resize."""
        with self._lock:
            for job_id in job_ids:
                self._entry(job_id).unadopted = True

    def submitted(self, job_id: str, *, new_run: bool, forget: Callable[[], None]) -> None:
        """A job (or a new run of it) was submitted: its target is the one submitted; a new run's metrics
        ``forget`` runs, and its reports are numbered afresh."""
        with self._lock:
            entry = self._entry(job_id)
            entry.unadopted = False
            if new_run:
                forget()
                entry.reports = 0

    def follow(self, step: Follow) -> bool:
        """Apply ``step`` if the job's entry still holds the decision it read; whether it did."""
        with self._lock:
            entry = self._entry(step.job_id)
            if entry.converging is not step.was:
                return False
            entry.converging = step.now
            if step.adopted:
                entry.unadopted = False
            return True

    def set_short(self, since: Mapping[str, tuple[int, float]]) -> None:
        """Since when each job asks for more than fits; a job not in ``since`` does not."""
        with self._lock:
            for job_id in since.keys() - self._entries.keys():
                self._entry(job_id)
            for job_id, entry in self._entries.items():
                entry.short_since = since.get(job_id)

    # ------------------------------------------------------------------ sending

    def start_send(self, job_id: str, converging: Converging) -> threading.Event:
        """A decision of the job is recorded and about to be sent: follow it; the event is set once the send ends."""
        done = threading.Event()
        with self._lock:
            entry = self._entry(job_id)
            entry.converging = converging
            entry.sending = done
        return done

    def sent_batch(self, job_id: str, batch: pb.Target) -> None:
        with self._lock:
            self._entry(job_id).batch_sent = batch

    def send_failed(self, job_id: str) -> None:
        """The driver did not take the decision: nothing to follow, and its target is to be read again."""
        with self._lock:
            entry = self._entry(job_id)
            entry.converging = None
            entry.unadopted = True

    def send_ended(self, job_id: str, done: threading.Event) -> None:
        with self._lock:
            entry = self._entry(job_id)
            if entry.sending is done:
                entry.sending = None
        done.set()

    def converging(self, job_id: str) -> Converging | None:
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.converging if entry is not None else None

    def sends(self) -> list[threading.Event]:
        """The events of the sends under way."""
        with self._lock:
            return [e.sending for e in self._entries.values() if e.sending is not None]

    # ------------------------------------------------------------------ policies and reports

    def policy(self, job_id: str) -> tuple[int, str | None] | None:
        with self._lock:
            entry = self._entries.get(job_id)
            return entry.policy if entry is not None else None

    def set_policy(self, job_id: str, policy: tuple[int, str | None] | None) -> None:
        with self._lock:
            self._entry(job_id).policy = policy

    def with_policies(self) -> set[str]:
        with self._lock:
            return {job_id for job_id, e in self._entries.items() if e.policy is not None}

    def report(self, job_id: str, ingest: Callable[[int], T]) -> T:
        """``ingest`` of the job's next report sequence number, under the lock: seqs reach the metrics store in
        order, or a later one would drop an earlier one."""
        with self._lock:
            entry = self._entry(job_id)
            entry.reports += 1
            return ingest(entry.reports)
