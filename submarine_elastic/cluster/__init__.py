"""The local Hadoop YARN pseudo-cluster: real ZooKeeper, ResourceManager and NodeManager JVMs."""

from submarine_elastic.cluster.api import (
    ClusterAlreadyUpError,
    ClusterError,
    ClusterNotUpError,
    ClusterSpec,
    ClusterStatus,
    DaemonStartError,
    PortInUseError,
    PrerequisiteError,
)
from submarine_elastic.cluster.local import LocalCluster

__all__ = [
    "ClusterAlreadyUpError",
    "ClusterError",
    "ClusterNotUpError",
    "ClusterSpec",
    "ClusterStatus",
    "DaemonStartError",
    "LocalCluster",
    "PortInUseError",
    "PrerequisiteError",
]
