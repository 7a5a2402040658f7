"""Tests that need TensorFlow: each module skips itself when it is missing; all carry the marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Before any TensorFlow import: quiet C++ logging, and one thread per op on the shared 2-core machine.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.tensorflow)


@pytest.fixture(autouse=True)
def plaintext_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics services these tests start are plaintext: the hooks open a plaintext channel only when
    told to (SUBMARINE_INSECURE); without it they refuse, never sending their token in the clear."""
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")
