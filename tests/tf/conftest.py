"""Tests that need TensorFlow: each module skips itself when it is missing; all carry the marker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Before any TensorFlow import: quiet C++ logging, and one thread per op on the shared 2-core machine.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

_HERE = Path(__file__).parent
REPO = _HERE.parents[1]
#: TF_USE_LEGACY_KERAS for each Keras, and the major version the trainer must then report.
KERAS = {"keras3": ("0", 3), "keras2": ("1", 2)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.tensorflow)


@pytest.fixture(autouse=True)
def plaintext_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics services these tests start are plaintext: the hooks open a plaintext channel only when
    told to (SUBMARINE_INSECURE); without it they refuse, never sending their token in the clear."""
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")


def run(
    args: list[str], legacy: str | None, timeout: float = 300, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``args`` in the repository, with none of the job's variables and ``TF_USE_LEGACY_KERAS=legacy``
    (None: unset); ``tf.keras`` is fixed per process, so each Keras runs in a fresh Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_", "KERAS_BACKEND"))}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy is not None:
        env["TF_USE_LEGACY_KERAS"] = legacy
    env.update(extra_env)
    return subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def horovodrun(np_: int = 2) -> list[str]:
    """The command line that starts ``np_`` ranks of this Python on loopback (skips without horovodrun)."""
    found = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("horovodrun is not installed (pip install -e '.[horovod]')")
    return [found, "-np", str(np_), "--gloo", "--network-interface", "lo", sys.executable]
