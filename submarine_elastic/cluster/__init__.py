"""The local Hadoop YARN pseudo-cluster: real ZooKeeper, ResourceManager and NodeManager JVMs, on loopback or
on hosts that are network namespaces."""

from submarine_elastic.cluster.api import (
    DEFAULT_SUBNET,
    MAX_HOSTS,
    ROLES,
    ClusterAlreadyUpError,
    ClusterError,
    ClusterNotUpError,
    ClusterSpec,
    ClusterStatus,
    DaemonNotRunningError,
    DaemonPlan,
    DaemonStartError,
    Host,
    HostStatus,
    KerberosSetupError,
    Placement,
    PortInUseError,
    PrerequisiteError,
    UnknownDaemonError,
)
from submarine_elastic.cluster.local import LocalCluster
from submarine_elastic.cluster.netns import HostNetwork, HostNetworkError, HostNetworkUnavailableError

__all__ = [
    "DEFAULT_SUBNET",
    "MAX_HOSTS",
    "ROLES",
    "ClusterAlreadyUpError",
    "ClusterError",
    "ClusterNotUpError",
    "ClusterSpec",
    "ClusterStatus",
    "DaemonNotRunningError",
    "DaemonPlan",
    "DaemonStartError",
    "Host",
    "HostNetwork",
    "HostNetworkError",
    "HostNetworkUnavailableError",
    "HostStatus",
    "KerberosSetupError",
    "LocalCluster",
    "Placement",
    "PortInUseError",
    "PrerequisiteError",
    "UnknownDaemonError",
]
