"""The simulator on a live replay's plan, with the costs that live run measured: the same jobs, arrivals and
work, the same policy objects, so the two mean JCTs can be set side by side (``replay --compare-sim``).

The live jobs train ``time_scale`` of their application's work; the simulator's applications are scaled to
match (every epoch's progress times the scale: the same step times and statistical efficiency per epoch, epochs
that many times shorter). The costs are read off the live run (:func:`measured_costs`): how long a job took
from its submission to its first committed step (``start_s``) and how long its ring stood still at a resize;
under ``tiresias`` a job's start is also each resumption (its service started again, to its first step resumed
from its checkpoint), the cost the simulator charges a preempted job when it resumes.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.replay.plan import ReplayPlan
from submarine_elastic.replay.records import JobRecord, LiveRun
from submarine_elastic.replay.runner import STATIC, TIRESIAS
from submarine_elastic.replay.tiresias import scaled_tiresias
from submarine_elastic.sim import (
    BatchRule,
    ClusterConfig,
    JobSpec,
    ResizeCosts,
    Scheduler,
    SimConfig,
    SimResult,
    TraceCatalog,
    load_scheduler,
    simulate,
)
from submarine_elastic.sim.physics import Application

#: The simulator's scheduler for the live ``static`` baseline: every job at its size, FIFO.
SIM_STATIC = "fifo"


class ScaledCatalog(TraceCatalog):
    """The applications of the default catalog with every epoch ``scale`` times shorter."""

    def __init__(self, scale: float, data_dir: Path | None = None) -> None:
        super().__init__(data_dir)
        self.scale = scale
        self._scaled: dict[str, Application] = {}

    def get(self, name: str) -> Application:
        app = self._scaled.get(name)
        if app is None:
            app = copy.copy(super().get(name))
            app.epoch_progress = app.epoch_progress * self.scale
            self._scaled[name] = app
        return app


@dataclass(frozen=True)
class MeasuredCosts:
    """Costs read off a live run, each with the number of events it is the median of."""

    start_s: float
    starts: int
    scale_out_s: float
    scale_outs: int
    scale_in_s: float
    scale_ins: int
    #: of the starts, the resumptions after a suspension (tiresias): resumed to its first step again
    restart_s: float = 0.0
    restarts: int = 0

    def costs(self, default: ResizeCosts | None = None) -> ResizeCosts:
        """As the simulator's costs; a kind of change the run never made keeps ``default``'s."""
        base = default or ResizeCosts()
        return ResizeCosts(
            start_s=self.start_s if self.starts else base.start_s,
            scale_out_s=self.scale_out_s if self.scale_outs else base.scale_out_s,
            scale_in_s=self.scale_in_s if self.scale_ins else base.scale_in_s,
        )

    def describe(self) -> str:
        return (
            f"start {self.start_s:.1f} s (median of {self.starts}), scale-out pause {self.scale_out_s:.2f} s "
            f"({self.scale_outs}), scale-in pause {self.scale_in_s:.2f} s ({self.scale_ins})"
            + (f", restart {self.restart_s:.1f} s ({self.restarts})" if self.restarts else "")
        )


def measured_costs(runs: Sequence[LiveRun]) -> MeasuredCosts:
    """Medians over the runs' jobs: submission to first committed step, and each resumption to the first step
    after it (a start too); and at each change of ring size, the gap between the last step before and the
    first after less the median gap between two steps at the new size (a change with no two steps at its new
    size after it is left out)."""
    starts: list[float] = []
    restarts: list[float] = []
    outs: list[float] = []
    ins: list[float] = []
    for run in runs:
        for record in run.records:
            if record.submitted_s is not None and record.first_step_s is not None:
                starts.append(record.first_step_s - record.submitted_s)
            for resumed, step in zip(record.resumed_s, record.resumed_step_s, strict=False):
                if step is not None:
                    restarts.append(step - resumed)
            for grew, pause in _pauses(record):
                (outs if grew else ins).append(pause)
    starts += restarts
    return MeasuredCosts(
        start_s=statistics.median(starts) if starts else 0.0,
        starts=len(starts),
        scale_out_s=statistics.median(outs) if outs else 0.0,
        scale_outs=len(outs),
        scale_in_s=statistics.median(ins) if ins else 0.0,
        scale_ins=len(ins),
        restart_s=statistics.median(restarts) if restarts else 0.0,
        restarts=len(restarts),
    )


def _pauses(record: JobRecord) -> list[tuple[bool, float]]:
    ring = record.ring
    gaps: dict[int, list[float]] = {}
    for (t0, n0), (t1, n1) in zip(ring, ring[1:], strict=False):
        if n0 == n1:
            gaps.setdefault(n1, []).append(t1 - t0)
    out = []
    for (t0, n0), (t1, n1) in zip(ring, ring[1:], strict=False):
        if n0 != n1 and n1 in gaps:
            typical = statistics.median(gaps[n1])
            out.append((n1 > n0, max(0.0, t1 - t0 - typical)))
    return out


def specs(plan: ReplayPlan, elastic: bool) -> list[JobSpec]:
    """The plan's jobs as the simulator's (elastic: 1 .. each job's cap of workers)."""
    return [
        JobSpec(
            name=j.name,
            arrival_s=j.arrival_s,
            application=j.application,
            num_replicas=j.workers,
            batch_size=j.batch,
            min_replicas=1 if elastic else None,
            max_replicas=j.max_workers if elastic else None,
        )
        for j in plan.jobs
    ]


def scheduler_for(plan: ReplayPlan, policy: str) -> Scheduler:
    """The simulator's scheduler for a live run's policy: ``static`` its FIFO, ``tiresias`` the one the live run
    asks (its threshold scaled with the plan's time), any other the policy as the controller runs it."""
    if policy == STATIC:
        return load_scheduler(SIM_STATIC)
    if policy == TIRESIAS:
        return scaled_tiresias(plan.time_scale)
    return load_scheduler(policy)


def simulate_plan(plan: ReplayPlan, policy: str, costs: ResizeCosts, interval_s: float) -> SimResult:
    """The plan in the simulator under ``policy`` (:func:`scheduler_for`), every job's global batch fixed."""
    elastic = policy not in (STATIC, TIRESIAS)
    return simulate(
        specs(plan, elastic),
        ClusterConfig(plan.nodes, plan.gpus_per_node),
        scheduler_for(plan, policy),
        catalog=ScaledCatalog(plan.time_scale),
        config=SimConfig(interval_s=interval_s, costs=costs, batch_rule=BatchRule.FIXED_GLOBAL),
        workload_name=plan.workload,
    )


def compare_runs(runs: Sequence[LiveRun], interval_s: float) -> tuple[dict[str, float], list[str]]:
    """Each run's policy in the simulator on its plan with the costs that run measured: the simulated mean JCT
    per policy, and a line per policy with the live one beside it and the costs."""
    from submarine_elastic.replay.report import summary

    sims: dict[str, float] = {}
    lines = []
    for run in runs:
        measured = measured_costs([run])
        sims[run.policy] = simulate_plan(run.plan, run.policy, measured.costs(), interval_s).summary.mean_jct_s
        live = summary(run)["mean_jct_s"]
        ratio = f", live/sim {live / sims[run.policy]:.2f}" if isinstance(live, float) else ""
        lines.append(
            f"{run.policy}: simulated mean JCT {sims[run.policy]:.0f} s{ratio}; costs measured live: "
            f"{measured.describe()}"
        )
    return sims, lines
