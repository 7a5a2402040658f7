"""What ``submarine job show`` (and ``job run --wait_job_finish``) prints: a job's driver view, how it ended,
its batch settings and the controller's decisions, on the CLI's one console."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console
from rich.text import Text

from submarine_elastic.cli.tables import decisions_table
from submarine_elastic.cli.tables import table as _table
from submarine_elastic.protocol.api import JobPhase, WorkerState
from submarine_elastic.submit.store import load_outcome
from submarine_elastic.yarn import AppSummary, ServiceStatus, YarnError, YarnServiceClient

if TYPE_CHECKING:
    from submarine_elastic.metrics.proto import metrics_pb2
    from submarine_elastic.protocol.proto import elastic_pb2 as pb
    from submarine_elastic.protocol.records import JobOutcome

console = Console()
#: Lines of a failed worker's stderr ``job show`` prints.
SHOWN_TAIL_LINES = 12


def summary_line(summary: metrics_pb2.JobSummary) -> str:
    """Step, loss, throughput and gradient noise scale of a job's metrics summary (a ``JobSummary``), and the
    points the service refused from it with the last reason: a worker whose reports are refused feeds the
    policies nothing."""
    line = f", step {summary.last_step}"
    if summary.HasField("last_loss"):
        line += f", loss {summary.last_loss:.4g}"
    rate = [t for t in summary.throughput if t.world_size == summary.world_size]
    if rate:
        line += f", {rate[0].aggregate_examples_per_second:.0f} samples/s"
    if summary.HasField("gradient_noise_scale"):
        line += f", gradient noise scale {summary.gradient_noise_scale:.4g} samples (step {summary.noise_step})"
    if summary.points_rejected:
        line += f"; {summary.points_rejected} metric points refused (last: {summary.last_rejection})"
    return line


def queue_line(yarn: YarnServiceClient, name: str) -> str:
    """``, queue Q (...)``: the queue the RM runs the job in, with that queue's guaranteed, maximum and used
    share of the cluster and what it waits for; "" where the RM does not say."""
    app = newest_app(yarn, name)
    if app is None or not app.queue:
        return ""
    try:
        queue = next((q for q in yarn.queues() if app.queue in (q.name, q.path)), None)
    except YarnError:
        queue = None
    if queue is None:
        return f", queue {app.queue}"
    waiting = ""
    if queue.pending_containers:
        full = "at its maximum" if queue.used_capacity >= queue.max_capacity - 0.5 else "below its maximum"
        waiting = f", {queue.pending_containers} containers pending ({full})"
    return (
        f", queue {queue.path} (guaranteed {queue.capacity:g}%, maximum {queue.max_capacity:g}%, "
        f"using {queue.used_capacity:.0f}% of the cluster{waiting})"
    )


def print_carried(carried: dict[str, str]) -> None:
    """Where the job's code and its Python come from (nothing for a job submitted elsewhere)."""
    for what in ("code", "python"):
        if what in carried:
            console.print(f"{what}: {carried[what]}", markup=False, highlight=False, soft_wrap=True)


def quicklinks(status: ServiceStatus) -> list[tuple[str, str]]:
    """The service's quicklinks (name, URL), a URL whose host is an instance of the job (``tensorboard-0``, as
    Submarine writes them) pointed at that instance's host as YARN reports it; as written where none is known."""
    links = status.raw.get("quicklinks") or {}
    hosts = {
        c.component_instance_name: c.bare_host or c.ip or c.hostname
        for comp in status.components
        for c in comp.containers
    }
    shown = []
    for name, url in sorted(links.items()) if isinstance(links, dict) else ():
        parts = urlsplit(str(url))
        host = hosts.get(parts.hostname or "")
        if host:
            url = urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))
        shown.append((str(name), str(url)))
    return shown


def print_quicklinks(status: ServiceStatus) -> None:
    """``NAME: URL`` for each quicklink of the job's service (:func:`quicklinks`)."""
    for name, url in quicklinks(status):
        console.print(f"{name}: {url}", markup=False, highlight=False, soft_wrap=True)


def newest_app(yarn: YarnServiceClient, name: str) -> AppSummary | None:
    """The RM's newest application named ``name`` (None: unknown)."""
    try:
        apps = [a for a in yarn.list(states=None) if a.name == name]
    except YarnError:
        return None
    return max(apps, key=lambda a: a.id, default=None)


def show_outcome(name: str, yarn: YarnServiceClient | None, yarn_state: str | None = None) -> bool:
    """Prints how an ended job ended; False when nothing is known of it."""
    app = newest_app(yarn, name) if yarn is not None else None
    return print_outcome(name, load_outcome(name), app, yarn_state)


def print_outcome(name: str, outcome: JobOutcome | None, app: AppSummary | None, yarn_state: str | None) -> bool:
    if outcome is None and yarn_state is None:
        return False
    final = app.final_status if app is not None else None
    verdict = (outcome.phase.upper() if outcome is not None else None) or final or "ENDED"
    # With a record, the RM's final status is the driver's (it exits 0 whenever it concluded the job, so that
    # YARN does not relaunch it): shown only when no record says how the job itself ended.
    shown_final = final if outcome is None else None
    facts = (f"YARN state {yarn_state}" if yarn_state else "", f"final status {shown_final}" if shown_final else "")
    where = ", ".join(x for x in facts if x)
    console.print(f"job [bold]{name}[/bold] ended: {verdict}" + (f" ({where})" if where else ""))
    if outcome is None:
        # No driver ran to the end (an ApplicationMaster that failed starts none): what YARN says of the job.
        if app is not None and app.diagnostics:
            console.print(f"YARN's diagnostics of {app.id}:", highlight=False)
            console.print(app.diagnostics.strip(), markup=False, highlight=False, soft_wrap=True)
        else:
            console.print("its driver left no record of how it ended (see the driver container's stderr.txt)")
        return True
    print_failures(outcome.error, outcome.failures)
    if outcome.batch_timeline:
        print_batch_settings(outcome.batch_timeline[-1], outcome.batch_timeline)
    return True


def print_failures(error: str, failures: Iterable[pb.WorkerFailure]) -> None:
    if error:
        console.print("reason: " + error, style="bold red", markup=False, highlight=False)
    shown = list(failures)
    if not shown:
        return
    table = _table("failed training processes (first ones)", "time", "worker", "rank", "exit", "reason")
    for f in shown:
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(f.time)),
            f.instance,
            str(f.rank) if f.rank >= 0 else "-",
            str(f.exit_code),
            f.reason,
        )
    console.print(table)
    first = next((f for f in shown if f.stderr_tail), None)
    if first is not None:
        lines = first.stderr_tail.rstrip().splitlines()[-SHOWN_TAIL_LINES:]
        console.print(f"{first.instance} stderr, last {len(lines)} lines:", markup=False)
        console.print("\n".join("  " + line for line in lines), markup=False, highlight=False)
        if first.log_path:
            console.print(f"full log: {first.log_path} in container {first.container_id}", markup=False)


def print_driver_view(st: pb.JobStatus) -> None:
    batch_limits = f", batch limits {st.min_batch_size}..{st.max_batch_size}" if st.max_batch_size else ""
    phase = JobPhase.from_wire(st.phase)
    console.print(
        f"phase {phase}; ring of {st.world_size}, target {st.target}, limits {st.min_workers}..{st.max_workers}"
        + batch_limits
    )
    if phase is JobPhase.RUNNING:
        state = "converged" if st.converged else f"converging: {st.lag}"
        console.print(f"target {st.version}: {state}", markup=False, highlight=False)
    if len(st.incarnations) > 1:
        now = st.incarnations[-1]
        adopted = (
            f", adopted {now.adopted_workers} training workers ({now.recovered_after:.1f} s to re-form their ring)"
            if now.adopted_workers
            else ""
        )
        since = time.strftime("%H:%M:%S", time.localtime(now.started))
        console.print(
            f"driver: incarnation {now.number} since {since} (relaunched {len(st.incarnations) - 1}x){adopted}"
        )
        # The whole job was lost at once (every container killed, a power loss, a cluster restarted): what from.
        from submarine_elastic.protocol.records import RING_GONE  # (pydantic: loaded once a job is shown)

        lost = [e for e in st.timeline if e.reason.startswith(RING_GONE) and e.time >= now.started]
        if lost:
            console.print(lost[-1].reason, markup=False, highlight=False)
    # A GPU job's workers also show the minor numbers of their node's devices their training process sees.
    gpus = any(w.gpus for w in st.workers)
    # The node each worker runs on (its NodeManager, host:port), where its agent named it.
    nodes = any(w.node for w in st.workers)
    extra = (["node"] if nodes else []) + (["gpus on its node"] if gpus else [])
    table = _table("workers", "instance", "container", "state", "rank", "exit", *extra)
    for w in st.workers:
        exit_code = str(w.exit_code) if w.HasField("exit_code") else ""
        rank = str(w.rank) if w.rank >= 0 else "-"
        state = f"{WorkerState.from_wire(w.state)}" + (" (preempted by YARN)" if w.preempted else "")
        node = [w.node or "-"] if nodes else []
        devices = [",".join(map(str, w.gpus)) or "-"] if gpus else []
        table.add_row(w.instance, w.container_id, state, rank, exit_code, *node, *devices)
    console.print(table)
    print_failures(st.error if phase is JobPhase.FAILED else "", st.failures)
    if st.error and phase is not JobPhase.FAILED:
        console.print(f"[yellow]waiting:[/yellow] {st.error}")
    if st.timeline:
        tl = _table("resizes", "time", "from", "to", "reason")
        for e in st.timeline:
            tl.add_row(
                time.strftime("%H:%M:%S", time.localtime(e.time)), str(e.from_workers), str(e.to_workers), e.reason
            )
        console.print(tl)
    print_batch(st)


def learning_rate(setting: pb.Target) -> str:
    return f"{setting.learning_rate:g}" if setting.HasField("learning_rate") else "the job's rule"


def print_batch(st: pb.JobStatus) -> None:
    """The job's batch setting and every one before it with its reason, as its driver keeps them (at most
    ``driver.MAX_BATCH_TIMELINE``); nothing for a job whose batch was never set."""
    if st.HasField("batch"):
        print_batch_settings(st.batch, st.batch_timeline)


def print_batch_settings(now: pb.Target, timeline: Iterable[pb.Target]) -> None:
    """The setting in effect (at the end, for an ended job) and the table of every setting with its reason."""
    console.print(
        f"batch: global batch {now.batch_size}, accumulation steps {now.accum_steps} ({now.accum_steps + 1} "
        f"micro-batch{'es' if now.accum_steps else ''} a step), learning rate {learning_rate(now)}; setting "
        f"{now.version} since "
        f"{time.strftime('%H:%M:%S', time.localtime(now.time))}",
        markup=False,
        highlight=False,
    )
    history = _table("batch settings", "time", "setting", "global batch", "accumulation", "learning rate", "reason")
    for s in timeline:
        history.add_row(
            time.strftime("%H:%M:%S", time.localtime(s.time)),
            str(s.version),
            str(s.batch_size),
            str(s.accum_steps),
            learning_rate(s),
            Text(s.reason),
        )
    console.print(history)


def print_decisions(name: str, all_runs: bool = False) -> bool:
    """Prints the controller's decisions for the job (its current run, or every run); False: none."""
    from submarine_elastic.controller.api import ControllerError, UnknownJobError
    from submarine_elastic.controller.client import view

    try:
        with view() as controller:
            decisions = controller.timeline(name, all_runs=all_runs) if controller is not None else []
    except UnknownJobError:
        decisions = []
    except ControllerError as exc:
        console.print(f"[yellow]the controller's decisions are not known: {exc}[/yellow]")
        return False
    if decisions:
        console.print(decisions_table(decisions, with_run=all_runs))
    return bool(decisions)
