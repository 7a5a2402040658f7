"""``submarine replay WORKLOAD``: a workload's jobs replayed live on the pseudo-cluster, on emulated GPUs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.console import Console

from submarine_elastic.cluster import ClusterError, LocalCluster
from submarine_elastic.replay.plan import ReplayError, plan_replay
from submarine_elastic.replay.records import ReplayRunError
from submarine_elastic.replay.report import summary, table, write
from submarine_elastic.replay.runner import INTERVAL_S, STATIC, run_policies

console = Console()

DEFAULT_POLICIES = (STATIC, "goodput+goodput")


@click.command()
@click.argument("workload")
@click.option(
    "--policy",
    "policies",
    multiple=True,
    help=f"Run the workload under this policy: static (FIFO), tiresias (whole jobs suspended and resumed from "
    f"their checkpoints), or one the controller runs (goodput+goodput, greedy+fair-share, ...); repeat to run "
    f"each in turn [default: {' and '.join(DEFAULT_POLICIES)}].",
)
@click.option(
    "--time-scale",
    type=float,
    default=0.04,
    show_default=True,
    help="Arrival times and every job's work are multiplied by this (0 < S <= 1), so that hours run in minutes.",
)
@click.option(
    "--arrival-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Arrival times are further multiplied by this (< 1: a denser, more contended load).",
)
@click.option("--sample", type=click.IntRange(min=1), default=None, help="Replay only this many jobs, drawn by --seed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Logs, replay.json, replay.md and replay.png [default: a new temporary directory].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800,
    show_default=True,
    help="Seconds after the last arrival the jobs may take to end; then they are killed and the run fails.",
)
@click.option(
    "--compare-sim",
    is_flag=True,
    help="Also run the simulator on the same jobs under each policy, with the costs each live run measured, "
    "and print live and simulated mean JCT side by side.",
)
@click.option(
    "--cluster-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="The cluster's directory."
)
def replay(
    workload: str,
    policies: tuple[str, ...],
    time_scale: float,
    arrival_scale: float,
    sample: int | None,
    seed: int,
    out: Path | None,
    timeout: float,
    compare_sim: bool,
    cluster_dir: Path | None,
) -> None:
    """Replay a workload live on the pseudo-cluster, on emulated GPUs, static against elastic.

    WORKLOAD is a simulator workload CSV, or a name such as workload-1; the pseudo-cluster must run, with GPUs.
    Each job is submitted at its arrival time as `submarine job run` would, one emulated GPU a worker (its
    steps held for its application's measured GPU step time), training the samples its application's profile
    needs at its batch, scaled by --time-scale. Under each --policy in turn; writes each job's JCT, queueing
    and GPUs over time, and per policy the mean, median and p95 JCT, makespan and GPU use. Interrupted, it
    kills what it submitted.
    """
    cluster = LocalCluster(cluster_dir)
    try:
        if not cluster.running_daemons():
            raise click.ClickException(
                "no pseudo-cluster runs: start one with `submarine cluster up --gpus-per-node 4`"
            )
        spec = cluster.spec()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    chosen = policies or DEFAULT_POLICIES
    try:
        plan = plan_replay(
            workload,
            time_scale=time_scale,
            arrival_scale=arrival_scale,
            nodes=spec.nodes,
            gpus_per_node=spec.gpus_per_node,
            sample=sample,
            seed=seed,
        )
    except (ReplayError, ReplayRunError) as exc:
        raise click.ClickException(str(exc)) from exc
    out = out or Path(tempfile.mkdtemp(prefix="submarine-replay-"))
    console.print(f"replay: {plan.describe()}")
    say = lambda line: console.print(line, soft_wrap=True, highlight=False)  # noqa: E731
    try:
        runs = run_policies(plan, chosen, rm_url=spec.rm_url, out=out, say=say, heading=console.rule, timeout_s=timeout)
    except ReplayRunError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        console.print("interrupted: the jobs it had submitted were killed")
        raise SystemExit(130) from None
    for run in runs:
        s = summary(run)
        console.print(
            f"{run.policy}: {s['finished']}/{s['jobs']} jobs finished, mean JCT {_seconds(s['mean_jct_s'])}, "
            f"makespan {_seconds(s['makespan_s'])} (emulated)"
        )
        for name, problems in dict(s["problems"]).items():  # type: ignore[call-overload]
            console.print(f"[red]{name}: {'; '.join(problems)}[/red]")
    sims = None
    if compare_sim:
        from submarine_elastic.replay.simulate import compare_runs

        sims, lines = compare_runs(runs, INTERVAL_S)
        for line in lines:
            console.print(line, highlight=False)
    paths = write(runs, out, sims)
    console.print(table([summary(r) for r in runs], sims), soft_wrap=True)
    console.print(f"results: {paths['json']}, picture: [bold]{paths['png']}[/bold]")
    if any(summary(r)["problems"] for r in runs):
        raise SystemExit(1)


def _seconds(value: object) -> str:
    return f"{value:.0f} s" if isinstance(value, float | int) else "-"
