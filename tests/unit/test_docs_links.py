"""README.md and docs/*.md: every relative link names a file of the repository, without an anchor.

Anchors are refused because a heading renamed in one file silently breaks them in another; a link names
the file, and the file's own headings do the rest. Links inside code (fenced blocks, inline spans) are not
links and are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def links(text: str) -> list[str]:
    """The link targets of a Markdown text, code left out."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _INLINE.findall(text) + _REFERENCE.findall(text)


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of ``doc``: a missing target, an anchor, a path outside ``root``."""
    problems = []
    for target in links(doc.read_text(encoding="utf-8")):
        if _EXTERNAL.match(target):
            continue
        if "#" in target:
            problems.append(f"{target}: anchors are not allowed, link the file")
            continue
        path = (doc.parent / target).resolve()
        if not path.is_relative_to(root.resolve()):
            problems.append(f"{target}: points outside the repository")
        elif not path.exists():
            problems.append(f"{target}: no such file")
    return problems


def test_there_are_docs() -> None:
    assert (ROOT / "README.md").is_file()
    assert len(DOCS) > 1, "docs/*.md is empty"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(doc: Path) -> None:
    assert broken_links(doc) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_stay_inside_the_repository(doc: Path) -> None:
    assert "../shared" not in doc.read_text(encoding="utf-8")


def test_checker_finds_broken_links(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# there\n")
    doc = tmp_path / "docs" / "index.md"
    doc.write_text(
        "[ok](there.md) [up](../docs/there.md) ![img](there.md) [web](https://example.org/x#y)\n"
        "[gone](missing.md) [anchor](there.md#top) [self](#here) [out](../../elsewhere.md)\n"
        "`[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "[ref]: also-missing.md\n"
    )
    assert broken_links(doc, root=tmp_path) == [
        "missing.md: no such file",
        "there.md#top: anchors are not allowed, link the file",
        "#here: anchors are not allowed, link the file",
        "../../elsewhere.md: points outside the repository",
        "also-missing.md: no such file",
    ]
