"""Talking to a running job: its YARN service and its driver's control plane (flex, status)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from submarine_elastic.elastic.api import DriverUnreachableError, FlexRefusedError, JobPhase
from submarine_elastic.elastic.jobcode import keep_locally, write_carried
from submarine_elastic.elastic.jobfiles import HdfsJobFiles
from submarine_elastic.elastic.jobspec import (
    CLIENT_CERT,
    CLIENT_KEY,
    DRIVER_CN,
    INSECURE_MARK,
    SECRET_ENV,
    TLS_FILES,
    JobRequest,
    JobSpecError,
    WorkerResources,
    build_service,
    job_dir,
    outcome_path,
    write_secrets,
)
from submarine_elastic.elastic.locate import driver_address
from submarine_elastic.webhdfs import WebHdfsError
from submarine_elastic.yarn import GPU_RESOURCE, ServiceNotFoundError, YarnError, YarnServiceClient

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from submarine_elastic.elastic.proto import elastic_pb2 as pb


def refuse_unplaceable(yarn: YarnServiceClient, resources: WorkerResources) -> None:
    """Refuse workers that ask GPUs the cluster cannot give one of them, before anything is submitted: YARN
    would accept the service and its ApplicationMaster fail three times over a resource type its RM does not
    know, or keep a worker pending for ever on nodes that all have too few. Blocks for one or two requests to
    the RM (none when the workers ask no GPU).

    Raises:
        JobSpecError: the RM declares no ``yarn.io/gpu``, or no running node has ``resources.gpus`` (naming what
            the cluster offers).
        YarnError: the RM did not answer.
    """
    if resources.gpus == 0:
        return
    asked = f"--worker_resources asks {GPU_RESOURCE} {resources.gpus} per worker"
    totals = yarn.resource_totals()
    if GPU_RESOURCE not in totals:
        raise JobSpecError(
            f"{asked}, but the ResourceManager at {yarn.rm_url} has no {GPU_RESOURCE} resource type (it offers "
            f"{', '.join(sorted(totals))}); declare it in the cluster's resource-types.xml "
            f"(the pseudo-cluster: submarine cluster up --gpus-per-node N), or ask no gpu"
        )
    nodes = yarn.nodes()
    largest = max((n.total_gpus for n in nodes), default=0)
    if largest < resources.gpus:
        offers = ", ".join(f"{n.node_id} {n.total_gpus}" for n in nodes) or "no running node"
        raise JobSpecError(
            f"{asked}, but the largest node of the cluster at {yarn.rm_url} has {largest} ({GPU_RESOURCE} by "
            f"node: {offers}); a worker's GPUs come from one node"
        )


#: The RM setting that makes its scheduler honour a component's placement constraints, and the values that do
#: (``disabled``, Hadoop's default, makes the RM refuse the ApplicationMaster's scheduling requests: it fails).
PLACEMENT_HANDLER = "yarn.resourcemanager.placement-constraints.handler"
PLACEMENT_HANDLERS = ("scheduler", "placement-processor")


def refuse_unplaceable_placement(yarn: YarnServiceClient, req: JobRequest) -> None:
    """Refuse a ``--placement`` the cluster cannot honour, before anything is submitted: an RM that does not
    handle placement constraints (the service's ApplicationMaster would fail on its first request), or a spread
    of more workers than the cluster has running nodes (YARN would keep the extra workers pending for ever; a
    grow up to ``--max_workers`` too). Blocks for two requests to the RM (none without a placement).

    Raises:
        JobSpecError: what the cluster lacks, with the flag and the figures.
        YarnError: the RM did not answer.
    """
    if req.placement is None:
        return
    handler = yarn.config_value(PLACEMENT_HANDLER)
    if handler not in PLACEMENT_HANDLERS:
        raise JobSpecError(
            f"--placement {req.placement}: the ResourceManager at {yarn.rm_url} does not handle placement "
            f"constraints ({PLACEMENT_HANDLER} is {handler or 'disabled'!r}); set it to 'scheduler' in its "
            "yarn-site.xml (the pseudo-cluster does), or run the job without --placement"
        )
    nodes = yarn.nodes()
    most = req.limits.max
    if most > len(nodes):
        flag = "--max_workers" if req.elastic and most != req.limits.num else "--num_workers"
        raise JobSpecError(
            f"--placement {req.placement} puts at most one worker on a node, but {flag} asks {most} workers and the "
            f"cluster at {yarn.rm_url} has {len(nodes)} running node{'s' if len(nodes) != 1 else ''}"
            f"{' (' + ', '.join(n.node_id for n in nodes) + ')' if nodes else ''}: at most {len(nodes)} workers"
        )


#: The YARN Services ApplicationMaster's memory where the RM does not say (``yarn.service.am-resource.memory``,
#: Hadoop's default).
AM_DEFAULT_MEMORY_MB = 1024


def refuse_unfit_queue(yarn: YarnServiceClient, req: JobRequest) -> None:
    """Refuse a job whose queue (``req.queue``, a leaf name or its path) the scheduler does not have, or whose
    fewest containers cannot fit under that queue's maximum even when the queue holds nothing else: the
    ApplicationMaster, the driver and ``req.limits.min`` workers. YARN would accept either and leave the
    service waiting for ever. Blocks for two requests to the RM (none without a queue).

    Raises:
        JobSpecError: no such queue (naming the queues there are), or the minimum over the queue's maximum
            (naming the queue, its guaranteed and maximum share and the maximum in memory and vcores).
        YarnError: the RM did not answer.
    """
    if not req.queue:
        return
    queues = yarn.queues()
    found = next((q for q in queues if req.queue in (q.name, q.path)), None)
    if found is None:
        offered = ", ".join(q.path for q in queues) or "none"
        raise JobSpecError(
            f"--queue: the scheduler at {yarn.rm_url} has no queue {req.queue!r} (its queues: {offered})"
        )
    driver = build_service(req).component("driver")
    driver_mb, driver_vcores = (
        (int(driver.resource.memory), driver.resource.cpus) if driver and driver.resource else (0, 0)
    )
    am_mb = int(yarn.config_value("yarn.service.am-resource.memory") or AM_DEFAULT_MEMORY_MB)
    need_mb = am_mb + driver_mb + req.limits.min * req.resources.memory_mb
    need_vcores = 1 + driver_vcores + req.limits.min * req.resources.vcores
    if not found.max_memory_mb:
        return  # the RM does not say the queue's maximum in resources: YARN alone decides
    if need_mb > found.max_memory_mb or need_vcores > found.max_vcores:
        raise JobSpecError(
            f"--queue {req.queue}: the job's fewest containers (ApplicationMaster, driver and --min_workers "
            f"{req.limits.min}) need {need_mb} MB and {need_vcores} vcores, over queue {found.path}'s maximum "
            f"of {found.max_memory_mb} MB and {found.max_vcores} vcores (guaranteed {found.capacity:g}%, "
            f"maximum {found.max_capacity:g}% of the cluster)"
        )


#: The NodeManagers' SIGTERM-to-SIGKILL delay, as the cluster's configuration names it.
SIGKILL_DELAY = "yarn.nodemanager.sleep-delay-before-sigkill.ms"


def with_kill_delay(yarn: YarnServiceClient, req: JobRequest) -> JobRequest:
    """``req`` with the cluster's SIGTERM-to-SIGKILL delay in its containers' environment
    (``SUBMARINE_SIGKILL_DELAY_MS``, read from the RM's configuration), so that a worker whose container YARN
    stops (preempted from any queue, its NodeManager decommissioned) knows how long its process has to leave
    the ring; unchanged where the RM does not say, or, for a job without a queue, does not answer (its workers
    are then stopped at once on SIGTERM, as on Hadoop's default delay of 250 ms). Blocks for one request to the RM.

    Raises:
        YarnError: the RM did not answer for a job in a queue (where YARN preempts, the delay is what a worker
            has to leave its ring).
    """
    try:
        delay = yarn.config_value(SIGKILL_DELAY)
    except YarnError:
        if req.queue:
            raise
        return req
    if delay is None or not delay.strip().isdigit():
        return req
    return dataclasses.replace(req, env={**req.env, "SUBMARINE_SIGKILL_DELAY_MS": delay.strip()})


def submit(
    yarn: YarnServiceClient, req: JobRequest, *, replace: bool = False, files: HdfsJobFiles | None = None
) -> None:
    """Submit the job's YARN service (without waiting for it to start) and keep its control token.

    The token, the job's secrets and its TLS files are written first (see :func:`write_secrets`), with
    ``files`` the containers' files into the job's directory on HDFS (``req.files_uri`` must name it); if
    a write fails or the RM refuses the job, everything written is removed again.

    Raises:
        JobSpecError: the request makes no valid spec, or ``files`` and ``req.files_uri`` disagree (nothing
            is sent).
        WebHdfsError: HDFS refused the job's files or did not answer.
        YarnError: the RM refused it (with ``replace``, a job of that name is destroyed first).
    """
    service = build_service(req)
    if files is not None and req.files_uri != files.uri(req.name):
        raise JobSpecError(f"the job's files go to {files.uri(req.name)}, but its spec names {req.files_uri}")
    if replace:
        yarn.destroy(req.name, missing_ok=True)
    outcome_path(req.name).unlink(missing_ok=True)  # an earlier job of that name
    kept = write_secrets(req)
    try:
        if files is not None:
            files.put(req)
        else:
            keep_locally(req)
        write_carried(req)
        yarn.create(service, wait=False)
    except BaseException:
        shutil.rmtree(kept, ignore_errors=True)
        if files is not None:
            with contextlib.suppress(WebHdfsError):
                files.remove(req.name)
        raise


def clear_ended_service(yarn: YarnServiceClient, name: str) -> bool:
    """Makes room for a new job called ``name``: YARN keeps an ended service's definition, and refuses a
    new service of that name until it is destroyed. Returns True when an ended one was removed.

    Raises:
        JobSpecError: a job of that name is running (naming ``--name`` and its state).
        YarnError: the RM refused or did not answer.
    """
    try:
        existing = yarn.status(name)
    except ServiceNotFoundError:
        return False
    if not existing.is_terminal:
        raise JobSpecError(
            f"--name {name}: a job of that name is running (YARN state {existing.state}); "
            f"choose another name, or stop it with `submarine job kill {name}`"
        )
    yarn.destroy(name, wait=True, missing_ok=True)
    return True


def forget_job(job: str, files: HdfsJobFiles | None = None) -> None:
    """Removes what :func:`submit` kept of a job that is gone (its outcome record stays), with ``files`` its
    directory on HDFS too.

    Raises:
        OSError: a file could not be removed.
        WebHdfsError: HDFS refused or did not answer.
    """
    if files is not None:
        files.remove(job)
    if job_dir(job).is_dir():
        shutil.rmtree(job_dir(job))


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, as its driver recorded it: ``phase`` finished or failed, the reason, the first
    failed training processes, and the batch settings it took (oldest first; empty when its batch was never
    set)."""

    phase: str
    error: str
    time: float
    failures: list[pb.WorkerFailure] = field(default_factory=list)
    batch_timeline: list[pb.Target] = field(default_factory=list)


def load_outcome(job: str) -> JobOutcome | None:
    """The job's outcome record, or None when its driver wrote none (still running, or the record's
    directory is not shared with the NodeManagers) or it cannot be read."""
    try:
        raw = json.loads(outcome_path(job).read_text())
    except (OSError, ValueError):
        return None
    from google.protobuf import json_format  # only for an ended job's record

    from submarine_elastic.elastic.proto import elastic_pb2 as pb

    try:
        failures = [json_format.ParseDict(f, pb.WorkerFailure()) for f in raw.get("failures", [])]
        batches = [json_format.ParseDict(b, pb.Target()) for b in raw.get("batch_timeline", [])]
        return JobOutcome(str(raw["phase"]), str(raw.get("error", "")), float(raw.get("time", 0.0)), failures, batches)
    except (ValueError, KeyError, TypeError, AttributeError, json_format.ParseError):
        return None


def forget_outcome(job: str) -> None:
    """Removes the job's outcome record."""
    outcome_path(job).unlink(missing_ok=True)


_DRIVER_ADDRESS = "driver.address"


def remember_driver(job: str, target: str) -> None:
    """Keeps the address the job's driver was last found at (for when the ResourceManager is down)."""
    directory = job_dir(job)
    if directory.is_dir():
        try:
            (directory / _DRIVER_ADDRESS).write_text(target)
        except OSError:
            pass


def last_driver_address(job: str) -> str | None:
    """The address :func:`remember_driver` kept, or None."""
    try:
        return (job_dir(job) / _DRIVER_ADDRESS).read_text().strip() or None
    except OSError:
        return None


def load_tls_ca(job: str) -> bytes | None:
    """The certificates the job's driver is checked against, if it was started with TLS."""
    path = job_dir(job) / TLS_FILES["driver_tls_ca_file"]
    return path.read_bytes() if path.is_file() else None


def load_client_cert(job: str) -> tuple[bytes, bytes] | None:
    """The client certificate chain and key ``job run`` issued for the job's submitting side, or None."""
    cert, key = job_dir(job) / CLIENT_CERT, job_dir(job) / CLIENT_KEY
    return (cert.read_bytes(), key.read_bytes()) if cert.is_file() and key.is_file() else None


def load_server_name(job: str) -> str | None:
    """The name the job's driver certificate carries, when ``job run`` issued it (else None: the
    certificate given with ``--tls_cert`` names the driver's hosts)."""
    from submarine_elastic.tls import common_name, driver_server_name

    path = job_dir(job) / TLS_FILES["driver_tls_cert_file"]
    try:
        issued = common_name(path.read_bytes()) == DRIVER_CN
    except (OSError, ValueError):
        return None
    return driver_server_name(job) if issued else None


def is_insecure(job: str) -> bool:
    """Whether the job was run with ``--insecure`` (its directory then holds no TLS files)."""
    return (job_dir(job) / INSECURE_MARK).is_file()


def load_token(job: str) -> str | None:
    """The job's control token as :func:`submit` kept it, or None."""
    path = job_dir(job) / SECRET_ENV["SUBMARINE_JOB_TOKEN"]
    return path.read_text() if path.is_file() else None


class JobClient:
    """The driver of one job. Every call blocks for one RPC (at most ``timeout`` s).

    The driver is found through YARN (for up to ``locate_timeout`` s), or at ``address`` when given
    (``submarine job show`` passes the last known one while the ResourceManager is down). It is reached
    over mutual TLS with the certificates ``job run`` kept in the job's directory, in plaintext only for a
    job run ``--insecure``.

    Raises:
        DriverUnreachableError: the driver cannot be found or does not answer, or the job's directory holds
            no CA to check it against (nothing is sent then).
    """

    def __init__(
        self,
        job: str,
        yarn: YarnServiceClient | None,
        *,
        timeout: float = 30.0,
        locate_timeout: float = 60.0,
        address: str | None = None,
    ):
        self.job = job
        self.timeout = timeout
        if address is not None:
            target = address
        elif yarn is None:
            raise DriverUnreachableError(f"driver of {job}: no address and no ResourceManager to find it")
        else:
            target = driver_address(job, client=yarn, timeout=locate_timeout)
            remember_driver(job, target)
        self.address = target
        # gRPC (about 60 ms to import) only once a driver is to be asked: `job show` of a job that ended,
        # or whose driver is unknown, never loads it.
        from submarine_elastic.elastic.proto import elastic_pb2_grpc as pb_grpc
        from submarine_elastic.rpc import bearer, open_channel

        token = load_token(job)
        self._metadata = bearer(token)
        from submarine_elastic.rpc import InsecureChannelError

        try:
            self._channel = open_channel(
                target,
                ca=load_tls_ca(job),
                client_cert=load_client_cert(job),
                server_name=load_server_name(job),
                insecure=is_insecure(job),
            )
        except InsecureChannelError as exc:
            # Its directory has no CA and the job was not run --insecure: nothing is sent, the token least.
            raise DriverUnreachableError(f"driver of {job}: {exc}") from exc
        self._stub = pb_grpc.ElasticDriverStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> pb.JobStatus:
        import grpc

        from submarine_elastic.elastic.proto import elastic_pb2 as pb

        try:
            # wait_for_ready: a driver whose container runs but whose server is not up yet is waited for.
            return self._stub.Status(
                pb.StatusRequest(), metadata=self._metadata, timeout=self.timeout, wait_for_ready=True
            )
        except grpc.RpcError as exc:
            raise DriverUnreachableError(f"driver of {self.job}: {exc.code().name}: {exc.details()}") from exc

    def set_target(self, target: pb.Target) -> pb.FlexReply:
        """Give the job's driver a new target (worker count, instances to remove, and optionally a batch: global
        batch, accumulation steps, learning rate); returns at once with the version the driver gave it (the
        resize runs in the driver; its workers take a batch at their next commit). The one way every writer
        (``job flex``, the controller, a replacement) changes a running job.

        Raises:
            FlexRefusedError: outside the job's limits (workers or batch), or unknown instances to remove.
            DriverUnreachableError: as the class.
        """
        import grpc

        try:
            return self._stub.SetTarget(target, metadata=self._metadata, timeout=self.timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise FlexRefusedError(exc.details()) from exc
            raise DriverUnreachableError(f"driver of {self.job}: {exc.code().name}: {exc.details()}") from exc

    def wait_for_size(
        self, workers: int, timeout: float, poll: float = 0.5, *, sleep: Callable[[float], None] = time.sleep
    ) -> pb.JobStatus:
        """Block until the driver's target is ``workers`` and it says the ring is at it (that many ranks, nobody
        leaving: ``JobStatus.ring_at_target``; YARN may still catch up, ``JobStatus.converged`` says when it
        has); at most ``timeout`` s, one status read every ``poll`` s.

        Raises:
            TimeoutError: naming the last status seen (the driver's ``lag``, and why the ring has not formed, or
                why YARN has not taken the resize yet, if so).
            FlexRefusedError: the job failed meanwhile (with its reason).
            DriverUnreachableError: as the class.
        """
        from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

        def settled(st: pb.JobStatus) -> bool:
            return st.target == workers and st.ring_at_target

        def read() -> pb.JobStatus:
            st = self.status()
            if not settled(st) and st.phase == JobPhase.FAILED.wire:
                raise FlexRefusedError(f"job {self.job} failed: {st.error or 'see submarine job show'}")
            return st

        def timed_out(state: RetryCallState) -> pb.JobStatus:
            assert state.outcome is not None  # tenacity calls this after an attempt
            st: pb.JobStatus = state.outcome.result()
            lag = st.lag if st.target == workers else f"the driver's target is {st.target}"
            why = f"; {st.error}" if st.error else ""
            raise TimeoutError(
                f"job {self.job} did not reach {workers} workers within {timeout:.0f} s "
                f"(world size {st.world_size}, target {st.target}: {lag or 'converging'}){why}"
            )

        retrying = Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_fixed(poll),
            retry=retry_if_result(lambda st: not settled(st)),
            retry_error_callback=timed_out,
            sleep=sleep,
        )
        return retrying(read)
