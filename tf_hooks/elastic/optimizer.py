"""Gradients averaged over the Horovod ring for a Keras optimizer, Keras 3 or Keras 2 (``tf_keras``).

Horovod 0.28's Keras ``DistributedOptimizer`` allreduces in methods that Keras 3 no longer calls
(``get_gradients``, ``_compute_gradients``): under Keras 3 ``fit`` then trains every rank on its own
gradients, without a word. :func:`allreduce_gradients` wraps instead the one method every update of the
optimizer goes through, so ``fit``, ``train_on_batch`` and a custom loop are all covered:

- Keras 3: ``apply(grads, trainable_variables)`` (``apply_gradients`` calls it);
- Keras 2 (``tf_keras``, new and legacy optimizers): ``apply_gradients(grads_and_vars, ...)``.

The gradients are averaged before the optimizer clips, scales or accumulates them, as Horovod's wrapper
does. With ``HOROVOD_ELASTIC=1`` (every elastic job, and ``horovodrun`` in elastic mode) the average
divides by the ring size read when the step runs, so a step traced before a resize stays right after it.

Importing this module imports neither TensorFlow nor Horovod.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tf_hooks.noise import GradientNoiseScale

#: Prefix of the allreduce of gradient i: Horovod's ``elastic.run`` recognises a failed collective, and
#: turns it into a ring re-form, by "HorovodAllreduce" in TensorFlow's error message, which names the op.
GRADIENT_OP_NAME = "HorovodAllreduce_ElasticGradient_{}"
#: The allreduce of the gradient noise measurement (three numbers a step; see tf_hooks.noise).
NOISE_OP_NAME = "HorovodAllreduce_GradientNoise"

_classes: dict[type, type] = {}
#: The noise estimator each of our optimizers feeds (not an attribute: Keras would track its variables).
_noise_of: weakref.WeakKeyDictionary[Any, GradientNoiseScale] = weakref.WeakKeyDictionary()


def is_allreducing(optimizer: Any) -> bool:
    """Whether ``optimizer`` already averages its gradients over the ring: one of ours, or Horovod's
    ``DistributedOptimizer`` of a Keras 2 optimizer (of a Keras 3 one it does not: see :func:`allreduce_gradients`)."""
    if getattr(type(optimizer), "_submarine_allreduce", False):
        return True
    return hasattr(optimizer, "_allreduce_grads") and not _is_keras3(type(optimizer))


def _is_keras3(cls: type) -> bool:
    return callable(getattr(cls, "apply", None))


def allreduce_gradients(optimizer: Any, noise: GradientNoiseScale | None = None) -> Any:
    """A new optimizer, of the same configuration, whose every update first averages the gradients over the
    ring; ``optimizer`` itself when it already does (:func:`is_allreducing`). With ``noise``, every update
    also feeds it this rank's gradients before and after the average (:mod:`tf_hooks.noise`).

    Use the returned optimizer from then on (in ``compile``, in a custom loop): it is built from
    ``optimizer.get_config()``, so it starts with no slots and ``iterations`` at 0. Its class is a subclass
    of ``optimizer``'s with the same name and module, so a saved model names the original class and loads
    without this module. ``None`` gradients pass through; ``tf.IndexedSlices`` are averaged as Horovod does.

    Raises:
        TypeError: ``optimizer`` is not a Keras optimizer (it has neither ``apply`` nor ``apply_gradients``,
            or no ``get_config``/``from_config``), or is Horovod's ``DistributedOptimizer`` of a Keras 3
            optimizer, which never allreduces in ``fit``; or ``noise`` with an optimizer that averages the
            gradients inside (Horovod's ``DistributedOptimizer``: the local gradients are never seen).
    """
    if is_allreducing(optimizer):
        if noise is not None:
            if not getattr(type(optimizer), "_submarine_allreduce", False):
                raise TypeError(
                    "optimizer: Horovod's DistributedOptimizer averages the gradients inside, so the gradient "
                    "noise scale cannot see the local ones: pass the plain optimizer"
                )
            _noise_of[optimizer] = noise
        return optimizer
    base = type(optimizer)
    if hasattr(optimizer, "_allreduce_grads"):
        raise TypeError(
            f"optimizer: Horovod's DistributedOptimizer of a Keras 3 {base.__qualname__} does not allreduce in fit "
            f"(Horovod 0.28 wraps methods Keras 3 does not call): pass the {base.__qualname__} itself"
        )
    if not (hasattr(base, "get_config") and hasattr(base, "from_config")):
        raise TypeError(f"optimizer: expected a Keras optimizer, got a {base.__module__}.{base.__qualname__}")
    cls: Any = _classes.get(base)
    if cls is None:
        cls = _classes[base] = _allreducing_class(base)
    wrapped = cls.from_config(optimizer.get_config())
    if noise is not None:
        _noise_of[wrapped] = noise
    return wrapped


def _allreducing_class(base: type) -> type:
    namespace: dict[str, Any] = {"_submarine_allreduce": True, "__module__": base.__module__}
    if _is_keras3(base):  # apply_gradients calls apply

        def apply(self: Any, grads: Sequence[Any], trainable_variables: Any = None) -> Any:
            averaged = average_over_ring(grads, *_noise_and_step(self))
            return base.apply(self, averaged, trainable_variables)  # type: ignore[attr-defined]

        namespace["apply"] = apply
    elif callable(getattr(base, "apply_gradients", None)):  # Keras 2: apply_gradients is where updates start

        def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            pairs = list(grads_and_vars)
            grads = average_over_ring([g for g, _ in pairs], *_noise_and_step(self))
            return base.apply_gradients(  # type: ignore[attr-defined]
                self, list(zip(grads, [v for _, v in pairs], strict=True)), *args, **kwargs
            )

        namespace["apply_gradients"] = apply_gradients
    else:
        raise TypeError(
            f"optimizer: a {base.__module__}.{base.__qualname__} has neither apply (Keras 3) nor "
            f"apply_gradients (Keras 2)"
        )
    cls = type(base.__name__, (base,), namespace)
    cls.__qualname__ = base.__qualname__
    cls.__doc__ = f"{base.__qualname__}, with the gradients averaged over the Horovod ring first."
    return cls


def _noise_and_step(optimizer: Any) -> tuple[GradientNoiseScale | None, Any]:
    """The noise estimator ``optimizer`` feeds, and its ``iterations`` (the step the ranks agree on)."""
    noise = _noise_of.get(optimizer)
    return noise, getattr(optimizer, "iterations", None) if noise is not None else None


def average_over_ring(grads: Sequence[Any], noise: GradientNoiseScale | None = None, step: Any = None) -> list[Any]:
    """Each gradient averaged over the ring (an allreduce per gradient, which Horovod fuses); None stays None.
    With ``noise``, it is fed this rank's gradients and the averaged ones, and the ranks' square norms are
    averaged in one more allreduce of three numbers (:mod:`tf_hooks.noise`; set its batch sizes with
    ``set_batch``). ``step``: the step count every rank agrees on (the optimizer's ``iterations``), which
    picks the measured steps; None counts this process's calls (a joiner's count differs).

    Blocks, when run eagerly, until every rank has contributed; inside a traced step the allreduce is an op
    of the step.
    """
    import horovod.tensorflow as hvd

    averaged = [
        None if grad is None else hvd.allreduce(grad, op=hvd.Average, name=GRADIENT_OP_NAME.format(i))
        for i, grad in enumerate(grads)
    ]
    if noise is not None:

        def average(values: Any) -> Any:
            return hvd.allreduce(values, op=hvd.Average, name=NOISE_OP_NAME)

        noise.observe(grads, averaged, step=step, average=average)
    return averaged


__all__ = ["GRADIENT_OP_NAME", "NOISE_OP_NAME", "allreduce_gradients", "average_over_ring", "is_allreducing"]
