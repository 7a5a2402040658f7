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

__all__ = [
    "Allocation",
    "ClusterArbiter",
    "Decision",
    "InvalidDecisionError",
    "InvalidSnapshotError",
    "JobMetrics",
    "JobPolicy",
    "JobView",
    "NotAPolicyError",
    "PolicyAttributeError",
    "PolicyBase",
    "PolicyConfigError",
    "PolicyError",
    "PolicyLoadError",
    "PolicyNotFoundError",
    "PolicyStateError",
    "Refusal",
    "Request",
    "Snapshot",
    "Throughput",
]
