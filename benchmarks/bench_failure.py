"""What a killed worker costs an elastic job: the pause of the survivors and the steps redone.

An elastic job with 2 workers runs ``examples/train_elastic.py`` on its own pseudo-cluster; worker-1's
training process is killed with SIGKILL ``--kills`` times (each time after YARN relaunched it and it
rejoined). From the step log (time each committed step ended, ring size):
- pause: the last step completed before the kill -> the first step completed by the shrunken ring;
- rejoin: the kill -> the first step of the ring at 2 again (YARN relaunch, warm-up, re-form).

Writes ``benchmarks/results/failure.json`` and ``failure.md``.
Run: ``.venv/bin/python benchmarks/bench_failure.py [--kills 3]``
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
from submarine_elastic.elastic.api import Limits
from submarine_elastic.elastic.client import JobClient, submit
from submarine_elastic.elastic.jobspec import JobRequest, WorkerResources
from submarine_elastic.yarn import YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
COMMIT_EVERY = 4


def training_pids(instance: str) -> list[int]:
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
        ):
            pids.append(int(proc.name))
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--port-base", type=int, default=20700)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-failure-"))
    print(f"working in {root}", flush=True)
    cluster = LocalCluster(root / "cluster")
    rm_url = cluster.up(ClusterSpec(nodes=2, port_base=args.port_base))
    kills: list[float] = []
    log = root / "log"
    try:
        cmd = (
            f"{sys.executable} {REPO}/examples/train_elastic.py --samples 2048 --epochs 10000 --step-sleep 0.02 "
            f"--commit-every {COMMIT_EVERY} --until-file {root}/stop --log-dir {log}"
        )
        req = JobRequest(
            name="bench-failure",
            launch_cmd=cmd,
            limits=Limits(2, 1, 2),
            resources=WorkerResources(1024, 1),
            rm_url=rm_url,
            workdir=REPO,
        )
        with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
            submit(yarn, req, replace=True)
            try:
                with JobClient(req.name, yarn, locate_timeout=120) as job:
                    job.wait_for_size(2, timeout=300)
                    for i in range(args.kills):
                        time.sleep(4)
                        kills.append(time.time())
                        for pid in training_pids("worker-1"):
                            os.kill(pid, signal.SIGKILL)
                        deadline = time.monotonic() + 60
                        while job.status().world_size != 1 and time.monotonic() < deadline:
                            time.sleep(0.1)
                        job.wait_for_size(2, timeout=300)
                        print(f"  kill {i + 1}/{args.kills}: rejoined", flush=True)
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
    pauses, rejoins = [], []
    for t in kills:
        before = max((s for s, _, _ in steps if s < t), default=None)
        first_small = next((s for s, size, _ in steps if s > t and size == 1), None)
        back = next((s for s, size, _ in steps if s > t and size == 2), None)
        if before is not None and first_small is not None:
            pauses.append(first_small - before)
        if back is not None:
            rejoins.append(back - t)
    results = {
        "kills": len(kills),
        "commit_every": COMMIT_EVERY,
        "pause_s": {
            "median": round(statistics.median(pauses), 3),
            "max": round(max(pauses), 3),
            "samples": [round(p, 3) for p in pauses],
        },
        "kill_to_rejoined_s": {
            "median": round(statistics.median(rejoins), 3),
            "samples": [round(r, 3) for r in rejoins],
        },
        "steps_lost_at_most": COMMIT_EVERY,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "failure.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# A killed worker",
        "",
        f"Elastic job of 2 workers on the pseudo-cluster, worker-1's process SIGKILLed {len(kills)} times; "
        f"commit every {COMMIT_EVERY} steps; HOROVOD_GLOO_TIMEOUT_SECONDS=20. Target: pause under 6 s.",
        "",
        "| what | median s | max s |",
        "|---|---|---|",
        f"| pause: last step before the kill -> first step of the ring without it | {results['pause_s']['median']} | "
        f"{results['pause_s']['max']} |",
        f"| kill -> ring back at 2 (YARN relaunch, warm-up, re-form) | {results['kill_to_rejoined_s']['median']} | "
        f"{max(rejoins):.3f} |",
        "",
        f"Steps lost per kill: at most the {COMMIT_EVERY} since the last commit (they are redone; the exactly-once "
        "check in tests/integration/test_elastic_job.py covers it).",
    ]
    (RESULTS / "failure.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
