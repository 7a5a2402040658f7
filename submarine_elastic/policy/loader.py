"""Load a policy by entry-point name (``scaling-efficiency``) or by ``module:Class``.

Entry points live in the group ``submarine_elastic.policies``; the built-ins are registered there by
``setup.cfg``, and a user's package registers its own the same way::

    [options.entry_points]
    submarine_elastic.policies =
        my-policy = my_package.policies:MyPolicy

Built-ins also load by name from a source checkout whose metadata is not installed.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

import yaml

from .api import (
    ClusterArbiter,
    JobPolicy,
    NotAPolicyError,
    PolicyAttributeError,
    PolicyConfigError,
    PolicyLoadError,
    PolicyNotFoundError,
)

__all__ = [
    "BUILTIN_POLICIES",
    "ENTRY_POINT_GROUP",
    "load_arbiter",
    "load_job_policy",
    "load_policy",
    "load_policy_class",
    "policy_names",
]

ENTRY_POINT_GROUP = "submarine_elastic.policies"

#: The built-in policies by name; ``setup.cfg`` registers the same entry points (a test checks it).
BUILTIN_POLICIES: dict[str, str] = {
    "composite": "submarine_elastic.policy.composite:CompositePolicy",
    "convergence": "submarine_elastic.policy.convergence:ConvergencePolicy",
    "fair-share": "submarine_elastic.policy.fair_share:FairShareArbiter",
    "goodput": "submarine_elastic.policy.goodput:GoodputArbiter",
    "greedy": "submarine_elastic.policy.basic:GreedyPolicy",
    "scaling-efficiency": "submarine_elastic.policy.scaling_efficiency:ScalingEfficiencyPolicy",
    "static": "submarine_elastic.policy.basic:StaticPolicy",
    "straggler": "submarine_elastic.policy.straggler:StragglerPolicy",
    "utility": "submarine_elastic.policy.utility:UtilityPolicy",
}

PolicyClass = type[JobPolicy] | type[ClusterArbiter]


def policy_names() -> list[str]:
    """Every policy name that :func:`load_policy` knows: installed entry points and the built-ins."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} | set(BUILTIN_POLICIES))


def _import_path(path: str, spec: str) -> object:
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise PolicyNotFoundError(f"policy {spec!r}: expected 'module:Class', got {path!r}", spec=spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise PolicyNotFoundError(f"policy {spec!r}: no module named {missing!r}", spec=spec) from exc
        raise PolicyLoadError(
            f"policy {spec!r}: module {module_name!r} imports {missing!r}, which is not installed", spec=spec
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any error while importing user code is reported as a load error
        raise PolicyLoadError(
            f"policy {spec!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}", spec=spec
        ) from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise PolicyAttributeError(
                f"policy {spec!r}: module {module_name!r} has no attribute {attr!r}", spec=spec
            ) from exc
    return obj


def _by_name(spec: str) -> object:
    found = {ep.value: ep for ep in entry_points(group=ENTRY_POINT_GROUP, name=spec)}
    if len(found) > 1:
        raise PolicyLoadError(f"policy {spec!r} is registered more than once: {', '.join(sorted(found))}", spec=spec)
    if found:
        (value,) = found
        return _import_path(value, spec)
    if spec in BUILTIN_POLICIES:
        return _import_path(BUILTIN_POLICIES[spec], spec)
    raise PolicyNotFoundError(
        f"no policy named {spec!r} (known: {', '.join(policy_names())}; or give 'module:Class')", spec=spec
    )


def load_policy_class(spec: str) -> PolicyClass:
    """The policy class named by ``spec``: an entry-point name or ``module:Class``. Imports code; does
    not block otherwise.

    Raises:
        PolicyNotFoundError: no such entry point or module.
        PolicyAttributeError: the module has no such attribute.
        NotAPolicyError: the object is not a concrete JobPolicy or ClusterArbiter subclass.
        PolicyLoadError: the module failed to import, or the name is registered twice.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PolicyNotFoundError(f"a policy name or 'module:Class' is needed, got {spec!r}", spec=str(spec))
    spec = spec.strip()
    obj = _import_path(spec, spec) if ":" in spec else _by_name(spec)
    if not inspect.isclass(obj) or not issubclass(obj, JobPolicy | ClusterArbiter):
        raise NotAPolicyError(f"policy {spec!r}: {obj!r} is not a JobPolicy or ClusterArbiter subclass", spec=spec)
    if inspect.isabstract(obj):
        raise NotAPolicyError(f"policy {spec!r}: {obj.__name__} is abstract", spec=spec)
    return obj


def load_policy(spec: str, **options: Any) -> JobPolicy | ClusterArbiter:
    """An instance of the policy named by ``spec``, built with ``options`` as keyword arguments.

    Raises:
        PolicyConfigError: the class rejected the options (unknown name, bad value).
        PolicyLoadError: any subclass, as for :func:`load_policy_class`.
    """
    cls = load_policy_class(spec)
    try:
        return cls(**options)
    except TypeError as exc:
        raise PolicyConfigError(f"policy {spec!r}: {exc}") from exc


def load_job_policy(spec: str, **options: Any) -> JobPolicy:
    """Like :func:`load_policy`, for a :class:`JobPolicy`.

    Raises:
        NotAPolicyError: ``spec`` names a cluster arbiter.
        PolicyConfigError, PolicyLoadError: as for :func:`load_policy`.
    """
    if not issubclass(load_policy_class(spec), JobPolicy):
        raise NotAPolicyError(f"policy {spec!r} is a cluster arbiter, not a job policy", spec=spec)
    policy = load_policy(spec, **options)
    if not isinstance(policy, JobPolicy):
        raise NotAPolicyError(f"policy {spec!r} did not build a JobPolicy", spec=spec)
    return policy


def load_arbiter(spec: str, **options: Any) -> ClusterArbiter:
    """Like :func:`load_policy`, for a :class:`ClusterArbiter`.

    Raises:
        NotAPolicyError: ``spec`` names a job policy.
        PolicyConfigError, PolicyLoadError: as for :func:`load_policy`.
    """
    if not issubclass(load_policy_class(spec), ClusterArbiter):
        raise NotAPolicyError(f"policy {spec!r} is a job policy, not a cluster arbiter", spec=spec)
    arbiter = load_policy(spec, **options)
    if not isinstance(arbiter, ClusterArbiter):
        raise NotAPolicyError(f"policy {spec!r} did not build a ClusterArbiter", spec=spec)
    return arbiter


def split_top_level(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside parentheses and brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        if ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def parse_spec(part: str) -> tuple[str, dict[str, Any]]:
    """``name(key=value, ...)`` -> ``(name, options)``; values are read as YAML scalars (numbers, lists, ...).

    Raises:
        PolicyConfigError: no name, unbalanced parentheses, or an option that is not ``key=value``.
    """
    name, paren, rest = part.partition("(")
    name = name.strip()
    if not name:
        raise PolicyConfigError(f"policy {part!r}: the name is missing")
    if not paren:
        return name, {}
    if not rest.endswith(")"):
        raise PolicyConfigError(f"policy {part!r}: unbalanced parentheses")
    options: dict[str, Any] = {}
    for item in split_top_level(rest[:-1], ","):
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip().isidentifier():
            raise PolicyConfigError(f"policy {part!r}: option {item!r} of {name!r} must be key=value")
        try:
            options[key.strip()] = yaml.safe_load(value.strip()) if value.strip() else ""
        except yaml.YAMLError:
            options[key.strip()] = value.strip()
    return name, options


def load_job_policy_spec(text: str) -> JobPolicy:
    """A job policy from ``name`` or ``name(key=value, ...)`` (what ``--policy`` takes).

    Raises:
        PolicyConfigError, PolicyLoadError: as for :func:`parse_spec` and :func:`load_job_policy`.
    """
    name, options = parse_spec(text)
    return load_job_policy(name, **options)


def load_arbiter_spec(text: str) -> ClusterArbiter:
    """A cluster arbiter from ``name`` or ``name(key=value, ...)``.

    Raises:
        PolicyConfigError, PolicyLoadError: as for :func:`parse_spec` and :func:`load_arbiter`.
    """
    name, options = parse_spec(text)
    return load_arbiter(name, **options)
