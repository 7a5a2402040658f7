"""``submarine job run|show|list|flex|kill`` (Hadoop Submarine's flag names, plus --elastic and limits)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from submarine_elastic import env
from submarine_elastic.cli.jobrun_flags import job_flags, refused, run_options, verbose_logging, with_job_file
from submarine_elastic.cli.jobview import (
    console,
    newest_app,
    print_carried,
    print_decisions,
    print_driver_view,
    print_outcome,
    print_quicklinks,
    queue_line,
    show_outcome,
    summary_line,
)
from submarine_elastic.cli.tables import table as _table
from submarine_elastic.protocol.api import (
    DriverUnreachableError,
    ElasticError,
    FlexRefusedError,
    JobPhase,
)
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobcode import pack_current_env, read_carried
from submarine_elastic.submit.jobspec import (
    JobRequest,
    JobSpecError,
    build_service,
    describe_code,
    describe_environment,
)
from submarine_elastic.submit.service import FlagError, JobFlags, check_cluster, pack_code, prepare, submit
from submarine_elastic.submit.store import forget_job, forget_outcome, last_driver_address, load_outcome
from submarine_elastic.submit.submarine_flags import SubmarineFlagError
from submarine_elastic.tls import TlsError
from submarine_elastic.webhdfs import WebHdfsError
from submarine_elastic.yarn import (
    RM_UNREACHABLE_EXIT,
    RMUnreachableError,
    ServiceNotFoundError,
    YarnError,
    YarnServiceClient,
    cluster_away,
)

if TYPE_CHECKING:
    from submarine_elastic.controller.client import ControllerClient
    from submarine_elastic.submit.jobfiles import HdfsJobFiles


#: ``job show|flex|list|kill`` give up on an unresponsive ResourceManager after about 20 s: a 5 s connect
#: and 10 s read timeout, one retry.
RM_TIMEOUT = (5.0, 10.0)
RM_RETRIES = 1


def _yarn() -> YarnServiceClient:
    """A client for the CLI's short calls: bounded by :data:`RM_TIMEOUT` and :data:`RM_RETRIES`."""
    return YarnServiceClient(_rm_url(), timeout=RM_TIMEOUT, retries=RM_RETRIES)


def _rm_down(exc: RMUnreachableError) -> str:
    return f"the ResourceManager is unreachable ({exc})"


def _rm_url() -> str:
    url = env.settings().rm_url
    if url:
        return url
    from submarine_elastic.cluster import ClusterError, LocalCluster

    try:
        return LocalCluster().spec().rm_url
    except ClusterError as exc:
        raise click.ClickException(
            "no ResourceManager: set SUBMARINE_RM_URL or start one with `submarine cluster up`"
        ) from exc


def _job_files(rm_url: str, *, away_means_local: bool = False) -> HdfsJobFiles | None:
    """:func:`~submarine_elastic.cluster.jobfiles.cluster_job_files`, its errors the command's. None: the files
    stay local. The RM not answering raises its YarnError, unless ``away_means_local``.
    """
    from submarine_elastic.cluster.jobfiles import JobFilesLookupError, cluster_job_files

    try:
        return cluster_job_files(rm_url)
    except JobFilesLookupError as exc:
        raise click.ClickException(str(exc)) from exc
    except YarnError:
        if away_means_local:
            return None
        raise


class ClusterUnavailable(click.ClickException):
    """The ResourceManager or HDFS did not answer: exit status :data:`~submarine_elastic.yarn.RM_UNREACHABLE_EXIT`,
    not 1."""

    exit_code = RM_UNREACHABLE_EXIT


def _fail(exc: Exception) -> click.ClickException:
    from submarine_elastic.controller.api import ControllerUnavailableError

    if isinstance(exc, RMUnreachableError):
        return ClusterUnavailable(f"{_rm_down(exc)}; try again once it is back")
    if isinstance(exc, ControllerUnavailableError):
        return ClusterUnavailable(f"{_first_line(exc)}; nothing was submitted: try again once it is back")
    if isinstance(exc, YarnError) and cluster_away(exc):
        return ClusterUnavailable(f"the cluster did not answer ({_first_line(exc)}); try again once it is back")
    if isinstance(exc, WebHdfsError) and exc.unavailable:
        return ClusterUnavailable(
            f"HDFS did not answer ({_first_line(exc)}); nothing was submitted: try again once it is back"
        )
    return click.ClickException(str(exc))


def _first_line(exc: Exception) -> str:
    """The first line of an error: a Hadoop daemon's answer goes on with its Java stack."""
    return str(exc).split("\n", 1)[0]


@click.group()
def job() -> None:
    """Run, resize, inspect and stop training jobs."""


@job.command()
@run_options
@click.pass_context
def run(ctx: click.Context, **params: Any) -> None:
    """Submit a training job: a driver and --num_workers worker containers (Hadoop Submarine's flags; see
    docs/jobs.md for what each means here)."""
    flags, notes = job_flags(with_job_file(ctx, params))
    name, elastic, policy = flags.name, flags.elastic, flags.policy
    if params["verbose"]:
        verbose_logging()
    for note in notes:
        console.print(f"[yellow]{note}[/yellow]")
    found: list[HdfsJobFiles | None] = []
    unknown = False  # whether the cluster has HDFS, when the RM did not answer that

    def cluster(job_name: str) -> tuple[str, str | None]:
        nonlocal unknown
        rm_url = _rm_url()
        try:
            found.append(_job_files(rm_url))
        except YarnError:
            unknown = True
            found.append(None)
        return rm_url, None if found[0] is None else found[0].uri(job_name)

    try:
        req = prepare(flags, cluster, cwd=Path.cwd())
        with _submitting_yarn(req.rm_url, flags) as yarn:
            req, cleared = check_cluster(yarn, req)
        if unknown:
            # The RM answers now: asked again, as files kept locally would be refused on a cluster with HDFS
            # ("Wrong FS"). An RM with no configuration page to read means no HDFS to find, as before.
            found[0] = _job_files(req.rm_url, away_means_local=True)
            if found[0] is not None:
                req = dataclasses.replace(req, files_uri=found[0].uri(name))
    except FlagError as exc:
        raise refused(exc) from exc
    except SubmarineFlagError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.flag) from exc
    except (ValueError, YarnError) as exc:
        raise _fail(exc) from exc
    if cleared:
        console.print(f"removed the ended job {name} from YARN to run the new one")
    files = found[0]
    with tempfile.TemporaryDirectory(prefix="submarine-code-") as packing:
        try:
            req = _with_metrics_certificate(pack_code(req, Path(packing)))
        except (JobSpecError, OSError, TlsError) as exc:
            raise _fail(exc) from exc
        ctl, req = _controller_for(req, policy)
        with _submitting_yarn(req.rm_url, flags) as yarn:
            try:
                sent = submit(yarn, req, files=files)  # validates the whole spec before anything is sent
            except (JobSpecError, YarnError, WebHdfsError, OSError) as exc:
                if ctl is not None:
                    _tell_controller(ctl, lambda c: c.job_finished(name))
                raise _fail(exc) from exc
            finally:
                if ctl is not None:
                    ctl.close()
    if params["verbose"]:
        console.print_json(json.dumps(build_service(sent).to_dict()))
    limits = req.limits
    with _submitting_yarn(req.rm_url, flags) as yarn:
        console.print(
            f"job [bold]{name}[/bold] submitted: {limits.num} workers "
            f"({'elastic ' + str(limits.min) + '..' + str(limits.max) if elastic else 'fixed'})"
        )
        print_carried({"code": describe_code(req), "python": describe_environment(req)})
        console.print(f"watch it: submarine job show {name}   resize: submarine job flex {name} --workers N")
        if req.tensorboard is not None:
            console.print(f"TensorBoard over {req.tensorboard.logdir}: its link in `submarine job show {name}`")
        if params["wait_job_finish"]:
            _follow(yarn, name, params["timeout"])


def _submitting_yarn(rm_url: str, flags: JobFlags) -> YarnServiceClient:
    """``job run``'s client of the RM: logged in from ``--keytab`` when given, else as ``SUBMARINE_YARN_AUTH`` says."""
    if flags.keytab is None:
        return YarnServiceClient(rm_url)
    return YarnServiceClient(rm_url, auth="kerberos", keytab=flags.keytab, principal=flags.principal)


@job.command(name="pack-env")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("python-env.tar.gz"),
    show_default=True,
    help="The archive to write (.tar.gz).",
)
@click.option("--force", is_flag=True, help="Overwrite --output.")
def pack_env(output: Path, force: bool) -> None:
    """Pack the Python environment this command runs in for `job run --python_env` (venv-pack or conda-pack)."""
    try:
        packed, editable = pack_current_env(output, force=force)
    except JobSpecError as exc:
        raise _fail(exc) from exc
    console.print(
        f"packed {output} ({packed.archive_bytes / 2**20:.1f} MiB, sha256 {packed.sha256[:16]}): "
        f"submarine job run --python_env {output} ...",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if editable:
        console.print(
            f"[yellow]installed editable, so only linked from the archive to this machine:[/yellow] "
            f"{', '.join(editable)}; install them normally before packing for a cluster whose nodes lack that path"
        )


def _controller_for(req: JobRequest, policy: str | None) -> tuple[ControllerClient | None, JobRequest]:
    """The controller this job reports to (started for a --policy), with the job registered in it; it
    checks the job (limits, policy) before YARN hears of it. Returns it and the request with the job's
    metrics settings (and, unless --insecure, its client certificate for the metrics service)."""
    from submarine_elastic.controller import locate
    from submarine_elastic.controller.api import ControllerError
    from submarine_elastic.controller.client import ControllerClient
    from submarine_elastic.daemon import process

    try:
        info = process.start(req.rm_url) if policy is not None else locate.running()
        if info is None:
            return None, req
        where = locate.directory()
        client = ControllerClient(info.address, locate.read_token(where, locate.API_TOKEN), insecure=req.insecure)
        req.env.update(
            SUBMARINE_METRICS_ENDPOINT=info.metrics_endpoint,
            SUBMARINE_METRICS_TOKEN=locate.metrics_credential(where, req.name),
        )
        req = _with_metrics_certificate(req)
    except (ControllerError, TlsError) as exc:
        raise _fail(exc) from exc
    limits = req.limits
    _tell_controller(
        client,
        lambda c: c.job_submitted(
            req.name,
            limits.min,
            limits.max,
            limits.num,
            elastic=req.elastic,
            policy=policy,
            gpus=req.resources.gpus,
            queue=req.queue,
        ),
    )
    console.print(f"the controller manages it{' with policy ' + policy if policy else ''}")
    return client, req


def _with_metrics_certificate(req: JobRequest) -> JobRequest:
    """``req`` with a client certificate of the cluster's CA for the metrics service its hooks report to
    (and that CA), unless it reports nowhere, runs --insecure or has one.

    Raises:
        TlsError: the cluster's CA cannot be opened.
    """
    if req.insecure or req.metrics_tls is not None or not req.env.get("SUBMARINE_METRICS_ENDPOINT"):
        return req
    from submarine_elastic.tls import cluster_ca

    return dataclasses.replace(req, metrics_tls=cluster_ca().issue_client(f"job {req.name}"[:64]))


def _tell_controller(client: ControllerClient, call: Callable[[ControllerClient], object]) -> None:
    """One call to the controller; its refusal (a bad value, an unknown job) or silence fails the command."""
    from submarine_elastic.controller.api import ControllerError

    try:
        call(client)
    except ControllerError as exc:
        client.close()
        raise _fail(exc) from exc


def _metrics_line(name: str) -> str:
    """Step, loss and throughput of a job from the controller's metrics service ('' when unknown)."""
    from submarine_elastic.controller import locate
    from submarine_elastic.controller.api import ControllerError

    state = locate.running()
    if state is None:
        return ""
    import grpc

    from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
    from submarine_elastic.rpc import bearer, open_channel
    from submarine_elastic.tls import cluster_ca

    try:
        token = locate.read_token(locate.directory(), locate.METRICS_TOKEN)
        insecure = env.settings().insecure
        issued = None if insecure else cluster_ca().issue_client("submarine cli")
    except (ControllerError, TlsError, ValueError):
        return ""
    channel = open_channel(
        state.metrics_endpoint,
        ca=None if issued is None else issued.ca,
        client_cert=None if issued is None else (issued.cert, issued.key),
        insecure=insecure,
    )
    with channel:
        try:
            reply = metrics_pb2_grpc.MetricsServiceStub(channel).GetJob(
                metrics_pb2.GetJobRequest(job_id=name), metadata=bearer(token), timeout=2
            )
        except grpc.RpcError:
            return ""
    return summary_line(reply.summary)


def _follow(yarn: YarnServiceClient, name: str, timeout: float) -> None:
    """Print the job's state whenever it changes, until it ends (at most ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    last = ""
    client: JobClient | None = None
    while time.monotonic() < deadline:
        status = yarn.status(name)
        if status.is_terminal:
            # The service ends with its driver, as STOPPED whether the job finished or failed: the driver's
            # outcome record (or, without one, the RM's final status) tells which.
            outcome, app = load_outcome(name), newest_app(yarn, name)
            print_outcome(name, outcome, app, str(status.state))
            failed = (
                outcome.phase != "finished"
                if outcome is not None
                else app is not None and app.final_status in ("FAILED", "KILLED")
            )
            if failed or str(status.state) == "FAILED":
                reason = f": {outcome.error}" if outcome is not None and outcome.error else ""
                raise click.ClickException(f"job {name} failed{reason}")
            return
        try:
            client = client or JobClient(name, yarn, locate_timeout=5)
            st = client.status()
            phase = JobPhase.from_wire(st.phase)
            line = f"{phase}: {st.world_size} workers in the ring (target {st.target}){_metrics_line(name)}"
        except DriverUnreachableError:
            line = f"service {status.state}, driver starting"
        if line != last:
            console.print(f"{time.strftime('%H:%M:%S')} {line}")
            last = line
        time.sleep(2.0)
    raise click.ClickException(f"job {name} did not finish within {timeout:.0f} s")


@job.command()
@click.argument("name")
@click.option("--all", "all_runs", is_flag=True, help="Controller decisions of every run of NAME, ended ones too.")
def show(name: str, all_runs: bool) -> None:
    """The job's state, its workers and their ranks, its resize timeline, and why it failed."""
    with _yarn() as yarn:
        try:
            status = yarn.status(name)
        except ServiceNotFoundError as exc:
            if show_outcome(name, None) | print_decisions(name, all_runs):
                return
            raise _fail(exc) from exc
        except RMUnreachableError as exc:
            console.print(f"[yellow]{_rm_down(exc)}[/yellow]")
            address = last_driver_address(name)
            if address is None:
                raise ClusterUnavailable(
                    f"cannot show job {name}: {_rm_down(exc)}, and its driver's address is not known on this machine"
                ) from exc
            console.print(f"asking the job's driver at its last known address {address}")
            try:
                with JobClient(name, None, address=address, timeout=5) as client:
                    st = client.status()
            except DriverUnreachableError as err:
                raise click.ClickException(f"cannot show job {name}: {_rm_down(exc)}; {err}") from err
            print_driver_view(st)
            return
        except YarnError as exc:
            raise _fail(exc) from exc
        if status.is_terminal:
            show_outcome(name, yarn, yarn_state=str(status.state))
            print_carried(read_carried(name))
            print_decisions(name, all_runs)
            return
        console.print(f"job [bold]{name}[/bold]: YARN state {status.state}" + queue_line(yarn, name))
        print_quicklinks(status)
        from submarine_elastic.replay.runner import emulated_application

        emulated = emulated_application(status.raw)
        if emulated:
            console.print(f"accelerators: emulated, each step held for {emulated}'s measured GPU step time")
        print_carried(read_carried(name))
        try:
            with JobClient(name, yarn, locate_timeout=5) as client:
                st = client.status()
        except DriverUnreachableError as exc:
            console.print(f"driver not reachable yet: {exc}")
            return
    print_driver_view(st)
    print_decisions(name, all_runs)


@job.command(name="list")
def list_jobs() -> None:
    """YARN services of the cluster (jobs and others)."""
    with _yarn() as yarn:
        try:
            apps = yarn.list()
        except YarnError as exc:
            raise _fail(exc) from exc
    table = _table(None, "name", "application", "state", "user", names=2)
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
    """Resize a running job: grow stop-free, or shrink at a commit boundary.

    When the ResourceManager does not answer (after about 20 s), the resize goes to the job's driver at its
    last known address: the driver holds the new target, the ring follows at once (a shrink) or when the
    new containers start (a growth), and the driver sends YARN the target once the ResourceManager answers
    again. Without a known driver address nothing is changed."""
    with _yarn() as yarn:
        address = None
        try:
            yarn.status(name)
        except RMUnreachableError as exc:
            address = last_driver_address(name)
            if address is None:
                raise ClusterUnavailable(
                    f"cannot resize job {name}: {_rm_down(exc)}, and its driver's address is not known on this "
                    f"machine; nothing was changed"
                ) from exc
            console.print(
                f"[yellow]{_rm_down(exc)}[/yellow]: asking the job's driver at its last known address {address}; "
                f"it sends YARN the new target once the ResourceManager answers"
            )
        except YarnError as exc:
            raise _fail(exc) from exc
        try:
            with JobClient(name, None if address else yarn, address=address) as client:
                t0 = time.monotonic()
                from submarine_elastic.protocol.proto import elastic_pb2  # gRPC's stubs only once a driver is asked

                target = elastic_pb2.Target(workers=workers, remove=remove, reason="submarine job flex")
                reply = client.set_target(target)
                console.print(f"job {name}: {reply.previous} -> {reply.target} workers (target {reply.version})")
                if wait:
                    client.wait_for_size(workers, timeout)
                    console.print(f"ring has {workers} workers after {time.monotonic() - t0:.1f} s")
        except (FlexRefusedError, ElasticError, TimeoutError, YarnError) as exc:
            raise _fail(exc) from exc


@job.command()
@click.argument("name")
def kill(name: str) -> None:
    """Stop the job and remove its YARN service."""
    with YarnServiceClient(_rm_url(), retries=RM_RETRIES) as yarn:
        try:
            yarn.destroy(name, wait=True)
        except YarnError as exc:
            raise _fail(exc) from exc
    try:
        forget_job(name, _job_files(_rm_url(), away_means_local=True))
        forget_outcome(name)
    except (OSError, WebHdfsError) as exc:
        raise click.ClickException(f"job {name} is gone but its token files stay: {exc}") from exc
    _controller_forgets(name)
    console.print(f"job {name} killed")


def _controller_forgets(name: str) -> None:
    """Tell the running controller (if any) that a job left; one it does not know is nothing to tell."""
    from submarine_elastic.controller.api import ControllerError, UnknownJobError
    from submarine_elastic.controller.client import ControllerClient

    try:
        controller = ControllerClient.connect()
        if controller is None:
            return
        with controller:
            controller.job_finished(name)
    except UnknownJobError:
        return
    except ControllerError as exc:
        raise click.ClickException(f"job {name} is gone but the controller was not told: {exc}") from exc
