"""Resize pauses of an elastic job on the pseudo-cluster, side by side with stock ``horovodrun``.

Both run the same script (``examples/train_elastic.py``, fixed global batch) through the same resize
plan, 1 -> 2 -> 3 -> 2 -> 1, ``--rounds`` times:

- submarine-elastic: ``submarine job run --elastic`` on the pseudo-cluster, resized by the job's
  driver (what ``submarine job flex`` does): joiners warm up while the ring trains;
- stock: ``horovodrun --gloo`` elastic with a host discovery script on localhost, resized by
  rewriting the discovered slot count (Horovod starts a joiner only when the ring re-forms).

A third row runs a plain Horovod elastic Keras script written for ``horovodrun``
(``examples/horovod/keras_elastic.py``: its own ``hvd.init()`` at the top, nothing of this project)
through the same plan on the pseudo-cluster: its joiner builds its model and traces its step after
joining, which the project's own examples do before.

From the scripts' step logs (time each committed step ended, ring size):
- pause: last step at the old size -> first step at the new size;
- decision to capacity: the resize request -> first step at the new size.
Then the loss of the elastic run (with its resizes) against a fixed 2-worker job, epoch by epoch,
after the same number of samples.

Prints the table and writes ``benchmarks/results/elastic.json`` and ``elastic.md``.
Run: ``.venv/bin/python benchmarks/bench_elastic.py [--rounds 2]`` (needs no cluster up; uses its own).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.elastic.api import Limits
from submarine_elastic.elastic.client import JobClient, submit
from submarine_elastic.elastic.jobfiles import HdfsJobFiles
from submarine_elastic.elastic.jobspec import JobRequest, WorkerResources
from submarine_elastic.elastic.proto import elastic_pb2 as pb
from submarine_elastic.yarn import YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
PLAN = [2, 3, 2, 1]
SETTLE_S = 4.0
SCRIPT_ARGS = "--samples 2048 --global-batch 64 --step-sleep 0.02 --commit-every 4"


def step_times(log_dir: Path) -> list[tuple[float, int, int]]:
    """(time the step ended on its last rank, ring size, epoch) per committed step, in order."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            steps[r["step"]].append(r)
    return [(max(r["time"] for r in rs), rs[0]["size"], rs[0].get("epoch", 0)) for _, rs in sorted(steps.items())]


def pauses(log_dir: Path, resizes: list[tuple[float, int, int]]) -> list[dict]:
    """For each (request time, from, to): pause and decision-to-capacity from the step log."""
    steps = step_times(log_dir)
    out = []
    for requested, old, new in resizes:
        first_new = next((t for t, size, _ in steps if t > requested and size == new), None)
        if first_new is None:
            continue
        last_old = max((t for t, size, _ in steps if t < first_new and size == old), default=None)
        if last_old is None:
            continue
        out.append(
            {"from": old, "to": new, "pause_s": first_new - last_old, "decision_to_capacity_s": first_new - requested}
        )
    return out


def epoch_losses(log_dir: Path) -> dict[int, float]:
    by_epoch: dict[int, list[float]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            if r["rank"] == 0:
                by_epoch[r["epoch"]].append(r["loss"])
    return {e: statistics.fmean(v) for e, v in sorted(by_epoch.items())}


def run_plan(
    rm_url: str, req: JobRequest, rounds: int, stop_file: Path, label: str, files: HdfsJobFiles | None = None
) -> list[tuple[float, int, int]]:
    """Submits ``req`` (one worker; its container files on HDFS with ``files``) and resizes it through
    :data:`PLAN` ``rounds`` times, waiting for each ring; then creates ``stop_file`` and waits for the job to end.
    Returns (request time, from, to) per resize."""
    resizes = []
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        submit(yarn, req, replace=True, files=files)
        try:
            with JobClient(req.name, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=300)
                current = 1
                for _ in range(rounds):
                    for n in PLAN:
                        time.sleep(SETTLE_S)
                        t = time.time()
                        job.set_target(pb.Target(workers=n, reason="benchmark"))
                        job.wait_for_size(n, timeout=300)
                        resizes.append((t, current, n))
                        print(f"  {label} {current}->{n} done", flush=True)
                        current = n
            stop_file.touch()
            while not yarn.status(req.name).is_terminal:
                time.sleep(1)
        finally:
            yarn.destroy(req.name, missing_ok=True)
    return resizes


def run_elastic(rm_url: str, work: Path, rounds: int) -> tuple[list[tuple[float, int, int]], int]:
    """The resize plan on an elastic job; returns the resizes and the epochs it trained."""
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py {SCRIPT_ARGS} --epochs 10000 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    req = JobRequest(
        name="bench-elastic",
        launch_cmd=cmd,
        limits=Limits(1, 1, 3),
        resources=WorkerResources(1024, 1),
        rm_url=rm_url,
        workdir=REPO,
    )
    resizes = run_plan(rm_url, req, rounds, work / "stop", "elastic")
    epochs = json.loads((work / "log" / "final-rank0.json").read_text())["epoch"]
    return resizes, epochs


PLAIN_ARGS = "--step-sleep 0.02 --batches-per-commit 4 --epochs 100000"


def run_plain(rm_url: str, work: Path, rounds: int) -> list[tuple[float, int, int]]:
    """The resize plan on the plain Horovod Keras script; returns the resizes."""
    cmd = (
        f"{sys.executable} {REPO}/examples/horovod/keras_elastic.py {PLAIN_ARGS} "
        f"--until-file {work}/stop --log-dir {work}/log --checkpoint-dir {work}/ckpt"
    )
    req = JobRequest(
        name="bench-plain",
        launch_cmd=cmd,
        limits=Limits(1, 1, 3),
        resources=WorkerResources(1024, 1),
        rm_url=rm_url,
        workdir=REPO,
        env={"TF_USE_LEGACY_KERAS": "1"},
    )
    return run_plan(rm_url, req, rounds, work / "stop", "plain")


def run_fixed(rm_url: str, work: Path, epochs: int) -> None:
    name = "bench-fixed"
    cmd = f"{sys.executable} {REPO}/examples/train_elastic.py {SCRIPT_ARGS} --epochs {epochs} --log-dir {work}/log"
    req = JobRequest(
        name=name,
        launch_cmd=cmd,
        limits=Limits(2, 2, 2),
        resources=WorkerResources(1024, 1),
        rm_url=rm_url,
        elastic=False,
        workdir=REPO,
    )
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        submit(yarn, req, replace=True)
        try:
            deadline = time.monotonic() + 900
            while not yarn.status(name).is_terminal and time.monotonic() < deadline:
                time.sleep(1)
        finally:
            yarn.destroy(name, missing_ok=True)


def run_stock(work: Path, rounds: int) -> list[tuple[float, int, int]]:
    hosts = work / "hosts"
    hosts.write_text("localhost:1\n")
    discover = work / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    cmd = [
        str(Path(sys.executable).parent / "horovodrun"),
        "--gloo",
        "-np",
        "1",
        "--min-np",
        "1",
        "--max-np",
        "3",
        "--host-discovery-script",
        str(discover),
        "--network-interface",
        "lo",
        sys.executable,
        str(REPO / "examples/train_elastic.py"),
        *SCRIPT_ARGS.split(),
        "--epochs",
        "10000",
        "--until-file",
        str(work / "stop"),
        "--log-dir",
        str(work / "log"),
    ]
    env = {**os.environ, "HOROVOD_GLOO_TIMEOUT_SECONDS": "20"}
    with (work / "horovodrun.out").open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            return drive_stock(proc, work, rounds, lambda n: hosts.write_text(f"localhost:{n}\n"), "stock")
        finally:
            if proc.poll() is None:
                proc.kill()


def drive_stock(
    proc: subprocess.Popen, work: Path, rounds: int, resize: Callable[[int], None], label: str
) -> list[tuple[float, int, int]]:
    """Takes a running stock ``horovodrun`` (``proc``, its script logging to ``work/log``) through :data:`PLAN`
    ``rounds`` times, ``resize(n)`` changing what its discovery script says; then creates ``work/stop`` and waits
    for it to end. Returns (request time, from, to) per resize.

    Raises:
        RuntimeError: it did not start training within 300 s, or ended first.
    """
    deadline = time.monotonic() + 300
    while not list((work / "log").glob("steps-*.jsonl")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"stock horovodrun did not train: see {work / 'horovodrun.out'}")
        time.sleep(0.5)
    resizes = []
    current = 1
    for _ in range(rounds):
        for n in PLAN:
            time.sleep(SETTLE_S)
            t = time.time()
            resize(n)
            resizes.append((t, current, n))
            _wait_size(work / "log", n, t, timeout=300)
            print(f"  {label} {current}->{n} done", flush=True)
            current = n
    (work / "stop").touch()
    proc.wait(timeout=900)
    return resizes


def _wait_size(log_dir: Path, size: int, since: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(t > since and s == size for t, s, _ in step_times(log_dir)):
            return
        time.sleep(0.5)
    raise TimeoutError(f"no step at size {size} within {timeout} s")


def summarise(rows: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for key in sorted({f"{r['from']}->{r['to']}" for r in rows}):
        sel = [r for r in rows if f"{r['from']}->{r['to']}" == key]
        out[key] = {
            "pause_median_s": round(statistics.median(r["pause_s"] for r in sel), 3),
            "decision_to_capacity_median_s": round(statistics.median(r["decision_to_capacity_s"] for r in sel), 3),
            "samples": len(sel),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port-base", type=int, default=20500)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    print(f"working in {root} (logs of every daemon, container and step are kept there)", flush=True)
    for sub in ("elastic", "fixed", "stock", "plain"):
        (root / sub).mkdir()
    cluster = LocalCluster(root / "cluster")
    rm_url = cluster.up(ClusterSpec(nodes=2, port_base=args.port_base))
    try:
        print("elastic job on the pseudo-cluster:", flush=True)
        el_resizes, epochs = run_elastic(rm_url, root / "elastic", args.rounds)
        print("fixed 2-worker job on the pseudo-cluster:", flush=True)
        run_fixed(rm_url, root / "fixed", epochs)
        print("plain Horovod Keras script on the pseudo-cluster:", flush=True)
        pl_resizes = run_plain(rm_url, root / "plain", args.rounds)
    finally:
        cluster.down()
    print("stock horovodrun elastic:", flush=True)
    st_resizes = run_stock(root / "stock", args.rounds)

    el = summarise(pauses(root / "elastic" / "log", el_resizes))
    st = summarise(pauses(root / "stock" / "log", st_resizes))
    pl = summarise(pauses(root / "plain" / "log", pl_resizes))
    el_loss, fx_loss = epoch_losses(root / "elastic" / "log"), epoch_losses(root / "fixed" / "log")

    common = sorted(set(el_loss) & set(fx_loss))
    last = common[-1]
    loss_rows = [
        {
            "epoch": e,
            "elastic": el_loss[e],
            "fixed": fx_loss[e],
            "relative_diff": abs(el_loss[e] - fx_loss[e]) / fx_loss[e],
        }
        for e in common
    ]
    results = {
        "plan": PLAN,
        "rounds": args.rounds,
        "script_args": SCRIPT_ARGS,
        "submarine_elastic": el,
        "stock_horovodrun": st,
        "plain_horovod_keras_script": pl,
        "plain_script_args": PLAIN_ARGS,
        "ratio_pause_elastic_over_stock": {
            k: round(el[k]["pause_median_s"] / st[k]["pause_median_s"], 3)
            for k in el
            if k in st and st[k]["pause_median_s"]
        },
        "loss_by_epoch": loss_rows,
        "final_epoch_loss_relative_diff": loss_rows[-1]["relative_diff"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "elastic.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Resize pauses: submarine-elastic vs stock horovodrun (same script, same plan, same run)",
        "",
        f"Plan 1->{'->'.join(map(str, PLAN))} x {args.rounds}; fixed global batch 64; 2 CPUs; medians.",
        "",
        "| resize | pause (ours) s | pause (stock) s | ratio ours/stock | request->capacity (ours) s | (stock) s "
        "| pause (plain Horovod Keras script, ours) s |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in sorted(set(el) | set(st)):
        e, s, p = el.get(k, {}), st.get(k, {}), pl.get(k, {})
        ratio = results["ratio_pause_elastic_over_stock"].get(k, "-")
        lines.append(
            f"| {k} | {e.get('pause_median_s', '-')} | {s.get('pause_median_s', '-')} | {ratio} | "
            f"{e.get('decision_to_capacity_median_s', '-')} | {s.get('decision_to_capacity_median_s', '-')} "
            f"| {p.get('pause_median_s', '-')} |"
        )
    lines += [
        "",
        "Loss after the same samples, elastic (with the resizes above) vs fixed 2 workers:",
        "",
        "| epoch | elastic | fixed | relative diff |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['epoch']} | {r['elastic']:.6f} | {r['fixed']:.6f} | {r['relative_diff']:.2%} |" for r in loss_rows]
    (RESULTS / "elastic.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"last common epoch {last}")


if __name__ == "__main__":
    main()
