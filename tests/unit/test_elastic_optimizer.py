"""tf_hooks.elastic.optimizer without TensorFlow: fake optimizers of both Keras APIs and a recording Horovod."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from tf_hooks.elastic import optimizer as eopt


@pytest.fixture()
def allreduced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any, str]]:
    """A fake ``horovod.tensorflow`` whose allreduce records (tensor, op, name) and returns ("avg", tensor)."""
    calls: list[tuple[Any, Any, str]] = []

    def allreduce(tensor: Any, op: Any = None, name: str = "") -> Any:
        calls.append((tensor, op, name))
        return ("avg", tensor)

    fake = types.ModuleType("horovod.tensorflow")
    fake.Average = "Average"  # type: ignore[attr-defined]
    fake.allreduce = allreduce  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "horovod", types.ModuleType("horovod"))
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", fake)
    return calls


class _Configurable:
    def __init__(self, learning_rate: float = 0.1) -> None:
        self.learning_rate = learning_rate
        self.applied: list[Any] = []

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        return cls(**config)


class Keras3SGD(_Configurable):
    """Keras 3's shape: apply_gradients calls apply, where every update goes."""

    def apply_gradients(self, grads_and_vars: Any) -> Any:
        grads, variables = zip(*grads_and_vars, strict=True)
        return self.apply(grads, variables)

    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        self.applied.append((list(grads), trainable_variables))


class Keras2SGD(_Configurable):
    """Keras 2's shape (tf_keras): apply_gradients only."""

    def apply_gradients(self, grads_and_vars: Any, name: Any = None, **kwargs: Any) -> Any:
        self.applied.append((list(grads_and_vars), name, kwargs))


def test_keras_3_updates_average_every_gradient_first_and_keep_none(allreduced: list) -> None:
    opt = eopt.allreduce_gradients(Keras3SGD(0.5))
    opt.apply_gradients([("g0", "v0"), (None, "v1"), ("g2", "v2")])  # fit's path
    opt.apply(["g3"], ["v3"])  # a custom loop's
    assert opt.applied == [([("avg", "g0"), None, ("avg", "g2")], ("v0", "v1", "v2")), ([("avg", "g3")], ["v3"])]
    assert allreduced == [
        ("g0", "Average", "HorovodAllreduce_ElasticGradient_0"),
        ("g2", "Average", "HorovodAllreduce_ElasticGradient_2"),
        ("g3", "Average", "HorovodAllreduce_ElasticGradient_0"),
    ]


def test_keras_2_updates_average_in_apply_gradients_and_pass_its_arguments_on(allreduced: list) -> None:
    opt = eopt.allreduce_gradients(Keras2SGD())
    opt.apply_gradients(iter([("g0", "v0"), ("g1", "v1")]), name="step", skip_gradients_aggregation=True)
    assert opt.applied == [
        ([(("avg", "g0"), "v0"), (("avg", "g1"), "v1")], "step", {"skip_gradients_aggregation": True})
    ]
    assert [name for _, _, name in allreduced] == [
        "HorovodAllreduce_ElasticGradient_0",
        "HorovodAllreduce_ElasticGradient_1",
    ]


def test_the_copy_keeps_the_config_class_name_and_module_and_is_not_wrapped_twice() -> None:
    original = Keras3SGD(0.25)
    opt = eopt.allreduce_gradients(original)
    assert opt is not original and opt.learning_rate == 0.25
    assert isinstance(opt, Keras3SGD)
    assert (type(opt).__name__, type(opt).__qualname__, type(opt).__module__) == (
        "Keras3SGD",
        "Keras3SGD",
        Keras3SGD.__module__,
    )
    assert eopt.is_allreducing(opt) and not eopt.is_allreducing(original)
    assert eopt.allreduce_gradients(opt) is opt
    assert type(eopt.allreduce_gradients(Keras3SGD())) is type(opt)  # one subclass per optimizer class


def test_horovods_keras_2_wrapper_is_trusted_and_its_keras_3_one_refused() -> None:
    horovod_keras2 = Keras2SGD()
    horovod_keras2._allreduce_grads = object()  # type: ignore[attr-defined]
    assert eopt.allreduce_gradients(horovod_keras2) is horovod_keras2
    horovod_keras3 = Keras3SGD()
    horovod_keras3._allreduce_grads = object()  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="DistributedOptimizer of a Keras 3 Keras3SGD does not allreduce in fit"):
        eopt.allreduce_gradients(horovod_keras3)


@pytest.mark.parametrize("thing", [object(), _Configurable()])
def test_what_is_not_a_keras_optimizer_is_refused_naming_it(thing: Any) -> None:
    with pytest.raises(TypeError, match=type(thing).__qualname__):
        eopt.allreduce_gradients(thing)
