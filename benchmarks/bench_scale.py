"""Rings at scale: the pause of a scale-out, a scale-in and a worker's kill -9 at 2, 4, 8 and 16 workers, ours
beside stock ``horovodrun`` on the same hosts, and where each pause goes.

Both run the same script (``examples/train_elastic.py --data digits``, a small convolutional network, fixed
global batch, CPU) on the 3-host cluster (``cluster up --hosts 3``: network namespaces, no HDFS), the ring's
workers spread over the hosts. For each ring size N (``--sizes``), in one run:

- ours: an elastic job at N workers (limits 1..N+1, what ``job run --elastic`` submits). Once it trains: a
  scale-out N -> N+1 (the driver warms the joiner while the ring trains on, so the pause is the re-form alone),
  a scale-in N+1 -> N, then one training process killed with SIGKILL (the ring re-forms without it; YARN's
  relaunch that later grows it back is not timed);
- stock: ``horovodrun --gloo`` elastic, started in host 0's namespace, N slots spread over the hosts by its
  discovery script (``ssh HOST CMD`` is a shim running CMD in that host's namespace, as in ``bench_hosts.py``).
  The discovery adds a slot (N+1), removes it (N); then one worker on the first host is killed: Horovod
  blacklists that host, so its ring goes on with the other hosts' slots.

From the scripts' step logs: the pause, the last step at the old size -> the first step at the new size (for
a kill, the first step of the ring re-formed after it, whatever its size: YARN's relaunch of the killed worker
may be warm before the ring noticed). From their phase logs (``phases-<pid>.jsonl``), the latest time any
process of the new ring reached each point, the pause split into:

- notice: -> the ring saw the change (the commit that reads the hosts' update; Gloo's error on a peer's death);
- re-init: -> its reset callbacks ran (Horovod's shutdown, the driver's new assignment, the rendezvous, Gloo's
  full mesh: ``hvd.init()`` again);
- sync: -> the first step began (the state's broadcast from rank 0);
- first step: -> that step ended (it holds the new ring's first allreduce).

Every process shares this machine's 2 CPUs: a ring of 16 trains far slower than one of 2, which is part of what
the pauses measure here; the ratio ours / stock at each size is the figure to read.

Prints the table and writes ``benchmarks/results/scale.json`` and ``scale.md``. Needs root (namespaces). The
sizes may be run in parts (each part a cluster of its own): ``--add`` keeps the results file's rows of the other
sizes, and the table names each part's run (load, memory, time).
Run: ``.venv/bin/python benchmarks/bench_scale.py [--sizes 2,4,8,16] [--add] [--port-base 26000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import RESULTS, int_list, write_results
from bench_elastic import SCRIPT_ARGS, step_times
from bench_hosts import SSH_SHIM

from submarine_elastic.cluster import ClusterSpec, HostNetwork, LocalCluster
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.replay.watch import MachineWatch
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources
from submarine_elastic.submit.service import submit
from submarine_elastic.yarn import YarnServiceClient

REPO = Path(__file__).resolve().parents[1]
HOSTS = 3
WORKER_MB = 512
#: Seconds the ring trains at a size before the next change (its joiners warm meanwhile, for ours).
SETTLE_S = 6.0
#: The longest a ring may take to reach a size.
WAIT_S = 600.0
#: The points of a re-form a process logs (``examples/train_elastic.py``), in order, and the part each ends.
PARTS = (("notice", ("interrupt", "failure")), ("re-init", ("reset",)), ("sync", ("synced",)))
EVENTS = ("scale-out", "scale-in", "kill -9")


def phases(log_dir: Path) -> list[tuple[float, str]]:
    """(time, phase) of every process's phase log, oldest first."""
    out = []
    for path in log_dir.glob("phases-*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out.append((r["time"], r["phase"]))
    return sorted(out)


def pause_of(log_dir: Path, since: float, old: int, new: int | None) -> dict[str, object]:
    """The first re-form after ``since`` from a ring of ``old`` to one of ``new`` (None: the first ring any
    process re-formed in after ``since``, whatever its size: after a kill, YARN's relaunch may be back in it):
    its pause and where it went (:data:`PARTS`; a part the logs do not show is left out)."""
    steps = step_times(log_dir)
    if new is None:
        reset = min((t for t, p in phases(log_dir) if t > since and p == "reset"), default=None)
        first = None if reset is None else next(((t, size) for t, size, _ in steps if t > reset), None)
    else:
        first = next(((t, size) for t, size, _ in steps if t > since and size == new), None)
    if first is None:
        raise RuntimeError(f"no step {f'at {new} workers' if new else 'of a re-formed ring'} after the change "
                           f"(logs in {log_dir})")  # fmt: skip
    last = max((t for t, size, _ in steps if t < first[0] and size == old), default=None)
    if last is None:
        raise RuntimeError(f"no step at {old} workers before the change (logs in {log_dir})")
    row: dict[str, object] = {"from": old, "to": first[1], "pause_s": round(first[0] - last, 3)}
    seen = [(t, p) for t, p in phases(log_dir) if last < t <= first[0]]
    mark = last
    for part, names in PARTS:
        at = max((t for t, p in seen if p in names and t >= mark), default=None)
        if at is not None:
            row[f"{part}_s"] = round(at - mark, 3)
            mark = at
    row["first step_s"] = round(first[0] - mark, 3)
    return row


def wait_size(log_dir: Path, size: int, since: float) -> None:
    deadline = time.monotonic() + WAIT_S
    while not any(t > since and s == size for t, s, _ in step_times(log_dir)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no step at {size} workers within {WAIT_S:.0f} s (logs in {log_dir})")
        time.sleep(0.5)


def training_processes(log_dir: Path, namespace: str | None = None) -> list[psutil.Process]:
    """The script's training processes (not the shells or agents that started them), those in ``namespace`` if
    named; oldest first."""
    inside = None
    if namespace is not None:
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
        inside = {int(p) for p in listed.stdout.split()}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmd = proc.info["cmdline"] or []
        if any(a.endswith("examples/train_elastic.py") for a in cmd) and str(log_dir) in " ".join(cmd):
            if inside is None or proc.pid in inside:
                found.append(proc)
    return sorted(found, key=lambda p: p.info["create_time"])


def kill_one(log_dir: Path, namespace: str | None = None) -> float:
    """SIGKILL to the newest training process (in ``namespace`` if named); returns when."""
    procs = training_processes(log_dir, namespace)
    if not procs:
        raise RuntimeError(f"no training process of {log_dir} to kill")
    at = time.time()
    procs[-1].send_signal(signal.SIGKILL)
    return at


def run_ours(rm_url: str, work: Path, n: int, rows: list[dict[str, object]]) -> None:
    """The three re-forms of an elastic job of ``n`` workers; one row each, added to ``rows`` as measured."""
    log = work / "log"
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py {SCRIPT_ARGS} --epochs 100000 "
        f"--until-file {work}/stop --log-dir {log}"
    )
    req = JobRequest(
        name=f"bench-scale-{n}",
        launch_cmd=cmd,
        limits=Limits(n, 1, n + 1),
        resources=WorkerResources(WORKER_MB, 1),
        rm_url=rm_url,
        workdir=REPO,
    )
    with YarnServiceClient(rm_url, poll_interval=0.5) as yarn:
        submit(yarn, req, replace=True)
        try:
            with JobClient(req.name, yarn, locate_timeout=120) as job:
                job.wait_for_size(n, timeout=WAIT_S)
                wait_size(log, n, 0.0)
                for event, to in (("scale-out", n + 1), ("scale-in", n)):
                    time.sleep(SETTLE_S)
                    frm = n if to > n else n + 1
                    at = time.time()
                    job.set_target(pb.Target(workers=to, reason="benchmark"))
                    wait_size(log, to, at)
                    rows.append({"event": event, **pause_of(log, at, frm, to)})
                    print(f"  ours {n}: {event} {frm} -> {to}: {rows[-1]['pause_s']} s", flush=True)
                time.sleep(SETTLE_S)
                at = kill_one(log)
                rows.append({"event": "kill -9", **wait_pause(log, at, n)})
                print(f"  ours {n}: kill -9: {rows[-1]['pause_s']} s", flush=True)
        finally:
            yarn.destroy(req.name, missing_ok=True)


def wait_pause(log_dir: Path, since: float, old: int) -> dict[str, object]:
    """The re-form after a kill at ``since`` in a ring of ``old``: waits for a step of the re-formed ring."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return pause_of(log_dir, since, old, None)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def spread(n: int, names: list[str]) -> dict[str, int]:
    """``n`` slots over the hosts ``names``, one at a time in their order."""
    slots = dict.fromkeys(names, 0)
    for i in range(n):
        slots[names[i % len(names)]] += 1
    return slots


def run_stock(network: HostNetwork, work: Path, n: int, rows: list[dict[str, object]]) -> None:
    """The three re-forms of stock ``horovodrun`` elastic at ``n`` slots across the hosts; one row each, added
    to ``rows`` as measured."""
    log = work / "log"
    shim_dir = work / "bin"
    shim_dir.mkdir(parents=True)
    cases = "\n".join(f"  {h.name}) ns={h.namespace} ;;" for h in network.all_hosts)
    (shim_dir / "ssh").write_text(SSH_SHIM.replace("{cases}", cases))
    (shim_dir / "ssh").chmod(0o755)
    # Host 0 (where horovodrun runs) last: with only local hosts Horovod insists on loopback for Gloo.
    names = [h.name for h in network.all_hosts[1:]] + [network.host(0).name]
    hosts = work / "hosts"

    def discover(count: int) -> None:
        tmp = hosts.with_suffix(".tmp")
        tmp.write_text("".join(f"{name}:{k}\n" for name, k in spread(count, names).items() if k))
        tmp.replace(hosts)

    discover(n)
    script = work / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    horovodrun = [
        str(Path(sys.executable).parent / "horovodrun"), "--gloo",
        "-np", str(n), "--min-np", "1", "--max-np", str(n + 1),
        "--host-discovery-script", str(script), "--network-interface", "eth0",
        sys.executable, str(REPO / "examples/train_elastic.py"), *SCRIPT_ARGS.split(),
        "--epochs", "100000", "--until-file", str(work / "stop"), "--log-dir", str(log),
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}", "HOROVOD_GLOO_TIMEOUT_SECONDS": "20"}
    with (work / "horovodrun.out").open("w") as out:
        proc = subprocess.Popen(
            network.host(0).command(horovodrun), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
        try:
            wait_size(log, n, 0.0)
            for event, to in (("scale-out", n + 1), ("scale-in", n)):
                time.sleep(SETTLE_S)
                frm = n if to > n else n + 1
                at = time.time()
                discover(to)
                wait_size(log, to, at)
                rows.append({"event": event, **pause_of(log, at, frm, to)})
                print(f"  stock {n}: {event} {frm} -> {to}: {rows[-1]['pause_s']} s", flush=True)
            time.sleep(SETTLE_S)
            at = kill_one(log, network.host(1).namespace)
            rows.append({"event": "kill -9", **wait_pause(log, at, n)})
            print(f"  stock {n}: kill -9: {rows[-1]['pause_s']} s", flush=True)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            for left in training_processes(log):  # workers Horovod left behind on a host
                left.kill()


def render(results: dict[str, object]) -> list[str]:
    """``scale.md``: per event and ring size, the pause ours / stock, then where ours and stock's went."""
    rows = results["rows"]
    assert isinstance(rows, list)
    lines = [
        "# Rings at scale: re-form pauses, ours vs stock horovodrun on the same 3 hosts",
        "",
        f"`examples/train_elastic.py {SCRIPT_ARGS}` on 3 hosts (network namespaces) sharing 2 CPUs, CPU training "
        "(nothing emulated). Each size's ours and stock ran one after the other on one cluster:",
        "",
    ]
    for part in results["parts"]:  # type: ignore[attr-defined]
        lines.append(
            f"- sizes {part['sizes']}: peak memory {part['peak_memory_mb']} MB, load mean {part['load_mean']}, "
            f"{part['wall_s']} s ({part['at']})"
        )
    lines += [
        "",
        "| event | workers | ours s | stock s | ours / stock |",
        "|---|---|---|---|---|",
    ]
    for event in EVENTS:
        for n in results["sizes"]:  # type: ignore[attr-defined]
            ours = next((r for r in rows if r["who"] == "ours" and r["n"] == n and r["event"] == event), None)
            stock = next((r for r in rows if r["who"] == "stock" and r["n"] == n and r["event"] == event), None)
            o, s = cell(ours), cell(stock)
            ratio = f"{ours['pause_s'] / stock['pause_s']:.2f}" if ours and stock and measured(ours, stock) else "-"
            lines.append(f"| {event} | {n} | {o} | {s} | {ratio} |")
    parts = [p for p, _ in PARTS] + ["first step"]
    lines += ["", "Where the pause went (s):", "", "| who | event | workers | " + " | ".join(parts) + " |"]
    lines.append("|---|---|---|" + "---|" * len(parts))
    for r in rows:
        cells = [f"{r[f'{p}_s']:.2f}" if f"{p}_s" in r else "-" for p in parts]
        lines.append(f"| {r['who']} | {r['event']} | {r['n']} | " + " | ".join(cells) + " |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += ["", "Not measured:", ""]
        lines += [f"- {r['who']} {r['n']}, {r['event']}: {r['error']}" for r in errors]
    return lines


def measured(*rows: dict[str, object] | None) -> bool:
    """Whether every one of ``rows`` has a pause (run, and measured)."""
    return all(row is not None and bool(row.get("pause_s")) for row in rows)


def cell(row: dict[str, object] | None) -> str:
    """A pause and its sizes (``1.20 (8->9)``); ``n/m`` where it was not measured, ``-`` where not run."""
    if row is None:
        return "-"
    if "error" in row:
        return "n/m"
    return f"{row['pause_s']:.2f} ({row['from']}->{row['to']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = int_list("ring sizes", 2, " (a kill leaves one)")
    parser.add_argument("--sizes", type=sizes, default=[2, 4, 8, 16], help="ring sizes (default 2,4,8,16)")
    parser.add_argument("--port-base", type=int, default=26000)
    parser.add_argument("--only", choices=("ours", "stock"), help="run one side only")
    parser.add_argument("--add", action="store_true", help="keep the results file's rows of the other sizes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_scale: making network namespaces needs root")
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    print(f"bench_scale: rings of {args.sizes}; logs in {root} (emulates nothing: CPU training)", flush=True)
    per_host = -(-(max(args.sizes) + 1) // HOSTS)
    spec = ClusterSpec(
        nodes=HOSTS, hosts=HOSTS, subnet=f"198.19.{args.port_base // 100 % 256}.0/24", hdfs=False,
        node_memory_mb=per_host * WORKER_MB + 2048, node_vcores=per_host + 4, port_base=args.port_base,
    )  # fmt: skip
    cluster = LocalCluster(root / "cluster")
    rows: list[dict[str, object]] = []
    started = time.time()
    with MachineWatch() as watch:
        try:
            rm_url = cluster.up(spec, timeout=240, progress=lambda m: print(f"  {m}", flush=True))
            network = cluster.network(spec)
            assert network is not None
            for n in args.sizes:
                for who in ("ours", "stock"):
                    if args.only in (None, who):
                        rows += measure(who, n, rm_url, network, root)
        finally:
            cluster.down()
    machine = watch.as_dict()
    part = {
        "sizes": args.sizes,
        "peak_memory_mb": machine["peak_memory_mb"],
        "load_mean": machine["load_mean"],
        "wall_s": round(time.time() - started, 1),
        "at": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "logs": str(root),
    }
    write_results("scale", merged(rows, part, RESULTS / "scale.json" if args.add else None), render)


def measure(who: str, n: int, rm_url: str, network: HostNetwork, root: Path) -> list[dict[str, object]]:
    """``who``'s rows at ``n`` workers; an event that could not be measured (a ring that never re-formed, say)
    is a row with its ``error``, and the events after it are not run."""
    rows: list[dict[str, object]] = []
    try:
        if who == "ours":
            run_ours(rm_url, root / f"ours-{n}", n, rows)
        else:
            run_stock(network, root / f"stock-{n}", n, rows)
    except (RuntimeError, TimeoutError, OSError) as exc:
        event = EVENTS[len(rows)] if len(rows) < len(EVENTS) else "after the events"
        print(f"  {who} {n}: {event}: not measured: {exc}", flush=True)
        rows.append({"event": event, "error": str(exc)})
    return [{"who": who, "n": n, **r} for r in rows]


def merged(rows: list[dict[str, object]], part: dict[str, object], earlier: Path | None) -> dict[str, object]:
    """The results of this run (``rows``, measured in ``part``) with, from ``earlier`` (a results file, when
    given and there), the rows and parts of the sizes this run did not measure."""
    parts, kept = [part], []
    if earlier is not None and earlier.exists():
        old = json.loads(earlier.read_text())
        ran = set(part["sizes"])  # type: ignore[call-overload]
        kept = [r for r in old["rows"] if r["n"] not in ran]
        parts = [p for p in old["parts"] if set(p["sizes"]) - ran] + parts
    rows = sorted(kept + rows, key=lambda r: (r["n"], r["who"] != "ours"))
    return {
        "benchmark": "bench_scale",
        "accelerators": "none (CPU training)",
        "sizes": sorted({r["n"] for r in rows}),  # type: ignore[type-var]
        "script_args": SCRIPT_ARGS,
        "rows": rows,
        "parts": parts,
    }


if __name__ == "__main__":
    main()
