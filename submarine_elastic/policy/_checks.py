"""The value checks of the policy API's types (:mod:`submarine_elastic.policy.api`).

Each check tries the exact built-in type first: a snapshot of 1,000 jobs runs them about 50,000 times a round, and
an isinstance against an abstract class costs several times a type comparison.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

from submarine_elastic.limits import INSTANCE


def is_int(value: object) -> bool:
    kind = type(value)
    return kind is int or (kind is not bool and isinstance(value, int))


def is_number(value: object) -> bool:
    kind = type(value)
    return kind is float or kind is int or (kind is not bool and isinstance(value, int | float))


def is_mapping(value: object) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def is_sequence(value: object) -> bool:
    """A sequence that is not a string (nor bytes)."""
    kind = type(value)
    return kind is tuple or kind is list or (not isinstance(value, str | bytes) and isinstance(value, Sequence))


def check_count(err: type[Exception], name: str, value: object, *, minimum: int = 0) -> None:
    if not is_int(value) or value < minimum:  # type: ignore[operator]
        raise err(f"{name} must be an int >= {minimum}, got {value!r}")


def check_finite(err: type[Exception], name: str, value: object, *, positive: bool = False) -> None:
    if not is_number(value) or not math.isfinite(value):  # type: ignore[arg-type]
        raise err(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:  # type: ignore[operator]
        raise err(f"{name} must be > 0, got {value!r}")
    if not positive and value < 0:  # type: ignore[operator]
        raise err(f"{name} must be >= 0, got {value!r}")


def finite_floats(values: tuple[object, ...]) -> bool:
    """Every value a float and their sum finite (so each is): the usual case, checked at once before any value
    is checked alone; False may still be a valid sequence (ints, a sum that overflows)."""
    return set(map(type, values)) <= {float} and math.isfinite(sum(values))  # type: ignore[arg-type]


def is_instance_name(value: object) -> bool:
    """:data:`~submarine_elastic.limits.INSTANCE` matches ``value``. A job's few instance names come back every
    round: the least recently used 4,096 strings are remembered rather than matched again."""
    return _instance_name(value) if type(value) is str else INSTANCE.matches(value)


@functools.lru_cache(maxsize=4096)
def _instance_name(name: str) -> bool:
    return INSTANCE.matches(name)
