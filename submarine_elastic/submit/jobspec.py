"""From ``submarine job run`` flags to the job's YARN service spec (template: yarn_service_specs/elastic-job.json).

Everything is validated here, before anything is sent: a bad flag is refused with its name.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import re
import secrets
import shlex
import socket
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from submarine_elastic import env, resources
from submarine_elastic.files import write_atomic
from submarine_elastic.limits import JOB_NAME, QUEUE
from submarine_elastic.netif import is_loopback
from submarine_elastic.protocol.api import DRIVER_COMPONENT, WORKER_COMPONENT, BatchLimits, Limits
from submarine_elastic.submit.api import CodeSnapshot, JobSpecError, Localization, PackedEnv
from submarine_elastic.submit.credentials import DriverTls as DriverTls
from submarine_elastic.submit.credentials import YarnLogin as YarnLogin
from submarine_elastic.submit.jobresources import WorkerResources as WorkerResources
from submarine_elastic.submit.tensorboard import QUICKLINK as TB_QUICKLINK
from submarine_elastic.submit.tensorboard import TensorBoard
from submarine_elastic.yarn import InvalidSpecError

if TYPE_CHECKING:
    from submarine_elastic.tls import Issued
    from submarine_elastic.yarn import Service

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Placement(StrEnum):
    """How a job's workers are placed on the cluster's nodes (``job run --placement``), as YARN's placement
    constraints on the ``worker`` component say it; without one, YARN puts them wherever it has room."""

    #: at most one worker on a node (anti-affinity of the workers to each other): a job holds as many nodes as
    #: workers, and never more workers than the cluster has nodes
    SPREAD = "spread"

    def constraint(self) -> dict[str, object]:
        """The constraint of the worker component's ``placement_policy`` (the YARN Services API's form)."""
        return {"type": "ANTI_AFFINITY", "scope": "NODE", "target_tags": [WORKER_COMPONENT]}


@dataclass(frozen=True)
class JobRequest:
    """What ``submarine job run`` was asked for."""

    name: str
    launch_cmd: str
    limits: Limits
    resources: WorkerResources
    rm_url: str
    elastic: bool = True
    framework: str = "tensorflow"
    env: dict[str, str] = field(default_factory=dict)
    input_path: str | None = None
    checkpoint_path: str | None = None
    checkpoint_every: int | None = None
    #: the global batch sizes the job's batch may be set to (``--min_batch_size``/``--max_batch_size``); None: any
    batch_limits: BatchLimits | None = None
    queue: str | None = None
    docker_image: str | None = None
    workdir: Path = field(default_factory=Path.cwd)
    python: str = sys.executable
    #: the port of the driver's control plane and its token; None: chosen by :func:`with_credentials` (``submit``)
    driver_port: int | None = None
    token: str | None = field(default=None, repr=False)
    tls: DriverTls | None = None
    #: plaintext control plane (``job run --insecure``): no certificates, the containers told so
    insecure: bool = False
    #: the client certificate (and the CA of the service) the job's hooks present to the metrics service
    metrics_tls: Issued | None = field(default=None, repr=False)
    #: the driver's Kerberos login to the RM (``SUBMARINE_YARN_AUTH=kerberos``): the keytab travels as a secret;
    #: read by :func:`with_credentials`
    yarn_login: YarnLogin | None = field(default=None, repr=False)
    #: where the containers' files are localized from: the job's directory on the cluster's HDFS
    #: (``hdfs://nn:port/submarine-jobs/<user>/<job>``, ``submit.jobfiles``); None: :func:`job_dir`
    files_uri: str | None = None
    #: the job's code, packed by ``job run`` (``submit.jobcode``): the command runs in its copy in each container;
    #: None: in ``workdir`` on each node's own file system
    code: CodeSnapshot | None = field(default=None, repr=False)
    #: a packed Python environment (``--python_env``) whose interpreter the job runs; None: ``python`` (or, with
    #: ``docker_image``, the image's ``python3``)
    python_env: PackedEnv | None = field(default=None, repr=False)
    #: how the workers are placed on nodes (``--placement``); None: wherever YARN has room
    placement: Placement | None = None
    #: the job's own certificates (none with ``insecure``), issued by :func:`with_credentials`
    job_tls: JobTls | None = field(default=None, repr=False)
    #: ``--localization`` entries, packed into the code snapshot with ``workdir``
    localizations: tuple[Localization, ...] = ()
    #: whether ``job run`` packs ``workdir`` (``--snapshot``, the default) into :attr:`code`
    snapshot: bool = False
    #: where the training side exports the model (``--saved_model_path``, ``SUBMARINE_SAVED_MODEL_PATH``)
    saved_model_path: str | None = None
    #: the job's TensorBoard component (``--tensorboard``); None: none
    tensorboard: TensorBoard | None = None
    #: the service's quicklinks, name -> URL (``--quicklink``, and the TensorBoard's)
    quicklinks: dict[str, str] = field(default_factory=dict)
    #: the YARN service's configuration properties (``--conf``)
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuses, before anything is written or sent, every flag that would reach a shell or a path unsafely.

        How each flag that reaches a container travels, and why:

        - ``--worker_launch_cmd``: base64 in ``SUBMARINE_WORKER_CMD_B64``, decoded by the agent, so any
          quoting survives (a command needs quotes and ``$`` far too often to refuse them).
        - ``--env`` values, ``--input_path``, ``--checkpoint_path``, ``--workdir`` (and the ResourceManager
          URL): plain variables of the spec, which YARN writes into each container's launch script as
          ``export NAME="value"`` without escaping. A value holding ``$``, a backquote, ``"``, ``\\`` or a
          control character (newline) is refused, naming the flag and the character: there bash would expand
          it or run a command. Encoding them instead would hide the paths from YARN's logs and from every
          process that reads its environment before the agent could decode it, for values that are names
          and paths, which need none of those characters.
        - ``--env`` values of the secret variables (:data:`SECRET_ENV`): never in the spec but written to a
          file YARN localizes, so any character is kept.
        - ``--env`` names: shell variable names (``[A-Za-z_][A-Za-z0-9_]*``).
        - the Python interpreter (``sys.executable`` of ``job run``): the start of the driver's and the
          agents' launch commands, which YARN runs as ``bash -c "..."``; refused like a path above and quoted
          for the inner shell, so a directory with a space still works.
        - ``--queue``: a YARN queue name or dotted path (``[A-Za-z0-9_-]`` parts), ``--docker_image``: an image
          reference (``[registry[:port]/]name[:tag][@digest]``): names, refused when they are not one.

        Raises:
            JobSpecError: ``name`` is not a job name (it becomes a path under the jobs directory too), the
                framework is not TensorFlow, the command is empty, the checkpoint flags are unusable, or a flag
                above holds a character the launch script would interpret (the flag and the character named).
        """
        if (problem := JOB_NAME.problem(self.name)) is not None:
            raise JobSpecError(f"--name: {problem}")
        if self.framework.lower() != "tensorflow":
            raise JobSpecError(f"--framework: only 'tensorflow' is supported, got {self.framework!r}")
        if not self.launch_cmd.strip():
            raise JobSpecError("--worker_launch_cmd must not be empty")
        if (problem := checkpoint_problem(self.checkpoint_path, self.checkpoint_every)) is not None:
            raise JobSpecError(problem)
        for key, value in self.env.items():
            if (problem := env_problem(key, value)) is not None:
                raise JobSpecError(problem)
        for flag, text in (
            ("--input_path", self.input_path),
            ("--saved_model_path", self.saved_model_path),
            ("--tensorboard", None if self.tensorboard is None else self.tensorboard.logdir),
            ("--workdir", str(self.workdir)),
            ("SUBMARINE_RM_URL", self.rm_url),
            ("the Python interpreter", self.python),
        ):
            if text is not None and (problem := shell_problem(flag, text)) is not None:
                raise JobSpecError(problem)
        if self.files_uri is not None and not _FILES_URI.fullmatch(self.files_uri):
            raise JobSpecError(f"the job's files must be on HDFS (hdfs://host:port/path), got {self.files_uri!r}")
        if self.queue is not None and not QUEUE.matches(self.queue):
            raise JobSpecError(
                f"--queue: {self.queue!r} is not a YARN queue name (parts of letters, digits, '_' and '-', "
                "joined by '.', e.g. root.default)"
            )
        if self.docker_image is not None:
            for flag, text in (("--checkpoint_path", self.checkpoint_path), ("--input_path", self.input_path)):
                if text is not None and text.startswith("/") and ("," in text or ":" in text):
                    raise JobSpecError(
                        f"{flag} {text!r}: with --docker_image it is mounted into the containers, and a mount's "
                        "path must not contain ':' or ','"
                    )
        board_image = None if self.tensorboard is None else self.tensorboard.docker_image
        for flag, image in (("--docker_image", self.docker_image), ("--tensorboard_docker_image", board_image)):
            if image is not None and not _IMAGE.fullmatch(image):
                raise JobSpecError(
                    f"{flag}: {image!r} is not an image reference "
                    "([registry[:port]/]name[:tag][@sha256:digest], e.g. tensorflow/tensorflow:2.18.0)"
                )


#: The HDFS directory a job's files are localized from: a NameNode's address and an absolute path of names.
_FILES_URI = re.compile(r"hdfs://[A-Za-z0-9.-]+:[0-9]{1,5}(/[A-Za-z0-9._-]+)+")
#: A Docker image reference: an optional registry (``localhost``, a host name with a dot, or any host with a
#: port; as Docker tells a registry from a first path component), lower-case path components, an optional tag
#: and an optional digest.
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE = re.compile(
    r"(?=.{1,512}$)"
    rf"(?:(?:localhost(?::[0-9]{{1,5}})?|{_HOST}(?:\.{_HOST})+(?::[0-9]{{1,5}})?|{_HOST}:[0-9]{{1,5}})/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?"
)


#: What bash still reads inside the double quotes of ``export NAME="value"``, YARN's unescaped form of a
#: spec variable in a container's launch script: each could end the string, expand or run a command.
_SHELL_ACTIVE = {"$": "a dollar sign", "`": "a backquote", '"': "double quotes", "\\": "a backslash"}


def shell_problem(flag: str, value: str) -> str | None:
    """What makes ``value`` unsafe in YARN's launch script (see :meth:`JobRequest.__post_init__`), naming
    ``flag``, the character and the value; None when nothing does."""
    for char in value:
        if char in _SHELL_ACTIVE:
            what = f"{_SHELL_ACTIVE[char]} ({char!r})"
        elif char in "\n\r":
            what = f"a newline ({char!r})"
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            what = f"a control character (U+{ord(char):04X})"
        else:
            continue
        shown = value if len(value) <= 60 else value[:60] + "..."
        return (
            f"{flag} must not contain {what}, found in {shown!r}: YARN writes it into each container's "
            'launch script as export NAME="..." without escaping, where the shell would interpret it'
        )
    return None


def env_problem(key: str, value: str) -> str | None:
    """What is wrong with one ``--env`` pair, naming it; None when nothing is. Secret variables
    (:data:`SECRET_ENV`) travel as files, so their values may hold any character."""
    if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
        return f"--env: {key!r} is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*)"
    if not isinstance(value, str):
        return f"--env {key}: the value must be a string, got {type(value).__name__}"
    if key in SECRET_ENV:
        return None
    return shell_problem(f"--env {key}", value)


def checkpoint_problem(path: str | None, every: int | None) -> str | None:
    """What is wrong with ``--checkpoint_path``/``--checkpoint_every``, naming the flag; None when nothing is."""
    if path is not None:
        if not path.strip():
            return "--checkpoint_path must not be empty"
        if (problem := shell_problem("--checkpoint_path", path)) is not None:
            return problem
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            return f"--checkpoint_every must be a whole number of commits >= 1, got {every!r}"
        if path is None:
            return "--checkpoint_every needs --checkpoint_path (the directory the checkpoints are written to)"
    return None


def job_dir(job: str) -> Path:
    """What ``job run`` keeps of a job: its control token, its secrets and its driver's TLS files, one
    file each, under the jobs directory. The containers get them from here (YARN localizes them), so it
    must be a path every NodeManager reads: the jobs directory on a pseudo-cluster, a shared volume in
    the docker-compose cluster.

    Raises:
        JobSpecError: ``job`` is not a job name (so never a path outside the jobs directory).
    """
    if (problem := JOB_NAME.problem(job)) is not None:
        raise JobSpecError(problem)
    return env.settings().jobs_directory() / job


#: The job's YARN service properties it always has (``--conf`` may change them). An ApplicationMaster attempt
#: that failed more than 10 minutes ago no longer counts towards the service's attempts (6 on the pseudo-cluster,
#: ``yarn.service.am-restart.max-attempts``), so that a job of hours survives an AM lost now and then; YARN's
#: default (-1) counts every failure of the job's life. A worker's container that fails is the driver's to judge
#: (a lost worker, relaunched; a broken script fails the job at once), so YARN Services' own limits are a
#: backstop, counted over 10 minutes instead of 6 hours: the service shut down after 100 failed containers of a
#: component (YARN's 10 ended a chaos run's job whose workers' relaunches failed while HDFS restarted), and a
#: node left out of the job after 20 failures there (YARN's 3: one lost host with 3 workers of it did).
SERVICE_PROPERTIES = {
    "yarn.service.am-failure.validity-interval-ms": "600000",
    "yarn.service.container-failure-per-component.threshold": "100",
    "yarn.service.node-blacklist.threshold": "20",
    "yarn.service.failure-count-reset.window": "600",
}
#: Where a job's code snapshot is extracted in each container (``$PWD/code``, ``submit.jobcode``): the
#: training command runs there.
CODE_DIR = "code"
#: The snapshot as localized into a container, which its agent unpacks into :data:`CODE_DIR`.
CODE_ARCHIVE = "code.tar.gz"
#: Where a packed environment (``--python_env``) is extracted in each container (``$PWD/python-env``).
ENV_DIR = "python-env"
#: The user's directory of packed environments beside their jobs' directories (a job name never starts with a
#: dot), on HDFS or under the local jobs directory: each named by its content hash, uploaded once.
ENV_CACHE = ".python-envs"
#: The Python of the job's image when it runs in Docker without a packed environment.
DOCKER_PYTHON = "python3"
#: The PATH of a container before the job's own interpreter's directory.
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def code_source(req: JobRequest) -> str:
    """The directory YARN localizes the job's files from: the job's directory on HDFS, else its local one."""
    return req.files_uri or f"file://{job_dir(req.name).resolve()}"


def env_source(req: JobRequest) -> str | None:
    """Where the job's packed environment is kept on the cluster (the user's :data:`ENV_CACHE`), None without one."""
    if req.python_env is None:
        return None
    if req.files_uri is not None:
        return f"{req.files_uri.rsplit('/', 1)[0]}/{ENV_CACHE}/{req.python_env.name}"
    return f"file://{(job_dir(req.name).parent / ENV_CACHE / req.python_env.name).resolve()}"


def interpreter(req: JobRequest) -> str:
    """The Python the driver and the agents run, first on the training command's PATH too: the packed
    environment's (relative to the container's directory), the image's, or the submitter's own."""
    if req.python_env is not None:
        return f"{ENV_DIR}/bin/python"
    return DOCKER_PYTHON if req.docker_image else req.python


def describe_environment(req: JobRequest) -> str:
    """Which Python the job runs, as ``job show`` says it."""
    if req.python_env is not None:
        return (
            f"packed environment {env_source(req)} ({req.python_env.archive_bytes / 2**20:.1f} MiB, from "
            f"{req.python_env.archive}), its bin/python"
        )
    if req.docker_image:
        return f"Docker image {req.docker_image}, its {DOCKER_PYTHON}"
    return f"the submitter's interpreter {req.python} (every node must have it at that path)"


def describe_code(req: JobRequest) -> str:
    """Where the job's code comes from, as ``job show`` says it."""
    if req.code is None:
        return f"no snapshot: the command runs in {req.workdir} on each node's own file system"
    return (
        f"snapshot {code_source(req)}/{req.code.name} ({req.code.archive_bytes / 2**20:.2f} MiB packed, "
        f"{req.code.files} entries, {req.code.content_bytes / 2**20:.2f} MiB) of {req.workdir}"
    )


def docker_mounts(req: JobRequest, component: str) -> list[str]:
    """The host directories a component's Docker containers need at the same path
    (``YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS``): the checkpoint directory (read-write), a local input path
    (read-only) and, for the driver, the jobs directory it records the job's outcome in (read-write)."""
    mounts = []
    if req.checkpoint_path and req.checkpoint_path.startswith("/"):
        mounts.append(f"{req.checkpoint_path}:{req.checkpoint_path}:rw")
    if req.input_path and req.input_path.startswith("/"):
        mounts.append(f"{req.input_path}:{req.input_path}:ro")
    if component == DRIVER_COMPONENT:
        jobs = str(outcome_path(req.name).resolve().parent)
        mounts.append(f"{jobs}:{jobs}:rw")
    return mounts


def outcome_path(job: str) -> Path:
    """Where the job's driver records how the job ended (JSON), beside :func:`job_dir` so that removing
    a finished job's secrets keeps it; like the job's directory, every NodeManager must reach it.

    Raises:
        JobSpecError: ``job`` is not a job name.
    """
    return job_dir(job).with_name(f"{job}.outcome.json")


#: Variables whose values are secrets, and the file each is localized to in a container. The spec carries
#: ``<NAME>_FILE`` (:data:`SECRET_FILE_SETTINGS`) instead of the value: the ResourceManager logs every spec it
#: is sent, and shows it to whoever may read the service.
SECRET_ENV = {"SUBMARINE_JOB_TOKEN": "job.token", "SUBMARINE_METRICS_TOKEN": "metrics.token"}
#: The setting that names each secret's file in a container.
SECRET_FILE_SETTINGS = {"SUBMARINE_JOB_TOKEN": "job_token_file", "SUBMARINE_METRICS_TOKEN": "metrics_token_file"}
#: The keytab of :class:`YarnLogin` in the job's directory and its containers (``SUBMARINE_YARN_KEYTAB`` there).
KEYTAB_FILE = "yarn.keytab"
#: The job's TLS files and the setting (``settings.Environment``'s field) naming each in a container: the
#: driver's certificate and key (``--tls_cert/--tls_key``, else issued by the job's CA), the certificates the
#: agents trust for it, the job's CA the driver checks its clients' certificates against, and the agents'
#: client certificate.
TLS_FILES = {
    "driver_tls_cert_file": "driver.crt",
    "driver_tls_key_file": "driver.key",
    "driver_tls_ca_file": "driver-ca.crt",
    "driver_tls_client_ca_file": "job-ca.crt",
    "agent_tls_cert_file": "agent.crt",
    "agent_tls_key_file": "agent.key",
}
#: The hooks' TLS files for the metrics service (issued by the cluster's CA when the job reports to the
#: controller's service), by setting.
METRICS_TLS_FILES = {
    "metrics_tls_ca": "metrics-ca.crt",
    "metrics_tls_cert_file": "metrics.crt",
    "metrics_tls_key_file": "metrics.key",
}
#: The client certificate ``job flex|show`` and the controller present to the job's driver: kept in the
#: job's directory, never localized into a container.
CLIENT_CERT, CLIENT_KEY = "client.crt", "client.key"
#: The common name of a driver certificate ``job run`` issued (the job's name is in its DNS name).
DRIVER_CN = "submarine-elastic job driver"
#: In the job's directory of a job run with ``--insecure``: its clients then speak plaintext to its driver.
INSECURE_MARK = "insecure"


@dataclass(frozen=True)
class JobTls:
    """A job's certificates, issued at submit by a CA of the job's own whose key is then forgotten: the
    driver's (naming :func:`~submarine_elastic.tls.driver_server_name`, unless ``--tls_cert`` gave one),
    the agents' and the submitting side's client certificates. Its driver accepts no other client."""

    driver: DriverTls
    server_name: str | None
    job_ca: str
    agent: tuple[str, str]
    client: tuple[str, str]

    def __repr__(self) -> str:  # never show a key
        return f"JobTls(server_name={self.server_name!r}, keys=***)"

    @classmethod
    def issue(cls, job: str, given: DriverTls | None = None) -> JobTls:
        from submarine_elastic import tls

        ca = tls.CertificateAuthority.create(f"job CA {job}"[:64])
        name = None if given is not None else tls.driver_server_name(job)
        if given is None:
            server = ca.issue_server(DRIVER_CN, [tls.driver_server_name(job)])
            given = DriverTls(server.cert.decode(), server.key.decode(), ca.cert_pem.decode())
        agent, client = ca.issue_client("job agent"), ca.issue_client("job client")
        return cls(
            driver=given,
            server_name=name,
            job_ca=ca.cert_pem.decode(),
            agent=(agent.cert.decode(), agent.key.decode()),
            client=(client.cert.decode(), client.key.decode()),
        )


def job_secrets(req: JobRequest) -> dict[str, str | bytes]:
    """The files a job's containers get, by name: its control token, the secret variables of ``--env``,
    the job's TLS files, and the keytab its driver logs in to the RM from."""
    values = {"SUBMARINE_JOB_TOKEN": req.token or "", **req.env}
    files: dict[str, str | bytes] = {dest: values[name] for name, dest in SECRET_ENV.items() if values.get(name)}
    if req.yarn_login is not None and req.yarn_login.node_path is None:
        files[KEYTAB_FILE] = req.yarn_login.keytab
    if (job_tls := req.job_tls) is not None:
        driver = job_tls.driver
        contents = (driver.cert, driver.key, driver.ca, job_tls.job_ca, *job_tls.agent)
        files.update(zip(TLS_FILES.values(), contents, strict=True))
    if req.metrics_tls is not None:
        issued = req.metrics_tls
        pems = (issued.ca.decode(), issued.cert.decode(), issued.key.decode())
        files.update(zip(METRICS_TLS_FILES.values(), pems, strict=True))
    return files


#: What the submitting side keeps of a job whose containers' files are on HDFS: the token and the driver's
#: certificates ``job flex|show`` check it with (besides the client certificate); no key a container uses.
CLIENT_FILES = (SECRET_ENV["SUBMARINE_JOB_TOKEN"], TLS_FILES["driver_tls_cert_file"],
                TLS_FILES["driver_tls_ca_file"])  # fmt: skip


def write_secrets(req: JobRequest) -> Path:
    """Writes :func:`job_secrets` into :func:`job_dir` (directory 0700, files 0600); returns it. When the
    containers' files are on HDFS (``req.files_uri``), only :data:`CLIENT_FILES` of them."""
    directory = job_dir(req.name)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    kept = job_secrets(req)
    if req.files_uri is not None:
        kept = {dest: value for dest, value in kept.items() if dest in CLIENT_FILES}
    if (job_tls := req.job_tls) is not None:
        kept.update({CLIENT_CERT: job_tls.client[0], CLIENT_KEY: job_tls.client[1]})
    else:
        kept[INSECURE_MARK] = "plaintext control plane (job run --insecure)\n"
    for dest, value in kept.items():
        write_atomic(directory / dest, value, mode=0o600)
    return directory


def parse_env(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``K=V`` pairs of ``--env``.

    Raises:
        JobSpecError: a pair without ``=``, a bad variable name, or a value the containers' launch script
            would interpret (see :func:`env_problem`).
    """
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            raise JobSpecError(f"--env: expected NAME=VALUE with a shell variable name, got {pair!r}")
        if (problem := env_problem(key, value)) is not None:
            raise JobSpecError(problem)
        result[key] = value
    return result


# The driver binds its port seconds after it is chosen: outside Linux's ephemeral range (32768-60999),
# no outgoing connection of another process can take it in between. Above the pseudo-clusters' 18000-21000.
DRIVER_PORTS = range(21000, 32000)


def free_port() -> int:
    """A port for a job's driver that is free now, drawn at random from :data:`DRIVER_PORTS`.

    Raises:
        OSError: none of 200 tries was free.
    """
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.choice(DRIVER_PORTS)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port for the job driver in {DRIVER_PORTS.start}-{DRIVER_PORTS.stop - 1}")


def container_settings(req: JobRequest) -> dict[str, str]:
    """What every container of the job is told (``settings.Environment``, written by
    ``settings.container_env``), with ``--env`` over it; the secrets as the files YARN localizes, never as
    values in the spec.

    Raises:
        SettingsError: a value its setting's rule refuses (naming the variable).
    """
    from submarine_elastic.settings import container_env, env_name

    if req.python_env is not None:
        path = f"$PWD/{ENV_DIR}/bin:{SYSTEM_PATH}"
    else:
        path = SYSTEM_PATH if req.docker_image else f"{Path(req.python).parent}:{SYSTEM_PATH}"
    batch = req.batch_limits
    common = container_env(
        job_id=req.name,
        rm_url=req.rm_url,
        driver_port=req.driver_port,
        num_workers=req.limits.num,
        min_workers=req.limits.min,
        max_workers=req.limits.max,
        elastic=req.elastic,
        workdir=f"$PWD/{CODE_DIR}" if req.code is not None else req.workdir,
        job_outcome_file=outcome_path(req.name).resolve(),
        # Unset: the driver tells its ranks the interface holding its own address (driver.gloo_endpoint), the
        # one that routes to its workers' hosts. A loopback cluster runs every container on this machine, where
        # the host's name may resolve to an address the containers were not given: lo, as its NodeManagers.
        gloo_iface="lo" if is_loopback(req.rm_url) else None,
        queue=req.queue or None,
        input_path=req.input_path or None,
        checkpoint_path=req.checkpoint_path or None,
        checkpoint_every=req.checkpoint_every,
        min_batch_size=None if batch is None else batch.min,
        max_batch_size=None if batch is None else batch.max,
        saved_model_path=req.saved_model_path or None,
        tensorboard_dir=None if req.tensorboard is None else req.tensorboard.logdir.removeprefix("file://"),
    )
    common.update(
        {
            "PATH": path,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            # Set before the ring forms so a warm process can trace its step (the ring size is read at run time).
            "HOROVOD_ELASTIC": "1",
            # Above a joiner's start, far below the 30 s default a dead peer would otherwise cost.
            "HOROVOD_GLOO_TIMEOUT_SECONDS": "20",
        }
    )
    common.update(req.env)
    # Secrets travel as files YARN localizes into each container, never as values in the spec.
    secrets_given = {"SUBMARINE_JOB_TOKEN": req.token, **req.env}
    for name, dest in SECRET_ENV.items():
        common.pop(name, None)
        if secrets_given.get(name):
            common.update(container_env(**{SECRET_FILE_SETTINGS[name]: f"$PWD/{dest}"}))
    if (job_tls := req.job_tls) is not None:
        common.update(container_env(**{field: f"$PWD/{dest}" for field, dest in TLS_FILES.items()}))
        common.update(container_env(driver_tls_name=job_tls.server_name or None))
    else:
        common.update(container_env(insecure=True))
    if req.metrics_tls is not None:
        # A CA given with --env SUBMARINE_METRICS_TLS_CA (a service with a certificate of its own) stays.
        given_ca = req.env.get(env_name("metrics_tls_ca"))
        common.update(container_env(**{field: f"$PWD/{dest}" for field, dest in METRICS_TLS_FILES.items()}))
        if given_ca is not None:
            common[env_name("metrics_tls_ca")] = given_ca
    if req.yarn_login is not None:
        # The driver resizes its own job: it logs in from the localized keytab, into a cache of its own.
        keytab = req.yarn_login.node_path or f"$PWD/{KEYTAB_FILE}"
        common.update(container_env(yarn_auth="kerberos", yarn_keytab=keytab, yarn_principal=req.yarn_login.principal))
    return common


def build_service(req: JobRequest) -> Service:
    """The job's YARN service: a ``driver`` (ends the service) and ``num`` ``worker`` agents.

    Raises:
        JobSpecError: the request cannot make a valid spec (the field named).
    """
    raw = json.loads(resources.job_template().read_text())
    raw["name"] = req.name
    if req.queue:
        raw["queue"] = req.queue
    from submarine_elastic.settings import SettingsError, container_env

    python = interpreter(req)
    try:
        common = container_settings(req)
    except SettingsError as exc:
        raise JobSpecError(str(exc)) from exc
    secret_files = job_secrets(req)
    if req.docker_image:
        common.update(YARN_CONTAINER_RUNTIME_TYPE="docker", YARN_CONTAINER_RUNTIME_DOCKER_IMAGE=req.docker_image)
    raw["configuration"] = {
        "env": {k: v for k, v in common.items() if v != ""},
        "properties": {**SERVICE_PROPERTIES, **dict(req.conf)},
    }
    source = code_source(req)
    files = [{"type": "STATIC", "src_file": f"{source}/{dest}", "dest_file": dest} for dest in secret_files]
    if req.code is not None:
        # A file, unpacked by the agent (jobcode.unpack_code): an ARCHIVE is a link to a directory, which the
        # NodeManager's in-place relaunch links again with ``ln -sf`` (into that directory: a loop its own
        # ``find -L`` fails on), so every relaunch of a failed worker in its container would fail.
        files.append({"type": "STATIC", "src_file": f"{source}/{req.code.name}", "dest_file": CODE_ARCHIVE})
    if (env_archive := env_source(req)) is not None:
        # PRIVATE: each NodeManager keeps the extracted environment for the user's later jobs of the same archive.
        files.append({"type": "ARCHIVE", "src_file": env_archive, "dest_file": ENV_DIR, "visibility": "PRIVATE"})
    if files:
        raw["configuration"]["files"] = files
    for comp in raw["components"]:
        if req.docker_image:
            comp["artifact"] = {"type": "DOCKER", "id": req.docker_image}
            if mounts := docker_mounts(req, comp["name"]):
                comp["configuration"].setdefault("env", {})["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] = ",".join(mounts)
        if comp["name"] == DRIVER_COMPONENT:
            comp["launch_command"] = f"{shlex.quote(python)} -m submarine_elastic.elastic.driver"
        elif comp["name"] == WORKER_COMPONENT:
            comp["number_of_containers"] = req.limits.num
            comp["launch_command"] = f"{shlex.quote(python)} -m submarine_elastic.elastic.agent"
            comp["resource"] = req.resources.yarn_resource()
            comp["configuration"]["env"].update(
                container_env(
                    worker_gpus=req.resources.gpus or None,
                    worker_cmd_b64=base64.b64encode(req.launch_cmd.encode()).decode(),
                )
            )
            if req.placement is not None:
                # Fixed for the service's life: YARN applies it to every worker it starts, a flex's too.
                comp["placement_policy"] = {"constraints": [req.placement.constraint()]}
    if (board := req.tensorboard) is not None:
        image = board.docker_image or req.docker_image
        board_env = (
            {"YARN_CONTAINER_RUNTIME_TYPE": "docker", "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": image} if image else {}
        )
        python = DOCKER_PYTHON if image and req.python_env is None else python
        raw["components"].append(board.component(python, board_env, image))
    if req.quicklinks or req.tensorboard is not None:
        raw["quicklinks"] = {**req.quicklinks, **({} if board is None else {TB_QUICKLINK: board.link()})}
    try:
        from submarine_elastic.yarn import Service  # pydantic: only a submission needs it

        return Service.from_dict(raw)
    except InvalidSpecError as exc:
        raise JobSpecError(f"--name or another flag makes an invalid service: {exc}") from exc


def tensorboard_port(board: TensorBoard) -> TensorBoard:
    """``board`` with a port free here now (:func:`free_port`): TensorBoard binds it on its node."""
    return dataclasses.replace(board, port=free_port())


def new_token() -> str:
    return secrets.token_urlsafe(24)


def with_credentials(req: JobRequest) -> JobRequest:
    """``req`` with what it lacks of its credentials: a free port for its driver (:func:`free_port`), a control
    token, the submitter's Kerberos login when the RM asks one (:meth:`YarnLogin.from_env`) and, unless it runs
    ``--insecure``, the job's certificates (:meth:`JobTls.issue`). What ``req`` has is kept, so it may be called
    again. Binds sockets, reads the keytab and issues certificates: ``submit`` calls it, nothing earlier.

    Raises:
        OSError: no free port.
        JobSpecError: the Kerberos login is unusable (naming the variable).
    """
    return dataclasses.replace(
        req,
        driver_port=req.driver_port if req.driver_port is not None else free_port(),
        token=req.token if req.token is not None else new_token(),
        yarn_login=req.yarn_login if req.yarn_login is not None else YarnLogin.from_env(),
        job_tls=req.job_tls if req.job_tls is not None or req.insecure else JobTls.issue(req.name, req.tls),
        tensorboard=None if (board := req.tensorboard) is None else board if board.port else tensorboard_port(board),
    )
