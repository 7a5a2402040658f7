"""``submarine sim run``: replay a workload on a simulated GPU cluster under one or more schedulers."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from submarine_elastic.cluster.api import QueueSpec
from submarine_elastic.cluster.queues import parse_queues
from submarine_elastic.policy import QueueShare
from submarine_elastic.sim import (
    BatchRule,
    ClusterConfig,
    JobSpec,
    ResizeCosts,
    SimConfig,
    SimError,
    SimResult,
    TraceCatalog,
    load_scheduler,
    load_workload,
    plots,
    resolve_workload,
    simulate,
)
from submarine_elastic.sim.output import write_result
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals

console = Console()
if not console.is_terminal:
    console = Console(width=160)  # a pipe or a file: do not squeeze the table into 80 columns
err = Console(stderr=True)

DEFAULT_POLICIES = ("fifo", "goodput+goodput")


def slug(spec: str) -> str:
    """A directory name for a scheduler spec (``greedy(x=1)+goodput`` becomes ``greedy_x_1_+goodput``)."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", spec).strip("_") or "scheduler"


def quiet_policy_logs() -> None:
    """The policy engine logs every decision at INFO and every refusal at WARNING: live, that is a job's
    timeline; over thousands of simulated rounds it is noise. Keep it unless -vv asked for debug output."""
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("submarine_elastic.policy").setLevel(logging.ERROR)


def load_jobs(
    workload: str, data_dir: Path | None, sample: int | None, seed: int, arrival_scale: float
) -> tuple[list[JobSpec], TraceCatalog, str]:
    """The workload's jobs (sampled / re-timed as asked), the trace catalog, and a display name.

    Raises:
        click.ClickException: the workload or the traces cannot be read, or the options are bad.
    """
    catalog = TraceCatalog(data_dir)
    try:
        path = resolve_workload(workload, catalog.data_dir)
        jobs = load_workload(path, catalog.names())
        if sample is not None:
            jobs = sample_jobs(jobs, sample, seed)
        if arrival_scale != 1.0:
            jobs = scale_arrivals(jobs, arrival_scale)
    except (SimError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    return jobs, catalog, path.stem if path.parent.name == "workloads" else f"{path.parent.name}/{path.stem}"


def summary_table(results: dict[str, SimResult], title: str) -> Table:
    table = Table(title=title)
    for col in ("scheduler", "done", "mean JCT", "vs first", "median", "p99", "makespan", "queueing", "util"):
        table.add_column(col, justify="left" if col == "scheduler" else "right")
    for col in ("resizes", "preempt", "wall", "job·h/s"):
        table.add_column(col, justify="right")
    base = next(iter(results.values())).summary.mean_jct_s if results else 1.0
    for name, result in results.items():
        s = result.summary
        table.add_row(
            name,
            f"{s.finished}/{s.jobs}",
            f"{s.mean_jct_s / 3600:.2f} h",
            f"{s.mean_jct_s / base:.2f}",
            f"{s.median_jct_s / 3600:.2f} h",
            f"{s.p99_jct_s / 3600:.2f} h",
            f"{s.makespan_s / 3600:.1f} h",
            f"{s.mean_queueing_s / 3600:.2f} h",
            f"{s.mean_utilisation:.0%}",
            str(s.resizes),
            str(s.preemptions),
            f"{s.wall_s:.1f} s",
            f"{s.speed:,.0f}",
        )
    return table


def queue_shares(jobs: list[JobSpec], queues: tuple[QueueSpec, ...]) -> tuple[QueueShare, ...]:
    """``--queues`` as the policies take them; every job's queue must be one of them.

    Raises:
        click.ClickException: a job names a queue that ``--queues`` does not have (naming both).
    """
    names = [q.name for q in queues]
    if queues:
        for job in jobs:
            if job.queue is not None and job.queue not in names:
                raise click.ClickException(
                    f"job {job.name!r} is in queue {job.queue!r}, which --queues does not have ({', '.join(names)})"
                )
    return tuple(QueueShare(q.name, q.capacity / 100, q.max_capacity / 100) for q in queues)


def _queues(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[QueueSpec, ...]:
    try:
        return parse_queues(value) if value else ()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


@click.group()
def sim() -> None:
    """Trace-driven cluster simulator (job physics measured by Pollux, OSDI 2021)."""


@sim.command()
@click.option(
    "--workload",
    "-w",
    default="workload-1",
    show_default=True,
    help="A workload CSV, or a name in the Pollux data: workload-N, realistic/workload-N.",
)
@click.option("--cluster", "-c", "cluster_text", default="16x4", show_default=True, help="NODESxGPUS_PER_NODE.")
@click.option(
    "--policy",
    "-p",
    "policies",
    multiple=True,
    help="Scheduler, repeatable: fifo, backfill, tiresias, or JOB_POLICY[+ARBITER] as the controller takes "
    "them (goodput+goodput, greedy+fair-share, scaling-efficiency+fair-share, my.module:MyPolicy, "
    "utility(deadline_s=7200)). "
    f"[default: {', '.join(DEFAULT_POLICIES)}]",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sim-results"),
    show_default=True,
    help="Directory for the per-scheduler CSV/JSON files and the plots.",
)
@click.option("--interval", type=click.FloatRange(min=1), default=60, show_default=True, help="Seconds per round.")
@click.option(
    "--scale-out-cost", type=click.FloatRange(min=0), default=0.6, show_default=True, help="Pause (s) on growing."
)
@click.option(
    "--scale-in-cost", type=click.FloatRange(min=0), default=0.2, show_default=True, help="Pause (s) on shrinking."
)
@click.option(
    "--start-cost",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Pause (s) on starting or resuming.",
)
@click.option(
    "--restart-cost",
    type=click.FloatRange(min=0),
    default=None,
    help="Every change costs this many seconds (a checkpoint-restart system: 30); overrides the three above.",
)
@click.option(
    "--batch-rule",
    type=click.Choice([r.value for r in BatchRule]),
    default=BatchRule.FIXED_LOCAL.value,
    show_default=True,
    help="How a job's batch follows its workers when the policy does not set it.",
)
@click.option(
    "--cooldown", type=click.FloatRange(min=0), default=60, show_default=True, help="Policy engine cooldown (s)."
)
@click.option("--fixed", is_flag=True, help="Present every job to the policies as fixed at its requested size.")
@click.option("--sample", type=click.IntRange(min=1), default=None, help="Replay only this many jobs, drawn by --seed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --sample.")
@click.option(
    "--arrival-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply arrival times (0.5: twice the load).",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The Pollux data directory [default: $SUBMARINE_POLLUX_DATA or the copy the package ships].",
)
@click.option(
    "--queues",
    callback=_queues,
    default=None,
    metavar="NAME:CAPACITY[:MAX],...",
    help="YARN queues as `cluster up --queues` takes them (prod:60,research:40:50): the policies split the GPUs "
    "among them (each its guarantee, idle ones lent up to a queue's maximum) and decide within each; a job is in "
    "its workload `queue`, else the first. The baselines ignore queues [default: one pool].",
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
def run(
    workload: str,
    cluster_text: str,
    policies: tuple[str, ...],
    out: Path,
    interval: float,
    scale_out_cost: float,
    scale_in_cost: float,
    start_cost: float,
    restart_cost: float | None,
    batch_rule: str,
    cooldown: float,
    fixed: bool,
    sample: int | None,
    seed: int,
    arrival_scale: float,
    data_dir: Path | None,
    queues: tuple[QueueSpec, ...],
    no_plots: bool,
) -> None:
    """Replay a workload under each --policy; print the summary, write results and plots to --out.

    Per scheduler, OUT/<scheduler>/ gets jobs.csv (one row per job), summary.json, utilisation.csv,
    allocations.csv and workers.png; OUT/ gets summary.json (all of them), jct_cdf.png and utilisation.png.
    """
    try:
        cluster = ClusterConfig.parse(cluster_text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cluster") from exc
    costs = (
        ResizeCosts.restart(restart_cost)
        if restart_cost is not None
        else ResizeCosts(start_s=start_cost, scale_out_s=scale_out_cost, scale_in_s=scale_in_cost)
    )
    config = SimConfig(interval_s=interval, costs=costs, batch_rule=BatchRule(batch_rule))
    jobs, catalog, name = load_jobs(workload, data_dir, sample, seed, arrival_scale)
    shares = queue_shares(jobs, queues)
    quiet_policy_logs()
    specs = policies or DEFAULT_POLICIES
    try:
        schedulers = [load_scheduler(spec, cooldown_s=cooldown, elastic=not fixed, queues=shares) for spec in specs]
    except SimError as exc:
        raise click.ClickException(str(exc)) from exc

    results: dict[str, SimResult] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs · t={task.fields[sim_h]:.1f} h"),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        for spec, scheduler in zip(specs, schedulers, strict=True):
            task = progress.add_task(scheduler.name, total=len(jobs), sim_h=0.0)

            def report(now_s: float, finished: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=finished, sim_h=now_s / 3600)

            try:
                result = simulate(
                    jobs, cluster, scheduler, catalog=catalog, config=config, workload_name=name, progress=report
                )
            except SimError as exc:
                raise click.ClickException(f"{scheduler.name}: {exc}") from exc
            progress.update(task, completed=result.summary.finished)
            results[spec] = result
            write_result(result, out / slug(spec))

    (out / "summary.json").write_text(
        json.dumps([json.loads((out / slug(s) / "summary.json").read_text()) for s in results], indent=2) + "\n"
    )
    if not no_plots:
        named = {r.summary.scheduler: r for r in results.values()}
        plots.jct_cdf(named, out / "jct_cdf.png")
        plots.utilisation(named, out / "utilisation.png", cluster.total_gpus)
        for spec, result in results.items():
            plots.workers_per_job(result, out / slug(spec) / "workers.png")
    console.print(
        summary_table({r.summary.scheduler: r for r in results.values()}, f"{name} on {cluster} ({len(jobs)} jobs)")
    )
    unfinished = {r.summary.scheduler: r.summary.jobs - r.summary.finished for r in results.values()}
    for sched_name, count in unfinished.items():
        if count:
            err.print(f"[yellow]{sched_name}: {count} job(s) never finished[/yellow]")
    console.print(f"results in [bold]{out}[/bold]")
