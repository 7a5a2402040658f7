"""The unit tests of the training side carry the ``tensorflow`` marker, so the TensorFlow 2.18 pass runs them.

A unit test module that imports from ``tf_hooks`` tests code that runs inside the training process, beside
whichever TensorFlow line the job has (and the numpy, protobuf and grpcio that line pins); the others test the
controller side, whose packages the TensorFlow line does not change.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def _imports_tf_hooks(module: types.ModuleType) -> bool:
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.split(".")[0] == "tf_hooks":
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and _HERE in item.path.parents and _imports_tf_hooks(item.module):
            item.add_marker(pytest.mark.tensorflow)
