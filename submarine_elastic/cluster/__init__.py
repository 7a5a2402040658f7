"""The local Hadoop YARN pseudo-cluster: real ZooKeeper, ResourceManager and NodeManager JVMs, on loopback or
on hosts that are network namespaces."""

from submarine_elastic.cluster.api import (
    DEFAULT_SUBNET,
    MAX_GPUS_PER_NODE,
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
    GpuDevice,
    GpuDiscoveryError,
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
from submarine_elastic.yarn import GPU_RESOURCE

__all__ = [
    "DEFAULT_SUBNET",
    "GPU_RESOURCE",
    "MAX_GPUS_PER_NODE",
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
    "GpuDevice",
    "GpuDiscoveryError",
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
