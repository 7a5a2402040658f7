"""What a killed worker costs an elastic job, by the rank it held: the survivors' pause and the rejoin.

An elastic job with 3 workers runs ``examples/train_elastic.py`` on its own pseudo-cluster. The training
process holding rank 0 and one holding a non-zero rank are killed with SIGKILL in turn, ``--kills``
times each (each time after YARN relaunched the last one and it rejoined). From the step log (time each
committed step ended, ring size):
- pause: the last step completed before the kill -> the first step completed after it (by the shrunken
  ring, or by the full one when the survivors stalled until the relaunched worker was back);
- rejoin: the kill -> the first step of the ring at 3 again (YARN relaunch, warm-up, re-form).
Rank 0 is Horovod's coordinator; the two rows side by side show whether losing it costs more.

Writes ``benchmarks/results/failure.json`` and ``failure.md``.
Run: ``.venv/bin/python benchmarks/bench_failure.py [--kills 4]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_elastic import step_times

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.protocol.api import Limits, WorkerState
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources
from submarine_elastic.submit.service import submit
from submarine_elastic.yarn import YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
COMMIT_EVERY = 4
WORKERS = 3
STALL_S = 10.0


def training_pids(job: str, instance: str) -> list[int]:
    """Training processes of ``instance`` of ``job`` (never another job's workers of that instance name)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if (
            any(p.endswith(b"train_elastic.py") for p in cmd)
            and f"SUBMARINE_WORKER_INSTANCE={instance}\0".encode() in environ
            and f"SUBMARINE_JOB_ID={job}\0".encode() in environ
        ):
            pids.append(int(proc.name))
    return pids


def instance_of_rank(job: JobClient, rank: int) -> str:
    for worker in job.status().workers:
        if worker.rank == rank and worker.state == WorkerState.RUNNING.wire:
            return worker.instance
    raise RuntimeError(f"no running worker holds rank {rank}")


def measure(steps: list[tuple[float, int, int]], killed_at: float) -> tuple[float | None, float | None]:
    """(pause, rejoin) of one kill: the last step before it -> the first step after it, at whatever size
    (a ring stalled long enough comes back at full size, with the relaunched worker); the kill -> the
    first step at full size after the ring went on without the killed worker."""
    before = max((s for s, _, _ in steps if s < killed_at), default=None)
    resumed = next((s for s, _, _ in steps if s > killed_at), None)
    pause = resumed - before if before is not None and resumed is not None else None
    back = next((s for s, size, _ in steps if s > killed_at and size == WORKERS), None)
    return pause, (back - killed_at if back is not None else None)


def summary(values: list[float]) -> dict[str, object]:
    return {
        "median": round(statistics.median(values), 3) if values else None,
        "max": round(max(values), 3) if values else None,
        "samples": [round(v, 3) for v in values],
        "stalls_over_10s": sum(v > STALL_S for v in values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=4, help="kills per rank kind (rank 0, another rank)")
    parser.add_argument("--port-base", type=int, default=20700)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-failure-"))
    print(f"working in {root}", flush=True)
    cluster = LocalCluster(root / "cluster")
    rm_url = cluster.up(ClusterSpec(nodes=2, port_base=args.port_base))
    kills: list[tuple[float, int]] = []
    log = root / "log"
    try:
        cmd = (
            f"{sys.executable} {REPO}/examples/train_elastic.py --samples 2048 --epochs 10000 --step-sleep 0.02 "
            f"--commit-every {COMMIT_EVERY} --until-file {root}/stop --log-dir {log}"
        )
        req = JobRequest(
            name="bench-failure",
            launch_cmd=cmd,
            limits=Limits(WORKERS, 1, WORKERS),
            resources=WorkerResources(1024, 1),
            rm_url=rm_url,
            workdir=REPO,
        )
        with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
            submit(yarn, req, replace=True)
            try:
                with JobClient(req.name, yarn, locate_timeout=120) as job:
                    job.wait_for_size(WORKERS, timeout=300)
                    for i in range(2 * args.kills):
                        rank = 0 if i % 2 == 0 else WORKERS - 1 - (i // 2) % (WORKERS - 1)
                        time.sleep(4)
                        instance = instance_of_rank(job, rank)
                        kills.append((time.time(), rank))
                        for pid in training_pids(req.name, instance):
                            os.kill(pid, signal.SIGKILL)
                        deadline = time.monotonic() + 60
                        while job.status().world_size == WORKERS and time.monotonic() < deadline:
                            time.sleep(0.1)
                        job.wait_for_size(WORKERS, timeout=300)
                        print(f"  kill {i + 1}/{2 * args.kills} (rank {rank}, {instance}): rejoined", flush=True)
                    time.sleep(3)
                (root / "stop").touch()
                deadline = time.monotonic() + 300
                while not yarn.status(req.name).is_terminal and time.monotonic() < deadline:
                    time.sleep(1)
            finally:
                yarn.destroy(req.name, missing_ok=True)
    finally:
        cluster.down()

    steps = step_times(log)
    rows: dict[str, dict[str, list[float]]] = {kind: {"pause": [], "rejoin": []} for kind in ("rank 0", "other rank")}
    for killed_at, rank in kills:
        pause, rejoin = measure(steps, killed_at)
        row = rows["rank 0" if rank == 0 else "other rank"]
        if pause is not None:
            row["pause"].append(pause)
        if rejoin is not None:
            row["rejoin"].append(rejoin)
    results = {
        "workers": WORKERS,
        "kills_per_kind": args.kills,
        "commit_every": COMMIT_EVERY,
        "gloo_timeout_s": 20,
        "by_rank": {kind: {k: summary(v) for k, v in row.items()} for kind, row in rows.items()},
        "kills": [{"time": t, "rank": rank} for t, rank in kills],
        "steps_lost_at_most": COMMIT_EVERY,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "failure.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# A killed worker, by the rank it held",
        "",
        f"Elastic job of {WORKERS} workers on the pseudo-cluster; the process holding rank 0 and one holding another "
        f"rank SIGKILLed in turn, {args.kills} times each; commit every {COMMIT_EVERY} steps; "
        "HOROVOD_GLOO_TIMEOUT_SECONDS=20.",
        "",
        "| killed | pause median s | pause max s | pauses over 10 s | kill -> ring back at 3, median s |",
        "|---|---|---|---|---|",
    ]
    for kind in rows:
        r = results["by_rank"][kind]  # type: ignore[index]
        lines.append(
            f"| {kind} | {r['pause']['median']} | {r['pause']['max']} | {r['pause']['stalls_over_10s']} of "
            f"{len(r['pause']['samples'])} | {r['rejoin']['median']} |"
        )
    lines += [
        "",
        f"Steps lost per kill: at most the {COMMIT_EVERY} since the last commit (they are redone; the exactly-once "
        "check in tests/integration/test_elastic_job.py covers it).",
    ]
    (RESULTS / "failure.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
