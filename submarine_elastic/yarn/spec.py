"""Typed models of the YARN service spec (the "Yarnfile"), validated before anything is sent.

Field names are the snake_case JSON keys of the YARN Simplified API (``number_of_containers``,
``launch_command``, ``restart_policy``, ...), so ``Service.to_dict()`` is the request body as is.
Unknown keys are rejected (``extra="forbid"``): the RM's JSON reader would otherwise fail on them,
or, worse, a misspelt key (``restartPolicy``) would be silently dropped.

The checks mirror ``ServiceApiUtil.validateAndResolveService`` of Hadoop's services core, so that a
spec the RM would reject with HTTP 400 is rejected here instead, with the field's path in the message:
names match ``[a-z][a-z0-9-]*`` (service names at most 63 characters, component names at most 44,
the limits YARN enforces when registry DNS is on), ``version`` is required, at least one component,
no two components with the same name, resources positive, ``number_of_containers`` not negative,
a ``launch_command`` unless the artifact is DOCKER, dependencies that exist and form no cycle.

Constructing a model directly raises :class:`pydantic.ValidationError`; the ``from_*`` helpers raise
:class:`~submarine_elastic.yarn.api.InvalidSpecError`, which is also a :class:`ValueError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from submarine_elastic.limits import COMPONENT_NAME_MAX_LENGTH, SERVICE_NAME_MAX_LENGTH, YARN_NAME_CHARS

from .api import InvalidSpecError

__all__ = [
    "COMPONENT_NAME_MAX_LENGTH",
    "SERVICE_NAME_MAX_LENGTH",
    "Artifact",
    "ArtifactType",
    "Component",
    "ConfigFile",
    "ConfigFileType",
    "Configuration",
    "KerberosPrincipal",
    "PlacementConstraint",
    "PlacementPolicy",
    "PlacementScope",
    "PlacementType",
    "ReadinessCheck",
    "ReadinessCheckType",
    "Resource",
    "ResourceInformation",
    "RestartPolicy",
    "Service",
    "spec_error",
]

NAME_PATTERN = YARN_NAME_CHARS


def _name_checker(kind: str, max_length: int) -> AfterValidator:
    def check(value: str) -> str:
        if NAME_PATTERN.fullmatch(value) is None:
            raise ValueError(
                f"{kind} name {value!r} must match [a-z][a-z0-9-]*: start with a lowercase letter, "
                "then lowercase letters, digits and '-' only (YARN names are DNS labels)"
            )
        if len(value) > max_length:
            raise ValueError(f"{kind} name {value!r} has {len(value)} characters, at most {max_length} allowed")
        return value

    return AfterValidator(check)


ServiceName = Annotated[str, Field(strict=True), _name_checker("service", SERVICE_NAME_MAX_LENGTH)]
ComponentName = Annotated[str, Field(strict=True), _name_checker("component", COMPONENT_NAME_MAX_LENGTH)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    return value


NonEmptyStr = Annotated[str, Field(strict=True), AfterValidator(_not_blank)]


def _shell_safe(value: str) -> str:
    # The NodeManager runs it as `exec /bin/bash -c "<launch_command> 1>stdout 2>stderr"` without
    # escaping, so a double quote ends the string early and the container dies with a syntax error.
    if '"' in value:
        raise ValueError(
            'must not contain double quotes: YARN wraps it in bash -c "..." unescaped; '
            "use single quotes or put the command in a script"
        )
    return value


LaunchCommand = Annotated[str, Field(strict=True), AfterValidator(_not_blank), AfterValidator(_shell_safe)]
StrMap = dict[Annotated[str, Field(strict=True)], Annotated[str, Field(strict=True)]]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the API expects: snake_case keys, unset (None) fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


class ArtifactType(StrEnum):
    """How a component's software arrives in its container."""

    DOCKER = "DOCKER"
    TARBALL = "TARBALL"
    SERVICE = "SERVICE"


class Artifact(_Model):
    """Artifact of a component: a docker image, a tarball localised under ``lib/``, or another service."""

    id: NonEmptyStr
    type: ArtifactType | None = None  # YARN's default is DOCKER
    uri: NonEmptyStr | None = None

    @property
    def effective_type(self) -> ArtifactType:
        """The type YARN will use (DOCKER when unset)."""
        return self.type or ArtifactType.DOCKER


class ResourceInformation(_Model):
    """An extra resource type (``yarn.io/gpu`` ...) with its amount."""

    value: Annotated[StrictInt, Field(ge=0)]
    unit: str | None = None


class Resource(_Model):
    """Resources of each container of a component. ``memory`` is a whole number of MB, sent as a string."""

    cpus: Annotated[StrictInt, Field(gt=0)]
    memory: str
    additional: dict[str, ResourceInformation] | None = None

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_mb(cls, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"memory must be a whole number of MB (int or digit string), got {value!r}")
        text = str(value).strip()
        if not text.isdigit() or not text.isascii():
            raise ValueError(f"memory must be a whole number of MB such as '2048', got {value!r}")
        if int(text) <= 0:
            raise ValueError(f"memory must be positive, got {value!r}")
        return str(int(text))


class ReadinessCheckType(StrEnum):
    """How the AM decides that a container is READY."""

    DEFAULT = "DEFAULT"
    HTTP = "HTTP"
    PORT = "PORT"


class ReadinessCheck(_Model):
    """Readiness check of a component's containers (DEFAULT: the container has an IP)."""

    type: ReadinessCheckType
    properties: StrMap | None = None
    artifact: Artifact | None = None


class ConfigFileType(StrEnum):
    """Format of a configuration file YARN writes into a container."""

    XML = "XML"
    PROPERTIES = "PROPERTIES"
    JSON = "JSON"
    YAML = "YAML"
    TEMPLATE = "TEMPLATE"
    HADOOP_XML = "HADOOP_XML"
    STATIC = "STATIC"
    ARCHIVE = "ARCHIVE"


class Visibility(StrEnum):
    """Who shares a localized file on a node: every user, the user's applications, or one application (YARN's
    default), and so how long the NodeManager keeps it in its cache."""

    PUBLIC = "PUBLIC"
    PRIVATE = "PRIVATE"
    APPLICATION = "APPLICATION"


class ConfigFile(_Model):
    """A file YARN creates in the container (``conf/<dest_file>``)."""

    type: ConfigFileType
    dest_file: NonEmptyStr | None = None
    src_file: NonEmptyStr | None = None
    properties: StrMap | None = None
    visibility: Visibility | None = None


class Configuration(_Model):
    """``properties`` configure the service AM; ``env`` is the containers' environment."""

    properties: StrMap | None = None
    env: StrMap | None = None
    files: list[ConfigFile] | None = None


class RestartPolicy(StrEnum):
    """When YARN relaunches a component instance whose process exited."""

    ALWAYS = "ALWAYS"
    ON_FAILURE = "ON_FAILURE"
    NEVER = "NEVER"


class PlacementType(StrEnum):
    """Placement relation to the target tags."""

    AFFINITY = "AFFINITY"
    ANTI_AFFINITY = "ANTI_AFFINITY"
    AFFINITY_WITH_CARDINALITY = "AFFINITY_WITH_CARDINALITY"


class PlacementScope(StrEnum):
    """Scope a placement constraint applies in."""

    NODE = "NODE"
    RACK = "RACK"


class PlacementConstraint(_Model):
    """One placement constraint; YARN only allows the component's own name as target tag."""

    type: PlacementType
    scope: PlacementScope
    name: str | None = None
    target_tags: list[str] | None = None
    node_attributes: dict[str, list[str]] | None = None
    node_partitions: list[str] | None = None
    min_cardinality: Annotated[StrictInt, Field(ge=0)] | None = None
    max_cardinality: Annotated[StrictInt, Field(ge=0)] | None = None


class PlacementPolicy(_Model):
    """Placement constraints of a component's containers."""

    constraints: Annotated[list[PlacementConstraint], Field(min_length=1)]


class KerberosPrincipal(_Model):
    """Principal and keytab (URI with a scheme, e.g. ``hdfs:///...``) the service AM runs as."""

    principal_name: NonEmptyStr | None = None
    keytab: NonEmptyStr | None = None


class Component(_Model):
    """One component: ``number_of_containers`` instances named ``<name>-0``, ``<name>-1``, ..."""

    name: ComponentName
    number_of_containers: Annotated[StrictInt, Field(ge=0)]
    launch_command: LaunchCommand | None = None
    artifact: Artifact | None = None
    resource: Resource | None = None
    configuration: Configuration | None = None
    restart_policy: RestartPolicy | None = None
    readiness_check: ReadinessCheck | None = None
    dependencies: list[str] | None = None
    placement_policy: PlacementPolicy | None = None
    run_privileged_container: StrictBool | None = None
    quicklinks: list[str] | None = None
    decommissioned_instances: list[str] | None = None

    @model_validator(mode="after")
    def _check_component(self) -> Self:
        errors: list[InitErrorDetails] = []
        for i, instance in enumerate(self.decommissioned_instances or ()):
            if re.fullmatch(rf"{re.escape(self.name)}-\d+", instance) is None:
                errors.append(
                    _error(
                        ("decommissioned_instances", i),
                        f"instance {instance!r} is not an instance of component {self.name!r} "
                        f"(expected {self.name}-<number>)",
                        instance,
                    )
                )
        if self.placement_policy is not None:
            for i, constraint in enumerate(self.placement_policy.constraints):
                for j, tag in enumerate(constraint.target_tags or ()):
                    if tag != self.name:
                        errors.append(
                            _error(
                                ("placement_policy", "constraints", i, "target_tags", j),
                                f"YARN only supports the component's own name {self.name!r} as target tag, got {tag!r}",
                                tag,
                            )
                        )
        _raise_if(errors, type(self).__name__)
        return self


class Service(_Model):
    """A YARN service: the body of ``POST /app/v1/services``."""

    name: ServiceName
    version: NonEmptyStr
    components: Annotated[list[Component], Field(min_length=1)]
    description: str | None = None
    artifact: Artifact | None = None
    resource: Resource | None = None
    configuration: Configuration | None = None
    lifetime: Annotated[StrictInt, Field(gt=0)] | None = None
    queue: NonEmptyStr | None = None
    quicklinks: StrMap | None = None
    dependencies: list[str] | None = None
    docker_client_config: NonEmptyStr | None = None
    kerberos_principal: KerberosPrincipal | None = None

    @model_validator(mode="after")
    def _check_service(self) -> Self:
        errors: list[InitErrorDetails] = []
        first_index: dict[str, int] = {}
        for i, comp in enumerate(self.components):
            if comp.name in first_index:
                errors.append(
                    _error(
                        ("components", i, "name"),
                        f"duplicate component name {comp.name!r} (also components.{first_index[comp.name]})",
                        comp.name,
                    )
                )
            else:
                first_index[comp.name] = i

        for i, comp in enumerate(self.components):
            artifact = comp.artifact
            if artifact is None and self.artifact is not None and self.artifact.type != ArtifactType.SERVICE:
                artifact = self.artifact
            if artifact is not None and artifact.type == ArtifactType.SERVICE:
                continue  # YARN replaces it with the referenced service's components
            if comp.resource is None and self.resource is None:
                errors.append(
                    _error(
                        ("components", i, "resource"),
                        f"component {comp.name!r} has no resource and the service has no default resource",
                        None,
                    )
                )
            is_docker = artifact is not None and artifact.effective_type == ArtifactType.DOCKER
            if comp.launch_command is None and not is_docker:
                errors.append(
                    _error(
                        ("components", i, "launch_command"),
                        f"component {comp.name!r} needs a launch_command (only DOCKER artifacts may omit it)",
                        None,
                    )
                )
            for j, dep in enumerate(comp.dependencies or ()):
                if dep == comp.name or dep not in first_index:
                    errors.append(
                        _error(
                            ("components", i, "dependencies", j),
                            f"component {comp.name!r} depends on {dep!r}, which is not another component "
                            "of this service",
                            dep,
                        )
                    )
        if not errors:
            cycle = _dependency_cycle(self.components)
            if cycle:
                index = first_index[cycle[0]]
                errors.append(
                    _error(
                        ("components", index, "dependencies"),
                        f"components depend on each other in a cycle: {' -> '.join(cycle)}",
                        cycle,
                    )
                )
        _raise_if(errors, type(self).__name__)
        return self

    def component(self, name: str) -> Component | None:
        """The component called ``name``, or None."""
        for comp in self.components:
            if comp.name == name:
                return comp
        return None

    def to_json(self, *, indent: int | None = None) -> str:
        """The request body as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "service spec") -> Service:
        """Validate a spec given as a mapping (for example parsed JSON).

        Raises:
            InvalidSpecError: the spec is invalid; the message names each offending field.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_error(exc, source=source) from exc

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "service spec") -> Service:
        """Validate a spec given as JSON text.

        Raises:
            InvalidSpecError: the text is not a JSON object, or the spec is invalid.
        """
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidSpecError(f"{source}: not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidSpecError(f"{source}: expected a JSON object, got {type(data).__name__}")
        return cls.from_dict(data, source=source)

    @classmethod
    def from_json_file(cls, path: str | Path) -> Service:
        """Read and validate a spec from a JSON file. Blocks on the file read.

        Raises:
            InvalidSpecError: the file cannot be read, is not a JSON object, or the spec is invalid.
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidSpecError(f"cannot read service spec {str(file)!r}: {exc}") from exc
        return cls.from_json(text, source=str(file))


def spec_error(exc: ValidationError, *, source: str = "service spec") -> InvalidSpecError:
    """Turn pydantic's error into an :class:`InvalidSpecError` whose message lists ``field: problem``."""
    fields: list[str] = []
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(spec)"
        fields.append(where)
        message = err["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return InvalidSpecError(f"invalid {source}: " + "; ".join(problems), fields=fields)


def _error(loc: tuple[str | int, ...], message: str, value: object) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("yarn_spec", "{message}", {"message": message}),
        loc=loc,
        input=value,
    )


def _raise_if(errors: list[InitErrorDetails], title: str) -> None:
    if errors:
        raise ValidationError.from_exception_data(title, errors)


def _dependency_cycle(components: Iterable[Component]) -> list[str]:
    """A dependency cycle as ``[a, b, ..., a]``, or an empty list when the graph is acyclic."""
    graph = {c.name: list(c.dependencies or ()) for c in components}
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return []
        for dep in graph.get(node, ()):
            cycle = visit(dep, path + [node])
            if cycle:
                return cycle
        done.add(node)
        return []

    for name in graph:
        cycle = visit(name, [])
        if cycle:
            return cycle
    return []
