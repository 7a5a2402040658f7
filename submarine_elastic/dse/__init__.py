"""Design-space exploration: sweep job and system parameters on a backend and report what trains fastest.

A space file (:mod:`submarine_elastic.dse.space`) names the parameters and how to sample them; a backend
(:mod:`submarine_elastic.dse.backends`: the simulator, a command per point, or a real job per point on
the pseudo-cluster, :mod:`submarine_elastic.dse.pseudo_cluster`) measures each point;
:mod:`submarine_elastic.dse.runner` records one CSV row per point and resumes where it stopped;
:mod:`submarine_elastic.dse.report` finds the best configurations, the main effects, the interactions and
the correlations across workloads or models.
"""

from submarine_elastic.dse.api import (
    Backend,
    BackendError,
    DseError,
    JobRunner,
    JobState,
    Parameter,
    Point,
    PointResult,
    ResultsError,
    Space,
    SpaceError,
    Strategy,
)
from submarine_elastic.dse.backends import CommandBackend, SimulatorBackend, make_backend
from submarine_elastic.dse.pseudo_cluster import PseudoClusterBackend, YarnJobRunner, resolve_rm_url
from submarine_elastic.dse.report import Analysis, analyse, write_report
from submarine_elastic.dse.runner import RunSummary, read_results, run_space
from submarine_elastic.dse.space import load_space, parse_space, sample_points

__all__ = [
    "Analysis",
    "Backend",
    "BackendError",
    "CommandBackend",
    "DseError",
    "JobRunner",
    "JobState",
    "Parameter",
    "Point",
    "PointResult",
    "PseudoClusterBackend",
    "ResultsError",
    "RunSummary",
    "SimulatorBackend",
    "Space",
    "SpaceError",
    "Strategy",
    "YarnJobRunner",
    "analyse",
    "load_space",
    "make_backend",
    "parse_space",
    "read_results",
    "resolve_rm_url",
    "run_space",
    "sample_points",
    "write_report",
]
