"""The policy engine: worker counts decided from a snapshot of the cluster and the jobs' metrics.

Pure Python: nothing here imports YARN, gRPC, TensorFlow or the controller, and nothing reads a
clock. The controller and the trace-driven simulator call the same
:meth:`~submarine_elastic.policy.engine.PolicyEngine.decide` with a :class:`Snapshot`.
"""

from .api import (
    DEFAULT_QUEUE,
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
    QueueShare,
    Refusal,
    Request,
    Snapshot,
    StepTime,
    Throughput,
)
from .basic import GreedyPolicy, StaticPolicy
from .composite import CompositePolicy
from .convergence import ConvergencePolicy
from .engine import DEFAULT_COOLDOWN_S, PolicyEngine
from .fair_share import FairShareArbiter
from .goodput import GoodputArbiter, GoodputPolicy
from .loader import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    load_arbiter,
    load_arbiter_spec,
    load_job_policy,
    load_job_policy_spec,
    load_policy,
    load_policy_class,
    policy_names,
)
from .losses import LOSS_WINDOW, loss_window
from .scaling_efficiency import ScalingEfficiencyPolicy
from .straggler import StragglerPolicy
from .utility import UtilityPolicy

__all__ = [
    "Allocation",
    "BUILTIN_POLICIES",
    "ClusterArbiter",
    "CompositePolicy",
    "ConvergencePolicy",
    "DEFAULT_COOLDOWN_S",
    "DEFAULT_QUEUE",
    "Decision",
    "ENTRY_POINT_GROUP",
    "FairShareArbiter",
    "GoodputArbiter",
    "GoodputPolicy",
    "GreedyPolicy",
    "InvalidDecisionError",
    "InvalidSnapshotError",
    "JobMetrics",
    "JobPolicy",
    "JobView",
    "LOSS_WINDOW",
    "NotAPolicyError",
    "PolicyAttributeError",
    "PolicyBase",
    "PolicyConfigError",
    "PolicyEngine",
    "PolicyError",
    "PolicyLoadError",
    "PolicyNotFoundError",
    "PolicyStateError",
    "QueueShare",
    "Refusal",
    "Request",
    "ScalingEfficiencyPolicy",
    "Snapshot",
    "StaticPolicy",
    "StepTime",
    "StragglerPolicy",
    "Throughput",
    "UtilityPolicy",
    "load_arbiter",
    "load_job_policy",
    "load_job_policy_spec",
    "loss_window",
    "load_arbiter_spec",
    "load_policy",
    "load_policy_class",
    "policy_names",
]
