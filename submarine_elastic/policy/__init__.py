"""The policy engine: worker counts decided from a snapshot of the cluster and the jobs' metrics.

Pure Python: nothing here imports YARN, gRPC, TensorFlow or the controller, and nothing reads a
clock. The controller and the trace-driven simulator call the same
:meth:`~submarine_elastic.policy.engine.PolicyEngine.decide` with a :class:`Snapshot`.
"""

from .api import (
    Allocation,
    ClusterArbiter,
    Decision,
    InvalidDecisionError,
    InvalidSnapshotError,
    JobMetrics,
    JobPolicy,
    JobView,
    NotAPolicyError,
    PolicyAttributeError,
    PolicyBase,
    PolicyConfigError,
    PolicyError,
    PolicyLoadError,
    PolicyNotFoundError,
    PolicyStateError,
    Refusal,
    Request,
    Snapshot,
    Throughput,
)
from .basic import GreedyPolicy, StaticPolicy
from .engine import DEFAULT_COOLDOWN_S, PolicyEngine
from .fair_share import FairShareArbiter

__all__ = [
    "DEFAULT_COOLDOWN_S",
    "Allocation",
    "ClusterArbiter",
    "Decision",
    "FairShareArbiter",
    "GreedyPolicy",
    "InvalidDecisionError",
    "InvalidSnapshotError",
    "JobMetrics",
    "JobPolicy",
    "JobView",
    "NotAPolicyError",
    "PolicyAttributeError",
    "PolicyBase",
    "PolicyConfigError",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "PolicyNotFoundError",
    "PolicyStateError",
    "Refusal",
    "Request",
    "Snapshot",
    "StaticPolicy",
    "Throughput",
]
