"""Chaos: a live workload of elastic jobs under the controller, with faults from the catalogue injected at
random times into random targets for ``--minutes``, and the checker over what was recorded.

A cluster of its own (``--port-base``): by default on 3 hosts (network namespaces; root), each with a
NodeManager, an HDFS DataNode and 4 stand-in GPUs, ZooKeeper, the ResourceManager and the NameNode on host 0;
``--hosts 0`` is 2 NodeManagers on loopback. ``--jobs`` jobs drawn from ``--workload``'s rows that fit the GPUs
(``--seed``), each job's work scaled by ``--time-scale`` and the arrivals spread over the first 90 % of the run;
``--policy`` (default goodput+goodput) sizes them. A fault every ``--every`` seconds on average (kill -9 and
SIGSTOP of training processes, agents, drivers, ApplicationMasters, NodeManagers, the ResourceManager,
ZooKeeper, the NameNode, DataNodes and the controller; a host killed or cut off; a job of another tenant in the
prod queue that YARN preempts the replay's workers for (``--prod-share``; the replay's jobs run in research); an
operator's flex and kill; ``--kind`` to choose), each held to its recovery deadline
(``submarine_elastic.chaos.catalogue``). Emulated accelerators, as in ``bench_live``.

Prints the table (fault kind, injected, recovered, median and worst recovery, violations) and every violation;
writes ``benchmarks/results/chaos.json`` and ``chaos.md`` (``--out``). Exits 1 when the checker found a
violation.

Run: ``.venv/bin/python benchmarks/bench_chaos.py [--minutes 30] [--every 16] [--seed 0] [--jobs 16]``;
``--minutes 4 --every 20 --jobs 4`` is the short run.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import platform
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(REPO))

from submarine_elastic.chaos import ChaosResult, ChaosRun, catalogue  # noqa: E402
from submarine_elastic.chaos.check import table  # noqa: E402
from submarine_elastic.cluster import LocalCluster, QueueSpec  # noqa: E402
from submarine_elastic.replay.plan import ReplayPlan, fitting_sample, plan_replay  # noqa: E402
from submarine_elastic.replay.runner import LiveReplay, interrupted_by, replay_cluster_spec  # noqa: E402
from submarine_elastic.replay.watch import MachineWatch  # noqa: E402

#: The arrivals end this far into the run, so that jobs train under faults until its end (with 0.7 and 16 jobs of
#: time scale 0.06, the last job ended 22.7 minutes into a 30-minute run, and the faults with it).
ARRIVALS_WITHIN = 0.9
GPUS_PER_NODE = 4


def spread_plan(
    workload: str, jobs: int, seed: int, time_scale: float, seconds: float, folder: Path, nodes: int = 2
) -> ReplayPlan:
    """``jobs`` jobs of ``workload`` on ``nodes`` x :data:`GPUS_PER_NODE` GPUs, the first arriving at the start
    and the last :data:`ARRIVALS_WITHIN` of ``seconds`` in."""
    path = fitting_sample(workload, jobs, nodes * GPUS_PER_NODE, seed, folder / "workload.csv")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    first = min(float(r["time"]) for r in rows)
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows({**r, "time": f"{float(r['time']) - first:g}"} for r in rows)
    plan = plan_replay(str(path), time_scale=time_scale, nodes=nodes, gpus_per_node=GPUS_PER_NODE)
    last = max(j.arrival_s for j in plan.jobs)
    scale = ARRIVALS_WITHIN * seconds / last if last > 0 else 1.0
    return plan_replay(str(path), time_scale=time_scale, arrival_scale=scale, nodes=nodes, gpus_per_node=GPUS_PER_NODE)


def main() -> None:
    kinds = [k.name for k in catalogue(random.Random(0))]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected (default 30)")
    p.add_argument("--every", type=float, default=16.0, help="mean seconds between faults (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=16)
    p.add_argument("--workload", default="workload-1")
    p.add_argument("--time-scale", type=float, default=0.06)
    p.add_argument("--policy", default="goodput+goodput")
    p.add_argument("--kind", dest="kinds", action="append", default=[], choices=kinds, metavar="KIND",
                   help=f"a fault kind to inject (repeatable; default every one): {', '.join(kinds)}")  # fmt: skip
    p.add_argument("--hosts", type=int, default=3,
                   help="hosts (network namespaces, one NodeManager and DataNode each, HDFS on; needs root) "
                        "the cluster spans (default 3); 0: loopback, 2 NodeManagers, no HDFS")  # fmt: skip
    p.add_argument("--prod-share", type=int, default=25,
                   help="percent of the cluster guaranteed to a prod queue whose jobs (the prod-job fault) YARN "
                        "preempts the replay's workers for; the replay's jobs run in research, the rest "
                        "(default 25; 0: one queue, no preemption)")  # fmt: skip
    p.add_argument("--port-base", type=int, default=29400)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.minutes <= 0 or args.every <= 0:
        p.error("--minutes and --every must be above 0")
    if not 0 <= args.prod_share < 100:
        p.error(f"--prod-share must be 0..99 percent, got {args.prod_share}")
    # ^C and SIGTERM interrupt the run: it heals, kills its jobs, writes what it got to and tears the cluster down.
    with interrupted_by(signal.SIGINT, signal.SIGTERM):
        run(args)


def run(args: argparse.Namespace) -> None:
    queues = (QueueSpec("prod", args.prod_share), QueueSpec("research", 100 - args.prod_share))
    root = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    nodes = args.hosts or 2
    plan = spread_plan(args.workload, args.jobs, args.seed, args.time_scale, args.minutes * 60, root, nodes)
    print(f"bench_chaos: {plan.describe()}; a fault every {args.every:g} s for {args.minutes:g} min "
          f"(seed {args.seed}); logs in {root}", flush=True)  # fmt: skip
    cluster = LocalCluster(root / "cluster")
    started = time.time()
    with MachineWatch() as watch:
        spec = dataclasses.replace(
            replay_cluster_spec(args.port_base, nodes, GPUS_PER_NODE),
            hosts=args.hosts,
            hdfs=bool(args.hosts),
            queues=queues if args.prod_share else (),
        )
        try:
            rm_url = cluster.up(spec, progress=lambda m: print(f"  {m}", flush=True))
            replay = LiveReplay(
                plan, args.policy, rm_url=rm_url, out=root / "run", say=lambda line: print(line, flush=True),
                timeout_s=args.minutes * 60 + 1800, checkpoints=True, queue="research" if args.prod_share else None,
            )  # fmt: skip
            chaos = ChaosRun(
                replay, cluster, duration_s=args.minutes * 60, every_s=args.every, seed=args.seed, kinds=args.kinds,
                say=lambda line: print(line, flush=True), prod_queue="prod" if args.prod_share else None,
            )  # fmt: skip
            result = chaos.run()
        finally:
            cluster.down()
    machine = {**watch.as_dict(), "python": platform.python_version()}
    write(args, plan, result, machine, time.time() - started, root)
    sys.exit(130 if result.interrupted_s is not None else 1 if result.violations else 0)


def write(
    args: argparse.Namespace, plan: ReplayPlan, result: ChaosResult, machine: dict[str, object], wall_s: float,
    root: Path,
) -> None:  # fmt: skip
    shown = table(result.faults, result.violations)
    print(f"\n{shown}\n")
    for violation in result.violations:
        print(f"violation: {violation}")
    finished = result.succeeded
    print(f"{finished} of {len(plan.jobs)} jobs SUCCEEDED; {len(result.violations)} violations; emulated GPUs")
    args.out.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": "bench_chaos",
        "accelerators": "emulated",
        "plan": plan.describe(),
        "minutes": args.minutes,
        **result.as_dict(),
        "machine": machine,
        "wall_s": round(wall_s, 1),
        "logs": str(root),
    }
    (args.out / "chaos.json").write_text(json.dumps(data, indent=2) + "\n")
    ran = f"{args.minutes:g} minutes"
    if result.interrupted_s is not None:
        ran = f"{result.interrupted_s / 60:.1f} of {args.minutes:g} minutes (interrupted: not a complete run)"
        print(f"interrupted after {result.interrupted_s:.0f} s: the table and the checks cover what ran")
    md = [
        f"# Chaos: {len(result.faults)} faults in {ran} (seed {result.seed})",
        "",
        f"{plan.describe()}; policy {result.policy}; a fault every {result.every_s:g} s on average. "
        f"Emulated GPUs. {finished} of {len(plan.jobs)} jobs SUCCEEDED. Peak memory "
        f"{machine['peak_memory_mb']} MB, load mean {machine['load_mean']}, {wall_s / 60:.1f} min.",
        "",
        "```",
        shown,
        "```",
        "",
        *(f"- violation: {v}" for v in result.violations),
    ]
    (args.out / "chaos.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
