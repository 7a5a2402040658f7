"""Queues in the simulator: the controller's per-queue arbitration on a contended Pollux workload.

100 jobs of ``workload-1`` (imagenet left out: days on one GPU; drawn with seed 0, arrivals 5x denser), every other
one submitted to ``research``, the rest to ``prod``, on 16x4 GPUs with queues ``prod:60,research:40:50``, beside the
same run with the cluster as one pool. Target: research never holds more than its maximum, 32 GPUs, at any
time; every job finishes. Reported: each queue's peak GPUs, mean JCT per queue and overall, utilisation.

Writes ``benchmarks/results/sim_queues.json`` and ``sim_queues.md``.

Run: ``.venv/bin/python benchmarks/bench_sim_queues.py``
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from submarine_elastic import env
from submarine_elastic.cluster.queues import parse_queues
from submarine_elastic.policy import QueueShare
from submarine_elastic.sim import ClusterConfig, JobSpec, SimResult, load_scheduler, load_workload, simulate
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals

RESULTS = Path(__file__).resolve().parent / "results"
CLUSTER = ClusterConfig(16, 4)
QUEUES = "prod:60,research:40:50"
SCHEDULERS = ("greedy+fair-share", "goodput+goodput")


def jobs() -> list[JobSpec]:
    """The workload: see the module docstring."""
    every = [
        j
        for j in load_workload(env.settings().pollux_data_directory() / "workloads" / "workload-1.csv")
        if j.application != "imagenet"
    ]
    picked = scale_arrivals(sample_jobs(every, 100, seed=0), 0.2)
    return [replace(j, queue="research" if i % 2 == 0 else "prod") for i, j in enumerate(picked)]


def measure(result: SimResult, workload: list[JobSpec]) -> dict[str, Any]:
    """Each queue's peak GPUs over the run and mean JCT (hours), and the run's totals."""
    queue_of = {j.name: j.queue for j in workload}
    held: dict[str, int] = {}
    peak = {"prod": 0, "research": 0}
    for change in result.allocations:
        held[change.job] = change.workers
        for queue in peak:
            peak[queue] = max(peak[queue], sum(n for job, n in held.items() if queue_of[job] == queue))
    jct = {q: [r.jct_s for r in result.jobs if queue_of[r.name] == q and r.jct_s is not None] for q in peak}
    s = result.summary
    return {
        "finished": s.finished,
        "jobs": s.jobs,
        "peak_gpus": peak,
        "mean_jct_h": round(s.mean_jct_s / 3600, 3),
        "mean_jct_h_by_queue": {q: round(statistics.mean(v) / 3600, 3) for q, v in jct.items() if v},
        "utilisation": round(s.mean_utilisation, 3),
        "wall_s": round(s.wall_s, 1),
    }


def main() -> None:
    logging.getLogger("submarine_elastic.policy").setLevel(logging.ERROR)
    specs = parse_queues(QUEUES)
    shares = tuple(QueueShare(q.name, q.capacity / 100, q.max_capacity / 100) for q in specs)
    maximum = {q.name: CLUSTER.total_gpus * q.max_capacity // 100 for q in specs}
    workload = jobs()
    rows: dict[str, dict[str, Any]] = {}
    for spec in SCHEDULERS:
        for label, queues in (("one pool", ()), (QUEUES, shares)):
            rows[f"{spec}, {label}"] = measure(
                simulate(workload, CLUSTER, load_scheduler(spec, queues=queues)), workload
            )
    met = all(
        row["finished"] == row["jobs"] and all(row["peak_gpus"][q] <= maximum[q] for q in maximum)
        for key, row in rows.items()
        if key.endswith(QUEUES)
    )
    report = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cluster": str(CLUSTER), "queues": QUEUES}
    report |= {"maximum_gpus": maximum, "target_met": met, "runs": rows}
    (RESULTS / "sim_queues.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Queues in the simulator",
        "",
        f"`benchmarks/bench_sim_queues.py`, {report['time']}: 100 jobs of workload-1 (no imagenet, seed 0,",
        f"arrivals x0.2), every other one in research, on {CLUSTER} GPUs; queues `{QUEUES}` (research at",
        f"most {maximum['research']} GPUs) beside one pool. Target (research never over its maximum, every",
        f"job finishes): {'met' if met else 'NOT met'}.",
        "",
        "| scheduler, queues | finished | peak GPUs prod / research | mean JCT h (prod / research) "
        "| utilisation | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in rows.items():
        by = row["mean_jct_h_by_queue"]
        peak = row["peak_gpus"]
        lines.append(
            f"| {key} | {row['finished']}/{row['jobs']} | {peak['prod']} / {peak['research']} "
            f"| {row['mean_jct_h']} ({by.get('prod')} / {by.get('research')}) "
            f"| {row['utilisation']} | {row['wall_s']} |"
        )
    (RESULTS / "sim_queues.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not met:
        raise SystemExit("target not met")


if __name__ == "__main__":
    main()
