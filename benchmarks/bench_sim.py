"""Simulator speed, and the headline table: mean JCT of each scheduler relative to static FIFO.

Speed: the 160-job ``workload-1`` on 64 GPUs (16 nodes x 4) under each scheduler, ``--repeat`` times; the
figure is jobs x simulated hours (first arrival to last completion) per wall-clock second, median of runs.

Headline: every scheduler on the Pollux workloads 1-4 (tuned replica counts and batch sizes) and their
"realistic" variants (what users typically submit), on 16x4, with the resize costs the live system
measures (ResizeCosts defaults: benchmarks/results/elastic.md) and again with 30 s for every change (what
checkpoint-restart systems pay, the cost the Pollux paper's simulator charges). Each cell is the
scheduler's mean JCT divided by static FIFO's on the same workload, measured side by side in this run.

Writes ``benchmarks/results/sim.json``, ``sim.md`` and PNGs under ``benchmarks/results/sim/``.

Run: ``.venv/bin/python benchmarks/bench_sim.py [--repeat 3] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import time
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.sim import (
    ClusterConfig,
    ResizeCosts,
    SimConfig,
    SimResult,
    TraceCatalog,
    load_scheduler,
    load_workload,
    plots,
    simulate,
)

RESULTS = Path(__file__).resolve().parent / "results"
CLUSTER = ClusterConfig(16, 4)
SCHEDULERS = (
    "fifo",
    "backfill",
    "tiresias",
    "greedy+fair-share",
    "greedy+goodput",
    "scaling-efficiency+fair-share",
    "utility(deadline_s=3600)+goodput",
)
SPEED_SCHEDULERS = ("fifo", "tiresias", "greedy+goodput", "scaling-efficiency+fair-share")
COSTS = {"live": ResizeCosts(), "restart-30s": ResizeCosts.restart(30.0)}


def workloads(quick: bool) -> list[tuple[str, Path]]:
    data = env.pollux_data_dir()
    numbers = (1,) if quick else (1, 2, 3, 4)
    out = [(f"workload-{n}", data / "workloads" / f"workload-{n}.csv") for n in numbers]
    out += [(f"realistic/workload-{n}", data / "workloads-realistic" / f"workload-{n}.csv") for n in numbers]
    return out


def run(path: Path, name: str, spec: str, costs: ResizeCosts, catalog: TraceCatalog) -> SimResult:
    jobs = load_workload(path, catalog.names())
    return simulate(
        jobs, CLUSTER, load_scheduler(spec), catalog=catalog, config=SimConfig(costs=costs), workload_name=name
    )


def bench_speed(repeat: int, catalog: TraceCatalog) -> dict[str, dict[str, float]]:
    path = env.pollux_data_dir() / "workloads" / "workload-1.csv"
    out: dict[str, dict[str, float]] = {}
    run(path, "workload-1", "fifo", ResizeCosts(), catalog)  # warm up: load the traces, fill the caches
    for spec in SPEED_SCHEDULERS:
        walls, speeds, sim_h = [], [], 0.0
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = run(path, "workload-1", spec, ResizeCosts(), catalog)
            walls.append(time.perf_counter() - t0)
            sim_h = result.summary.makespan_s / 3600
            speeds.append(result.summary.jobs * sim_h / walls[-1])
        out[spec] = {
            "wall_s_median": round(statistics.median(walls), 3),
            "wall_s_max": round(max(walls), 3),
            "simulated_hours": round(sim_h, 2),
            "rounds": result.summary.rounds,
            "job_hours_per_s": round(statistics.median(speeds), 1),
        }
        print(f"  speed {spec:32s} {out[spec]['wall_s_median']:6.2f} s   {out[spec]['job_hours_per_s']:9,.0f} job·h/s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per scheduler for the speed figure")
    parser.add_argument("--quick", action="store_true", help="workload 1 only (both variants)")
    parser.add_argument("--markdown-only", action="store_true", help="rewrite sim.md from sim.json, run nothing")
    args = parser.parse_args()
    if args.markdown_only:
        (RESULTS / "sim.md").write_text(_markdown(json.loads((RESULTS / "sim.json").read_text())))
        return
    logging.getLogger("submarine_elastic.policy").setLevel(logging.ERROR)
    catalog = TraceCatalog()
    plot_dir = RESULTS / "sim"
    plot_dir.mkdir(parents=True, exist_ok=True)

    print(f"simulator speed: workload-1 (160 jobs) on {CLUSTER} ({CLUSTER.total_gpus} GPUs)")
    speed = bench_speed(args.repeat, catalog)

    table: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for cost_name, costs in COSTS.items():
        print(f"headline, resize costs {cost_name}")
        table[cost_name] = {}
        for name, path in workloads(args.quick):
            results = {spec: run(path, name, spec, costs, catalog) for spec in SCHEDULERS}
            base = results["fifo"].summary.mean_jct_s
            table[cost_name][name] = {
                spec: {
                    "mean_jct_h": round(r.summary.mean_jct_s / 3600, 3),
                    "vs_fifo": round(r.summary.mean_jct_s / base, 3),
                    "p99_jct_h": round(r.summary.p99_jct_s / 3600, 2),
                    "makespan_h": round(r.summary.makespan_s / 3600, 2),
                    "utilisation": round(r.summary.mean_utilisation, 3),
                    "finished": r.summary.finished,
                }
                for spec, r in results.items()
            }
            print(f"  {name:24s} " + "  ".join(f"{s}={table[cost_name][name][s]['vs_fifo']:.2f}" for s in SCHEDULERS))
            if cost_name == "live" and name in ("workload-1", "realistic/workload-1"):
                stem = name.replace("/", "-")
                plots.jct_cdf(results, plot_dir / f"jct_cdf_{stem}.png")
                plots.utilisation(results, plot_dir / f"utilisation_{stem}.png", CLUSTER.total_gpus)
                plots.workers_per_job(results["greedy+goodput"], plot_dir / f"workers_greedy+goodput_{stem}.png")

    report = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "cluster": str(CLUSTER),
        "speed": speed,
        "headline": table,
    }
    (RESULTS / "sim.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "sim.md").write_text(_markdown(report))
    print(f"wrote {RESULTS / 'sim.json'}, {RESULTS / 'sim.md'} and plots in {plot_dir}")


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _markdown(report: dict) -> str:
    lines = [
        "# Simulator benchmark",
        "",
        f"Machine: {report['machine']['platform']}, Python {report['machine']['python']}, "
        f"{report['machine']['cpus']} CPUs. Cluster {report['cluster']} (64 GPUs). "
        "Produced by `benchmarks/bench_sim.py`.",
        "",
        "## Speed: workload-1 (160 jobs), median of runs",
        "",
        "| scheduler | wall s | simulated h | rounds | jobs x simulated h per wall s |",
        "|---|---:|---:|---:|---:|",
    ]
    for spec, s in report["speed"].items():
        lines.append(
            f"| {spec} | {s['wall_s_median']:.2f} | {s['simulated_hours']:.1f} | {s['rounds']} | "
            f"{s['job_hours_per_s']:,.0f} |"
        )
    for cost_name, rows in report["headline"].items():
        lines += [
            "",
            f"## Mean JCT relative to static FIFO, resize costs: {cost_name}",
            "",
            "| workload | FIFO mean JCT h | " + " | ".join(SCHEDULERS[1:]) + " |",
            "|---|---:|" + "---:|" * (len(SCHEDULERS) - 1),
        ]
        for name, cells in rows.items():
            lines.append(
                f"| {name} | {cells['fifo']['mean_jct_h']:.2f} | "
                + " | ".join(f"{cells[s]['vs_fifo']:.2f}" for s in SCHEDULERS[1:])
                + " |"
            )
        means = {s: statistics.geometric_mean(rows[n][s]["vs_fifo"] for n in rows) for s in SCHEDULERS[1:]}
        lines.append("| geometric mean | | " + " | ".join(f"{means[s]:.2f}" for s in SCHEDULERS[1:]) + " |")
    lines += _pollux_style(report["headline"].get("live", {}))
    return "\n".join(lines) + "\n"


def _pollux_style(rows: dict) -> list[str]:
    """The Pollux paper's comparison: elastic policies given the realistic (user-submitted) configurations
    against Tiresias given the tuned ones, on the same jobs and arrivals."""
    elastic = [s for s in SCHEDULERS if "+" in s]
    pairs = [(n, f"realistic/{n}") for n in rows if not n.startswith("realistic/") and f"realistic/{n}" in rows]
    if not pairs:
        return []
    lines = [
        "",
        "## Elastic on realistic configurations vs Tiresias on tuned ones (live costs)",
        "",
        "The comparison the Pollux paper headlines (37-50% lower mean JCT than tuned baselines): each cell is",
        "the policy's mean JCT on `realistic/workload-N` divided by Tiresias' on the tuned `workload-N`.",
        "",
        "| workload | Tiresias tuned mean JCT h | " + " | ".join(elastic) + " |",
        "|---|---:|" + "---:|" * len(elastic),
    ]
    for tuned, realistic in pairs:
        base = rows[tuned]["tiresias"]["mean_jct_h"]
        cells = " | ".join(f"{rows[realistic][s]['mean_jct_h'] / base:.2f}" for s in elastic)
        lines.append(f"| {tuned} | {base:.2f} | {cells} |")
    return lines


if __name__ == "__main__":
    main()
