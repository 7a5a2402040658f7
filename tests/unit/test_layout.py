"""The rooms of the code base and which way their imports go (docs/architecture.md): checked on every module's
source, imports inside functions and under TYPE_CHECKING included, so a shortcut taken anywhere fails here."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Modules at the top of ``submarine_elastic`` that any room may import and that import no room.
LEAVES = {"limits", "settings", "env", "secret_files", "files", "states", "rpc", "tls", "resources", "netif"}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "tf_hooks":
        return "tf_hooks"
    if parts[0] != "submarine_elastic" or len(parts) == 1:
        return None
    return parts[1]


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("submarine_elastic/**/*.py"), *ROOT.glob("tf_hooks/**/*.py")]:
        if "proto" in path.parts or "_site" in path.parts:
            continue
        found[".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = path
    return found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("submarine_elastic", "tf_hooks"):
                names.update(f"{node.module}.{a.name}" for a in node.names)
            else:
                names.add(node.module)
    return names


def _room_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for module, path in _modules().items():
        src = _room(module)
        for name in _imports(path):
            dst = _room(name)
            if src and dst and dst != src:
                edges[src].add(dst)
    return edges


EDGES = _room_edges()


def test_the_leaves_import_no_room() -> None:
    for leaf in LEAVES:
        assert EDGES.get(leaf, set()) <= LEAVES, (leaf, EDGES.get(leaf))


@pytest.mark.parametrize(
    ("room", "may_import"),
    [
        ("protocol", {"yarn"}),
        ("policy", set()),
        ("yarn", set()),
        ("metrics", set()),
        ("submit", {"protocol", "yarn", "webhdfs"}),
        ("elastic", {"protocol", "yarn", "submit", "tf_hooks"}),
        ("tf_hooks", {"protocol", "metrics", "sim"}),
    ],
)
def test_a_room_imports_only_what_the_architecture_page_says(room: str, may_import: set[str]) -> None:
    assert EDGES[room] - LEAVES <= may_import, f"{room} imports {sorted(EDGES[room] - LEAVES - may_import)}"


def test_the_runtime_reaches_the_submit_side_only_for_unpacking_a_jobs_code() -> None:
    used = {
        name
        for module, path in _modules().items()
        if _room(module) == "elastic"
        for name in _imports(path)
        if _room(name) == "submit"
    }
    assert used <= {"submarine_elastic.submit.jobcode"}, used


def test_no_two_rooms_import_each_other_in_a_cycle() -> None:
    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in EDGES.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(room for room in EDGES if reaches(room, room, {room}))
    assert cycles == [], cycles
