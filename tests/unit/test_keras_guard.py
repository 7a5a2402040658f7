"""The Keras guards of tf_hooks.elastic.keras, without TensorFlow: fakes stand in for ``tf.keras`` and Keras."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_hooks.elastic import keras as ekeras


def test_keras_2_passes_with_or_without_the_variable():
    assert ekeras.keras_problem("2.18.0", "1") is None
    assert ekeras.keras_problem("2.15.1", None) is None  # TF 2.15: tf.keras is Keras 2 anyway


def test_keras_3_is_refused_with_both_ways_out():
    problem = ekeras.keras_problem("3.15.1", None)
    assert problem is not None
    assert "tf.keras is Keras 3.15.1 (TF_USE_LEGACY_KERAS is not set)" in problem
    assert "unsynchronised" in problem
    assert "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported" in problem
    assert "--env TF_USE_LEGACY_KERAS=1" in problem
    assert "tf_hooks.elastic.state.ElasticState" in problem and "examples/train_elastic.py" in problem
    assert "tf_hooks.elastic.keras.ElasticKerasTrainer" in problem  # trains Keras 3 fit


def test_variable_set_but_still_keras_3_names_the_likely_causes():
    problem = ekeras.keras_problem("3.15.1", "true")
    assert problem is not None
    assert "TF_USE_LEGACY_KERAS=true is set but tf.keras is Keras 3.15.1" in problem
    assert "tf_keras is not installed" in problem and "after tf.keras was first used" in problem


@pytest.mark.parametrize("version", [None, "", "nightly"])
def test_an_unknown_version_is_refused(version: str | None):
    problem = ekeras.keras_problem(version, "1")
    assert problem is not None and "unknown version" in problem


@given(major=st.integers(3, 99), minor=st.integers(0, 99), legacy=st.sampled_from([None, "", "0", "1", "True"]))
def test_every_keras_from_3_on_is_refused(major: int, minor: int, legacy: str | None):
    assert ekeras.keras_problem(f"{major}.{minor}.0", legacy) is not None


def _fake_keras(monkeypatch: pytest.MonkeyPatch, package: str, version: str) -> types.ModuleType:
    """A ``tf.keras`` whose Model lives in ``package`` (of ``version``), in a fake ``tensorflow``."""
    monkeypatch.setitem(sys.modules, package, types.SimpleNamespace(__version__=version))
    keras = types.ModuleType(f"{package}.api")
    keras.Model = type("Model", (), {"__module__": f"{package}.src.models"})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(keras=keras))
    return keras


def test_keras_version_is_read_from_the_package_behind_the_module(monkeypatch: pytest.MonkeyPatch):
    keras = _fake_keras(monkeypatch, "fake_keras_pkg", "3.2.1")
    assert ekeras.keras_version(keras) == "3.2.1"
    assert ekeras.keras_version(types.SimpleNamespace()) is None


def _fake_keras_package(monkeypatch: pytest.MonkeyPatch, package: str, version: str, backend: str = "tensorflow"):
    """A Keras package ``package`` of ``version``, and a model of it."""
    module = types.ModuleType(package)
    module.__version__ = version  # type: ignore[attr-defined]
    module.Model = type("Model", (), {"__module__": f"{package}.src.models"})  # type: ignore[attr-defined]
    module.backend = types.SimpleNamespace(backend=lambda: backend)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, package, module)
    sequential = type("Sequential", (module.Model,), {"__module__": f"{package}.src.models.sequential"})
    return module, sequential()


@pytest.mark.parametrize("version", ["2.21.0", "3.15.1"])
def test_the_trainer_follows_the_keras_of_the_model(monkeypatch: pytest.MonkeyPatch, version: str):
    package, model = _fake_keras_package(monkeypatch, "fake_keras_pkg", version)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)  # whatever tf.keras would be
    assert ekeras.model_keras(model) is package


def test_keras_3_off_tensorflow_is_refused_naming_the_backend(monkeypatch: pytest.MonkeyPatch):
    _, model = _fake_keras_package(monkeypatch, "fake_keras_pkg", "3.15.1", backend="jax")
    with pytest.raises(ekeras.KerasVersionError, match=r"Keras 3.15.1 on the 'jax' backend.*KERAS_BACKEND"):
        ekeras.model_keras(model)


@pytest.mark.parametrize("version", ["1.2.2", "4.0.0", "nightly"])
def test_a_keras_the_trainer_does_not_run_is_refused(monkeypatch: pytest.MonkeyPatch, version: str):
    _, model = _fake_keras_package(monkeypatch, "fake_keras_pkg", version)
    with pytest.raises(
        ekeras.KerasVersionError, match=rf"fake_keras_pkg.src.models.sequential.Sequential of Keras {version}"
    ):
        ekeras.model_keras(model)


def test_the_trainer_refuses_a_non_keras_model_before_it_touches_horovod(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # any import of Horovod fails loudly
    x = np.zeros((4, 2), np.float32)
    with pytest.raises(ekeras.KerasVersionError, match="builtins.object, not a Keras model"):
        ekeras.ElasticKerasTrainer(object(), object(), loss="mse", x=x, y=x, rule=None)  # type: ignore[arg-type]


def test_fingerprints_of_diverged_ranks_are_named():
    same = np.array([[1.5, 2.0], [1.5, 2.0], [1.5, 2.0]])
    assert ekeras._fingerprint_problem(same) is None
    apart = same.copy()
    apart[2, 1] = 2.0000001
    problem = ekeras._fingerprint_problem(apart)
    assert problem is not None and problem.startswith("ranks [2] hold other weights than rank 0")


def test_importing_the_module_imports_neither_tensorflow_nor_horovod():
    code = (
        "import sys, tf_hooks.elastic.keras; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'horovod', 'keras', 'tf_keras')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
