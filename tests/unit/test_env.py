"""The positive-integer variables are read by one rule: ASCII digits >= 1, blanks around them allowed, and
anything else refused with a message naming the variable and the value."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from submarine_elastic import env
from submarine_elastic.limits import CHECKPOINT_EVERY_DEFAULT

WORKERS = {"SUBMARINE_NUM_WORKERS": "2", "SUBMARINE_MIN_WORKERS": "1", "SUBMARINE_MAX_WORKERS": "4"}
BATCH = {"SUBMARINE_MIN_BATCH_SIZE": "32", "SUBMARINE_MAX_BATCH_SIZE": "512"}

#: (variable, what reads it, the other variables it needs, its value when unset: None if required)
READERS: list[tuple[str, Callable[[], int], dict[str, str], int | None]] = [
    ("SUBMARINE_METRICS_EVERY_N", lambda: env.settings().metrics_every_n, {}, 1),
    ("SUBMARINE_NOISE_EVERY", lambda: env.settings().noise_every or 10, {}, 10),
    ("SUBMARINE_CHECKPOINT_EVERY", lambda: env.settings().checkpoint_every, {}, CHECKPOINT_EVERY_DEFAULT),
    ("SUBMARINE_NUM_WORKERS", lambda: env.settings().worker_limits()[0], WORKERS, None),
    ("SUBMARINE_MIN_WORKERS", lambda: env.settings().worker_limits()[1], WORKERS, None),
    ("SUBMARINE_MAX_WORKERS", lambda: env.settings().worker_limits()[2], WORKERS, None),
    ("SUBMARINE_MIN_BATCH_SIZE", lambda: _batch()[0], BATCH, None),
    ("SUBMARINE_MAX_BATCH_SIZE", lambda: _batch()[1], BATCH, None),
]


def _batch() -> tuple[int, int]:
    limits = env.settings().batch_limits()
    assert limits is not None
    return limits


def _set(monkeypatch: pytest.MonkeyPatch, others: dict[str, str], name: str, value: str | None) -> None:
    for key, other in others.items():
        monkeypatch.setenv(key, other)
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(("name", "read", "others", "default"), READERS, ids=[r[0] for r in READERS])
@pytest.mark.parametrize("value", ["7", " 7 ", "07"])
def test_a_whole_number_is_read_with_blanks_around_it(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], int],
    others: dict[str, str],
    default: int | None,
    value: str,
) -> None:
    _set(monkeypatch, others, name, value)
    assert read() == 7


@pytest.mark.parametrize(("name", "read", "others", "default"), READERS, ids=[r[0] for r in READERS])
@pytest.mark.parametrize("value", ["0", "-1", "+3", "2.5", "1_000", "ten", "\u00b2", "\u0663"])
def test_anything_else_is_refused_naming_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], int],
    others: dict[str, str],
    default: int | None,
    value: str,
) -> None:
    _set(monkeypatch, others, name, value)
    with pytest.raises(ValueError, match=f"^{name} must be a positive integer.*, got {re.escape(repr(value))}$"):
        read()


@pytest.mark.parametrize(("name", "read", "others", "default"), READERS, ids=[r[0] for r in READERS])
def test_unset_is_the_default_or_an_error_naming_a_required_variable(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    read: Callable[[], int],
    others: dict[str, str],
    default: int | None,
) -> None:
    _set(monkeypatch, others, name, None)
    if default is not None:
        assert read() == default
    else:
        with pytest.raises(ValueError, match=f"^{name} must be a positive integer, got None$"):
            read()


def test_the_unit_is_named_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_EVERY", "0")
    with pytest.raises(
        ValueError, match=r"^SUBMARINE_CHECKPOINT_EVERY must be a positive integer \(commits\), got '0'$"
    ):
        _ = env.settings().checkpoint_every


def test_no_batch_limits_when_neither_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BATCH:
        monkeypatch.delenv(name, raising=False)
    assert env.settings().batch_limits() is None
