"""The mission, live: a workload replayed on the pseudo-cluster under every policy side by side, on emulated GPUs,
with the simulator's prediction of the same runs beside it.

A cluster of its own (2 nodes x 4 stand-in GPUs, ``--port-base``); ``--jobs`` jobs (default 12) drawn from
``--workload``'s rows that fit 8 GPUs. The sample is the first seed from 0 up whose offered load (GPU-seconds
of work at the submitted sizes over the GPU-seconds of the arrivals) is at least ``--min-load`` (1.0: a
cluster that has more work than GPUs while the jobs arrive; ``--seed`` overrides). Every job's work and arrival
are scaled by ``--time-scale``, arrivals further by ``--arrival-scale`` (0.12 and 1/3: about 20 minutes of
arrivals). Then ``submarine replay``'s runs, one policy after the other on the same cluster (by default every
policy side by side: static FIFO, tiresias — whole jobs suspended and resumed from their checkpoints — and
goodput+goodput), and the simulator on the same plan under each policy with the costs that policy's live run
measured (tiresias: its restarts too).

Targets (the issue's): live goodput+goodput's mean JCT at most 0.70 of static's and at most 0.85 of
tiresias'; the simulator within +-15 % of the live mean JCT for every policy, ranking them the same; every job
finishes with every committed step once and every sample once per epoch. Each row says how far from its target
it is.

Writes ``benchmarks/results/live.json``, ``live.md`` and ``live.png`` (every job's GPUs over time per
policy); every job's series (``replay.json``) stays in the run's temporary directory with its logs.
Emulated accelerators: the ratios are the result, not the absolute seconds.

Run: ``.venv/bin/python benchmarks/bench_live.py [--jobs 12] [--quick] [--policy static --policy tiresias]``;
``--report DIR`` (with the run's ``--time-scale`` and ``--arrival-scale``) works the figures out again from an
earlier run's directory, running nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(REPO))

from submarine_elastic.cluster import LocalCluster  # noqa: E402
from submarine_elastic.replay.plan import ReplayPlan, fitting_sample, plan_replay  # noqa: E402
from submarine_elastic.replay.records import LiveRun, load_runs  # noqa: E402
from submarine_elastic.replay.report import summary, table, write  # noqa: E402
from submarine_elastic.replay.runner import (  # noqa: E402
    INTERVAL_S,
    STATIC,
    TIRESIAS,
    replay_cluster_spec,
    run_policies,
)
from submarine_elastic.replay.simulate import measured_costs, simulate_plan  # noqa: E402
from submarine_elastic.replay.watch import MachineWatch  # noqa: E402

ELASTIC_OVER_STATIC = 0.70
ELASTIC_OVER_TIRESIAS = 0.85
#: The policies side by side, by default: the two baselines, then the elastic one.
POLICIES = (STATIC, TIRESIAS, "goodput+goodput")
SIM_WITHIN = 0.15


def choose_plan(args: argparse.Namespace, folder: Path) -> tuple[ReplayPlan, int]:
    seeds = [args.seed] if args.seed is not None else range(50)
    for seed in seeds:
        path = fitting_sample(args.workload, args.jobs, 8, seed, folder / "workload.csv")
        plan = plan_replay(
            str(path),
            time_scale=args.time_scale,
            arrival_scale=args.arrival_scale,
            nodes=2,
            gpus_per_node=4,
        )
        if args.seed is not None or plan.offered_load() >= args.min_load:
            return plan, seed
    raise SystemExit(f"no seed in 0..49 gives an offered load of {args.min_load}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="workload-1")
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--min-load", type=float, default=1.0)
    p.add_argument("--time-scale", type=float, default=0.12)
    p.add_argument("--arrival-scale", type=float, default=1 / 3)
    p.add_argument("--policy", dest="policies", action="append", default=None)
    p.add_argument("--quick", action="store_true", help="5 jobs (the demo's size)")
    p.add_argument("--port-base", type=int, default=28600)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="work the figures out again from an earlier run's directory (its report/replay.json), run nothing; "
        "the machine's figures come from --out's live.json",
    )
    args = p.parse_args()
    if args.quick:
        args.jobs = 5
    if args.report is not None:
        root = args.report
        plan = plan_replay(
            str(root / "workload.csv"),
            time_scale=args.time_scale,
            arrival_scale=args.arrival_scale,
            nodes=2,
            gpus_per_node=4,
        )
        earlier = json.loads((args.out / "live.json").read_text()) if (args.out / "live.json").exists() else {}
        runs = load_runs(root / "report" / "replay.json", plan)
        seed = earlier.get("seed", args.seed)
        report(args, plan, seed, runs, root, earlier.get("machine", {}), float(earlier.get("wall_s", 0.0)))
        return
    policies = args.policies or list(POLICIES)
    root = Path(tempfile.mkdtemp(prefix="bench-live-"))
    plan, seed = choose_plan(args, root)
    print(f"bench_live: {plan.describe()} (seed {seed})", flush=True)
    cluster = LocalCluster(root / "cluster")
    runs: list[LiveRun] = []
    started = time.time()
    with MachineWatch() as watch:
        rm_url = cluster.up(replay_cluster_spec(args.port_base), progress=lambda m: print(f"  {m}", flush=True))
        try:
            runs = run_policies(
                plan, policies, rm_url=rm_url, out=root, say=lambda line: print(line, flush=True),
                heading=lambda line: print(f"--- {line}", flush=True), timeout_s=3600,
            )  # fmt: skip
        finally:
            cluster.down()
    machine = {**watch.as_dict(), "cores": _cores(), "python": platform.python_version()}
    report(args, plan, seed, runs, root, machine, time.time() - started)


def report(
    args: argparse.Namespace,
    plan: ReplayPlan,
    seed: int | None,
    runs: list[LiveRun],
    root: Path,
    machine: dict[str, object],
    wall_s: float,
) -> None:
    """The simulator beside each run, the targets, and the results files (live.json, live.md, live.png)."""
    sims: dict[str, float] = {}
    costs: dict[str, str] = {}
    for run in runs:
        measured = measured_costs([run])
        costs[run.policy] = measured.describe()
        sims[run.policy] = simulate_plan(plan, run.policy, measured.costs(), INTERVAL_S).summary.mean_jct_s
    # A policy not run live (--policy) still has the simulator's figure, with the elastic runs' costs.
    elastic_costs = measured_costs([r for r in runs if r.policy not in (STATIC, TIRESIAS)] or runs).costs()
    sim_only = {
        policy: simulate_plan(plan, policy, elastic_costs, INTERVAL_S).summary.mean_jct_s
        for policy in POLICIES
        if policy not in sims
    }
    summaries = [summary(run) for run in runs]
    verdicts = targets(summaries, sims)
    args.out.mkdir(parents=True, exist_ok=True)
    # Every job's series stay with the run's logs; the repository keeps the figures and the picture.
    paths = write(runs, root / "report", sims)
    picture = args.out / "live.png"
    shutil.copyfile(paths["png"], picture)
    result = {
        "benchmark": "bench_live",
        "accelerators": "emulated",
        "workload": args.workload,
        "seed": seed,
        "jobs": args.jobs,
        "time_scale": args.time_scale,
        "arrival_scale": args.arrival_scale,
        "offered_load": round(plan.offered_load(), 3),
        "plan": [j.__dict__ for j in plan.jobs],
        "runs": summaries,
        "simulated_mean_jct_s": {k: round(v, 1) for k, v in sims.items()},
        "simulated_only_mean_jct_s": {k: round(v, 1) for k, v in sim_only.items()},
        "measured_costs": costs,
        "targets": verdicts,
        "machine": machine,
        "wall_s": round(wall_s, 1),
        "picture": picture.name,
        "per_job_results": str(paths["json"]),
    }
    (args.out / "live.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        f"# Live replay: {plan.describe()}",
        "",
        table(summaries, sims),
        "",
        *(
            [f"Simulator only (not run live here): {', '.join(f'{k} {v:.0f} s' for k, v in sim_only.items())}.", ""]
            if sim_only
            else []
        ),
        *[f"- {line}" for line in verdicts],
        "",
        *[f"- costs measured live, {k}: {v}" for k, v in costs.items()],
        "",
        f"Machine: peak memory in use {float(machine.get('peak_memory_mb', 0)) / 1024:.1f} GiB (before "
        f"{float(machine.get('memory_before_mb', 0)) / 1024:.1f}), load average mean {machine.get('load_mean')}, "
        f"max {machine.get('load_max')}; wall {wall_s / 60:.1f} min.",
    ]
    (args.out / "live.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def targets(summaries: list[dict[str, object]], sims: dict[str, float]) -> list[str]:
    by = {str(s["policy"]): s for s in summaries}
    lines = []
    baselines = {STATIC: ELASTIC_OVER_STATIC, TIRESIAS: ELASTIC_OVER_TIRESIAS}
    for policy, s in by.items():
        live = s.get("mean_jct_s")
        for baseline, target in baselines.items():
            base = by.get(baseline, {}).get("mean_jct_s")
            if policy not in baselines and isinstance(live, float) and isinstance(base, float):
                ratio = live / base
                ok = "met" if ratio <= target else "MISSED"
                lines.append(f"{policy} / {baseline} mean JCT live: {ratio:.3f} (target <= {target}): {ok}")
        sim = sims.get(policy)
        if isinstance(live, float) and sim:
            off = sim / live - 1
            ok = "met" if abs(off) <= SIM_WITHIN else "MISSED"
            lines.append(f"{policy}: simulated {sim:.0f} s against live {live:.0f} s: {off:+.1%} (target +-15 %): {ok}")
        problems = s.get("problems")
        lines.append(
            f"{policy}: {s['finished']}/{s['jobs']} jobs finished"
            + (f", problems: {problems}" if problems else ", every step and sample once")
        )
    live_rank = sorted(by, key=lambda k: by[k].get("mean_jct_s") or float("inf"))
    sim_rank = sorted(sims, key=lambda k: sims[k])
    lines.append(f"ranking live {live_rank}, simulated {sim_rank}: {'same' if live_rank == sim_rank else 'DIFFERENT'}")
    return lines


def _cores() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    main()
