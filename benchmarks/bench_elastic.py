"""Resize pauses of an elastic job on the pseudo-cluster, side by side with stock ``horovodrun``.

Both run the same script (``examples/train_elastic.py --data digits``: a small convolutional network on
scikit-learn's handwritten digits, fixed global batch) through the same resize
plan, 1 -> 2 -> 3 -> 2 -> 1, ``--rounds`` times:

- submarine-elastic: ``submarine job run --elastic`` on the pseudo-cluster, resized by the job's
  driver (what ``submarine job flex`` does): joiners warm up while the ring trains;
- stock: ``horovodrun --gloo`` elastic with a host discovery script on localhost, resized by
  rewriting the discovered slot count (Horovod starts a joiner only when the ring re-forms).

A third row runs a plain Horovod elastic Keras script written for ``horovodrun``
(``examples/horovod/keras_elastic.py``: its own ``hvd.init()`` at the top, nothing of this project)
through the same plan on the pseudo-cluster: its joiner builds its model and traces its step after
joining, which the project's own examples do before.

With ``--horovod-example PATH`` (Horovod 0.28.1's ``examples/elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py``,
which its sdist does not ship: take it from Horovod's git tag v0.28.1), that script runs unchanged but for its
data (``benchmarks/_generated_mnist.py``: MNIST-shaped generated arrays instead of the download) through
:data:`EXAMPLE_PLAN` on the pseudo-cluster and under stock ``horovodrun``. Besides the pause and request->ring
(first step at the new size) of each resize, a scale-out gives warm->ring: from the joiner's ``hvd.init()``
call (where it is ready to join; under the job's agent it waits there for its slot) to the ring's first step
with it. What the script does after ``hvd.init()`` (its data, model, compile, first one-step ``fit``) is on
that path in both.

From the scripts' step logs (time each committed step ended, ring size):
- pause: last step at the old size -> first step at the new size;
- decision to capacity: the resize request -> first step at the new size.
Then the loss of the elastic run (with its resizes) against a fixed 2-worker job, epoch by epoch,
after the same number of samples.

Prints the table and writes ``benchmarks/results/elastic.json`` and ``elastic.md``.
Run: ``.venv/bin/python benchmarks/bench_elastic.py [--rounds 2] [--horovod-example PATH [--only-horovod-example]]``
(needs no cluster up; uses its own).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import write_results

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources
from submarine_elastic.submit.service import submit
from submarine_elastic.yarn import YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
PLAN = [2, 3, 2, 1]
#: Horovod's example starts with 2 workers and goes through the sizes its first measurement used.
EXAMPLE_START, EXAMPLE_PLAN = 2, [3, 1, 2]
SETTLE_S = 4.0
SCRIPT_ARGS = "--data digits --samples 1500 --global-batch 64 --commit-every 4"


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


def warm_to_ring(log_dir: Path, resizes: list[tuple[float, int, int]]) -> list[dict]:
    """For each scale-out: from the last joiner's first ``hvd.init()`` call (``init-<pid>.json``, written by
    ``_generated_mnist.py``) after the request to the first step at the new size."""
    inits = [json.loads(p.read_text())["time"] for p in log_dir.glob("init-*.json")]
    steps = step_times(log_dir)
    out = []
    for requested, old, new in resizes:
        joined = sorted(t for t in inits if t > requested)[: new - old] if new > old else []
        if len(joined) < new - old or new <= old:
            continue
        warm = joined[-1]
        ring = next((t for t, size, _ in steps if t > warm and size == new), None)
        if ring is not None:
            out.append({"from": old, "to": new, "warm_to_ring_s": ring - warm})
    return out


#: Driver log lines that mark a scale-out's phases: YARN given the count, a joiner's agent attached, warm.
_DRIVER_EVENT = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) driver INFO "
    r"(?:(?P<flexed>flexed \S+/worker to \d+)|agent attached: (?P<attached>worker-\d+)|(?P<warm>worker-\d+) warm after)"
)


def driver_log(cluster_dir: Path, job: str) -> str:
    """The text of ``job``'s driver log (its container's stderr) in a cluster's NodeManager logs ('' if none)."""
    for path in cluster_dir.glob("**/logs/application_*/container_*/stderr.txt"):
        text = path.read_text(errors="replace")
        if f"driver of job {job} listening" in text:
            return text
    return ""


def scale_out_phases(driver_text: str, log_dir: Path, resizes: list[tuple[float, int, int]]) -> list[dict]:
    """Where each scale-out's request -> capacity goes, from the driver's log and the step log (s): the driver
    gives YARN the count (``yarn_asked_s``), YARN allocates, localizes and starts the joiners' containers and
    their agents attach (``containers_s``, to the last joiner's), the joiners import TensorFlow, build the model
    and trace their step (``warm_up_s``, to the last one warm), and the ring re-forms with them and trains its
    first step (``re_form_s``)."""
    events: list[tuple[float, str]] = []
    for line in driver_text.splitlines():
        found = _DRIVER_EVENT.match(line)
        if found:
            at = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            events.append((at, "flexed" if found["flexed"] else "attached" if found["attached"] else "warm"))
    steps = step_times(log_dir)
    out = []
    for requested, old, new in resizes:
        if new <= old:
            continue
        after = [(t, kind) for t, kind in events if t >= requested]
        flexed = next((t for t, kind in after if kind == "flexed"), None)
        attached = [t for t, kind in after if kind == "attached"][: new - old]
        warm = [t for t, kind in after if kind == "warm"][: new - old]
        ring = next((t for t, size, _ in steps if t > requested and size == new), None)
        if flexed is None or len(attached) < new - old or len(warm) < new - old or ring is None:
            continue
        out.append({
            "from": old, "to": new,
            "yarn_asked_s": round(flexed - requested, 2),
            "containers_s": round(attached[-1] - flexed, 2),
            "warm_up_s": round(warm[-1] - attached[-1], 2),
            "re_form_s": round(ring - warm[-1], 2),
        })  # fmt: skip
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
    rm_url: str,
    req: JobRequest,
    rounds: int,
    stop_file: Path | None,
    label: str,
    files: HdfsJobFiles | None = None,
    *,
    plan: list[int] = PLAN,
    log_dir: Path | None = None,
) -> list[tuple[float, int, int]]:
    """Submits ``req`` (``req.limits.num`` workers; its container files on HDFS with ``files``) and resizes it
    through ``plan`` ``rounds`` times, waiting for each ring (and, given the script's ``log_dir``, for its first
    step at that size: the driver counts a ring formed once Horovod assigned its ranks, before a joiner that
    builds its model after joining trained a step); then creates ``stop_file`` and waits for the job to end (no
    ``stop_file``: the job is destroyed). Returns (request time, from, to) per resize."""
    resizes = []
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        submit(yarn, req, replace=True, files=files)
        try:
            with JobClient(req.name, yarn, locate_timeout=120) as job:
                current = req.limits.num
                job.wait_for_size(current, timeout=300)
                for _ in range(rounds):
                    for n in plan:
                        time.sleep(SETTLE_S)
                        t = time.time()
                        job.set_target(pb.Target(workers=n, reason="benchmark"))
                        job.wait_for_size(n, timeout=300)
                        if log_dir is not None:
                            _wait_size(log_dir, n, t, timeout=300)
                        resizes.append((t, current, n))
                        print(f"  {label} {current}->{n} done", flush=True)
                        current = n
            if stop_file is not None:
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


def example_command(example: Path, log_dir: Path) -> list[str]:
    """Horovod's example, unchanged but for its data, logging its commits and first init to ``log_dir``."""
    return [sys.executable, str(REPO / "benchmarks" / "_generated_mnist.py"), "--log-dir", str(log_dir), str(example)]


def run_example(rm_url: str, work: Path, rounds: int, example: Path) -> list[tuple[float, int, int]]:
    """:data:`EXAMPLE_PLAN` on Horovod's Keras example under ``submarine job run --elastic``; returns the resizes.
    It runs in ``work`` (rank 0 writes its checkpoints to the working directory)."""
    req = JobRequest(
        name="bench-hvd-example",
        launch_cmd=" ".join(example_command(example, work / "log")),
        limits=Limits(EXAMPLE_START, 1, 3),
        resources=WorkerResources(1024, 1),
        rm_url=rm_url,
        workdir=work,
        env={"TF_USE_LEGACY_KERAS": "1"},
    )
    return run_plan(rm_url, req, rounds, None, "horovod-example", plan=EXAMPLE_PLAN, log_dir=work / "log")


def run_example_stock(work: Path, rounds: int, example: Path) -> list[tuple[float, int, int]]:
    """The same under stock ``horovodrun`` (its discovery script reads the slot count the plan writes)."""
    hosts = work / "hosts"
    hosts.write_text(f"localhost:{EXAMPLE_START}\n")
    discover = work / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    cmd = [
        str(Path(sys.executable).parent / "horovodrun"),
        *("--gloo", "-np", str(EXAMPLE_START), "--min-np", "1", "--max-np", "3"),
        *("--host-discovery-script", str(discover), "--network-interface", "lo"),
        *example_command(example, work / "log"),
    ]
    # horovodrun starts a joiner when the ring re-forms, and the ring waits for it within the Gloo timeout: its
    # TensorFlow import alone took over 20 s on a loaded 2-core machine.
    env = {**os.environ, "HOROVOD_GLOO_TIMEOUT_SECONDS": "60", "TF_USE_LEGACY_KERAS": "1"}
    with (work / "horovodrun.out").open("w") as out:
        proc = subprocess.Popen(cmd, cwd=work, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            resize = lambda n: hosts.write_text(f"localhost:{n}\n")  # noqa: E731
            return drive_stock(
                proc, work, rounds, resize, "horovod-example-stock", start=EXAMPLE_START, plan=EXAMPLE_PLAN, stop=False
            )
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # horovodrun stops its workers
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)


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
    proc: subprocess.Popen,
    work: Path,
    rounds: int,
    resize: Callable[[int], None],
    label: str,
    *,
    start: int = 1,
    plan: list[int] = PLAN,
    stop: bool = True,
) -> list[tuple[float, int, int]]:
    """Takes a running stock ``horovodrun`` (``proc``, ``start`` workers, its script logging to ``work/log``)
    through ``plan`` ``rounds`` times, ``resize(n)`` changing what its discovery script says; then, with ``stop``
    (the script ends at the first epoch end after ``work/stop`` exists), creates ``work/stop`` and waits for it
    to end; else returns with it running. Returns (request time, from, to) per resize.

    Raises:
        RuntimeError: it did not start training within 300 s, or ended first.
    """
    deadline = time.monotonic() + 300
    while not list((work / "log").glob("steps-*.jsonl")):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"stock horovodrun did not train: see {work / 'horovodrun.out'}")
        time.sleep(0.5)
    resizes = []
    current = start
    for _ in range(rounds):
        for n in plan:
            time.sleep(SETTLE_S)
            t = time.time()
            resize(n)
            resizes.append((t, current, n))
            _wait_size(work / "log", n, t, timeout=300)
            print(f"  {label} {current}->{n} done", flush=True)
            current = n
    if stop:
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


def summarise_example(log_dir: Path, resizes: list[tuple[float, int, int]]) -> dict:
    """One run of Horovod's example: :func:`summarise` of its resizes, with the median warm->ring of each
    scale-out, and its median step time at the starting size."""
    out = summarise(pauses(log_dir, resizes))
    joins = warm_to_ring(log_dir, resizes)
    for key, row in out.items():
        sel = [r["warm_to_ring_s"] for r in joins if f"{r['from']}->{r['to']}" == key]
        if sel:
            row["warm_to_ring_median_s"] = round(statistics.median(sel), 3)
    steps = step_times(log_dir)
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:], strict=False) if a[1] == b[1] == EXAMPLE_START]
    return {"resizes": out, "step_median_s": round(statistics.median(gaps), 3) if gaps else None}


def run_parts(args: argparse.Namespace, root: Path) -> dict:
    """Runs what ``args`` ask for; returns its results (the keys of ``elastic.json`` it fills)."""
    results: dict = {"load_average_1m": [round(os.getloadavg()[0], 1)]}
    cluster = LocalCluster(root / "cluster")
    rm_url = cluster.up(ClusterSpec(nodes=2, port_base=args.port_base))
    try:
        if not args.only_horovod_example:
            print("elastic job on the pseudo-cluster:", flush=True)
            el_resizes, epochs = run_elastic(rm_url, root / "elastic", args.rounds)
            print("fixed 2-worker job on the pseudo-cluster:", flush=True)
            run_fixed(rm_url, root / "fixed", epochs)
            print("plain Horovod Keras script on the pseudo-cluster:", flush=True)
            pl_resizes = run_plain(rm_url, root / "plain", args.rounds)
        if args.horovod_example:
            print("Horovod's Keras example on the pseudo-cluster:", flush=True)
            ex_resizes = run_example(rm_url, root / "example", args.rounds, args.horovod_example)
    finally:
        cluster.down()
    if args.horovod_example:
        print("Horovod's Keras example under stock horovodrun:", flush=True)
        ex_st_resizes = run_example_stock(root / "example-stock", args.rounds, args.horovod_example)
        results["horovod_keras_example"] = {
            "script": "Horovod 0.28.1 examples/elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py, generated data",
            "start": EXAMPLE_START,
            "plan": EXAMPLE_PLAN,
            "rounds": args.rounds,
            "submarine_elastic": summarise_example(root / "example" / "log", ex_resizes),
            "stock_horovodrun": summarise_example(root / "example-stock" / "log", ex_st_resizes),
        }
    results["load_average_1m"].append(round(os.getloadavg()[0], 1))
    if args.only_horovod_example:
        return results
    print("stock horovodrun elastic:", flush=True)
    st_resizes = run_stock(root / "stock", args.rounds)

    el = summarise(pauses(root / "elastic" / "log", el_resizes))
    st = summarise(pauses(root / "stock" / "log", st_resizes))
    pl = summarise(pauses(root / "plain" / "log", pl_resizes))
    el_loss, fx_loss = epoch_losses(root / "elastic" / "log"), epoch_losses(root / "fixed" / "log")
    common = sorted(set(el_loss) & set(fx_loss))
    loss_rows = [
        {
            "epoch": e,
            "elastic": el_loss[e],
            "fixed": fx_loss[e],
            "relative_diff": abs(el_loss[e] - fx_loss[e]) / fx_loss[e],
        }
        for e in common
    ]
    results.update(
        {
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
    )
    return results


def render(results: dict) -> list[str]:
    """``elastic.md`` from ``elastic.json``'s content."""
    el, st, pl = results["submarine_elastic"], results["stock_horovodrun"], results["plain_horovod_keras_script"]
    lines = [
        "# Resize pauses: submarine-elastic vs stock horovodrun (same script, same plan, same run)",
        "",
        f"Plan 1->{'->'.join(map(str, results['plan']))} x {results['rounds']}; {results['script_args']}; 2 CPUs, "
        f"load average (1 min) at start and end {results.get('load_average_1m', 'not recorded')}; medians.",
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
    example = results.get("horovod_keras_example")
    if example:
        ours, stock = example["submarine_elastic"]["resizes"], example["stock_horovodrun"]["resizes"]
        plan = "->".join(map(str, [example["start"], *example["plan"]]))
        lines += [
            "",
            f"Horovod's own Keras example ({example['script']}), unchanged otherwise; plan {plan} x "
            f"{example['rounds']}; a step at {example['start']} workers takes "
            f"{example['submarine_elastic']['step_median_s']} s (ours), {example['stock_horovodrun']['step_median_s']}"
            " s (stock); medians. request->ring: from the resize asked for (job flex / the discovery script's answer "
            "changed) to the first step at the new size; warm->ring: from the joiner's hvd.init() call to that step.",
            "",
            "| resize | request->ring (ours) s | (stock) s | pause (ours) s | (stock) s | warm->ring (ours) s "
            "| (stock) s |",
            "|---|---|---|---|---|---|---|",
        ]
        for k in sorted(set(ours) | set(stock)):
            o, s = ours.get(k, {}), stock.get(k, {})
            cells = [
                o.get("decision_to_capacity_median_s", "-"),
                s.get("decision_to_capacity_median_s", "-"),
                o.get("pause_median_s", "-"),
                s.get("pause_median_s", "-"),
                o.get("warm_to_ring_median_s", "-"),
                s.get("warm_to_ring_median_s", "-"),
            ]
            lines.append(f"| {k} | " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "Loss after the same samples, elastic (with the resizes above) vs fixed 2 workers:",
        "",
        "| epoch | elastic | fixed | relative diff |",
        "|---|---|---|---|",
    ]
    rows = results["loss_by_epoch"]
    lines += [
        f"| {r['epoch']} | {r['elastic']:.6f} | {r['fixed']:.6f} | {r['relative_diff']:.2%} |"
        for i, r in enumerate(rows)
        if shown_epoch(r["epoch"]) or i == len(rows) - 1
    ]
    if rows:
        worst = max(rows, key=lambda r: r["relative_diff"])
        lines += [
            "",
            f"{len(rows)} epochs in both (every epoch in elastic.json); the largest relative difference: "
            f"{worst['relative_diff']:.2%} at epoch {worst['epoch']}.",
        ]
    return lines


def shown_epoch(epoch: int) -> bool:
    """The epochs the table shows: each of the first ten, every tenth to 100, then every hundredth."""
    return epoch < 10 or (epoch < 100 and epoch % 10 == 0) or epoch % 100 == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port-base", type=int, default=20500)
    parser.add_argument(
        "--horovod-example",
        type=Path,
        help="Horovod 0.28.1's examples/elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py: run it too",
    )
    parser.add_argument(
        "--only-horovod-example",
        action="store_true",
        help="run only that script; the other results in elastic.json are kept",
    )
    args = parser.parse_args()
    if args.only_horovod_example and not args.horovod_example:
        parser.error("--only-horovod-example needs --horovod-example")
    if args.horovod_example and not args.horovod_example.is_file():
        parser.error(f"--horovod-example: no such file: {args.horovod_example}")

    root = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    print(f"working in {root} (logs of every daemon, container and step are kept there)", flush=True)
    for sub in ("elastic", "fixed", "stock", "plain", "example", "example-stock"):
        (root / sub).mkdir()
    results = run_parts(args, root)
    if args.only_horovod_example:
        results = {**json.loads((RESULTS / "elastic.json").read_text()), **results}
    write_results("elastic", results, render)


if __name__ == "__main__":
    main()
