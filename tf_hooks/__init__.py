"""Training-side helpers: metrics hooks and elastic-training helpers that run inside the training process.

Nothing here imports the controller side (``submarine_elastic``); the metrics hooks use only its
``env`` module and the generated gRPC stubs. Importing this package imports neither TensorFlow nor
gRPC: each name below loads its module on first use.

The three lines a Keras script adds (the job spec sets ``SUBMARINE_METRICS_ENDPOINT``,
``SUBMARINE_JOB_ID`` and, where needed, ``SUBMARINE_METRICS_TOKEN``)::

    from tf_hooks import MetricsCallback
    metrics = MetricsCallback(batch_size=64)
    model.fit(dataset, epochs=10, callbacks=[metrics])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tf_hooks.api import (
        MetricsConfigError,
        MetricsSink,
        NullSink,
        SenderStats,
        StepRecord,
        TfHooksError,
    )
    from tf_hooks.config import MetricsConfig
    from tf_hooks.keras import MetricsCallback, callback_class
    from tf_hooks.sender import GrpcSink, make_sink
    from tf_hooks.session import MetricsHook

_LAZY = {
    "MetricsCallback": "tf_hooks.keras",
    "callback_class": "tf_hooks.keras",
    "MetricsHook": "tf_hooks.session",
    "MetricsConfig": "tf_hooks.config",
    "GrpcSink": "tf_hooks.sender",
    "make_sink": "tf_hooks.sender",
    "MetricsConfigError": "tf_hooks.api",
    "MetricsSink": "tf_hooks.api",
    "NullSink": "tf_hooks.api",
    "SenderStats": "tf_hooks.api",
    "StepRecord": "tf_hooks.api",
    "TfHooksError": "tf_hooks.api",
}

__all__ = [
    "GrpcSink",
    "MetricsCallback",
    "MetricsConfig",
    "MetricsConfigError",
    "MetricsHook",
    "MetricsSink",
    "NullSink",
    "SenderStats",
    "StepRecord",
    "TfHooksError",
    "callback_class",
    "make_sink",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_hooks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
