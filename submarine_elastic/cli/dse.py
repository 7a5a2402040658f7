"""``submarine dse run|report``: sweep a design space, then say which configuration is best and why."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from submarine_elastic.cli.sim import quiet_policy_logs
from submarine_elastic.dse import (
    DseError,
    PointResult,
    analyse,
    load_space,
    make_backend,
    read_results,
    run_space,
    sample_points,
    write_report,
)
from submarine_elastic.dse.report import Analysis, human

console = Console()
if not console.is_terminal:
    console = Console(width=160)
err = Console(stderr=True)


@click.group()
def dse() -> None:
    """Design-space exploration on the simulator or on real jobs."""


@dse.command()
@click.argument("space_file", metavar="SPACE.yaml", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Results directory [default: dse-<space name>]. Rerunning with the same one resumes.",
)
@click.option(
    "--parallel", "-j", type=click.IntRange(min=1), default=1, show_default=True, help="Points measured at once."
)
@click.option("--report/--no-report", default=True, show_default=True, help="Write the report when done.")
def run(space_file: Path, out: Path | None, parallel: int, report: bool) -> None:
    """Measure every point of SPACE.yaml not measured yet; one CSV row per point in OUT/results.csv."""
    try:
        space = load_space(space_file)
        backend = make_backend(space.backend, dict(space.backend_options))
    except DseError as exc:
        raise click.ClickException(str(exc)) from exc
    out = out or Path(f"dse-{space.name}")
    points = sample_points(space)
    quiet_policy_logs()
    failures: list[PointResult] = []
    with Progress(
        TextColumn(f"[bold]{space.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
    ) as progress:
        task = progress.add_task(space.name, total=len(points))

        def report_point(result: PointResult, done: int, total: int) -> None:
            progress.update(task, completed=done)
            if result.status != "ok":
                failures.append(result)
                progress.console.print(f"[red]failed[/red] {result.error}")

        try:
            summary = run_space(space, backend, points, out, parallel=parallel, progress=report_point)
        except DseError as exc:
            raise click.ClickException(str(exc)) from exc
        progress.update(task, completed=len(points))
    console.print(
        f"{summary.total} points: {summary.measured} measured now, {summary.skipped} already measured, "
        f"{summary.failed} failed; results in [bold]{out / 'results.csv'}[/bold]"
    )
    if report:
        _report(out, out, None)


@dse.command(name="report")
@click.argument("results_dir", metavar="RESULTS_DIR", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where report.md and the plots go [default: RESULTS_DIR].",
)
@click.option("--across", default=None, help="Parameter to correlate across [default: workload or application].")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True, help="Best configurations listed.")
def report_cmd(results_dir: Path, out: Path | None, across: str | None, top: int) -> None:
    """Best configurations, main effects, interactions and correlations of a `dse run`, as Markdown and PNG."""
    _report(results_dir, out or results_dir, across, top)


def _report(results_dir: Path, out: Path, across: str | None, top: int = 5) -> None:
    try:
        record, rows = read_results(results_dir)
        analysis = analyse(record, rows, top=top, across=across)
    except DseError as exc:
        raise click.ClickException(str(exc)) from exc
    paths = write_report(analysis, out)
    console.print(_best_table(analysis))
    lead = analysis.lead
    if lead is not None:
        console.print(
            f"[bold]{lead.parameter}[/bold] matters most: best {lead.parameter}={lead.best.level} "
            f"({human(lead.best.mean)}), worst {lead.parameter}={lead.worst.level} ({human(lead.worst.mean)})"
        )
    console.print(f"report: [bold]{paths['report']}[/bold]")


def _best_table(a: Analysis) -> Table:
    table = Table(title=f"{a.space}: best by {a.objective} ({'lowest' if a.minimize else 'highest'} first)")
    table.add_column("rank", justify="right")
    for p in a.parameters:
        table.add_column(p)
    table.add_column(a.objective, justify="right")
    for i, row in enumerate(a.best, 1):
        table.add_row(str(i), *(str(row[p]) for p in a.parameters), human(row[a.objective]))
    return table
