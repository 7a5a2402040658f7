"""Horovod's Keras binding as a plain script imports it in an agent-started process (the agent's
``sitecustomize`` on ``PYTHONPATH``), with the real TensorFlow and Horovod, one process per Keras:

- Keras 3: the helpers that cannot work there raise ``KerasVersionError`` naming the ways out (tf_keras, or
  the project's Keras 3 trainer), where Horovod's own ``DistributedOptimizer`` would train the ranks apart
  without a word;
- Keras 2 (``TF_USE_LEGACY_KERAS=1``): the binding's backend is ``tf.keras``'s (Horovod binds the Keras
  3 one, and its metric-average callback fails at the first epoch end), and ``KerasState`` builds the
  optimizer's slots before it synchronises (a joiner has none, and the broadcast would hang).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow")

from submarine_elastic.elastic.training import site_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def run_in_agent_env(code: str, *, legacy_keras: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "SUBMARINE_", "TF_USE_LEGACY"))}
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir()), str(REPO)])
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


KERAS3 = """
import tensorflow as tf
import horovod.tensorflow.keras as hvd
from tf_hooks.elastic.keras import KerasVersionError
refused = []
for name, call in [
    ("DistributedOptimizer", lambda: hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))),
    ("KerasState", lambda: hvd.elastic.KerasState(None)),
    ("BroadcastGlobalVariablesCallback", lambda: hvd.callbacks.BroadcastGlobalVariablesCallback(0)),
    ("MetricAverageCallback", lambda: hvd.callbacks.MetricAverageCallback()),
]:
    try:
        call()
    except KerasVersionError as exc:
        assert "TF_USE_LEGACY_KERAS=1" in str(exc) and name in str(exc), str(exc)
        assert "tf_hooks.elastic.keras.ElasticKerasTrainer" in str(exc), str(exc)  # Keras 3 fit's way
        refused.append(name)
print(" ".join(refused))
"""


def test_keras3_refuses_horovods_keras_helpers_with_the_way_out() -> None:
    result = run_in_agent_env(KERAS3, legacy_keras=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "DistributedOptimizer",
        "KerasState",
        "BroadcastGlobalVariablesCallback",
        "MetricAverageCallback",
    ]


KERAS2 = """
import tensorflow as tf
import horovod.tensorflow.keras as hvd
assert tf.keras.Model.__module__.startswith("tf_keras"), tf.keras.Model.__module__
assert hvd.callbacks.K is tf.keras.backend and hvd.K is tf.keras.backend
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9))
model.compile(optimizer=opt, loss="mse")
before = len(opt.variables())
state = hvd.elastic.KerasState(model, batch=0)
hvd.init()
state.sync()   # a ring of one: what a joiner does first
print(before, len(opt.variables()))
"""


def test_keras2_binding_uses_tf_keras_backend_and_state_sync_builds_the_slots() -> None:
    result = run_in_agent_env(KERAS2, legacy_keras=True)
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = map(int, result.stdout.split())
    assert after > before  # the momentum slots exist before rank 0's are broadcast into them


BUSY_ITERATOR = """
import threading
import tensorflow as tf

waiting, release, closed = threading.Event(), threading.Event(), threading.Event()

def elements():
    try:
        yield 1
        waiting.set()
        release.wait(20)  # the pipeline's prefetch thread is busy here
        yield 2
    finally:
        closed.set()

dataset = tf.data.Dataset.from_generator(elements, output_signature=tf.TensorSpec((), tf.int32)).prefetch(1)
iterator = iter(dataset)
next(iterator)
assert waiting.wait(20)
del iterator  # freeing it waits for the busy prefetch thread
print("dropped before the pipeline let go:", not closed.is_set(), flush=True)
release.set()
print("freed afterwards:", closed.wait(20), flush=True)
"""


def test_a_dropped_tf_data_iterator_is_freed_off_the_training_thread() -> None:
    """Freeing an iterator waits for its pipeline's threads (a Keras fit's waited for tf.data's autotuning
    thread, seconds): the thread that drops it goes on at once, and it is freed once the pipeline lets go."""
    result = run_in_agent_env(BUSY_ITERATOR, legacy_keras=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["dropped before the pipeline let go: True", "freed afterwards: True"]
    assert "interpreter state is not initialized" not in result.stderr  # nothing left to free at exit
