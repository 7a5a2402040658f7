"""Resize pauses of an elastic job across hosts, side by side with loopback and with stock ``horovodrun``.

The same script (``examples/train_elastic.py``, fixed global batch) goes through the same resize plan,
1 -> 2 -> 3 -> 2 -> 1, ``--rounds`` times, in one run:

- hosts: ``submarine job run --elastic`` on a 3-host cluster (``cluster up --hosts 3``, network namespaces),
  workers of 1536 MB on NodeManagers of 2560 MB, so each worker has a host of its own and the ring runs over
  the hosts' ``eth0``;
- loopback: the same job on a 3-NodeManager loopback cluster of the same sizes;
- stock on hosts: ``horovodrun --gloo`` elastic, started in host 0's namespace with a host discovery script
  listing N hosts (one slot each) and ``--network-interface eth0``; Horovod starts a remote worker
  with ``ssh HOST CMD``, which here is a shim running CMD on that host (``ip netns exec``), so the workers
  sit on the same three namespaces as ours.

From the scripts' step logs (time each committed step ended, ring size), per resize:
- pause: last step at the old size -> first step at the new size;
- request -> capacity: the resize request -> first step at the new size.

Prints the table and writes ``benchmarks/results/hosts.json`` and ``hosts.md``. Needs root (namespaces).
Run: ``.venv/bin/python benchmarks/bench_hosts.py [--rounds 1] [--port-base 27000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_elastic import PLAN, SCRIPT_ARGS, drive_stock, driver_log, pauses, run_plan, scale_out_phases, summarise

from submarine_elastic import env
from submarine_elastic.cluster import ClusterSpec, HostNetwork, LocalCluster
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources
from submarine_elastic.webhdfs import WebHdfs

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
HOSTS = 3
NODE_MB = 2560
#: Two do not fit one NodeManager: each worker has a host of its own.
WORKER_MB = 1536


def cluster_spec(port_base: int, hosts: bool) -> ClusterSpec:
    """The 3-host cluster, or a loopback cluster of the same NodeManager sizes."""
    if hosts:
        subnet = f"198.19.{port_base // 100 % 256}.0/24"
        return ClusterSpec(
            nodes=HOSTS, hosts=HOSTS, subnet=subnet, node_memory_mb=NODE_MB, node_vcores=4, port_base=port_base
        )
    return ClusterSpec(nodes=HOSTS, node_memory_mb=NODE_MB, node_vcores=4, port_base=port_base)


def run_ours(spec: ClusterSpec, work: Path, rounds: int, label: str) -> list[tuple[float, int, int]]:
    """The resize plan on an elastic job of the project (its files on the cluster's HDFS if it has one, as
    ``job run`` puts them); returns (request time, from, to) per resize."""
    rm_url = spec.rm_url
    name = f"bench-{label}"
    files = (
        HdfsJobFiles(WebHdfs(spec.webhdfs_url, env.settings().user()), spec.default_fs) if spec.webhdfs_url else None
    )
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py {SCRIPT_ARGS} --epochs 10000 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    req = JobRequest(
        name=name,
        launch_cmd=cmd,
        limits=Limits(1, 1, HOSTS),
        resources=WorkerResources(WORKER_MB, 1),
        rm_url=rm_url,
        workdir=REPO,
        files_uri=None if files is None else files.uri(name),
    )
    return run_plan(rm_url, req, rounds, work / "stop", label, files)


SSH_SHIM = """#!/bin/sh
# ssh [-o OPT|-p PORT|-i FILE]... HOST [-p PORT|-i FILE|-o OPT]... COMMAND: COMMAND run on HOST, a namespace
# of this machine, with its host name (what Horovod's launcher asks ssh for).
while [ $# -gt 0 ]; do case "$1" in -o|-p|-i) shift 2 ;; *) break ;; esac; done
host=$1; shift
while [ $# -gt 0 ]; do case "$1" in -o|-p|-i) shift 2 ;; *) break ;; esac; done
case "$host" in
{cases}
  *) echo "ssh shim: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'echo "$0" > /proc/sys/kernel/hostname && exec sh -c "$1"' "$host" "$*"
"""


def run_stock_on_hosts(network: HostNetwork, work: Path, rounds: int) -> list[tuple[float, int, int]]:
    """The resize plan on stock ``horovodrun`` elastic across the hosts; returns the resizes."""
    shim_dir = work / "bin"
    shim_dir.mkdir()
    cases = "\n".join(f"  {h.name}) ns={h.namespace} ;;" for h in network.all_hosts)
    (shim_dir / "ssh").write_text(SSH_SHIM.replace("{cases}", cases))
    (shim_dir / "ssh").chmod(0o755)
    hosts = work / "hosts"
    # Host 0 (where horovodrun runs) last: with only local hosts Horovod insists on loopback for Gloo.
    names = [h.name for h in network.all_hosts[1:]] + [network.host(0).name]

    def discover(n: int) -> None:
        tmp = hosts.with_suffix(".tmp")
        tmp.write_text("".join(f"{name}:1\n" for name in names[:n]))
        tmp.replace(hosts)

    discover(1)
    script = work / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts}\n")
    script.chmod(0o755)
    horovodrun = [
        str(Path(sys.executable).parent / "horovodrun"),
        "--gloo",
        "-np", "1", "--min-np", "1", "--max-np", str(HOSTS),
        "--host-discovery-script", str(script),
        "--network-interface", "eth0",
        sys.executable, str(REPO / "examples/train_elastic.py"), *SCRIPT_ARGS.split(),
        "--epochs", "10000", "--until-file", str(work / "stop"), "--log-dir", str(work / "log"),
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{shim_dir}:{os.environ['PATH']}", "HOROVOD_GLOO_TIMEOUT_SECONDS": "20"}
    cmd = network.host(0).command(horovodrun)
    with (work / "horovodrun.out").open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        try:
            return drive_stock(proc, work, rounds, discover, "stock-hosts")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            # Workers Horovod left behind on a host, if any.
            subprocess.run(["pkill", "-9", "-f", "--", f"--log-dir {work / 'log'}"], check=False)


NOTE = (
    "Request -> capacity on scale-out includes the joiner's warm-up (its process starts, imports TensorFlow, builds "
    "the model and traces its step; the driver logs `worker-K warm after N s`), which here shares the machine's "
    "two CPUs with the ring that trains on meanwhile; stock horovodrun stops its ring while a joiner starts (its "
    "pause), so its joiner has the CPUs to itself. Training time lost to a resize is the pause."
)


def table(rows: dict[str, dict[str, dict[str, float]]], key: str) -> list[str]:
    out = []
    for resize in [f"1->{PLAN[0]}", *[f"{a}->{b}" for a, b in zip(PLAN, PLAN[1:], strict=False)]]:
        cells = [str(rows[label].get(resize, {}).get(key, "-")) for label in rows]
        out.append(f"| {resize} | " + " | ".join(cells) + " |")
    return out


def phase_table(phases: dict[str, list[dict]]) -> list[str]:
    """One row per scale-out and cluster: the median of each phase over the rounds."""
    out = []
    keys = ("yarn_asked_s", "containers_s", "warm_up_s", "re_form_s")
    for resize in sorted({(p["from"], p["to"]) for rows in phases.values() for p in rows}):
        for label, rows in phases.items():
            same = [p for p in rows if (p["from"], p["to"]) == resize]
            if same:
                cells = [f"{statistics.median(p[k] for p in same):.2f}" for k in keys]
                out.append(f"| {resize[0]}->{resize[1]} | {label} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--port-base", type=int, default=27000)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_hosts: making network namespaces needs root")

    root = Path(tempfile.mkdtemp(prefix="bench-hosts-"))
    print(f"working in {root} (logs of every daemon, container and step are kept there)", flush=True)
    resizes: dict[str, list[tuple[float, int, int]]] = {}
    for label in ("hosts", "stock-hosts", "loopback"):
        (root / label).mkdir()

    cluster = LocalCluster(root / "cluster-hosts")
    spec = cluster_spec(args.port_base, hosts=True)
    cluster.up(spec, timeout=240)
    try:
        network = cluster.network(spec)
        assert network is not None
        print(f"elastic job on {HOSTS} hosts:", flush=True)
        resizes["hosts"] = run_ours(spec, root / "hosts", args.rounds, "hosts")
        print(f"stock horovodrun on the same {HOSTS} hosts:", flush=True)
        resizes["stock-hosts"] = run_stock_on_hosts(network, root / "stock-hosts", args.rounds)
    finally:
        cluster.down()

    cluster = LocalCluster(root / "cluster-loopback")
    spec = cluster_spec(args.port_base + 400, hosts=False)
    cluster.up(spec)
    try:
        print("elastic job on loopback:", flush=True)
        resizes["loopback"] = run_ours(spec, root / "loopback", args.rounds, "loopback")
    finally:
        cluster.down()

    rows = {label: summarise(pauses(root / label / "log", resizes[label])) for label in resizes}
    phases = {
        label: scale_out_phases(
            driver_log(root / f"cluster-{label}", f"bench-{label}"), root / label / "log", resizes[label]
        )
        for label in ("hosts", "loopback")
    }
    results = {
        "plan": [1, *PLAN], "rounds": args.rounds, "script_args": SCRIPT_ARGS, "worker_mb": WORKER_MB, **rows,
        "scale_out_phases": phases,
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hosts.json").write_text(json.dumps(results, indent=2) + "\n")
    labels = " | ".join(rows)
    lines = [
        "# Resize pauses across hosts: 3 hosts vs loopback vs stock horovodrun on the same hosts (one run)",
        "",
        f"Plan 1->{'->'.join(map(str, PLAN))} x {args.rounds}; fixed global batch 64; one worker a host; "
        f"2 CPUs shared by every host; medians. Command: `{shlex.join(['bench_hosts.py', *sys.argv[1:]])}`.",
        "",
        "Pause (s): last step at the old size -> first step at the new size",
        "",
        f"| resize | {labels} |",
        "|---|" + "---|" * len(rows),
        *table(rows, "pause_median_s"),
        "",
        "Request -> capacity (s): the resize request -> first step at the new size",
        "",
        f"| resize | {labels} |",
        "|---|" + "---|" * len(rows),
        *table(rows, "decision_to_capacity_median_s"),
        "",
        NOTE,
        "",
        "Where ours' scale-out request -> capacity goes (s, medians; from the driver's log and the step log):",
        "the driver gives YARN the count; YARN allocates, localizes and starts the joiner's container and its",
        "agent attaches; the joiner warms up (TensorFlow's import, the model, its traced step); the ring re-forms",
        "with it and trains its first step.",
        "",
        "| resize | cluster | YARN asked | container + agent | warm-up | re-form + first step |",
        "|---|---|---|---|---|---|",
        *phase_table(phases),
    ]
    (RESULTS / "hosts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
