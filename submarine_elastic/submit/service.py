"""The submit side's service: ``submarine job run`` is flags -> :func:`prepare` -> the cluster's checks ->
:func:`submit`.

1. :func:`prepare` turns the command's flags (:class:`JobFlags`) into a :class:`~.jobspec.JobRequest`: pure
   but for reading the files the flags name, and validated once (every error names its flag).
2. The cluster's checks (:func:`refuse_unplaceable`, :func:`refuse_unplaceable_placement`,
   :func:`refuse_unfit_queue`) refuse, before anything is sent, what YARN would accept and never run;
   :func:`with_kill_delay` and :func:`clear_ended_service` adapt the request and the cluster to each other.
3. :func:`submit` writes the job's secrets and files, then sends the spec.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.protocol.api import BatchLimits, Limits
from submarine_elastic.submit import tensorboard as tb
from submarine_elastic.submit.api import Localization, PackedEnv
from submarine_elastic.submit.credentials import YarnLogin
from submarine_elastic.submit.jobcode import keep_locally, snapshot, write_carried
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import (
    DriverTls,
    JobRequest,
    JobSpecError,
    Placement,
    WorkerResources,
    build_service,
    job_dir,
    outcome_path,
    parse_env,
    with_credentials,
    write_secrets,
)
from submarine_elastic.submit.submarine_flags import parse_conf, parse_quicklinks
from submarine_elastic.submit.tensorboard import TensorBoard
from submarine_elastic.webhdfs import WebHdfsError
from submarine_elastic.yarn import (
    GPU_RESOURCE,
    ServiceNotFoundError,
    YarnError,
    YarnServiceClient,
    gpus_on_one_node_problem,
)

#: How long ``job run`` waits for a NodeManager when the ResourceManager lists none running before it judges
#: whether the workers' GPUs fit: after a restart of the RM its NodeManagers register again within seconds.
NODES_WAIT_S = 30.0


def refuse_unplaceable(yarn: YarnServiceClient, resources: WorkerResources) -> None:
    """Refuse workers that ask GPUs the cluster cannot give one of them, before anything is submitted: YARN
    would accept the service and its ApplicationMaster fail three times over a resource type its RM does not
    know, or keep a worker pending for ever on nodes that all have too few. Blocks for one or two requests to
    the RM (none when the workers ask no GPU); up to :data:`NODES_WAIT_S` more while it lists no running node.

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
    deadline = time.monotonic() + NODES_WAIT_S
    while not nodes and time.monotonic() < deadline:  # none yet, as right after the RM restarted
        time.sleep(1.0)
        nodes = yarn.nodes()
    problem = gpus_on_one_node_problem(
        resources.gpus, [(n.node_id, n.total_gpus) for n in nodes], f"the cluster at {yarn.rm_url}"
    )
    if problem is not None:
        raise JobSpecError(f"{asked}, but {problem}")


def refuse_unoffered(yarn: YarnServiceClient, resources: WorkerResources, flag: str, *, gpus: bool = False) -> None:
    """Refuse resource types the ResourceManager does not offer (any asked in ``flag`` beyond memory and vcores;
    ``yarn.io/gpu`` too with ``gpus``, else :func:`refuse_unplaceable` checks it), before anything is submitted:
    its ApplicationMaster would fail over a type it does not know. Blocks for one request (none when nothing
    else is asked).

    Raises:
        JobSpecError: naming the flag, the types it lacks and the ones it offers.
        YarnError: the RM did not answer.
    """
    asked = [name for name, _ in resources.extra] + ([GPU_RESOURCE] if gpus and resources.gpus else [])
    if not asked:
        return
    offered = yarn.resource_totals()
    missing = [name for name in asked if name not in offered]
    if missing:
        raise JobSpecError(
            f"{flag} asks {', '.join(missing)}, but the ResourceManager at {yarn.rm_url} offers only "
            f"{', '.join(sorted(offered))}"
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
    from submarine_elastic.settings import container_env  # pydantic: only once a job is submitted

    return dataclasses.replace(req, env={**req.env, **container_env(sigkill_delay_ms=delay.strip())})


def submit(
    yarn: YarnServiceClient, req: JobRequest, *, replace: bool = False, files: HdfsJobFiles | None = None
) -> JobRequest:
    """Submit the job's YARN service (without waiting for it to start) and keep its control token; returns
    ``req`` with its credentials (:func:`~.jobspec.with_credentials`: the driver's port, the token, the
    certificates), which are chosen here.

    The token, the job's secrets and its TLS files are written first (see :func:`write_secrets`), with
    ``files`` the containers' files into the job's directory on HDFS (``req.files_uri`` must name it); if
    a write fails or the RM refuses the job, everything written is removed again.

    Raises:
        JobSpecError: the request makes no valid spec, or ``files`` and ``req.files_uri`` disagree (nothing
            is sent).
        WebHdfsError: HDFS refused the job's files or did not answer.
        YarnError: the RM refused it (with ``replace``, a job of that name is destroyed first).
        OSError: no free port for the driver.
    """
    req = with_credentials(req)
    service = build_service(req)
    if files is not None and req.files_uri != files.uri(req.name):
        raise JobSpecError(f"the job's files go to {files.uri(req.name)}, but its spec names {req.files_uri}")
    if replace:
        yarn.destroy(req.name, missing_ok=True)
    outcome_path(req.name).unlink(missing_ok=True)  # an earlier job of that name
    kept = write_secrets(req)
    if req.tensorboard is not None and Path(req.tensorboard.logdir).is_relative_to(kept):
        Path(req.tensorboard.logdir).mkdir(parents=True, exist_ok=True)
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
    return req


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


class FlagError(JobSpecError):
    """A ``submarine job run`` flag that contradicts another or is missing its partner; ``flag`` names it (None:
    the command line as a whole)."""

    def __init__(self, message: str, flag: str | None = None) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class JobFlags:
    """What ``submarine job run`` was given, flag by flag, as the command line parsed it (nothing checked yet)."""

    name: str
    worker_launch_cmd: str
    framework: str = "tensorflow"
    elastic: bool = False
    num_workers: int = 2
    min_workers: int | None = None
    max_workers: int | None = None
    worker_resources: str = "memory-mb=2048,vcores=1"
    env: tuple[str, ...] = ()
    input_path: str | None = None
    checkpoint_path: str | None = None
    checkpoint_every: int | None = None
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    placement: str | None = None
    queue: str | None = None
    docker_image: str | None = None
    workdir: Path | None = None
    localizations: tuple[str, ...] = ()
    snapshot: bool = True
    python_env: Path | None = None
    policy: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    #: None: ``SUBMARINE_INSECURE``
    insecure: bool | None = None
    saved_model_path: str | None = None
    #: the TensorBoard's directory: None: no TensorBoard; "": the default (``<checkpoint_path>/tensorboard``)
    tensorboard: str | None = None
    tensorboard_resources: str = tb.DEFAULT_RESOURCES
    tensorboard_docker_image: str | None = None
    quicklinks: tuple[str, ...] = ()
    conf: tuple[str, ...] = ()
    keytab: Path | None = None
    principal: str | None = None
    distribute_keytab: bool = False


def yarn_login(flags: JobFlags) -> YarnLogin | None:
    """The Kerberos login ``--keytab``/``--principal``/``--distribute_keytab`` give the job (None: none given,
    ``SUBMARINE_YARN_KEYTAB`` then decides).

    Raises:
        FlagError: ``--principal`` or ``--distribute_keytab`` without ``--keytab``.
        JobSpecError: the keytab or principal is unusable (naming the flag).
    """
    if flags.keytab is None:
        for given, flag in ((flags.principal, "--principal"), (flags.distribute_keytab or None, "--distribute_keytab")):
            if given is not None:
                raise FlagError(f"{flag} needs --keytab (the keytab the job logs in to the ResourceManager from)", flag)
        return None
    return YarnLogin.load(flags.keytab, flags.principal, distribute=flags.distribute_keytab)


def tensorboard_of(flags: JobFlags) -> TensorBoard | None:
    """The job's TensorBoard (``--tensorboard [DIR]``): over DIR, else ``<--checkpoint_path>/tensorboard``, else
    the job's directory's ``tensorboard``; None without ``--tensorboard``.

    Raises:
        FlagError: ``--tensorboard_resources``/``--tensorboard_docker_image`` without ``--tensorboard``.
        JobSpecError: its resources or directory refused (naming the flag).
    """
    if flags.tensorboard is None:
        if flags.tensorboard_docker_image is not None or flags.tensorboard_resources != tb.DEFAULT_RESOURCES:
            raise FlagError(
                "--tensorboard_resources and --tensorboard_docker_image need --tensorboard", "--tensorboard"
            )
        return None
    logdir = flags.tensorboard
    if not logdir:
        base = flags.checkpoint_path.rstrip("/") if flags.checkpoint_path else str(job_dir(flags.name).resolve())
        logdir = f"{base}/{tb.SUBDIR}"
    resources = WorkerResources.parse(flags.tensorboard_resources, "--tensorboard_resources")
    own_python = flags.python_env is None and not (flags.tensorboard_docker_image or flags.docker_image)
    if own_python and importlib.util.find_spec("tensorboard") is None:
        raise FlagError(
            f"--tensorboard: the job's Python ({sys.executable}) has no tensorboard module to run; install it there "
            "(pip install tensorboard), or run TensorBoard from --python_env or --tensorboard_docker_image",
            "--tensorboard",
        )
    return TensorBoard(logdir, resources, flags.tensorboard_docker_image)


def batch_limits(min_batch_size: int | None, max_batch_size: int | None) -> BatchLimits | None:
    """The job's batch limits from ``--min_batch_size``/``--max_batch_size`` (None: neither given). A minimum
    alone is refused: the largest batch is what a job's memory and its learning-rate rule must hold.

    Raises:
        FlagError: a minimum alone (naming ``--min_batch_size``), or limits :class:`BatchLimits` refuses.
    """
    if max_batch_size is None:
        if min_batch_size is not None:
            raise FlagError(
                "--min_batch_size needs --max_batch_size (the largest global batch the job may be set to)",
                "--min_batch_size",
            )
        return None
    try:
        return BatchLimits(1 if min_batch_size is None else min_batch_size, max_batch_size)
    except ValueError as exc:
        raise FlagError(str(exc)) from exc


def prepare(flags: JobFlags, cluster: Callable[[str], tuple[str, str | None]], *, cwd: Path) -> JobRequest:
    """The request ``flags`` ask for, every flag checked here once (each error names its flag). Reads only the
    files the flags name (``--python_env``, ``--tls_*``) and ``SUBMARINE_INSECURE``; chooses no port and issues
    no certificate (:func:`submit` does).

    Args:
        cluster: the job's name -> the ResourceManager's address and the HDFS directory of the job's files
            (None: they stay on this machine); called once the flags themselves are checked.
        cwd: the directory relative ``--workdir`` and ``--localization`` sources are taken from.

    Raises:
        FlagError: flags that contradict each other (naming the flag).
        JobSpecError: a flag's value is refused (naming it).
        SettingsError: ``SUBMARINE_INSECURE`` is neither on nor off.
    """
    lo = flags.min_workers if flags.min_workers is not None else (1 if flags.elastic else flags.num_workers)
    hi = flags.max_workers if flags.max_workers is not None else flags.num_workers
    if not flags.elastic and (lo != flags.num_workers or hi != flags.num_workers):
        raise FlagError("--min_workers/--max_workers need --elastic", "--min_workers")
    if (flags.tls_cert is None) != (flags.tls_key is None) or (flags.tls_ca is not None and flags.tls_cert is None):
        raise FlagError("--tls_cert and --tls_key go together (and --tls_ca needs them)", "--tls_cert")
    insecure = env.settings().insecure if flags.insecure is None else flags.insecure
    if insecure and flags.tls_cert is not None:
        raise FlagError("--insecure and --tls_cert exclude each other", "--insecure")
    limits_of_batch = batch_limits(flags.min_batch_size, flags.max_batch_size)
    if flags.localizations and not flags.snapshot:
        raise FlagError("--localization goes into the snapshot: not with --no_snapshot", "--localization")
    code_dir = (cwd / flags.workdir if flags.workdir is not None else cwd).resolve()
    carried = tuple(Localization.parse(text, cwd) for text in flags.localizations)
    packed = PackedEnv.load(flags.python_env) if flags.python_env is not None else None
    login, board = yarn_login(flags), tensorboard_of(flags)
    quicklinks, conf = parse_quicklinks(flags.quicklinks), parse_conf(flags.conf)
    rm_url, files_uri = cluster(flags.name)
    try:
        limits = Limits(flags.num_workers, lo, hi)
    except ValueError as exc:
        raise JobSpecError(str(exc)) from exc
    tls = None
    if flags.tls_cert is not None and flags.tls_key is not None:
        tls = DriverTls.load(flags.tls_cert, flags.tls_key, flags.tls_ca)
    req = JobRequest(
        name=flags.name,
        launch_cmd=flags.worker_launch_cmd,
        limits=limits,
        resources=WorkerResources.parse(flags.worker_resources),
        rm_url=rm_url,
        elastic=flags.elastic,
        framework=flags.framework,
        env=parse_env(flags.env),
        input_path=flags.input_path,
        checkpoint_path=flags.checkpoint_path,
        checkpoint_every=flags.checkpoint_every,
        batch_limits=limits_of_batch,
        placement=None if flags.placement is None else Placement(flags.placement),
        queue=flags.queue,
        docker_image=flags.docker_image,
        workdir=code_dir,
        python_env=packed,
        tls=tls,
        insecure=insecure,
        files_uri=files_uri,
        localizations=carried,
        snapshot=flags.snapshot,
        saved_model_path=flags.saved_model_path,
        tensorboard=board,
        quicklinks=quicklinks,
        conf=conf,
        yarn_login=login,
    )
    if flags.policy is not None and not flags.elastic:
        raise FlagError("a --policy resizes the job: it needs --elastic", "--policy")
    build_service(req)  # the spec's own checks, before the controller or YARN hears of the job
    return req


def check_cluster(yarn: YarnServiceClient, req: JobRequest) -> tuple[JobRequest, bool]:
    """The cluster's checks of a prepared request, before anything is written or sent: GPUs, placement and queue
    it can honour, its SIGTERM-to-SIGKILL delay told to the job, and room made for the name. Returns the request
    and whether an ended job of that name was removed from YARN. Blocks for a few requests to the RM.

    Raises:
        JobSpecError: what the cluster cannot give the job (the flag named), or a job of that name runs.
        YarnError: the RM refused or did not answer.
    """
    refuse_unoffered(yarn, req.resources, "--worker_resources")
    if req.tensorboard is not None:
        refuse_unoffered(yarn, req.tensorboard.resources, "--tensorboard_resources", gpus=True)
    refuse_unplaceable(yarn, req.resources)
    refuse_unplaceable_placement(yarn, req)
    refuse_unfit_queue(yarn, req)
    req = with_kill_delay(yarn, req)
    return req, clear_ended_service(yarn, req.name)


def pack_code(req: JobRequest, into: Path) -> JobRequest:
    """``req`` with its code snapshot (``workdir`` and its localizations) packed into the directory ``into``,
    when it asks one (:attr:`~.jobspec.JobRequest.snapshot`).

    Raises:
        JobSpecError: the code cannot be packed (the source named).
        OSError: writing the archive failed.
    """
    if not req.snapshot:
        return req
    return dataclasses.replace(req, code=snapshot(req.workdir, list(req.localizations), into))
