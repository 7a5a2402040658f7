"""Trace-driven cluster simulator: replays a workload on a simulated GPU cluster under a scheduler.

Job speed and convergence come from measured data (:mod:`submarine_elastic.sim.physics`, the Pollux
OSDI 2021 traces); schedulers are the static baselines (:mod:`submarine_elastic.sim.baselines`) or the
live policy engine, driven unchanged (:mod:`submarine_elastic.sim.policy_adapter`).
"""

from submarine_elastic.sim.api import (
    Allocation,
    AllocationChange,
    ClusterConfig,
    ClusterView,
    JobResult,
    JobSpec,
    JobView,
    ResizeCosts,
    Scheduler,
    SchedulerError,
    SimError,
    SimResult,
    SimSummary,
    TraceDataError,
    UnknownApplicationError,
    UtilSample,
    WorkloadError,
)
from submarine_elastic.sim.baselines import BASELINES, StaticBackfill, StaticFifo, Tiresias
from submarine_elastic.sim.engine import BatchRule, SimConfig, Simulator, simulate
from submarine_elastic.sim.physics import Application, TraceCatalog
from submarine_elastic.sim.policy_adapter import PolicyScheduler, to_snapshot
from submarine_elastic.sim.schedulers import load_scheduler
from submarine_elastic.sim.workload import load_workload, parse_workload, resolve_workload, write_workload

__all__ = [
    "BASELINES",
    "Allocation",
    "AllocationChange",
    "Application",
    "BatchRule",
    "ClusterConfig",
    "ClusterView",
    "JobResult",
    "JobSpec",
    "JobView",
    "PolicyScheduler",
    "ResizeCosts",
    "Scheduler",
    "SchedulerError",
    "SimConfig",
    "SimError",
    "SimResult",
    "SimSummary",
    "Simulator",
    "StaticBackfill",
    "StaticFifo",
    "Tiresias",
    "TraceCatalog",
    "TraceDataError",
    "UnknownApplicationError",
    "UtilSample",
    "WorkloadError",
    "load_scheduler",
    "load_workload",
    "parse_workload",
    "resolve_workload",
    "simulate",
    "to_snapshot",
    "write_workload",
]
