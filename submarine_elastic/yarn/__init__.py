"""YARN Services API client: typed service specs, the REST client, its errors and value types.

This package knows nothing of Horovod or the policy engine; a job's driver resizes its workers
through :class:`ServiceBackend` (``set_target`` / ``reconcile``).
"""

from typing import TYPE_CHECKING

from .api import (
    GPU_RESOURCE,
    RM_UNREACHABLE_EXIT,
    AppSummary,
    ComponentNotFoundError,
    ComponentState,
    ComponentStatus,
    ComponentTarget,
    ContainerState,
    ContainerStatus,
    InvalidSpecError,
    KerberosUnavailableError,
    NodeReport,
    QueueReport,
    ReconcileResult,
    RMUnreachableError,
    ServiceAlreadyExistsError,
    ServiceBackend,
    ServiceFailedError,
    ServiceNotFoundError,
    ServiceState,
    ServiceStateError,
    ServiceStatus,
    YarnAuthError,
    YarnError,
    YarnRequestError,
    YarnTimeoutError,
    cluster_away,
    gpus_on_one_node_problem,
    hadoop_connection_failed,
    instance_number,
    resource_values,
)
from .client import YarnServiceClient
from .rm import LIVE_APP_STATES, RmClient
from .session import build_session, refuse_cookies, spnego_auth


# The spec models import pydantic (about a tenth of a second): loaded on first use, so a command that only
# reads a service's status (``submarine job show``) does not pay for them.
def __getattr__(name: str) -> object:
    if name in __all__:  # the names not bound above are the spec's
        from . import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from .spec import (
        Artifact,
        ArtifactType,
        Component,
        ConfigFile,
        ConfigFileType,
        Configuration,
        KerberosPrincipal,
        PlacementConstraint,
        PlacementPolicy,
        PlacementScope,
        PlacementType,
        ReadinessCheck,
        ReadinessCheckType,
        Resource,
        ResourceInformation,
        RestartPolicy,
        Service,
    )

__all__ = [
    "GPU_RESOURCE",
    "gpus_on_one_node_problem",
    "LIVE_APP_STATES",
    "AppSummary",
    "Artifact",
    "ArtifactType",
    "Component",
    "ComponentNotFoundError",
    "ComponentState",
    "ComponentStatus",
    "ComponentTarget",
    "ConfigFile",
    "ConfigFileType",
    "Configuration",
    "ContainerState",
    "ContainerStatus",
    "InvalidSpecError",
    "KerberosPrincipal",
    "KerberosUnavailableError",
    "NodeReport",
    "QueueReport",
    "PlacementConstraint",
    "PlacementPolicy",
    "PlacementScope",
    "PlacementType",
    "RM_UNREACHABLE_EXIT",
    "cluster_away",
    "hadoop_connection_failed",
    "RMUnreachableError",
    "ReadinessCheck",
    "ReadinessCheckType",
    "ReconcileResult",
    "RmClient",
    "Resource",
    "ResourceInformation",
    "RestartPolicy",
    "Service",
    "ServiceAlreadyExistsError",
    "ServiceBackend",
    "ServiceFailedError",
    "ServiceNotFoundError",
    "ServiceState",
    "ServiceStateError",
    "ServiceStatus",
    "YarnAuthError",
    "YarnError",
    "YarnRequestError",
    "YarnServiceClient",
    "YarnTimeoutError",
    "build_session",
    "instance_number",
    "refuse_cookies",
    "resource_values",
    "spnego_auth",
]
