"""What MetricsCallback costs a training step: the same Keras model, with and without the callback.

Four configurations, interleaved round by round (in a shuffled order each round) so that drift of
the shared machine hits all of them alike:
- ``none``: no callback;
- ``empty``: a callback whose ``on_train_batch_end`` does nothing: what any per-step callback (the
  progress bar too) costs in Keras 3, which then converts the logs on the training thread;
- ``live``: the callback reporting every step to a metrics service running in its own process
  (``submarine metrics serve``), as in a real job;
- ``dead``: the callback pointed at a port nobody listens on (connections refused).
For each it records wall time per step and process CPU time per step (which includes the sender
thread), takes the median over rounds, and prints the ratios to ``none``. It also times the two
halves of the callback apart (the training thread's ``on_train_batch_end`` in a loop, then the
sender's CPU per point), figures free of fit's noise.
Checks that the live service received every step of the live runs. Writes
``benchmarks/results/hook_overhead.json`` and ``hook_overhead.md``.

Run: ``.venv/bin/python benchmarks/bench_hook_overhead.py [--rounds 25] [--steps 300] [--calls 5000]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc  # noqa: E402
from tf_hooks import MetricsCallback  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN = "bench-token"
BATCH = 32


class EmptyBatchCallback(tf.keras.callbacks.Callback):  # type: ignore[misc,name-defined]
    """Does nothing per batch; having a batch hook at all makes Keras 3 convert the logs on the training
    thread (no async dispatch), a cost any per-step callback pays, the progress bar included."""

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        pass


def start_service() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "SUBMARINE_METRICS_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from submarine_elastic.cli.main import main; main()",
            "metrics",
            "serve",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+:\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the metrics service did not start: {line!r}")
    return proc, match.group(1)


def build_model(steps: int) -> tuple[Any, Any]:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((32,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * BATCH, 32)).astype("float32")
    y = rng.normal(size=(steps * BATCH, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).cache()
    model.fit(dataset.take(20), epochs=1, verbose=0)  # build, trace, fill the cache path
    return model, dataset


def run(model: Any, dataset: Any, callbacks: list[Any], steps: int) -> tuple[float, float]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    model.fit(dataset, epochs=1, verbose=0, callbacks=callbacks)
    return (time.perf_counter() - wall0) / steps, (time.process_time() - cpu0) / steps


def split_cost(model: Any, endpoint: str, calls: int) -> tuple[float, float, int]:
    """The callback's two halves apart: seconds per ``on_train_batch_end`` on the training thread (the
    sender kept idle meanwhile), then process CPU seconds per point while the sender delivers them all."""
    callback = MetricsCallback(
        endpoint=endpoint,
        job_id="bench-split",
        token=TOKEN,
        batch_size=BATCH,
        flush_interval=3600.0,
        max_batch_points=calls + 1,
        queue_size=calls + 1,
    )
    callback.set_model(model)
    callback.on_train_begin()
    logs = {"loss": 0.5}  # as Keras 3 hands them over
    t0 = time.perf_counter()
    for batch in range(calls):
        callback.on_train_batch_end(batch, logs)
    training_thread = (time.perf_counter() - t0) / calls
    cpu0 = time.process_time()
    stats = callback.close(timeout=60)
    sender = (time.process_time() - cpu0) / calls
    return training_thread, sender, stats.acked


def points_received(address: str, job: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = metrics_pb2_grpc.MetricsServiceStub(channel)
        answer = stub.GetJob(
            metrics_pb2.GetJobRequest(job_id=job), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10
        )
        return answer.summary.points_received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--steps", type=int, default=300, help="steps per fit")
    parser.add_argument("--calls", type=int, default=5_000, help="direct on_train_batch_end calls per repeat")
    parser.add_argument("--split-repeats", type=int, default=7, help="repeats of the direct calls (median)")
    args = parser.parse_args()

    service, address = start_service()
    dead_socket = socket.socket()
    dead_socket.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    dead = f"127.0.0.1:{dead_socket.getsockname()[1]}"
    try:
        model, dataset = build_model(args.steps)
        live_cb = MetricsCallback(endpoint=address, job_id="bench-live", token=TOKEN, batch_size=BATCH)
        dead_cb = MetricsCallback(endpoint=dead, job_id="bench-dead", token=TOKEN, batch_size=BATCH)
        configs: dict[str, list[Any]] = {
            "none": [],
            "empty": [EmptyBatchCallback()],
            "live": [live_cb],
            "dead": [dead_cb],
        }
        wall: dict[str, list[float]] = {name: [] for name in configs}
        cpu: dict[str, list[float]] = {name: [] for name in configs}
        order = list(configs)
        rng = random.Random(0)
        for _ in range(args.rounds):
            rng.shuffle(order)
            for name in order:
                w, c = run(model, dataset, configs[name], args.steps)
                wall[name].append(w)
                cpu[name].append(c)
        live_stats = live_cb.close(timeout=10)
        dead_stats = dead_cb.close(timeout=0.5)
        received = points_received(address, "bench-live")

        splits = [split_cost(model, address, args.calls) for _ in range(args.split_repeats)]
        per_call = statistics.median(s[0] for s in splits)
        sender_per_point = statistics.median(s[1] for s in splits)
        split_acked = sum(s[2] for s in splits)
    finally:
        dead_socket.close()
        service.terminate()
        service.wait(10)

    median = {name: statistics.median(v) for name, v in wall.items()}
    # ratios within a round (runs minutes apart would see different machine load); median over rounds
    per_round = {k: [w / n for w, n in zip(wall[k], wall["none"], strict=True)] for k in ("empty", "live", "dead")}
    round_ratio = {k: statistics.median(v) for k, v in per_round.items()}
    quartiles = {k: statistics.quantiles(v, n=4) for k, v in per_round.items()}
    cpu_median = {name: statistics.median(v) for name, v in cpu.items()}
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "keras": tf.keras.__version__ if hasattr(tf.keras, "__version__") else "",
        },
        "setup": {
            "rounds": args.rounds,
            "steps_per_fit": args.steps,
            "batch": BATCH,
            "model": "Dense 32-64-64-1, SGD, MSE; tf.data cached",
            "service": "submarine metrics serve in its own process, loopback",
        },
        "step_seconds_median": {k: round(v, 7) for k, v in median.items()},
        "step_seconds_samples": {k: [round(s, 7) for s in v] for k, v in wall.items()},
        "cpu_seconds_per_step_median": {k: round(v, 7) for k, v in cpu_median.items()},
        "ratio_of_medians_to_none": {k: round(median[k] / median["none"], 4) for k in ("empty", "live", "dead")},
        "median_per_round_ratio_to_none": {k: round(v, 4) for k, v in round_ratio.items()},
        "per_round_ratio_quartiles": {k: [round(q, 4) for q in v] for k, v in quartiles.items()},
        "none_round_to_round_spread": round(max(wall["none"]) / min(wall["none"]), 4),
        "cpu_ratio_to_none": {k: round(cpu_median[k] / cpu_median["none"], 4) for k in ("empty", "live", "dead")},
        "training_thread_seconds_per_step": round(per_call, 9),
        "sender_cpu_seconds_per_point": round(sender_per_point, 9),
        "split_points_acked": split_acked,
        "split_samples": [[round(x, 9) for x in s[:2]] for s in splits],
        "share_of_median_step": {
            "training_thread": round(per_call / median["none"], 5),
            "sender_cpu": round(sender_per_point / median["none"], 5),
        },
        "live": {
            "steps_reported": live_stats.recorded,
            "acked": live_stats.acked,
            "dropped": live_stats.dropped,
            "received_by_service": received,
        },
        "dead": {"steps_reported": dead_stats.recorded, "dropped": dead_stats.dropped},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hook_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = [
        f"| {name} | {median[name] * 1e3:.3f} | {round_ratio.get(name, 1.0):.3f} "
        f"| {cpu_median[name] * 1e3:.3f} | {cpu_median[name] / cpu_median['none']:.3f} |"
        for name in ("none", "empty", "live", "dead")
    ]
    md = "\n".join(
        [
            "# MetricsCallback overhead",
            "",
            f"{result['machine']['cpus']} CPUs, TensorFlow {tf.__version__} (tf.keras), Python "
            f"{platform.python_version()}; {args.rounds} interleaved rounds of {args.steps} steps per configuration, "
            f"batch {BATCH}, {result['setup']['model']}. The live service runs in its own process.",
            "",
            "| callback | median step ms | step time ratio (median of per-round ratios) "
            "| CPU ms/step (process) | CPU ratio |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Per-round ratio quartiles (how much the shared machine moves a paired comparison): "
            + ", ".join(f"{k} {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f}" for k, q in quartiles.items())
            + f"; the slowest `none` round took {max(wall['none']) / min(wall['none']):.2f}x the fastest.",
            "",
            f"The two halves apart (median of {args.split_repeats} repeats of {args.calls} calls): "
            "`on_train_batch_end` costs the training thread "
            f"{per_call * 1e6:.1f} µs per step ({100 * per_call / median['none']:.2f}% of a median step); "
            f"the sender then spends {sender_per_point * 1e6:.1f} µs of CPU per point to build, serialize and "
            f"stream them ({100 * sender_per_point / median['none']:.2f}%), on another thread ({split_acked} "
            "acknowledged).",
            "",
            f"Live runs: {live_stats.recorded} steps reported, {live_stats.acked} acknowledged, "
            f"{live_stats.dropped} dropped; the service holds {received}. "
            f"Dead runs: {dead_stats.recorded} steps reported, all dropped by the bounded queue.",
            "",
        ]
    )
    (RESULTS / "hook_overhead.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
