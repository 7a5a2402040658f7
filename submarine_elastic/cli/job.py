"""``submarine job run|show|list|flex|kill`` (Hadoop Submarine's flag names, plus --elastic and limits)."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from submarine_elastic import env
from submarine_elastic.cluster import ClusterError, LocalCluster
from submarine_elastic.controller import process
from submarine_elastic.controller.api import ControllerError, JobRecord
from submarine_elastic.elastic.api import DriverUnreachableError, ElasticError, FlexRefusedError, Limits
from submarine_elastic.elastic.client import JobClient, forget_job, submit
from submarine_elastic.elastic.jobspec import (
    DriverTls,
    JobRequest,
    JobSpecError,
    WorkerResources,
    build_service,
    parse_env,
)
from submarine_elastic.yarn import ServiceNotFoundError, YarnError, YarnServiceClient

console = Console()


def _rm_url() -> str:
    url = env.rm_url()
    if url:
        return url
    try:
        return LocalCluster().spec().rm_url
    except ClusterError as exc:
        raise click.ClickException(
            "no ResourceManager: set SUBMARINE_RM_URL or start one with `submarine cluster up`"
        ) from exc


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.group()
def job() -> None:
    """Run, resize, inspect and stop training jobs."""


@job.command()
@click.option("--name", required=True, help="Job name: the YARN service name, [a-z][a-z0-9-]*.")
@click.option("--framework", default="tensorflow", show_default=True, help="Only tensorflow.")
@click.option("--elastic/--no-elastic", default=False, help="Let the worker count change while the job runs.")
@click.option("--num_workers", type=int, default=2, show_default=True, help="Workers at start.")
@click.option("--min_workers", type=int, default=None, help="Fewest workers (default: --num_workers; 1 if --elastic).")
@click.option("--max_workers", type=int, default=None, help="Most workers (default: --num_workers).")
@click.option(
    "--worker_resources",
    default="memory-mb=2048,vcores=1",
    show_default=True,
    help="Per worker container: memory-mb=N (or memory=NG), vcores=N, gpu=N.",
)
@click.option("--worker_launch_cmd", required=True, help="The training command each worker runs.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V", help="Environment of every container (repeat).")
@click.option("--input_path", default=None, help="Passed to the job as SUBMARINE_INPUT_PATH.")
@click.option("--checkpoint_path", default=None, help="Passed to the job as SUBMARINE_CHECKPOINT_PATH.")
@click.option("--queue", default=None, help="YARN queue.")
@click.option("--docker_image", default=None, help="Worker image (needs a Docker-enabled NodeManager).")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory the command runs in [default: the current one].",
)
@click.option(
    "--policy",
    default=None,
    help="Resize the job by this policy (name or module:Class); starts the controller if none runs.",
)
@click.option(
    "--tls_cert",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The driver's certificate chain (PEM): its control plane then speaks TLS only. Needs --tls_key.",
)
@click.option("--tls_key", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Its private key (PEM).")
@click.option(
    "--tls_ca",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Certificates the agents and `job flex|show` trust for the driver [default: --tls_cert].",
)
@click.option("--wait_job_finish", is_flag=True, help="Follow the job to its end with a live view.")
@click.option("--timeout", type=float, default=3600, show_default=True, help="Seconds --wait_job_finish waits.")
def run(
    name: str,
    framework: str,
    elastic: bool,
    num_workers: int,
    min_workers: int | None,
    max_workers: int | None,
    worker_resources: str,
    worker_launch_cmd: str,
    env_pairs: tuple[str, ...],
    input_path: str | None,
    checkpoint_path: str | None,
    queue: str | None,
    docker_image: str | None,
    workdir: Path | None,
    policy: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_ca: Path | None,
    wait_job_finish: bool,
    timeout: float,
) -> None:
    """Submit a training job: a driver and --num_workers worker containers."""
    lo = min_workers if min_workers is not None else (1 if elastic else num_workers)
    hi = max_workers if max_workers is not None else num_workers
    if not elastic and (lo != num_workers or hi != num_workers):
        raise click.BadParameter("--min_workers/--max_workers need --elastic", param_hint="--min_workers")
    if (tls_cert is None) != (tls_key is None) or (tls_ca is not None and tls_cert is None):
        raise click.BadParameter(
            "--tls_cert and --tls_key go together (and --tls_ca needs them)", param_hint="--tls_cert"
        )
    try:
        limits = Limits(num_workers, lo, hi)
        tls = DriverTls.load(tls_cert, tls_key, tls_ca) if tls_cert is not None and tls_key is not None else None
        req = JobRequest(
            name=name,
            launch_cmd=worker_launch_cmd,
            limits=limits,
            resources=WorkerResources.parse(worker_resources),
            rm_url=_rm_url(),
            elastic=elastic,
            framework=framework,
            env=parse_env(env_pairs),
            input_path=input_path,
            checkpoint_path=checkpoint_path,
            queue=queue,
            docker_image=docker_image,
            workdir=(workdir or Path.cwd()).resolve(),
            tls=tls,
        )
    except (ValueError, JobSpecError) as exc:
        raise _fail(exc) from exc
    if policy is not None and not elastic:
        raise click.BadParameter("a --policy resizes the job: it needs --elastic", param_hint="--policy")
    try:
        build_service(req)  # refuse a bad spec before the controller or YARN hears of the job
    except JobSpecError as exc:
        raise _fail(exc) from exc
    ctl = _controller_for(req, policy)
    with YarnServiceClient(req.rm_url) as yarn:
        try:
            submit(yarn, req)  # validates the whole spec before anything is sent
        except (JobSpecError, YarnError) as exc:
            if ctl is not None:
                process.finish_job(name)
            raise _fail(exc) from exc
        console.print(
            f"job [bold]{name}[/bold] submitted: {limits.num} workers "
            f"({'elastic ' + str(limits.min) + '..' + str(limits.max) if elastic else 'fixed'})"
        )
        console.print(f"watch it: submarine job show {name}   resize: submarine job flex {name} --workers N")
        if wait_job_finish:
            _follow(yarn, name, timeout)


def _controller_for(req: JobRequest, policy: str | None) -> dict | None:
    """The controller this job reports to (started for a --policy), with the job registered in it."""
    try:
        state = process.start(req.rm_url) if policy is not None else process.running()
    except ControllerError as exc:
        raise _fail(exc) from exc
    if state is None:
        return None
    req.env.update(process.metrics_env(state))
    limits = req.limits
    record = JobRecord(
        req.name, limits.min, limits.max, limits.num, limits.num, req.elastic, "running", time.time(), "cli"
    )
    process.register_job(state, record, policy)
    console.print(f"the controller manages it{' with policy ' + policy if policy else ''}")
    return state


def _metrics_line(name: str) -> str:
    """Step, loss and throughput of a job from the controller's metrics service ('' when unknown)."""
    state = process.running()
    if state is None:
        return ""
    import grpc

    from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc

    token = process.metrics_env(state)["SUBMARINE_METRICS_TOKEN"]
    with grpc.insecure_channel(state["metrics_endpoint"]) as channel:
        try:
            reply = metrics_pb2_grpc.MetricsServiceStub(channel).GetJob(
                metrics_pb2.GetJobRequest(job_id=name), metadata=(("authorization", f"Bearer {token}"),), timeout=2
            )
        except grpc.RpcError:
            return ""
    summary = reply.summary
    line = f", step {summary.last_step}"
    if summary.HasField("last_loss"):
        line += f", loss {summary.last_loss:.4g}"
    rate = [t for t in summary.throughput if t.world_size == summary.world_size]
    if rate:
        line += f", {rate[0].aggregate_examples_per_second:.0f} samples/s"
    return line


def _follow(yarn: YarnServiceClient, name: str, timeout: float) -> None:
    """Print the job's state whenever it changes, until it ends (at most ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    last = ""
    client: JobClient | None = None
    while time.monotonic() < deadline:
        status = yarn.status(name)
        if status.is_terminal:
            # The driver ends the service: STOPPED (or SUCCEEDED) after a clean finish, FAILED otherwise.
            console.print(f"job {name} ended: {status.state}")
            if str(status.state) not in ("STOPPED", "SUCCEEDED"):
                raise click.ClickException(f"job {name} ended in state {status.state}")
            return
        try:
            client = client or JobClient(name, yarn, locate_timeout=5)
            st = client.status()
            line = f"{st.phase}: {st.world_size} workers in the ring (target {st.target}){_metrics_line(name)}"
        except DriverUnreachableError:
            line = f"service {status.state}, driver starting"
        if line != last:
            console.print(f"{time.strftime('%H:%M:%S')} {line}")
            last = line
        time.sleep(2.0)
    raise click.ClickException(f"job {name} did not finish within {timeout:.0f} s")


@job.command()
@click.argument("name")
def show(name: str) -> None:
    """The job's state, its workers and their ranks, and its resize timeline."""
    with YarnServiceClient(_rm_url()) as yarn:
        try:
            status = yarn.status(name)
        except ServiceNotFoundError as exc:
            raise _fail(exc) from exc
        console.print(f"job [bold]{name}[/bold]: YARN state {status.state}")
        if status.is_terminal:
            return
        try:
            with JobClient(name, yarn, locate_timeout=5) as client:
                st = client.status()
        except DriverUnreachableError as exc:
            console.print(f"driver not reachable yet: {exc}")
            return
    console.print(
        f"phase {st.phase}; ring of {st.world_size}, target {st.target}, limits {st.min_workers}..{st.max_workers}"
    )
    table = Table(title="workers")
    for col in ("instance", "container", "state", "rank"):
        table.add_column(col)
    for w in st.workers:
        table.add_row(w.instance, w.container_id, w.state, str(w.rank) if w.rank >= 0 else "-")
    console.print(table)
    db = process.store()
    if db is not None:
        try:
            decisions = db.decisions(name)
        finally:
            db.close()
        if decisions:
            ct = Table(title="controller decisions")
            for col in ("time", "from", "to", "applied", "reason"):
                ct.add_column(col)
            for d in decisions:
                ct.add_row(
                    time.strftime("%H:%M:%S", time.localtime(d.time)),
                    str(d.from_workers),
                    str(d.to_workers),
                    "yes" if d.applied else (d.error or "in progress"),
                    d.reason,
                )
            console.print(ct)
    if st.timeline:
        tl = Table(title="resizes")
        for col in ("time", "from", "to", "reason"):
            tl.add_column(col)
        for e in st.timeline:
            tl.add_row(
                time.strftime("%H:%M:%S", time.localtime(e.time)), str(e.from_workers), str(e.to_workers), e.reason
            )
        console.print(tl)


@job.command(name="list")
def list_jobs() -> None:
    """YARN services of the cluster (jobs and others)."""
    with YarnServiceClient(_rm_url()) as yarn:
        apps = yarn.list()
    table = Table()
    for col in ("name", "application", "state", "user"):
        table.add_column(col)
    for a in apps:
        table.add_row(a.name, a.id, str(a.state), a.user or "")
    console.print(table if apps else "no jobs")


@job.command()
@click.argument("name")
@click.option("--workers", type=int, required=True, help="The new worker count.")
@click.option("--remove", multiple=True, help="On scale-in, remove these instances (default: highest-numbered).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the ring has the new size.")
@click.option("--timeout", type=float, default=300, show_default=True)
def flex(name: str, workers: int, remove: tuple[str, ...], wait: bool, timeout: float) -> None:
    """Resize a running job: grow stop-free, or shrink at a commit boundary."""
    with YarnServiceClient(_rm_url()) as yarn:
        try:
            with JobClient(name, yarn) as client:
                t0 = time.monotonic()
                reply = client.flex(workers, list(remove), reason="submarine job flex")
                console.print(f"job {name}: {reply.previous} -> {reply.target} workers")
                if wait:
                    client.wait_for_size(workers, timeout)
                    console.print(f"ring has {workers} workers after {time.monotonic() - t0:.1f} s")
        except (FlexRefusedError, ElasticError, TimeoutError, YarnError) as exc:
            raise _fail(exc) from exc


@job.command()
@click.argument("name")
def kill(name: str) -> None:
    """Stop the job and remove its YARN service."""
    with YarnServiceClient(_rm_url()) as yarn:
        try:
            yarn.destroy(name, wait=True)
        except YarnError as exc:
            raise _fail(exc) from exc
    try:
        forget_job(name)
    except OSError as exc:
        raise click.ClickException(f"job {name} is gone but its token files stay: {exc}") from exc
    process.finish_job(name)
    console.print(f"job {name} killed")
