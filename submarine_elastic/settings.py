"""Every environment variable submarine-elastic reads or tells a container: one typed model, read in one place.

:class:`Environment` names each variable once (the field ``checkpoint_every`` is ``SUBMARINE_CHECKPOINT_EVERY``;
the few that YARN, Hadoop or Horovod own carry their own name). The submit side writes a job's containers'
variables from it (:func:`container_env`, what ``submarine job run`` puts in the spec); the driver, the agent
and the training side read them back as :class:`Settings` (``submarine_elastic.env.settings()``), validated
once: a bad value is a :class:`SettingsError` naming the variable and the value. Each kind of value has one
rule:

- a count (steps, commits, workers, batch sizes, a port): ASCII digits >= 1, blanks around them allowed;
- a duration in seconds: a finite number > 0;
- a switch: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (any case; empty is unset, which is off);
- an empty variable is an unset one.

| variable | side | meaning |
|---|---|---|
| ``SUBMARINE_CLUSTER_DIR`` | cluster | where ``submarine cluster up`` keeps configs, logs, pids (default ``~/.submarine-elastic/cluster``) |
| ``SUBMARINE_HADOOP_LIB`` | cluster | directory of the Hadoop jars (default ``share/submarine-elastic/hadoop/lib`` under the Python environment, where ``submarine cluster install-jars`` puts them) |
| ``SUBMARINE_HADOOP_CONF`` | cluster | the shared Hadoop configuration files (default: the ones the package ships) |
| ``SUBMARINE_RM_URL`` | client | ResourceManager web address (default: the local pseudo-cluster's) |
| ``HADOOP_CONF_DIR`` | client | a Hadoop client configuration: when its ``fs.defaultFS`` is HDFS, ``job run`` puts the jobs' files there, through WebHDFS at its ``dfs.namenode.http-address`` (default: the local pseudo-cluster's HDFS, when it has one and the job goes to its RM) |
| ``SUBMARINE_YARN_USER`` | client | user for simple auth (``?user.name=``); default: the login user |
| ``SUBMARINE_YARN_AUTH`` | client, job | ``simple`` (default) or ``kerberos`` (SPNEGO, mutual authentication required) |
| ``SUBMARINE_YARN_KEYTAB`` | client, job | with ``kerberos``: the keytab to log in from (into a private in-memory credentials cache); unset: the user's credentials cache (``kinit``). ``job run`` copies it into the job's secrets and points the job's containers at the copy YARN localizes |
| ``SUBMARINE_YARN_PRINCIPAL`` | client, job | the keytab's principal to log in as (default: its first) |
| ``SUBMARINE_METRICS_ENDPOINT`` | training | ``host:port`` of the metrics service; unset: hooks do nothing |
| ``SUBMARINE_METRICS_TOKEN`` | training, service | bearer token the hooks send and the service checks |
| ``SUBMARINE_METRICS_TOKEN_FILE`` | training, service | file holding the token (when no ``..._TOKEN``) |
| ``SUBMARINE_METRICS_TLS_CA`` | training | PEM of the CA that signed the service's certificate; set: TLS |
| ``SUBMARINE_METRICS_TLS_CERT_FILE`` / ``..._KEY_FILE`` | training | the hooks' client certificate and key (PEM) for a metrics service that requires one |
| ``SUBMARINE_METRICS_TLS`` | training | a switch: TLS with the system's CAs (when no ``..._TLS_CA``) |
| ``SUBMARINE_METRICS_EVERY_N`` | training | report every N-th step (default 1) |
| ``SUBMARINE_NOISE_EVERY`` | training | measure the gradient noise scale every N-th training step (default 10; ``tf_hooks.noise``) |
| ``SUBMARINE_CHECKPOINT_PATH`` | training | directory where rank 0 of the elastic helpers writes the committed state, and from which a job that lost every worker resumes (``job run --checkpoint_path``); unset: no checkpoints |
| ``SUBMARINE_CHECKPOINT_EVERY`` | training | write a checkpoint every N commits (default 50; ``job run --checkpoint_every``) |
| ``SUBMARINE_TENSORBOARD_DIR`` | job, training | the job's TensorBoard directory (``job run --tensorboard``): rank 0 writes the training's scalars there and the job's driver its decisions (``tf_hooks.tensorboard``); unset: nothing written |
| ``SUBMARINE_SAVED_MODEL_PATH`` | training | where rank 0 of the Keras elastic helpers exports the trained model as a SavedModel when the job ends (``job run --saved_model_path``); unset: not exported |
| ``SUBMARINE_INPUT_PATH`` | training | ``job run --input_path``, for the training script to read |
| ``SUBMARINE_JOB_ID`` | training | the job's name (the job spec sets ``${SERVICE_NAME}``) |
| ``SUBMARINE_WORKER_INSTANCE`` | training | ``${COMPONENT_INSTANCE_NAME}``; default: the host name |
| ``NM_HOST`` / ``NM_PORT`` / ``NM_HTTP_PORT`` | job | set by YARN in each container: the worker's node (``host:port``), which its agent reports so the controller knows each job's placement, and its NodeManager's web port (where a GPU worker reads its devices) |
| ``CONTAINER_ID`` / ``LOG_DIRS`` | job | set by YARN in each container: its id, and its log directories (the first holds the training logs) |
| ``SUBMARINE_AGENT_FD`` | training | socket to the worker agent; set by the agent, read by ``tf_hooks.elastic.ring`` |
| ``SUBMARINE_WORKER_CMD_B64`` | job | the training command (``job run --worker_launch_cmd``), base64, which the worker agent runs |
| ``SUBMARINE_SIGKILL_DELAY_MS`` | job | the NodeManagers' delay from SIGTERM to SIGKILL (``job run`` reads it from the cluster): how long a worker whose container YARN stops (preempted) has to leave its ring |
| ``SUBMARINE_QUEUE`` | job | the YARN queue the job runs in (``job run --queue``): the driver grows back after a preemption within what it may hold |
| ``SUBMARINE_DRIVER_PORT`` | job | port of the job driver's control plane (agents attach, ``job flex`` resizes) |
| ``SUBMARINE_JOB_TOKEN`` | job | bearer token of the job driver's control plane |
| ``SUBMARINE_JOB_TOKEN_FILE`` | job | file holding that token (when no ``..._JOB_TOKEN``); ``job run`` points it at the file YARN localizes into each container |
| ``SUBMARINE_DRIVER_TLS_CERT_FILE`` / ``..._KEY_FILE`` | job | the driver's certificate chain and key (PEM): with both, its control plane speaks TLS only |
| ``SUBMARINE_DRIVER_TLS_CA_FILE`` | job | certificates the agents trust for the driver (PEM); with it, they connect over TLS |
| ``SUBMARINE_DRIVER_TLS_CLIENT_CA_FILE`` | job | the job's CA (PEM): the driver accepts only clients presenting a certificate it issued |
| ``SUBMARINE_DRIVER_TLS_NAME`` | job | the name the driver's certificate carries, which its clients check instead of the host they dial |
| ``SUBMARINE_AGENT_TLS_CERT_FILE`` / ``..._KEY_FILE`` | job | the agents' client certificate and key (PEM) for the driver |
| ``SUBMARINE_NUM_WORKERS`` / ``..._MIN_WORKERS`` / ``..._MAX_WORKERS`` | job | the elastic limits |
| ``SUBMARINE_ELASTIC`` | job | a switch: whether the job's worker count may change (``job run --elastic``) |
| ``SUBMARINE_MIN_BATCH_SIZE`` / ``..._MAX_BATCH_SIZE`` | job | the global batch sizes a policy or an operator may set the job's batch to (read by the job's driver, which refuses a batch outside them and reports them to the controller); unset: no limits |
| ``SUBMARINE_JOB_OUTCOME_FILE`` | job | where the job's driver writes how the job ended (phase, reason, first failures) for ``submarine job show``; ``job run`` sets it beside the job's directory |
| ``SUBMARINE_WORKER_GPUS`` | job | the ``yarn.io/gpu`` of each worker container (``job run``'s ``gpu=N``); the agent pins its training process to that many of its node's devices (``submarine_elastic.elastic.gpus``); unset: none |
| ``SUBMARINE_GPU_CLAIMS_DIR`` | job | where the workers of every job on a node claim the devices YARN does not assign itself, one directory per NodeManager (default ``/tmp/submarine-elastic-gpus``; the same for every job on the node) |
| ``SUBMARINE_WORKDIR`` | job | directory the worker agent runs the training command in |
| ``SUBMARINE_HUNG_AFTER_S`` | job | a training process in a ring that sends its agent no heartbeat for this long is killed as hung (default 10) |
| ``SUBMARINE_DRIVER_GRACE_S`` | job | how long a worker whose driver was lost keeps training and waits for the driver's next incarnation (default 180) |
| ``SUBMARINE_DRIVER_STATE_FILE`` | job | where the job's driver keeps what its next incarnation needs (target, timeline, incarnations); default: beside the outcome file |
| ``SUBMARINE_GLOO_IFACE`` | job | network interface Horovod's rendezvous and Gloo use; unset: the one holding the driver's address (on a loopback cluster ``job run`` sets ``lo``) |
| ``HOROVOD_ELASTIC_TIMEOUT`` | job | seconds Horovod's elastic driver waits for the hosts it needs (default 600) |
| ``SUBMARINE_CONTROLLER_DIR`` | controller | state of ``submarine controller`` (default ``~/.submarine-elastic/controller``) |
| ``SUBMARINE_CA_DIR`` | client, controller | the cluster's certificate authority (``ca.crt``, ``ca.key`` mode 0600), created on first use; default ``~/.submarine-elastic/ca`` |
| ``SUBMARINE_INSECURE`` | client, job, training | a switch: plaintext where TLS is the default (the job driver, the controller, the metrics service, the py4j bridge and their clients); unset: TLS, and a client without a CA refuses to connect |
| ``SUBMARINE_JOBS_DIR`` | client | one directory per job: its control token, secrets and TLS files, which YARN localizes into its containers (so every NodeManager must read it at the same path); default ``~/.submarine-elastic/jobs`` |
| ``SUBMARINE_POLLUX_DATA`` | simulator | the Pollux measured job models and workloads (default: the copy the package ships) |
"""

from __future__ import annotations

import getpass
import math
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AliasGenerator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from submarine_elastic import resources
from submarine_elastic.limits import CHECKPOINT_EVERY_DEFAULT
from submarine_elastic.secret_files import read_secret

#: The prefix of every variable of the project.
PREFIX = "SUBMARINE_"
#: Seconds Horovod's elastic driver waits for hosts when ``HOROVOD_ELASTIC_TIMEOUT`` is unset.
HOROVOD_ELASTIC_TIMEOUT_DEFAULT = 600


class SettingsError(ValueError):
    """A variable holds a value its rule refuses; the message names the variable and the value."""


def env_name(field: str) -> str:
    """The variable of :class:`Environment`'s field ``field`` (``checkpoint_every`` -> ``SUBMARINE_CHECKPOINT_EVERY``).

    Raises:
        KeyError: no such field.
    """
    alias = Environment.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else PREFIX + field.upper()


def positive_int_problem(name: str, value: object, unit: str | None = None) -> str | None:
    """What makes ``value`` of the variable ``name`` no count (ASCII digits >= 1, blanks around them allowed; no
    sign, no ``_``, no other script's digits); None when it is one."""
    if isinstance(value, str) and (text := value.strip()).isascii() and text.isdigit() and int(text) >= 1:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return None
    what = f"a positive integer ({unit})" if unit else "a positive integer"
    return f"{name} must be {what}, got {value!r}"


def _count(unit: str | None = None) -> Callable[[object, ValidationInfo], int]:
    def parse(value: object, info: ValidationInfo) -> int:
        if (problem := positive_int_problem(env_name(str(info.field_name)), value, unit)) is not None:
            raise ValueError(problem)
        return int(value) if isinstance(value, int) else int(str(value).strip())

    return parse


def _seconds(value: object, info: ValidationInfo) -> float:
    try:
        seconds = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else math.nan
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or seconds == math.inf:
        raise ValueError(f"{env_name(str(info.field_name))} must be a positive number of seconds, got {value!r}")
    return seconds


def _digits(what: str) -> Callable[[object, ValidationInfo], int]:
    def parse(value: object, info: ValidationInfo) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return int(value)
        raise ValueError(f"{env_name(str(info.field_name))} must be {what}, got {value!r}")

    return parse


def switch(name: str, value: object) -> bool:
    """The project's one rule for a yes/no variable: ``1``/``true``/``yes`` or ``0``/``false``/``no``, any case;
    empty is off.

    Raises:
        SettingsError: any other value (a typo must not leave the choice unclear), naming ``name`` and it.
    """
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise SettingsError(f"{name} must be 1/true/yes or 0/false/no, got {text!r}")


def _switch(value: object, info: ValidationInfo) -> bool:
    return switch(env_name(str(info.field_name)), value)


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _user_path(value: object) -> object:
    return Path(value).expanduser() if isinstance(value, (str, Path)) else value


Count = Annotated[int | None, BeforeValidator(_count())]
Seconds = Annotated[float | None, BeforeValidator(_seconds)]
Switch = Annotated[bool, BeforeValidator(_switch)]
#: a path whose ``~`` is the user's home (the user's own shell sets it)
UserPath = Annotated[Path | None, BeforeValidator(_user_path)]
#: a path as the container was given it (``$PWD/...`` in a spec stays as it is)
PlainPath = Path | None


def _own(name: str, description: str) -> Any:
    """A field for a variable that YARN, Hadoop or Horovod name, not the project."""
    return Field(None, validation_alias=name, description=description)


class Environment(BaseModel):
    """The project's variables, typed, as a job's containers are told them and every process reads them; a field
    left unset is a variable left unset (its reader's default applies). The table in this module's docstring
    says what each means."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        extra="forbid",
        alias_generator=AliasGenerator(validation_alias=lambda field: PREFIX + field.upper()),
    )

    # the submitting side and the cluster
    cluster_dir: UserPath = None
    hadoop_lib: UserPath = None
    hadoop_conf: UserPath = None
    hadoop_conf_dir: UserPath = _own("HADOOP_CONF_DIR", "a Hadoop client configuration")
    rm_url: str | None = None
    yarn_user: str | None = None
    yarn_auth: Annotated[str, BeforeValidator(_lower)] = "simple"
    yarn_keytab: UserPath = None
    yarn_principal: str | None = None
    controller_dir: UserPath = None
    ca_dir: UserPath = None
    insecure: Switch = False
    jobs_dir: UserPath = None
    pollux_data: UserPath = None
    # the training process
    metrics_endpoint: str | None = None
    metrics_token: str | None = Field(default=None, repr=False)
    metrics_token_file: UserPath = None
    metrics_tls_ca: UserPath = None
    metrics_tls_cert_file: PlainPath = None
    metrics_tls_key_file: PlainPath = None
    metrics_tls: Switch = False
    metrics_every_n: Annotated[int, BeforeValidator(_count())] = 1
    noise_every: Count = None
    checkpoint_path: str | None = None
    checkpoint_every: Annotated[int, BeforeValidator(_count("commits"))] = CHECKPOINT_EVERY_DEFAULT
    tensorboard_dir: str | None = None
    saved_model_path: str | None = None
    input_path: str | None = None
    job_id: str | None = None
    worker_instance: str | None = None
    agent_fd: Annotated[int | None, BeforeValidator(_digits("a file descriptor number"))] = None
    # the job's driver and agents
    nm_host: str | None = _own("NM_HOST", "the worker's NodeManager host")
    nm_port: str | None = _own("NM_PORT", "the worker's NodeManager port")
    nm_http_port: str | None = _own("NM_HTTP_PORT", "the worker's NodeManager web port")
    container_id: str | None = _own("CONTAINER_ID", "the container's id")
    log_dirs: str | None = _own("LOG_DIRS", "the container's log directories")
    worker_cmd_b64: str | None = None
    sigkill_delay_ms: Annotated[int | None, BeforeValidator(_digits("a whole number of milliseconds"))] = None
    queue: str | None = None
    driver_port: Count = None
    job_token: str | None = Field(default=None, repr=False)
    job_token_file: PlainPath = None
    driver_tls_cert_file: PlainPath = None
    driver_tls_key_file: PlainPath = None
    driver_tls_ca_file: PlainPath = None
    driver_tls_client_ca_file: PlainPath = None
    driver_tls_name: str | None = None
    agent_tls_cert_file: PlainPath = None
    agent_tls_key_file: PlainPath = None
    num_workers: Count = None
    min_workers: Count = None
    max_workers: Count = None
    elastic: Switch = False
    min_batch_size: Count = None
    max_batch_size: Count = None
    job_outcome_file: PlainPath = None
    driver_state_file: PlainPath = None
    worker_gpus: Annotated[int, BeforeValidator(_count())] = 0
    gpu_claims_dir: PlainPath = None
    workdir: PlainPath = None
    hung_after_s: Seconds = None
    driver_grace_s: Seconds = None
    gloo_iface: str | None = None
    horovod_elastic_timeout: Annotated[int, BeforeValidator(_count("seconds"))] = Field(
        default=HOROVOD_ELASTIC_TIMEOUT_DEFAULT, validation_alias="HOROVOD_ELASTIC_TIMEOUT"
    )


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def container_env(**values: object) -> dict[str, str]:
    """The variables that tell a container ``values`` (fields of :class:`Environment`; None: left unset), each
    checked by its rule and written as the reader parses it: the submit side's half of the model.

    Raises:
        SettingsError: a value its rule refuses, or no such field (naming it).
    """
    unknown = sorted(set(values) - set(Environment.model_fields))
    if unknown:
        raise SettingsError(f"no such setting: {', '.join(unknown)}")
    given = {name: value for name, value in values.items() if value is not None}
    try:
        model = Environment.model_validate(given)
    except ValidationError as exc:
        raise _error(exc) from None
    return {env_name(name): _text(getattr(model, name)) for name in given}


def _error_message(error: Any) -> str:
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, Exception):
        return str(cause)
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}, got {error.get('input')!r}"


def _error(exc: ValidationError) -> SettingsError:
    return SettingsError("; ".join(_error_message(error) for error in exc.errors()))


class Settings(BaseSettings, Environment):
    """:class:`Environment` as this process's variables hold it, with the values its readers derive (defaults
    that need the machine, pairs that go together, files that hold secrets). Built by :func:`load`.

    A variable its rule refuses is an error of the field that reads it, raised where it is read: a process is
    not stopped by a bad value of a variable it never reads (the metrics hooks by a bad checkpoint interval)."""

    model_config = SettingsConfigDict(
        case_sensitive=True, env_ignore_empty=True, extra="ignore", validate_default=False
    )
    #: field -> why its variable was refused
    _problems: dict[str, str] = PrivateAttr(default_factory=dict)

    def __getattribute__(self, name: str) -> Any:
        if name in _FIELDS:
            private = object.__getattribute__(self, "__pydantic_private__")
            if private and (problem := private["_problems"].get(name)) is not None:
                raise SettingsError(problem)
        return super().__getattribute__(name)

    def problems(self) -> list[str]:
        """Every variable its rule refused, each named with its value (empty: none)."""
        return list(self.__pydantic_private__["_problems"].values()) if self.__pydantic_private__ else []

    def home_dir(self, field: str, *parts: str) -> Path:
        value = getattr(self, field)
        return value if value is not None else Path.home().joinpath(".submarine-elastic", *parts)

    def cluster_directory(self) -> Path:
        """Directory of the local pseudo-cluster's state (``SUBMARINE_CLUSTER_DIR``)."""
        return self.home_dir("cluster_dir", "cluster")

    def hadoop_lib_directory(self) -> Path:
        """Directory of the Hadoop jars (``SUBMARINE_HADOOP_LIB``); by default inside the Python environment, where
        ``submarine cluster install-jars`` (run by ``scripts/install.sh``) resolves them."""
        default = Path(sys.prefix) / "share" / "submarine-elastic" / "hadoop" / "lib"
        return self.hadoop_lib if self.hadoop_lib is not None else default

    def hadoop_conf_template(self) -> Path:
        """The Hadoop configuration shared with the docker-compose cluster (``SUBMARINE_HADOOP_CONF``)."""
        return self.hadoop_conf if self.hadoop_conf is not None else resources.hadoop_conf()

    def controller_directory(self) -> Path:
        """Directory of the controller's state, database and log (``SUBMARINE_CONTROLLER_DIR``)."""
        return self.home_dir("controller_dir", "controller")

    def ca_directory(self) -> Path:
        """Directory of the cluster's certificate authority (``SUBMARINE_CA_DIR``)."""
        return self.home_dir("ca_dir", "ca")

    def jobs_directory(self) -> Path:
        """Where ``submarine job run`` keeps each job's token, secrets and TLS files (``SUBMARINE_JOBS_DIR``)."""
        return self.home_dir("jobs_dir", "jobs")

    def pollux_data_directory(self) -> Path:
        """The measured job models and workloads the simulator replays (``SUBMARINE_POLLUX_DATA``): from the
        artifact of Pollux (OSDI 2021); by default the copy the package ships."""
        return self.pollux_data if self.pollux_data is not None else resources.pollux_data()

    def gpu_claims_directory(self) -> Path:
        """Where workers claim the GPUs YARN does not assign (``SUBMARINE_GPU_CLAIMS_DIR``)."""
        return self.gpu_claims_dir if self.gpu_claims_dir is not None else Path("/tmp/submarine-elastic-gpus")

    def user(self) -> str:
        """User name for YARN simple auth (``SUBMARINE_YARN_USER``, else the login user)."""
        return self.yarn_user or getpass.getuser()

    def instance(self) -> str:
        """This worker's instance name (``SUBMARINE_WORKER_INSTANCE``, else the host name)."""
        return self.worker_instance or socket.gethostname()

    def node_id(self) -> str:
        """The NodeManager this container runs on as YARN names the node (``NM_HOST:NM_PORT``); empty outside a
        container. Two NodeManagers of one host are two nodes."""
        return f"{self.nm_host}:{self.nm_port}" if self.nm_host and self.nm_port else ""

    def sigkill_delay_s(self) -> float | None:
        """The NodeManagers' SIGTERM-to-SIGKILL delay in seconds (``SUBMARINE_SIGKILL_DELAY_MS``); None: not known."""
        return None if self.sigkill_delay_ms is None else self.sigkill_delay_ms / 1000

    def metrics_tls_on(self) -> bool:
        """Whether to reach the metrics service over TLS (``SUBMARINE_METRICS_TLS``, or a CA given)."""
        return self.metrics_tls or self.metrics_tls_ca is not None

    def worker_limits(self) -> tuple[int, int, int]:
        """``(num, min, max)`` workers of the job.

        Raises:
            SettingsError: one is unset (naming it).
        """
        return (
            _required(self, "num_workers"),
            _required(self, "min_workers"),
            _required(self, "max_workers"),
        )

    def batch_limits(self) -> tuple[int, int] | None:
        """``(min, max)`` global batch of the job; None when neither is set.

        Raises:
            SettingsError: one is set without the other (naming the one unset).
        """
        if self.min_batch_size is None and self.max_batch_size is None:
            return None
        return _required(self, "min_batch_size"), _required(self, "max_batch_size")

    def state_file(self) -> Path | None:
        """Where the job's driver keeps what its next incarnation needs (``SUBMARINE_DRIVER_STATE_FILE``; by default
        ``<job>.driver.json`` beside the outcome file), or None when neither is set."""
        if self.driver_state_file is not None:
            return self.driver_state_file
        outcome = self.job_outcome_file
        if outcome is None:
            return None
        return outcome.with_name(outcome.name.removesuffix(".outcome.json").removesuffix(".json") + ".driver.json")

    def read_metrics_token(self) -> str | None:
        """Bearer token of the metrics service: ``SUBMARINE_METRICS_TOKEN``, else the content of the file named by
        ``SUBMARINE_METRICS_TOKEN_FILE``, else None.

        Raises:
            SecretFileError: that file cannot be read or is empty.
        """
        if self.metrics_token:
            return self.metrics_token
        path = self.metrics_token_file
        return read_secret(path, "SUBMARINE_METRICS_TOKEN_FILE's token") if path else None

    def read_job_token(self) -> str | None:
        """Token of the job driver's control plane (``SUBMARINE_JOB_TOKEN`` or ``..._TOKEN_FILE``).

        Raises:
            SecretFileError: the file cannot be read or is empty.
        """
        if self.job_token:
            return self.job_token
        path = self.job_token_file
        return read_secret(path, "SUBMARINE_JOB_TOKEN_FILE's token") if path else None

    def read_pem_pair(self, cert_field: str, key_field: str) -> tuple[bytes, bytes] | None:
        """The certificate chain and key (PEM) the two fields name, or None when neither is set.

        Raises:
            SettingsError: only one of the two is set.
            OSError: a file cannot be read.
        """
        cert, key = getattr(self, cert_field), getattr(self, key_field)
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise SettingsError(f"{env_name(cert_field)} and {env_name(key_field)} go together")
        return Path(cert).read_bytes(), Path(key).read_bytes()

    def read_driver_tls(self) -> tuple[bytes, bytes] | None:
        """The driver's certificate chain and key (``SUBMARINE_DRIVER_TLS_CERT_FILE`` / ``..._KEY_FILE``)."""
        return self.read_pem_pair("driver_tls_cert_file", "driver_tls_key_file")

    def read_agent_tls(self) -> tuple[bytes, bytes] | None:
        """The agents' client certificate and key for the driver (``SUBMARINE_AGENT_TLS_CERT_FILE`` / ``..._KEY_FILE``)."""
        return self.read_pem_pair("agent_tls_cert_file", "agent_tls_key_file")

    def read_metrics_tls_client(self) -> tuple[bytes, bytes] | None:
        """The hooks' client certificate and key for the metrics service (``SUBMARINE_METRICS_TLS_CERT_FILE`` / ...)."""
        return self.read_pem_pair("metrics_tls_cert_file", "metrics_tls_key_file")

    def read_driver_tls_ca(self) -> bytes | None:
        """Certificates the agents trust for the driver (``SUBMARINE_DRIVER_TLS_CA_FILE``), or None.

        Raises:
            OSError: the file cannot be read.
        """
        return self.driver_tls_ca_file.read_bytes() if self.driver_tls_ca_file is not None else None

    def read_driver_tls_client_ca(self) -> bytes | None:
        """The job's CA (``SUBMARINE_DRIVER_TLS_CLIENT_CA_FILE``): the driver requires client certificates it issued.

        Raises:
            OSError: the file cannot be read.
        """
        path = self.driver_tls_client_ca_file
        return path.read_bytes() if path is not None else None


def _required(settings: Settings, field: str) -> int:
    value = getattr(settings, field)
    if value is None:
        raise SettingsError(f"{env_name(field)} must be a positive integer, got None")
    return int(value)


#: Every field of the model, and its variable.
_FIELDS = frozenset(Environment.model_fields)
NAMES = frozenset(env_name(field) for field in _FIELDS)


def _without_refused(exc: ValidationError) -> Settings:
    """The settings of the variables the rules took, each refused one recorded against its field."""
    by_name = {env_name(field): field for field in _FIELDS}
    problems: dict[str, str] = {}
    for error in exc.errors():
        variable = str(error["loc"][0])
        problems[by_name.get(variable, variable)] = str(_error_message(error))
    raw = {name: value for name in NAMES - {env_name(f) for f in problems} if (value := os.environ.get(name))}
    try:
        taken = Environment.model_validate(raw)
    except ValidationError as again:  # a rule that refuses only beside another value: none does today
        raise _error(again) from None
    settings = Settings.model_construct(_fields_set=taken.model_fields_set, **dict(taken))
    settings.__pydantic_private__ = {"_problems": problems}
    return settings


_cached: tuple[frozenset[tuple[str, str]], Settings] | None = None


def load() -> Settings:
    """The settings this process's environment holds; read again only when one of the model's variables changed
    since the last call.

    Raises:
        nothing: a variable its rule refuses raises :class:`SettingsError` where its field is read.
    """
    global _cached
    key = frozenset((name, os.environ[name]) for name in NAMES if name in os.environ)
    if _cached is not None and _cached[0] == key:
        return _cached[1]
    try:
        settings = Settings()
    except ValidationError as exc:
        settings = _without_refused(exc)
    _cached = (key, settings)
    return settings
