"""Design-space exploration: sweep job and system parameters on a backend and report what trains fastest.

A space file (:mod:`submarine_elastic.dse.space`) names the parameters and how to sample them; a backend
(:mod:`submarine_elastic.dse.backends`: the simulator, or a command per point such as a real job on the
pseudo-cluster) measures each point; :mod:`submarine_elastic.dse.runner` records one CSV row per point and
resumes where it stopped; :mod:`submarine_elastic.dse.report` finds the best configurations, the main
effects, the interactions and the correlations across workloads or models.
"""

from submarine_elastic.dse.api import (
    Backend,
    BackendError,
    DseError,
    Parameter,
    Point,
    PointResult,
    ResultsError,
    Space,
    SpaceError,
    Strategy,
)
from submarine_elastic.dse.backends import CommandBackend, SimulatorBackend, make_backend
from submarine_elastic.dse.report import Analysis, analyse, write_report
from submarine_elastic.dse.runner import RunSummary, read_results, run_space
from submarine_elastic.dse.space import load_space, parse_space, sample_points

__all__ = [
    "Analysis",
    "Backend",
    "BackendError",
    "CommandBackend",
    "DseError",
    "Parameter",
    "Point",
    "PointResult",
    "ResultsError",
    "RunSummary",
    "SimulatorBackend",
    "Space",
    "SpaceError",
    "Strategy",
    "analyse",
    "load_space",
    "make_backend",
    "parse_space",
    "read_results",
    "run_space",
    "sample_points",
    "write_report",
]
