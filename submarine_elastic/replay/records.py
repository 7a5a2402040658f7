"""What a live replay records of its jobs (:class:`JobRecord`) and of a policy's run (:class:`LiveRun`), how a
job's end is read (:func:`ended_state`: the driver's record over YARN's word), and reading a run's results file
back (:func:`load_runs`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from submarine_elastic.protocol.api import JobPhase
from submarine_elastic.replay.plan import ReplayJob, ReplayPlan
from submarine_elastic.submit.store import load_outcome


class ReplayRunError(RuntimeError):
    """A live replay could not run (a submission refused, the jobs not done in time)."""


@dataclass
class JobRecord:
    """One job of a live run, times in seconds after the run began."""

    job: ReplayJob
    #: its YARN service's name
    service: str
    submitted_s: float | None = None
    #: its `job run` returned (the service exists)
    created: bool = False
    #: since when (run seconds) YARN has said its service does not exist, once created (None: it exists)
    gone_since: float | None = None
    #: its step log was read and checked, after its end
    checked: bool = False
    ended_s: float | None = None
    state: str | None = None
    first_step_s: float | None = None
    last_step_s: float | None = None
    samples: int = 0
    problems: list[str] = field(default_factory=list)
    #: (time, ring size) at every committed step
    ring: list[tuple[float, int]] = field(default_factory=list)
    #: (time, worker containers YARN holds) at every look
    held: list[tuple[float, int]] = field(default_factory=list)
    #: under tiresias: when each suspension was asked (its service stopped), when YARN had it stopped, and when
    #: the job was resumed (its service started again); the first resumed step after each resumption
    stopped_s: list[float] = field(default_factory=list)
    stopped_done_s: list[float] = field(default_factory=list)
    resumed_s: list[float] = field(default_factory=list)
    resumed_step_s: list[float | None] = field(default_factory=list)
    #: steps an earlier run logged past the checkpoint its resumption started from (trained again after it)
    rolled_back: int = 0
    #: its service is being stopped (asked, not yet stopped), is stopped, is being started again
    suspending: bool = False
    suspended: bool = False
    resuming: bool = False
    #: the GPU-seconds it has held over its runs before the one it is in, and when that one began
    attained_gpu_s: float = 0.0
    holding_since: float | None = None

    @property
    def jct_s(self) -> float | None:
        return None if self.last_step_s is None else self.last_step_s - self.job.arrival_s

    @property
    def queueing_s(self) -> float | None:
        return None if self.first_step_s is None else self.first_step_s - self.job.arrival_s

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.job.name,
            "service": self.service,
            "workload_name": self.job.workload_name,
            "application": self.job.application,
            "workers": self.job.workers,
            "max_workers": self.job.max_workers,
            "batch": self.job.batch,
            "samples_planned": self.job.samples,
            "samples_trained": self.samples,
            "arrival_s": round(self.job.arrival_s, 3),
            "submitted_s": _round(self.submitted_s),
            "first_step_s": _round(self.first_step_s),
            "last_step_s": _round(self.last_step_s),
            "ended_s": _round(self.ended_s),
            "jct_s": _round(self.jct_s),
            "queueing_s": _round(self.queueing_s),
            "state": self.state,
            "problems": self.problems,
            "ring": [(round(t, 2), n) for t, n in self.ring],
            "held": [(round(t, 2), n) for t, n in self.held],
            **(
                {
                    "suspended_s": [round(t, 2) for t in self.stopped_s],
                    "stopped_s": [round(t, 2) for t in self.stopped_done_s],
                    "resumed_s": [round(t, 2) for t in self.resumed_s],
                    "resumed_step_s": [_round(t) for t in self.resumed_step_s],
                    "rolled_back_steps": self.rolled_back,
                }
                if self.stopped_s
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object], job: ReplayJob) -> JobRecord:
        """The record :meth:`as_dict` wrote of ``job`` (what a run's ``replay.json`` holds); its end as
        :func:`ended_state` reads it now."""

        def seconds(key: str) -> list[float]:
            return [float(t) for t in cast(list[float], data.get(key) or [])]

        def optional(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(cast(float, value))

        state = cast(str | None, data.get("state"))
        return cls(
            job=job,
            service=str(data["service"]),
            submitted_s=optional("submitted_s"),
            created=data.get("submitted_s") is not None,
            checked=True,
            ended_s=optional("ended_s"),
            state=None if state is None else ended_state(str(data["service"]), state),
            first_step_s=optional("first_step_s"),
            last_step_s=optional("last_step_s"),
            samples=int(cast(int, data.get("samples_trained") or 0)),
            problems=[str(p) for p in cast(list[str], data.get("problems") or [])],
            ring=[(float(t), int(n)) for t, n in cast(list[tuple[float, int]], data.get("ring") or [])],
            held=[(float(t), int(n)) for t, n in cast(list[tuple[float, int]], data.get("held") or [])],
            stopped_s=seconds("suspended_s"),
            stopped_done_s=seconds("stopped_s"),
            resumed_s=seconds("resumed_s"),
            resumed_step_s=[
                None if t is None else float(t) for t in cast(list[float], data.get("resumed_step_s") or [])
            ],
            rolled_back=int(cast(int, data.get("rolled_back_steps") or 0)),
        )

    def attained(self, now: float) -> float:
        """GPU-seconds held by ``now``: its runs before, and the one it is in."""
        since = self.holding_since
        return self.attained_gpu_s + (0.0 if since is None else self.job.workers * max(0.0, now - since))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass
class LiveRun:
    """What one policy's live run of a plan gave."""

    policy: str
    plan: ReplayPlan
    started_at: float
    records: list[JobRecord]
    #: (time, decision text) of every controller decision, per job name
    decisions: dict[str, list[tuple[float, int, int, str]]] = field(default_factory=dict)
    wall_s: float = 0.0


def load_runs(path: Path, plan: ReplayPlan) -> list[LiveRun]:
    """The runs a ``replay.json`` (:func:`~submarine_elastic.replay.report.write`) holds, of ``plan``'s jobs, so
    that their figures can be worked out again without running them again (each job's end as
    :func:`ended_state` reads it now).

    Raises:
        ReplayRunError: the file names a job ``plan`` does not have, or is not a replay's.
    """
    by_name = {job.name: job for job in plan.jobs}
    try:
        data = json.loads(path.read_text())
        runs = []
        for run in data["runs"]:
            records = []
            for job in run["jobs_detail"]:
                if job["name"] not in by_name:
                    raise ReplayRunError(f"{path}: job {job['name']!r} is not in the plan ({plan.describe()})")
                records.append(JobRecord.from_dict(job, by_name[job["name"]]))
            decisions = {
                name: [(float(t), int(a), int(b), str(why)) for t, a, b, why in log]
                for name, log in run.get("decision_log", {}).items()
            }
            runs.append(LiveRun(run["policy"], plan, 0.0, records, decisions, float(run.get("wall_s") or 0.0)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReplayRunError(f"{path} is not a replay's results file: {exc}") from exc
    return runs


def ended_state(service: str, yarn_state: str) -> str:
    """How a job whose service YARN shows ended (``yarn_state``) ended, by its driver's record where it left one:
    ``FAILED`` whatever YARN shows when the driver recorded the job failed (a driver that concluded the job exits
    0, so that YARN does not relaunch it: YARN then shows SUCCEEDED; seen in a chaos run, a job whose every
    worker was lost counted as finished); ``SUCCEEDED`` also where YARN says ``STOPPED`` but the driver recorded
    it finished. YARN's services API shows a service SUCCEEDED while its ApplicationMaster runs, and, read once
    that has exited and before the RM has the application FINISHED (up to 30 s), the saved definition's
    ``STOPPED``: seen in a replay, a job that trained every sample ended STOPPED and was left out of the run's
    figures."""
    outcome = load_outcome(service)
    if outcome is not None and outcome.phase is JobPhase.FAILED:
        return "FAILED"
    if yarn_state == "STOPPED" and outcome is not None and outcome.phase is JobPhase.FINISHED and not outcome.error:
        return "SUCCEEDED"
    return yarn_state
