"""The controller's decision latency: a metrics window closed -> the flex call for a decision sent.

50 synthetic jobs stream step points into the metrics store (as the gRPC service would hold them); each
round closes a metrics window and runs one controller round (``ControllerService.tick``): read every
job's size and metrics, build the snapshot, run the policy engine, record each decision in SQLite,
and send the flex call. Every round one job leaves and one arrives to a full cluster, so the arbiter
resizes several jobs. The job backend answers at once, so what is measured is the controller's own work.

Prints median and p99 over every decision and over rounds, and writes
``benchmarks/results/controller.json`` and ``controller.md``.

Run: ``.venv/bin/python benchmarks/bench_controller.py [--jobs 50] [--rounds 100]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from submarine_elastic.controller.api import ClusterApp, JobBackend, JobFootprint, NodeResources
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.elastic.proto import elastic_pb2 as pb
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy

RESULTS = Path(__file__).resolve().parent / "results"


class InstantCluster(JobBackend):
    """The controller is given its capacity in slots (``--capacity``), so nodes and footprints are not read."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.sent: list[float] = []

    def nodes(self) -> list[NodeResources] | None:
        return None

    def footprint(self, job_id: str) -> JobFootprint | None:
        return None

    def ring_size(self, job_id: str) -> int | None:
        return self.sizes.get(job_id)

    def set_target(self, job_id: str, target: pb.Target) -> None:
        workers = target.workers
        self.sent.append(time.perf_counter())
        self.sizes[job_id] = workers

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return None


def report(store: InMemoryStore, job: str, size: int, seq: int, step: int) -> None:
    for rank in range(size):
        store.ingest(
            metrics_pb2.ReportBatch(
                job_id=job,
                worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                incarnation="i1",
                world_size=size,
                points=[
                    metrics_pb2.StepPoint(
                        seq=seq,
                        step=step,
                        loss=1.0 / (1 + step),
                        examples_per_second=100.0,
                        step_time_seconds=0.1,
                        batch_size=32,
                        wall_time=time.time(),
                    )
                ],
            )
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()

    cluster = InstantCluster()
    metrics = InMemoryStore()
    with tempfile.TemporaryDirectory() as tmp:
        service = ControllerService(
            ControllerStore(Path(tmp) / "c.db"),
            PolicyEngine(load_job_policy("greedy"), load_arbiter("fair-share"), cooldown_s=0),
            cluster,
            metrics=metrics,
            interval=3600,
            capacity=3 * args.jobs,
        )
        for i in range(args.jobs):
            job = f"job-{i:03d}"
            service.job_submitted(job, 1, 8, 2)
            cluster.sizes[job] = 2
        per_decision: list[float] = []
        per_round: list[float] = []
        decisions = 0
        next_id = args.jobs
        for r in range(args.rounds):
            for job, size in list(cluster.sizes.items()):
                report(metrics, job, size, seq=r + 1, step=r)
            # One job leaves and one arrives to a full cluster: the arbiter reshuffles the others.
            leaving = next(iter(cluster.sizes))
            service.job_finished(leaving)
            del cluster.sizes[leaving]
            arriving = f"job-{next_id:03d}"
            next_id += 1
            service.job_submitted(arriving, 2, 8, 4)
            cluster.sent.clear()
            window_closed = time.perf_counter()
            recorded = service.tick()
            service.wait_idle(30)
            per_round.append(time.perf_counter() - window_closed)
            per_decision += [t - window_closed for t in cluster.sent]
            decisions += len(recorded)
            cluster.sizes.setdefault(arriving, 4)
        service.store.close()

    results = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        "decisions": decisions,
        "decision_latency_ms": {
            "median": round(statistics.median(per_decision) * 1e3, 2),
            "p99": round(percentile(per_decision, 0.99) * 1e3, 2),
        },
        "round_ms": {
            "median": round(statistics.median(per_round) * 1e3, 2),
            "p99": round(percentile(per_round, 0.99) * 1e3, 2),
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "controller.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Controller decision latency",
        "",
        f"{args.jobs} jobs streaming step points, {args.rounds} rounds (one departure and one arrival each), "
        f"{decisions} decisions (greedy + fair-share); job backend answers at once. Target: p99 under 100 ms.",
        "",
        "| what | median ms | p99 ms |",
        "|---|---|---|",
        f"| window closed -> flex call sent (per decision) | {results['decision_latency_ms']['median']} | "
        f"{results['decision_latency_ms']['p99']} |",
        f"| whole round (decide, record, apply) | {results['round_ms']['median']} | {results['round_ms']['p99']} |",
    ]
    (RESULTS / "controller.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
