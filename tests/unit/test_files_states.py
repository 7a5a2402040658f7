"""The atomic-write helper and the state-machine helper that every module of the project uses."""

from __future__ import annotations

import stat
from enum import StrEnum
from pathlib import Path

import pytest

from submarine_elastic.files import atomic_path, write_atomic
from submarine_elastic.states import IllegalTransitionError, Transitions


class _Light(StrEnum):
    RED = "red"
    GREEN = "green"
    OFF = "off"


def test_write_atomic_replaces_the_file_whole_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("old")
    write_atomic(path, "new", mode=0o600)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "archive.tgz"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["archive.tgz"]


def test_transitions_allow_only_what_the_table_lists() -> None:
    lights = Transitions(_Light, {_Light.RED: {_Light.GREEN, _Light.OFF}, _Light.GREEN: {_Light.RED}, _Light.OFF: ()})
    assert lights.advance("light", _Light.RED, _Light.GREEN) is _Light.GREEN
    assert not lights.can(_Light.RED, _Light.RED)
    assert lights.final(_Light.OFF) and not lights.final(_Light.GREEN)
    with pytest.raises(IllegalTransitionError, match=r"light: no transition from off to red \(off is final\)"):
        lights.advance("light", _Light.OFF, _Light.RED)
    with pytest.raises(IllegalTransitionError, match=r"from green only to red"):
        lights.advance("light", _Light.GREEN, _Light.OFF)


def test_a_table_must_give_every_state_a_row() -> None:
    with pytest.raises(ValueError, match="no transitions given for OFF"):
        Transitions(_Light, {_Light.RED: {_Light.GREEN}, _Light.GREEN: ()})
