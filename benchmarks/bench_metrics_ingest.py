"""How many points per second the metrics service takes in, and how soon a Watch consumer sees one.

- Ingest: ``--clients`` processes (8 by default) each stream ``--batches`` pre-serialized batches of
  ``--points`` points (one worker key per client) to ``submarine metrics serve`` running in its
  own process; the rate is the points the service acknowledged divided by the time from the common
  start to the last acknowledgement. Once with the steps as ``points`` (a StepPoint each) and once
  as ``columns`` (a StepColumns per batch, what ``tf_hooks`` sends), side by side.
- Latency: a probe sends one single-point batch every 10 ms, its ``wall_time`` set just before
  sending; a ``Watch`` consumer notes when each arrives. Measured once with the service idle and
  once while the ingest clients stream ``columns`` (a second pass, sized from the measured columns
  rate to last about ``--load-seconds``). Median and p99.
- Transport: the service serves mutual TLS, as ``submarine metrics serve`` does by default; the
  ``columns`` pass and the idle latency are measured once more against a plaintext service
  (``--insecure``) in the same run, and the ratio printed.

Everything runs on this machine (clients, service, consumer share its CPUs). Writes
``benchmarks/results/metrics_ingest.json`` and ``metrics_ingest.md``.

Run: ``.venv/bin/python benchmarks/bench_metrics_ingest.py [--clients 8] [--batches 40] [--points 500]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from _metrics_service import Transport, start_metrics_service

from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN = "bench-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


#: (label, encoding, a Watch on every job open meanwhile)
PASSES = (("points", "points", False), ("columns", "columns", False), ("columns_watched", "columns", True))


def batches(client: int, count: int, points: int, encoding: str) -> list[bytes]:
    """``count`` batches of ``points`` steps each, as ``points`` (a StepPoint per step) or as
    ``columns`` (one StepColumns per batch, what the training-side sender writes)."""
    out = []
    for k in range(count):
        batch = metrics_pb2.ReportBatch(
            job_id=f"ingest-{client}",
            worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
            incarnation="bench",
            world_size=8,
        )
        seqs = range(k * points + 1, (k + 1) * points + 1)
        if encoding == "columns":
            columns = batch.columns
            columns.seq.extend(seqs)
            columns.step.extend(seqs)
            columns.loss.extend(1.0 / seq for seq in seqs)
            columns.examples_per_second.extend([512.0] * points)
            columns.step_time_seconds.extend([0.0625] * points)
            columns.batch_size.extend([32] * points)
            columns.learning_rate.extend([0.01] * points)
            columns.wall_time.extend(1.7e9 + seq for seq in seqs)
        else:
            for seq in seqs:
                batch.points.add(
                    seq=seq,
                    step=seq,
                    loss=1.0 / seq,
                    examples_per_second=512.0,
                    step_time_seconds=0.0625,
                    batch_size=32,
                    learning_rate=0.01,
                    wall_time=1.7e9 + seq,
                )
        out.append(batch.SerializeToString())
    return out


def ingest_client(
    address: str,
    transport: Transport,
    client: int,
    count: int,
    points: int,
    encoding: str,
    start: mp.Event,
    done: mp.Queue,
) -> None:
    payload = batches(client, count, points, encoding)
    with transport.channel(address) as channel:
        report = channel.stream_unary(
            "/submarine.metrics.v1.MetricsService/Report",
            request_serializer=lambda b: b,
            response_deserializer=metrics_pb2.ReportAck.FromString,
        )
        grpc.channel_ready_future(channel).result(timeout=30)
        start.wait()
        ack = report(iter(payload), metadata=AUTH, timeout=300)
    done.put((ack.accepted, time.time()))


class WatchAll:
    """A ``Watch`` on every job, counting the points it is sent (what a policy engine watching the
    whole cluster costs the service)."""

    def __init__(self, address: str, transport: Transport) -> None:
        self.points = 0
        self.dropped = 0
        self._channel = transport.channel(address)
        stub = metrics_pb2_grpc.MetricsServiceStub(self._channel)
        self._stream = stub.Watch(metrics_pb2.WatchRequest(), metadata=AUTH)
        self._reader = threading.Thread(target=self._consume, daemon=True)
        self._reader.start()

    def _consume(self) -> None:
        try:
            for event in self._stream:
                self.points += len(event.points)
                self.dropped = max(self.dropped, event.events_dropped)
        except grpc.RpcError:
            pass  # cancelled at the end

    def close(self) -> None:
        self._stream.cancel()
        self._reader.join(10)
        self._channel.close()


def measure_latency(
    address: str,
    transport: Transport,
    seconds: float,
    subscribed: Callable[[], None] = lambda: None,
    until: Callable[[], bool] = bool,
) -> list[float]:
    """Seconds from just before sending a point to its arrival at a Watch consumer.

    Calls ``subscribed`` once the Watch is in place, then probes for ``seconds`` or until ``until()``.
    """
    arrivals: dict[int, float] = {}
    with transport.channel(address) as channel:
        stub = metrics_pb2_grpc.MetricsServiceStub(channel)
        stream = stub.Watch(metrics_pb2.WatchRequest(job_id="latency-probe"), metadata=AUTH)
        sent: dict[int, float] = {}

        def consume() -> None:
            try:
                for event in stream:
                    now = time.time()
                    for p in event.points:
                        arrivals[p.point.seq] = now
            except grpc.RpcError:
                pass  # cancelled at the end

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        time.sleep(0.5)  # let the Watch subscribe
        subscribed()
        seq = 0
        incarnation = f"probe-{time.time_ns()}"  # a fresh seq space per measurement
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            seq += 1
            sent[seq] = time.time()
            batch = metrics_pb2.ReportBatch(
                job_id="latency-probe",
                worker=metrics_pb2.WorkerRef(instance="probe", rank=0),
                incarnation=incarnation,
                world_size=1,
                points=[metrics_pb2.StepPoint(seq=seq, step=seq, wall_time=sent[seq])],
            )
            stub.Report(iter([batch]), metadata=AUTH, timeout=10)
            time.sleep(0.01)
        time.sleep(1.0)
        stream.cancel()
    missing = len(sent) - len(arrivals)
    if missing:
        print(f"  {missing} of {len(sent)} probe points never reached the watcher", file=sys.stderr)
    return [arrivals[s] - sent[s] for s in sent if s in arrivals]


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batches", type=int, default=40, help="batches per client")
    parser.add_argument("--points", type=int, default=500, help="points per batch")
    parser.add_argument("--idle-latency-seconds", type=float, default=3.0)
    parser.add_argument("--load-seconds", type=float, default=10.0, help="how long the latency-under-load pass lasts")
    args = parser.parse_args()

    ctx = mp.get_context("spawn")

    def ingest(
        address: str, transport: Transport, first_client: int, encoding: str, watcher: Callable[[], WatchAll | None]
    ) -> tuple[dict[str, float], WatchAll | None]:
        """One pass of the clients; the points accepted, the seconds, the rate, and the watcher if any."""
        start, done = ctx.Event(), ctx.Queue()
        clients = [
            ctx.Process(
                target=ingest_client,
                args=(address, transport, first_client + i, args.batches, args.points, encoding, start, done),
            )
            for i in range(args.clients)
        ]
        for c in clients:
            c.start()
        watching = watcher()
        time.sleep(3.0 + 0.5 * args.clients)  # clients import, build their batches, connect
        began = time.time()
        start.set()
        results = [done.get(timeout=600) for _ in clients]
        for c in clients:
            c.join()
        accepted = sum(a for a, _ in results)
        elapsed = max(t for _, t in results) - began
        return {"accepted": accepted, "seconds": elapsed, "rate": accepted / elapsed}, watching

    plain_service, plain_address, plain = start_metrics_service(TOKEN, tls=False)
    try:
        plain_idle = measure_latency(plain_address, plain, args.idle_latency_seconds)
        plain_columns, _ = ingest(plain_address, plain, 1000, "columns", lambda: None)
    finally:
        plain_service.terminate()
        plain_service.wait(10)

    service, address, transport = start_metrics_service(TOKEN)
    try:
        idle = measure_latency(address, transport, args.idle_latency_seconds)

        rates: dict[str, dict[str, float]] = {}
        watched: dict[str, int] = {}
        for n, (label, encoding, watch) in enumerate(PASSES):
            rates[label], watcher = ingest(
                address, transport, 10 * n, encoding, lambda w=watch: WatchAll(address, transport) if w else None
            )
            if watcher is not None:
                watched["at_last_ack"] = watcher.points
                time.sleep(2.0)  # let the watcher catch up before counting what it got
                watcher.close()
                watched["in_all"] = watcher.points
                watched["events_dropped"] = watcher.dropped
        # latency under load: a second, longer pass of the same clients, probed meanwhile
        load_batches = max(
            args.batches, round(args.load_seconds * rates["columns"]["rate"] / (args.clients * args.points))
        )
        start2, done2 = ctx.Event(), ctx.Queue()
        again = [
            ctx.Process(
                target=ingest_client,
                args=(address, transport, 100 + i, load_batches, args.points, "columns", start2, done2),
            )
            for i in range(args.clients)
        ]
        for c in again:
            c.start()
        time.sleep(3.0 + 0.5 * args.clients)
        finished: list[object] = []

        def load_over() -> bool:
            while not done2.empty():
                finished.append(done2.get())
            return len(finished) == len(again)

        loaded = measure_latency(address, transport, 600.0, subscribed=start2.set, until=load_over)
        while len(finished) < len(again):
            finished.append(done2.get(timeout=600))
        for c in again:
            c.join()
    finally:
        service.terminate()
        service.wait(10)

    expected = args.clients * args.batches * args.points
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "grpcio": grpc.__version__},
        "setup": {
            "clients": args.clients,
            "batches_per_client": args.batches,
            "points_per_batch": args.points,
            "load_pass_batches_per_client": load_batches,
            "service": "submarine metrics serve in its own process, loopback, mutual TLS, token checked",
        },
        "ingest": {
            encoding: {
                "points_accepted": r["accepted"],
                "points_sent": expected,
                "seconds": round(r["seconds"], 3),
                "points_per_second": round(r["rate"]),
            }
            for encoding, r in rates.items()
        },
        "watch_all_points_seen": watched,
        "transport": {
            "columns_points_per_second": {
                "mutual TLS": round(rates["columns"]["rate"]),
                "plaintext": round(plain_columns["rate"]),
            },
            "mutual_tls_over_plaintext_columns_rate": rates["columns"]["rate"] / plain_columns["rate"],
            "idle_watch_latency_median_seconds": {
                "mutual TLS": round(statistics.median(idle), 5),
                "plaintext": round(statistics.median(plain_idle), 5),
            },
        },
        "columns_rate_over_points_rate": rates["columns"]["rate"] / rates["points"]["rate"],
        "watch_latency_seconds": {
            "idle": {"median": round(statistics.median(idle), 5), "p99": round(quantile(idle, 0.99), 5)},
            "under_ingest_load": {
                "median": round(statistics.median(loaded), 5),
                "p99": round(quantile(loaded, 0.99), 5),
            },
            "samples": {"idle": len(idle), "under_ingest_load": len(loaded)},
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "metrics_ingest.json").write_text(json.dumps(result, indent=2) + "\n")
    lat = result["watch_latency_seconds"]
    md = "\n".join(
        [
            "# Metrics service ingest and Watch latency",
            "",
            f"{os.cpu_count()} CPUs shared by the service, {args.clients} client processes and the Watch consumer; "
            f"grpcio {grpc.__version__}, Python {platform.python_version()}.",
            "",
            f"Ingest: {args.clients} clients × {args.batches} batches × {args.points} points each way, over mutual "
            "TLS (the default of `submarine metrics serve`):",
            "",
            "| batches carry | points accepted | seconds | points/s |",
            "|---|---|---|---|",
            *(
                f"| {encoding} | {r['accepted']} of {expected} | {r['seconds']:.2f} | **{r['rate']:,.0f}** |"
                for encoding, r in rates.items()
            ),
            "",
            f"columns_watched: columns while a Watch on every job is open; it saw {watched['at_last_ack']} points "
            f"by the last ack, {watched['in_all']} in all ({watched['events_dropped']} events dropped).",
            "",
            f"columns / points: {result['columns_rate_over_points_rate']:.2f} (the service keeps columns as NumPy "
            "arrays; a point batch costs it a message per step to parse and check).",
            "",
            "Mutual TLS against plaintext (`--insecure`), the same run:",
            "",
            "| transport | columns points/s | idle Watch latency median ms |",
            "|---|---|---|",
            f"| mutual TLS | {rates['columns']['rate']:,.0f} | {statistics.median(idle) * 1e3:.2f} |",
            f"| plaintext | {plain_columns['rate']:,.0f} | {statistics.median(plain_idle) * 1e3:.2f} |",
            "",
            f"mutual TLS / plaintext ingest rate: {result['transport']['mutual_tls_over_plaintext_columns_rate']:.2f}",
            "",
            f"Watch latency under load: while the {args.clients} clients stream {load_batches} column batches each.",
            "",
            "| Watch latency (send → consumer) | median ms | p99 ms | samples |",
            "|---|---|---|---|",
            f"| service idle | {lat['idle']['median'] * 1e3:.2f} | {lat['idle']['p99'] * 1e3:.2f} | {len(idle)} |",
            f"| during ingest load | {lat['under_ingest_load']['median'] * 1e3:.2f} "
            f"| {lat['under_ingest_load']['p99'] * 1e3:.2f} | {len(loaded)} |",
            "",
        ]
    )
    (RESULTS / "metrics_ingest.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
