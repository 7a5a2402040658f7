"""``submarine controller start|stop|status``: the process that resizes jobs by policy."""

from __future__ import annotations

import time

import click
from rich.console import Console
from rich.table import Table

from submarine_elastic.cli.job import _rm_url
from submarine_elastic.controller import process
from submarine_elastic.controller.api import ControllerError

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
    help="Worker slots to hand out [default: from the ResourceManager's vcores].",
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
def start(
    policy: str,
    arbiter: str,
    interval: float,
    capacity: int | None,
    cooldown: float,
    bridge_port: int | None,
    bridge_java_port: int,
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
        )
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(
        f"controller running (pid {state['pid']}): policy {state['policy']} + {state['arbiter']}, "
        f"metrics service at {state['metrics_endpoint']}"
    )
    if state.get("bridge_port"):
        console.print(f"py4j bridge on 127.0.0.1:{state['bridge_port']} (token in {state['bridge_token_file']})")


@controller.command()
def stop() -> None:
    """Stop the controller (jobs keep running at their current size)."""
    try:
        stopped = process.stop()
    except ControllerError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print("controller stopped" if stopped else "no controller was running")


@controller.command()
def status() -> None:
    """Whether it runs, the jobs it manages and its latest decisions."""
    state = process.running()
    console.print(
        f"controller running (pid {state['pid']}), metrics service at {state['metrics_endpoint']}, "
        f"policy {state['policy']} + {state['arbiter']}"
        if state
        else "controller not running"
    )
    db = process.store()
    if db is None:
        return
    try:
        jobs = db.jobs()
        table = Table(title="jobs")
        for col in ("job", "state", "workers", "target", "limits", "source", "last decision"):
            table.add_column(col)
        for j in jobs:
            decisions = db.decisions(j.job_id)
            last = decisions[-1] if decisions else None
            table.add_row(
                j.job_id,
                j.state,
                str(j.workers),
                str(j.target),
                f"{j.min_workers}..{j.max_workers}",
                j.source,
                f"{time.strftime('%H:%M:%S', time.localtime(last.time))} {last.from_workers}->{last.to_workers}: "
                f"{last.reason}"
                if last
                else "-",
            )
        console.print(table if jobs else "no jobs")
    finally:
        db.close()
