"""The YARN package's interface: its errors and the value types read back from the ResourceManager.

Everything here is plain data. The HTTP client (:mod:`.client`) builds these objects from the
RM's JSON; the spec models that are *sent* live in :mod:`.spec`.

Errors form one tree under :class:`YarnError`. Each carries the HTTP status (when the RM answered)
and the RM's ``diagnostics`` text, which the services API puts into every error body.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

__all__ = [
    "AppSummary",
    "cluster_away",
    "hadoop_connection_failed",
    "ComponentNotFoundError",
    "ComponentState",
    "ComponentStatus",
    "ComponentTarget",
    "ContainerState",
    "ContainerStatus",
    "InvalidSpecError",
    "KerberosUnavailableError",
    "NodeReport",
    "RMUnreachableError",
    "ReconcileResult",
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
    "YarnTimeoutError",
    "instance_number",
    "GPU_RESOURCE",
    "resource_values",
]

#: YARN's name of the GPU resource type (``resource-types.xml``; a service spec's ``resource.additional``).
GPU_RESOURCE = "yarn.io/gpu"


def gpus_on_one_node_problem(gpus: int, nodes: Iterable[tuple[str, int]], cluster: str = "the cluster") -> str | None:
    """Why a worker asking ``gpus`` cannot be placed on any of ``nodes`` (``(node id, its GPUs)``), or None when
    one holds that many: a worker's GPUs come from one node. The sentence starts lower-case, after the ask."""
    offered = list(nodes)
    largest = max((n for _, n in offered), default=0)
    if largest >= gpus:
        return None
    offers = ", ".join(f"{node} {n}" for node, n in offered) or "no running node"
    return (
        f"the largest node of {cluster} has {largest} ({GPU_RESOURCE} by node: {offers}); "
        "a worker's GPUs come from one node"
    )


# --------------------------------------------------------------------------------------------- errors


class YarnError(Exception):
    """Base of every error raised by :mod:`submarine_elastic.yarn`.

    Attributes:
        status_code: HTTP status the RM answered with, or None when it did not answer.
        diagnostics: the ``diagnostics`` text of the RM's answer, or None.
    """

    def __init__(self, message: str, *, status_code: int | None = None, diagnostics: str | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.diagnostics = diagnostics


class RMUnreachableError(YarnError):
    """The ResourceManager could not be reached, or answered 502/503/504, after all retries."""


#: The exit status of a ``submarine`` command that could not reach the ResourceManager (sysexits' EX_UNAVAILABLE):
#: a script tells "try again once the cluster is back" from "refused" (1) by it.
RM_UNREACHABLE_EXIT = 69


class YarnTimeoutError(YarnError):
    """A wait ran out of time. The message names what was awaited and the last state seen.

    Attributes:
        last_state: the last :class:`ServiceStatus` (or other value) read before giving up, if any.
    """

    def __init__(self, message: str, *, last_state: object = None):
        super().__init__(message)
        self.last_state = last_state


class InvalidSpecError(YarnError, ValueError):
    """A service spec was rejected, locally (pydantic) or by the RM (HTTP 400 with diagnostics).

    Attributes:
        fields: dotted paths of the offending fields (``components.0.resource.memory``); empty when
            the RM rejected the spec, since it only sends text.
    """

    def __init__(
        self,
        message: str,
        *,
        fields: Sequence[str] = (),
        status_code: int | None = None,
        diagnostics: str | None = None,
    ):
        super().__init__(message, status_code=status_code, diagnostics=diagnostics)
        self.fields = tuple(fields)


class YarnAuthError(YarnError):
    """The RM refused the caller (401/403), or the requested authentication cannot be set up."""


class KerberosUnavailableError(YarnAuthError):
    """``auth="kerberos"`` was asked for but ``requests-gssapi`` is not installed."""


class ServiceNotFoundError(YarnError):
    """The RM does not know a service of that name."""


class ComponentNotFoundError(YarnError):
    """The service exists but has no component of that name."""


class ServiceAlreadyExistsError(YarnError):
    """A service of that name already exists (``POST`` of a taken name)."""


class ServiceStateError(YarnError):
    """The request conflicts with the service's current state (not running, still running, ...)."""


class ServiceFailedError(YarnError):
    """While waiting for a service, it reached a terminal state (FAILED, STOPPED, SUCCEEDED).

    Attributes:
        last_state: the :class:`ServiceStatus` that showed the terminal state.
    """

    def __init__(self, message: str, *, last_state: ServiceStatus | None = None):
        super().__init__(message)
        self.last_state = last_state


class YarnRequestError(YarnError):
    """The RM answered with an error that no narrower class describes."""


#: Hadoop's own words for a connection it could not make or lost (``NetUtils.wrapException``): "Call From
#: host-0/10.0.0.2 to host-0:8020 failed on connection exception: java.net.ConnectException: ..."), and a
#: NameNode starting (safe mode).
_CONNECTION_FAILED = re.compile(
    r"Call From \S+ to \S+ failed on (connection|socket) (exception|timeout)"
    r"|SafeModeException|Name node is in safe mode"
)


def hadoop_connection_failed(text: str) -> bool:
    """Whether a Hadoop daemon's error ``text`` says it could not reach another daemon (the NameNode from the
    ResourceManager or a DataNode, say), or that the NameNode is starting (safe mode): the cluster away for a
    moment, not a refusal."""
    return _CONNECTION_FAILED.search(text) is not None


def cluster_away(exc: YarnError) -> bool:
    """Whether ``exc`` means "try again once the cluster is back": the RM did not answer, or answered that a
    daemon behind it (HDFS, where YARN Services keeps a service's definition) did not."""
    return isinstance(exc, RMUnreachableError) or (
        exc.status_code is not None and exc.status_code >= 500 and hadoop_connection_failed(str(exc))
    )


# --------------------------------------------------------------------------------------------- states


class ServiceState(StrEnum):
    """``ServiceState`` of the YARN services API."""

    ACCEPTED = "ACCEPTED"
    STARTED = "STARTED"
    STABLE = "STABLE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    FLEX = "FLEX"
    UPGRADING = "UPGRADING"
    UPGRADING_AUTO_FINALIZE = "UPGRADING_AUTO_FINALIZE"
    EXPRESS_UPGRADING = "EXPRESS_UPGRADING"
    SUCCEEDED = "SUCCEEDED"
    CANCEL_UPGRADING = "CANCEL_UPGRADING"


#: Service states after which a service will not become STABLE on its own.
TERMINAL_SERVICE_STATES = frozenset({ServiceState.STOPPED, ServiceState.FAILED, ServiceState.SUCCEEDED})


class ComponentState(StrEnum):
    """``ComponentState`` of the YARN services API."""

    INIT = "INIT"
    FLEXING = "FLEXING"
    STABLE = "STABLE"
    NEEDS_UPGRADE = "NEEDS_UPGRADE"
    UPGRADING = "UPGRADING"
    CANCEL_UPGRADING = "CANCEL_UPGRADING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class ContainerState(StrEnum):
    """``ContainerState`` of the YARN services API. Only READY counts as a usable worker."""

    RUNNING_BUT_UNREADY = "RUNNING_BUT_UNREADY"
    READY = "READY"
    STOPPED = "STOPPED"
    NEEDS_UPGRADE = "NEEDS_UPGRADE"
    UPGRADING = "UPGRADING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAILED_UPGRADE = "FAILED_UPGRADE"


_E = TypeVar("_E", bound=StrEnum)


def _state(enum: type[_E], raw: object) -> _E | str | None:
    """The enum member for ``raw``; a value this client does not know stays a plain string."""
    if raw is None:
        return None
    text = str(raw)
    try:
        return enum(text)
    except ValueError:
        return text


_INSTANCE_SUFFIX = re.compile(r"-(\d+)$")


def instance_number(component_instance_name: str) -> int:
    """The ``i`` of a component instance name ``<component>-<i>`` (``worker-12`` -> 12).

    Raises:
        ValueError: the name does not end in ``-<digits>``.
    """
    match = _INSTANCE_SUFFIX.search(component_instance_name)
    if match is None:
        raise ValueError(f"component instance name {component_instance_name!r} does not end in -<number>")
    return int(match.group(1))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ContainerStatus:
    """One container of a running component, as ``GET /app/v1/services/{name}`` reports it."""

    id: str
    state: ContainerState | str | None
    component_instance_name: str
    hostname: str | None = None
    ip: str | None = None
    bare_host: str | None = None
    launch_time_ms: int | None = None

    @property
    def ready(self) -> bool:
        """True when YARN's readiness check passed (state READY)."""
        return self.state == ContainerState.READY

    @property
    def instance_number(self) -> int:
        """The ``i`` of ``<component>-<i>``; ``-1`` when the name has no number."""
        try:
            return instance_number(self.component_instance_name)
        except ValueError:
            return -1

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContainerStatus:
        """Build from one element of ``components[].containers[]``."""
        # Hadoop before YARN-7565 wrote component_name; later versions component_instance_name.
        name = data.get("component_instance_name") or data.get("component_name") or ""
        return cls(
            id=str(data.get("id", "")),
            state=_state(ContainerState, data.get("state")),
            component_instance_name=str(name),
            hostname=_opt_str(data.get("hostname")),
            ip=_opt_str(data.get("ip")),
            bare_host=_opt_str(data.get("bare_host")),
            launch_time_ms=_opt_int(data.get("launch_time")),
        )


@dataclass(frozen=True)
class ComponentStatus:
    """One component of a service: its desired size, its containers and the size of each
    (``memory_mb``, ``vcores``: its ``resource``, None when not reported; ``gpus``: its ``resource.additional``
    ``yarn.io/gpu``, 0 when it asks none), and the instances removed
    by name (``decommissioned_instances``: the RM never reuses their names, nor counts them twice)."""

    name: str
    state: ComponentState | str | None
    number_of_containers: int | None
    containers: tuple[ContainerStatus, ...] = ()
    restart_policy: str | None = None
    memory_mb: int | None = None
    vcores: int | None = None
    decommissioned: tuple[str, ...] = ()
    gpus: int = 0

    @property
    def ready_containers(self) -> tuple[ContainerStatus, ...]:
        """READY containers sorted by instance number (``worker-0``, ``worker-1``, ...)."""
        ready = (c for c in self.containers if c.ready)
        return tuple(sorted(ready, key=lambda c: (c.instance_number, c.component_instance_name)))

    @property
    def ready_count(self) -> int:
        """How many containers are READY."""
        return sum(1 for c in self.containers if c.ready)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ComponentStatus:
        """Build from one element of ``components[]``."""
        containers = data.get("containers") or ()
        resource = data.get("resource")
        resource = resource if isinstance(resource, Mapping) else {}
        return cls(
            name=str(data.get("name", "")),
            state=_state(ComponentState, data.get("state")),
            number_of_containers=_opt_int(data.get("number_of_containers")),
            containers=tuple(ContainerStatus.from_json(c) for c in containers if isinstance(c, Mapping)),
            restart_policy=_opt_str(data.get("restart_policy")),
            memory_mb=_opt_int(resource.get("memory")),
            vcores=_opt_int(resource.get("cpus")),
            decommissioned=tuple(str(i) for i in data.get("decommissioned_instances") or ()),
            gpus=_additional(resource, GPU_RESOURCE),
        )


@dataclass(frozen=True)
class ServiceStatus:
    """A service as ``GET /app/v1/services/{name}`` reports it.

    Before the service's AM runs (state ACCEPTED) or after it stopped, the RM returns the name and
    state only, so ``components`` is empty then.
    """

    name: str
    state: ServiceState | str | None
    id: str | None = None
    version: str | None = None
    lifetime: int | None = None
    number_of_running_containers: int | None = None
    components: tuple[ComponentStatus, ...] = ()
    diagnostics: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def component(self, name: str) -> ComponentStatus | None:
        """The component called ``name``, or None."""
        for comp in self.components:
            if comp.name == name:
                return comp
        return None

    @property
    def is_terminal(self) -> bool:
        """True in STOPPED, FAILED or SUCCEEDED: the service will not become STABLE by itself."""
        return self.state in TERMINAL_SERVICE_STATES

    @property
    def is_ready(self) -> bool:
        """True when the service is STABLE, or running with every component's desired containers READY."""
        if self.state == ServiceState.STABLE:
            return True
        if self.state not in (ServiceState.STARTED, ServiceState.FLEX) or not self.components:
            return False
        return all(c.ready_count >= (c.number_of_containers or 0) for c in self.components)

    def describe(self) -> str:
        """A one-line summary for messages: state and READY/desired per component."""
        parts = [f"{c.name} {c.ready_count}/{c.number_of_containers} READY" for c in self.components]
        detail = f" ({', '.join(parts)})" if parts else ""
        return f"service {self.name!r} state={self.state}{detail}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceStatus:
        """Build from the body of ``GET /app/v1/services/{name}``."""
        components = data.get("components") or ()
        return cls(
            name=str(data.get("name", "")),
            state=_state(ServiceState, data.get("state")),
            id=_opt_str(data.get("id")),
            version=_opt_str(data.get("version")),
            lifetime=_opt_int(data.get("lifetime")),
            number_of_running_containers=_opt_int(data.get("number_of_running_containers")),
            components=tuple(ComponentStatus.from_json(c) for c in components if isinstance(c, Mapping)),
            diagnostics=_opt_str(data.get("diagnostics")),
            raw=dict(data),
        )


@dataclass(frozen=True)
class NodeReport:
    """One NodeManager from ``/ws/v1/cluster/nodes``.

    ``total_*`` is what the node offers to containers (its ``totalResource``; used plus available where
    the RM does not report it), ``free_*`` what no container holds (``availMemoryMB``,
    ``availableVirtualCores``), ``used_*`` what its containers hold (``usedMemoryMB``,
    ``usedVirtualCores``). A reservation the scheduler holds on the node counts against none of them.

    ``free_*`` and ``used_*`` come from the scheduler, ``total_*`` from the node's record: just after a
    resize (``updateNodeResource``) the total is new while free is not yet, so ``total - free`` is not what
    the containers hold; read ``used_*`` for that.
    """

    node_id: str
    state: str
    total_memory_mb: int
    total_vcores: int
    free_memory_mb: int
    free_vcores: int
    used_memory_mb: int = 0
    used_vcores: int = 0
    #: ``yarn.io/gpu`` of ``totalResource``, ``availableResource`` and ``usedResource`` (0 where the RM has no
    #: such resource type)
    total_gpus: int = 0
    free_gpus: int = 0
    used_gpus: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeReport:
        """Build from one element of ``nodes.node[]``."""
        free_mb = _opt_int(data.get("availMemoryMB")) or 0
        free_vcores = _opt_int(data.get("availableVirtualCores")) or 0
        used_mb = _opt_int(data.get("usedMemoryMB")) or 0
        used_vcores = _opt_int(data.get("usedVirtualCores")) or 0
        total = data.get("totalResource")
        total = total if isinstance(total, Mapping) else {}
        total_mb = _opt_int(total.get("memory"))
        total_vcores = _opt_int(total.get("vCores"))
        return cls(
            node_id=str(data.get("id", "")),
            state=str(data.get("state", "")),
            total_memory_mb=total_mb if total_mb is not None else free_mb + used_mb,
            total_vcores=total_vcores if total_vcores is not None else free_vcores + used_vcores,
            free_memory_mb=free_mb,
            free_vcores=free_vcores,
            used_memory_mb=used_mb,
            used_vcores=used_vcores,
            total_gpus=resource_values(total).get(GPU_RESOURCE, 0),
            free_gpus=resource_values(data.get("availableResource")).get(GPU_RESOURCE, 0),
            used_gpus=resource_values(data.get("usedResource")).get(GPU_RESOURCE, 0),
        )


@dataclass(frozen=True)
class QueueReport:
    """One leaf queue of the CapacityScheduler from ``/ws/v1/cluster/scheduler``.

    Capacities are percent of the whole cluster (the RM's ``absolute*``): ``capacity`` the guarantee,
    ``max_capacity`` what it may grow to, ``used_capacity`` what its containers hold now. ``max_memory_mb``
    and ``max_vcores`` are its maximum in resources (``maxEffectiveCapacity``), ``pending_*`` what its
    applications ask for and do not hold yet (the default partition's ``pending``).
    """

    name: str
    path: str
    state: str
    capacity: float
    max_capacity: float
    used_capacity: float
    max_memory_mb: int = 0
    max_vcores: int = 0
    used_memory_mb: int = 0
    used_vcores: int = 0
    pending_containers: int = 0
    pending_memory_mb: int = 0
    applications: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueReport:
        """Build from one leaf of ``scheduler.schedulerInfo.queues.queue[]`` (nested ``queues`` flattened)."""
        used = data.get("resourcesUsed")
        used = used if isinstance(used, Mapping) else {}
        maximum = data.get("maxEffectiveCapacity")
        maximum = maximum if isinstance(maximum, Mapping) else {}
        pending: Mapping[str, Any] = {}
        usages = data.get("resources")
        partitions = usages.get("resourceUsagesByPartition") if isinstance(usages, Mapping) else None
        for partition in partitions if isinstance(partitions, list) else []:
            if isinstance(partition, Mapping) and not partition.get("partitionName"):
                found = partition.get("pending")
                pending = found if isinstance(found, Mapping) else {}
        name = str(data.get("queueName", ""))
        return cls(
            name=name,
            path=str(data.get("queuePath") or f"root.{name}"),
            state=str(data.get("state", "")),
            capacity=float(data.get("absoluteCapacity") or 0.0),
            max_capacity=float(data.get("absoluteMaxCapacity") or 0.0),
            used_capacity=float(data.get("absoluteUsedCapacity") or 0.0),
            max_memory_mb=_opt_int(maximum.get("memory")) or 0,
            max_vcores=_opt_int(maximum.get("vCores")) or 0,
            used_memory_mb=_opt_int(used.get("memory")) or 0,
            used_vcores=_opt_int(used.get("vCores")) or 0,
            pending_containers=_opt_int(data.get("pendingContainers")) or 0,
            pending_memory_mb=_opt_int(pending.get("memory")) or 0,
            applications=_opt_int(data.get("numApplications")) or 0,
        )


def leaf_queues(scheduler: object) -> list[QueueReport]:
    """The leaf queues of a ``/ws/v1/cluster/scheduler`` answer, depth first; [] for a scheduler without
    queues (the FIFO scheduler)."""
    info = scheduler.get("scheduler") if isinstance(scheduler, Mapping) else None
    root = info.get("schedulerInfo") if isinstance(info, Mapping) else None

    def leaves(queue: object) -> list[QueueReport]:
        children = queue.get("queues") if isinstance(queue, Mapping) else None
        items = children.get("queue") if isinstance(children, Mapping) else None
        if not isinstance(items, list):
            return [QueueReport.from_json(queue)] if isinstance(queue, Mapping) and queue is not root else []
        return [leaf for item in items for leaf in leaves(item)]

    return leaves(root)


def _additional(resource: Mapping[str, Any], name: str) -> int:
    """The value of resource type ``name`` in a service spec's ``resource.additional`` (0 when absent)."""
    additional = resource.get("additional")
    entry = additional.get(name) if isinstance(additional, Mapping) else None
    value = _opt_int(entry.get("value")) if isinstance(entry, Mapping) else None
    return value or 0


def resource_values(resource: object) -> dict[str, int]:
    """Every resource type's value in one of the RM's resource objects (a node's ``totalResource``, the
    cluster's ``totalClusterResourcesAcrossPartition``): its ``resourceInformations``, by type name
    (``memory-mb``, ``vcores``, ``yarn.io/gpu``, ...); {} for anything else."""
    infos = resource.get("resourceInformations") if isinstance(resource, Mapping) else None
    items = infos.get("resourceInformation") if isinstance(infos, Mapping) else None
    values = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and (value := _opt_int(item.get("value"))) is not None:
            values[str(item.get("name", ""))] = value
    return values


@dataclass(frozen=True)
class AppSummary:
    """One YARN application from ``/ws/v1/cluster/apps?applicationTypes=yarn-service``.

    ``state`` is the YARN *application* state (NEW ... ACCEPTED, RUNNING, FINISHED, FAILED, KILLED),
    not the service state; a yarn-service application is named after its service.
    """

    id: str
    name: str
    state: str
    user: str | None = None
    queue: str | None = None
    final_status: str | None = None
    application_type: str | None = None
    tags: tuple[str, ...] = ()
    progress: float | None = None
    started_time_ms: int | None = None
    finished_time_ms: int | None = None
    running_containers: int | None = None
    allocated_mb: int | None = None
    allocated_vcores: int | None = None
    tracking_url: str | None = None
    diagnostics: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AppSummary:
        """Build from one element of ``apps.app[]`` of the RM's cluster REST API."""
        raw_tags = data.get("applicationTags") or ""
        tags = tuple(t.strip() for t in str(raw_tags).split(",") if t.strip())
        progress = data.get("progress")
        return cls(
            id=str(data.get("id", "")),
            name=str(data.get("name", "")),
            state=str(data.get("state", "")),
            user=_opt_str(data.get("user")),
            queue=_opt_str(data.get("queue")),
            final_status=_opt_str(data.get("finalStatus")),
            application_type=_opt_str(data.get("applicationType")),
            tags=tags,
            progress=float(progress) if isinstance(progress, int | float) else None,
            started_time_ms=_opt_int(data.get("startedTime")),
            finished_time_ms=_opt_int(data.get("finishedTime")),
            running_containers=_opt_int(data.get("runningContainers")),
            allocated_mb=_opt_int(data.get("allocatedMB")),
            allocated_vcores=_opt_int(data.get("allocatedVCores")),
            tracking_url=_opt_str(data.get("trackingUrl")),
            diagnostics=_opt_str(data.get("diagnostics")) or None,
        )


@dataclass(frozen=True)
class ComponentTarget:
    """What a component should be: ``count`` containers, none of them one of the ``remove`` instances.

    ``remove`` names the instances a scale-in takes away when they are not the highest-numbered ones
    (which a plain flex would remove); they are decommissioned by name.

    Raises:
        ValueError: a negative or non-int ``count``, or an instance name that is not ``<name>-<number>``.
    """

    count: int
    remove: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ValueError(f"count must be an int >= 0, got {self.count!r}")
        for inst in self.remove:
            instance_number(inst)


@dataclass(frozen=True)
class ReconcileResult:
    """What :meth:`ServiceBackend.reconcile` found; failures are data here, never raised.

    Attributes:
        service, component: what was reconciled.
        target: the READY count asked for.
        desired: the component's ``number_of_containers`` as the RM last reported it (None if unknown).
        ready: how many containers were READY at the last read.
        ready_instances: their instance names, sorted by instance number.
        service_state: the service state at the last read.
        converged: True when ``ready == target == desired``, every listed container is READY and none
            of the target's ``remove`` instances is listed.
        flexed: True when reconcile had to (re)send the flex because the RM's desired count differed.
        decommissioned: the instances reconcile asked the RM to remove by name.
        error: the error that stopped reconciliation (timeout, RM unreachable, not found, ...), or None.
            A timeout's message names the last state seen and the last transient failure.
        elapsed_s: seconds spent.
    """

    service: str
    component: str
    target: int
    desired: int | None
    ready: int
    ready_instances: tuple[str, ...]
    service_state: ServiceState | str | None
    converged: bool
    flexed: bool = False
    decommissioned: tuple[str, ...] = ()
    error: YarnError | None = None
    elapsed_s: float = 0.0


# --------------------------------------------------------------------------------------------- backend


class ServiceBackend(ABC):
    """The declarative cluster-control surface a job's driver needs from a cluster (Ray autoscaler v2
    style).

    Say the target (:meth:`set_target`), read the state (:meth:`status`, :meth:`ready_instances`),
    reconcile (:meth:`reconcile`) until the cluster agrees; what stops a reconciliation comes back in
    its :class:`ReconcileResult`, so the caller polls it and tries again later.
    :class:`~submarine_elastic.yarn.client.YarnServiceClient` is the YARN implementation; a
    simulator or a test may provide another.
    """

    @abstractmethod
    def status(self, name: str) -> ServiceStatus:
        """Read the service's current state. Blocks for one request.

        Raises:
            ServiceNotFoundError: no such service.
            RMUnreachableError: the cluster did not answer.
            YarnError: any other failure.
        """

    @abstractmethod
    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        """Record that ``component`` should have ``n`` containers and none of the ``remove`` instances.

        Sends nothing (:meth:`reconcile` does); blocks for nothing.

        Returns:
            The target recorded.

        Raises:
            ValueError: a negative ``n``, an invalid name, or a ``remove`` entry that is not an instance of
                ``component``.
        """

    @abstractmethod
    def target(self, name: str, component: str) -> ComponentTarget | None:
        """The target last recorded for ``component``, or None."""

    @abstractmethod
    def reconcile(
        self,
        name: str,
        component: str,
        n: int | None = None,
        *,
        timeout: float,
        give_way: Callable[[], bool] | None = None,
    ) -> ReconcileResult:
        """Drive ``component`` towards its target (``n`` READY instances when given) and report; blocks at
        most ``timeout`` seconds, or until ``give_way()`` (asked after each read) says the caller has something
        else to do: the result is then that of a reconciliation out of time, as of that read.

        Never raises :class:`YarnError`: failures are returned in :attr:`ReconcileResult.error`.

        Raises:
            ValueError: no target given nor recorded, or a negative target or timeout.
        """

    @abstractmethod
    def ready_instances(self, name: str, component: str) -> list[ContainerStatus]:
        """READY instances of ``component``, sorted by instance number. Blocks for one request.

        Raises:
            ServiceNotFoundError, ComponentNotFoundError: no such service or component.
            RMUnreachableError: the cluster did not answer.
            YarnError: any other failure.
        """

    def queues(self) -> list[QueueReport]:
        """The scheduler's leaf queues; a backend that cannot see them has none ([])."""
        return []

    def nodes(self, states: Sequence[str] = ("RUNNING",)) -> list[NodeReport]:
        """The cluster's nodes in ``states``; a backend that cannot see them has none ([]), so a job on it never
        grows back into capacity on its own."""
        return []
