"""The local Hadoop YARN pseudo-cluster: real ZooKeeper, ResourceManager and NodeManager JVMs."""

from submarine_elastic.cluster.api import (
    ROLES,
    ClusterAlreadyUpError,
    ClusterError,
    ClusterNotUpError,
    ClusterSpec,
    ClusterStatus,
    DaemonNotRunningError,
    DaemonPlan,
    DaemonStartError,
    KerberosSetupError,
    Placement,
    PortInUseError,
    PrerequisiteError,
    UnknownDaemonError,
)
from submarine_elastic.cluster.local import LocalCluster

__all__ = [
    "ROLES",
    "ClusterAlreadyUpError",
    "ClusterError",
    "ClusterNotUpError",
    "ClusterSpec",
    "ClusterStatus",
    "DaemonNotRunningError",
    "DaemonPlan",
    "DaemonStartError",
    "KerberosSetupError",
    "LocalCluster",
    "Placement",
    "PortInUseError",
    "PrerequisiteError",
    "UnknownDaemonError",
]
