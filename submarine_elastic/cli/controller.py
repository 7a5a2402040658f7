"""``submarine controller start|stop|status|history``: the process that resizes jobs by policy.

``status`` and ``history`` ask the running controller through its API; when none runs they read what it
left in its database (read-only).
"""

from __future__ import annotations

import time

import click
from rich.console import Console
from rich.table import Table

from submarine_elastic.cli.job import _rm_url
from submarine_elastic.cli.tables import decisions_table
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerError, JobRecord, UnknownJobError
from submarine_elastic.controller.client import view
from submarine_elastic.daemon import process

console = Console()


@click.group()
def controller() -> None:
    """The controller: metrics in, policy decisions out, applied to running jobs."""


@controller.command()
@click.option(
    "--policy",
    default="static",
    show_default=True,
    help="Default job policy (name or module:Class); a job's own --policy wins.",
)
@click.option("--arbiter", default="fair-share", show_default=True, help="Cluster arbiter (fair-share, goodput).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Seconds between policy rounds (arrivals and departures also start one).",
)
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    default=None,
    help="Worker slots to hand out, one per worker whatever its size [default: counted from the nodes' "
    "memory and vcores and each job's container sizes].",
)
@click.option(
    "--cooldown",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds after a resize before the same job is resized again (twice that to reverse it).",
)
@click.option(
    "--bridge-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Also serve the py4j bridge for JVM callers on this port (0: any free one).",
)
@click.option(
    "--bridge-java-port",
    type=click.IntRange(min=1, max=65535),
    default=25333,
    show_default=True,
    help="The JVM caller's py4j port.",
)
@click.option(
    "--bind",
    metavar="ADDRESS",
    default=None,
    help="Address the metrics service, the controller's API and the bridge listen on (0.0.0.0: every "
    "interface) [default: this machine's address towards the ResourceManager: 127.0.0.1 for a cluster on "
    "loopback, the bridge's address for `cluster up --hosts`].",
)
@click.option(
    "--advertise",
    metavar="HOST",
    default=None,
    help="Host name or address jobs report their metrics to and clients dial, named in the TLS certificates "
    "[default: --bind; for 0.0.0.0 the address towards the ResourceManager, never loopback].",
)
def start(
    policy: str,
    arbiter: str,
    interval: float,
    capacity: int | None,
    cooldown: float,
    bridge_port: int | None,
    bridge_java_port: int,
    bind: str | None,
    advertise: str | None,
) -> None:
    """Start the controller in the background (nothing happens if one runs)."""
    try:
        state = process.start(
            _rm_url(),
            policy=policy,
            arbiter=arbiter,
            interval=interval,
            capacity=capacity,
            cooldown=cooldown,
            bridge_port=bridge_port,
            bridge_java_port=bridge_java_port,
            bind=bind,
            advertise=advertise,
        )
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(
        f"controller running (pid {state.pid}): policy {state.policy} + {state.arbiter}, "
        f"metrics service at {state.metrics_endpoint}"
    )
    if state.bridge_port:
        transport = (
            f"mutual TLS, the JVM's certificate, key and CA in {state.bridge_tls_dir}"
            if state.bridge_tls_dir
            else "plain TCP"
        )
        # The bridge listens where the metrics service does.
        host = state.metrics_endpoint.rsplit(":", 1)[0]
        console.print(f"py4j bridge on {host}:{state.bridge_port} ({transport}; token in {state.bridge_token_file})")


@controller.command()
def stop() -> None:
    """Stop the controller (jobs keep running at their current size)."""
    try:
        stopped = process.stop()
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print("controller stopped" if stopped else "no controller was running")


@controller.command()
@click.option("--all", "show_all", is_flag=True, help="Also list the jobs that have finished.")
def status(show_all: bool) -> None:
    """Whether it runs, the jobs it manages with their ring sizes, and its latest decisions."""
    state = locate.running()
    console.print(
        f"controller running (pid {state.pid}), metrics service at {state.metrics_endpoint}, "
        f"policy {state.policy} + {state.arbiter}"
        if state
        else "controller not running"
    )
    try:
        with view() as controller:
            if controller is None:
                return
            statuses = controller.statuses(include_finished=show_all)
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    table = Table(title="jobs")
    for col in ("job", "state", "ring", "target", "limits", "source", "last decision"):
        table.add_column(col)
    now = time.time()
    for j, last in ((s.job, s.last_decision) for s in statuses):
        table.add_row(
            j.job_id if j.run == 1 else f"{j.job_id} (run {j.run})",
            str(j.state),
            _ring(j, now),
            str(j.target),
            f"{j.min_workers}..{j.max_workers}",
            str(j.source),
            f"{time.strftime('%H:%M:%S', time.localtime(last.time))} {last.from_workers}->{last.to_workers} "
            f"({last.describe()}): {last.reason}"
            if last
            else "-",
        )
    if statuses:
        console.print(table)
    else:
        console.print("no jobs" if show_all else "no live jobs (--all lists the finished ones)")


def _ring(job: JobRecord, now: float) -> str:
    """The ring size the controller last read from the job's driver, and how long ago."""
    if not job.live or job.observed_at is None:
        return "-"
    age = max(0, round(now - job.observed_at))
    return f"{job.workers} ({age} s ago)" if age >= 10 else str(job.workers)


@controller.command()
@click.argument("name")
@click.option("--all", "all_runs", is_flag=True, help="Every run of the name, not only the latest.")
def history(name: str, all_runs: bool) -> None:
    """The controller's decisions for job NAME, also once it has finished, oldest first."""
    try:
        with view() as controller:
            if controller is None:
                raise click.ClickException("the controller has no state yet (it never ran here)")
            job = controller.job(name)
            decisions = controller.timeline(name, all_runs=all_runs)
    except UnknownJobError as exc:
        raise click.ClickException(f"the controller knows no job {name!r}") from exc
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(
        f"job [bold]{name}[/bold] run {job.run}: {job.state}, limits {job.min_workers}..{job.max_workers}, "
        f"submitted {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(job.submitted_at))}"
        + (f", application {job.app_id}" if job.app_id else "")
    )
    if not decisions:
        console.print("no decisions" + ("" if all_runs else " in this run (--all shows earlier runs)"))
        return
    console.print(decisions_table(decisions, with_run=True))
