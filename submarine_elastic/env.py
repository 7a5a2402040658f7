"""Every environment variable submarine-elastic reads, one accessor each.

This module imports nothing from the rest of the project but ``resources`` (the standard library only), so the training side (``tf_hooks``) may
import it without pulling in the controller. The job spec sets the training-side variables in each
container; the user sets the cluster-side ones in their shell.

Every count below (steps, commits, workers, batch sizes) is read by one rule, :func:`positive_int`: ASCII
digits >= 1, blanks around them allowed; anything else is an error naming the variable and the value.

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
| ``SUBMARINE_METRICS_TLS`` | training | ``1``: TLS with the system's CAs (when no ``..._TLS_CA``) |
| ``SUBMARINE_METRICS_EVERY_N`` | training | report every N-th step (default 1) |
| ``SUBMARINE_NOISE_EVERY`` | training | measure the gradient noise scale every N-th training step (default 10; ``tf_hooks.noise``) |
| ``SUBMARINE_CHECKPOINT_PATH`` | training | directory where rank 0 of the elastic helpers writes the committed state, and from which a job that lost every worker resumes (``job run --checkpoint_path``); unset: no checkpoints |
| ``SUBMARINE_CHECKPOINT_EVERY`` | training | write a checkpoint every N commits (default 50; ``job run --checkpoint_every``) |
| ``SUBMARINE_JOB_ID`` | training | the job's name (the job spec sets ``${SERVICE_NAME}``) |
| ``SUBMARINE_WORKER_INSTANCE`` | training | ``${COMPONENT_INSTANCE_NAME}``; default: the host name |
| ``NM_HOST`` / ``NM_PORT`` | job | set by YARN in each container: the worker's node (``host:port``), which its agent reports so the controller knows each job's placement |
| ``SUBMARINE_AGENT_FD`` | training | socket to the worker agent; set by the agent, read by ``tf_hooks.elastic.ring`` |
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
| ``SUBMARINE_MIN_BATCH_SIZE`` / ``..._MAX_BATCH_SIZE`` | job | the global batch sizes a policy or an operator may set the job's batch to (read by the job's driver, which refuses a batch outside them and reports them to the controller); unset: no limits |
| ``SUBMARINE_JOB_OUTCOME_FILE`` | job | where the job's driver writes how the job ended (phase, reason, first failures) for ``submarine job show``; ``job run`` sets it beside the job's directory |
| ``SUBMARINE_WORKER_GPUS`` | job | the ``yarn.io/gpu`` of each worker container (``job run``'s ``gpu=N``); the agent pins its training process to that many of its node's devices (``submarine_elastic.elastic.gpus``); unset: none |
| ``SUBMARINE_GPU_CLAIMS_DIR`` | job | where the workers of every job on a node claim the devices YARN does not assign itself, one directory per NodeManager (default ``/tmp/submarine-elastic-gpus``; the same for every job on the node) |
| ``SUBMARINE_WORKDIR`` | job | directory the worker agent runs the training command in |
| ``SUBMARINE_HUNG_AFTER_S`` | job | a training process in a ring that sends its agent no heartbeat for this long is killed as hung (default 10) |
| ``SUBMARINE_DRIVER_GRACE_S`` | job | how long a worker whose driver was lost keeps training and waits for the driver's next incarnation (default 180) |
| ``SUBMARINE_DRIVER_STATE_FILE`` | job | where the job's driver keeps what its next incarnation needs (target, timeline, incarnations); default: beside the outcome file |
| ``SUBMARINE_GLOO_IFACE`` | job | network interface Horovod's rendezvous and Gloo use; unset: the one holding the driver's address (on a loopback cluster ``job run`` sets ``lo``) |
| ``SUBMARINE_CONTROLLER_DIR`` | controller | state of ``submarine controller`` (default ``~/.submarine-elastic/controller``) |
| ``SUBMARINE_CA_DIR`` | client, controller | the cluster's certificate authority (``ca.crt``, ``ca.key`` mode 0600), created on first use; default ``~/.submarine-elastic/ca`` |
| ``SUBMARINE_INSECURE`` | client, job, training | ``1``: plaintext where TLS is the default (the job driver, the controller, the metrics service, the py4j bridge and their clients); unset: TLS, and a client without a CA refuses to connect |
| ``SUBMARINE_JOBS_DIR`` | client | one directory per job: its control token, secrets and TLS files, which YARN localizes into its containers (so every NodeManager must read it at the same path); default ``~/.submarine-elastic/jobs`` |
| ``SUBMARINE_POLLUX_DATA`` | simulator | the Pollux measured job models and workloads (default: the copy the package ships) |
"""

from __future__ import annotations

import getpass
import os
import socket
import sys
from pathlib import Path

from submarine_elastic import resources


class SecretFileError(ValueError):
    """A file that should hold a secret cannot be read or holds none; the message names the file."""


def read_secret(path: Path, what: str) -> str:
    """The secret in ``path`` (a token: its first line, surrounding blanks stripped).

    Raises:
        SecretFileError: the file cannot be read or is empty (``what`` names whose secret it is).
    """
    try:
        value = path.expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(f"cannot read {what} from {path}: {exc}") from None
    if not value:
        raise SecretFileError(f"{what} file {path} is empty")
    return value


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def positive_int(name: str, default: int | None = None, *, unit: str | None = None) -> int:
    """The whole number >= 1 in the variable ``name``: ASCII digits, blanks around them allowed (no sign, no
    ``_``, no other script's digits); ``default`` when it is unset or empty.

    Raises:
        ValueError: it is unset and there is no ``default``, or it is not such a number; the message names
            the variable, the value and ``unit`` when given.
    """
    value = _get(name)
    if value is None:
        if default is not None:
            return default
    elif (text := value.strip()).isascii() and text.isdigit() and int(text) >= 1:
        return int(text)
    what = f"a positive integer ({unit})" if unit else "a positive integer"
    raise ValueError(f"{name} must be {what}, got {value!r}")


def cluster_dir() -> Path:
    """Directory of the local pseudo-cluster's state (``SUBMARINE_CLUSTER_DIR``)."""
    value = _get("SUBMARINE_CLUSTER_DIR")
    return Path(value).expanduser() if value else Path.home() / ".submarine-elastic" / "cluster"


def hadoop_lib() -> Path:
    """Directory holding the Hadoop jars (``SUBMARINE_HADOOP_LIB``); by default inside the Python environment,
    where ``submarine cluster install-jars`` (run by ``scripts/install.sh``) resolves them."""
    value = _get("SUBMARINE_HADOOP_LIB")
    return Path(value).expanduser() if value else Path(sys.prefix) / "share" / "submarine-elastic" / "hadoop" / "lib"


def hadoop_conf_template() -> Path:
    """The Hadoop configuration shared with the docker-compose cluster (``SUBMARINE_HADOOP_CONF``)."""
    value = _get("SUBMARINE_HADOOP_CONF")
    return Path(value).expanduser() if value else resources.hadoop_conf()


def hadoop_conf_dir() -> Path | None:
    """A Hadoop client configuration directory given by the user (``HADOOP_CONF_DIR``), or None."""
    value = _get("HADOOP_CONF_DIR")
    return Path(value).expanduser() if value else None


def rm_url() -> str | None:
    """ResourceManager web address given by the user (``SUBMARINE_RM_URL``), or None."""
    return _get("SUBMARINE_RM_URL")


def yarn_user() -> str:
    """User name for YARN simple auth (``SUBMARINE_YARN_USER``, else the login user)."""
    return _get("SUBMARINE_YARN_USER") or getpass.getuser()


def yarn_auth() -> str:
    """``simple`` or ``kerberos`` (``SUBMARINE_YARN_AUTH``); anything else is rejected by the client."""
    return (_get("SUBMARINE_YARN_AUTH") or "simple").lower()


def yarn_keytab() -> Path | None:
    """The keytab a Kerberos client logs in from (``SUBMARINE_YARN_KEYTAB``; in a job's container, the copy YARN
    localized); None: the user's credentials cache."""
    value = _get("SUBMARINE_YARN_KEYTAB")
    return Path(value).expanduser() if value else None


def yarn_principal() -> str | None:
    """The principal to log in as from the keytab (``SUBMARINE_YARN_PRINCIPAL``); None: the keytab's first."""
    return _get("SUBMARINE_YARN_PRINCIPAL")


def metrics_endpoint() -> str | None:
    """``host:port`` of the metrics service (``SUBMARINE_METRICS_ENDPOINT``), or None: report nothing."""
    return _get("SUBMARINE_METRICS_ENDPOINT")


def metrics_token() -> str | None:
    """Bearer token of the metrics service: ``SUBMARINE_METRICS_TOKEN``, else the content of the file named
    by ``SUBMARINE_METRICS_TOKEN_FILE``, else None.

    Raises:
        SecretFileError: that file cannot be read or is empty.
    """
    value = _get("SUBMARINE_METRICS_TOKEN")
    if value:
        return value
    path = metrics_token_file()
    return read_secret(path, "SUBMARINE_METRICS_TOKEN_FILE's token") if path else None


def metrics_token_file() -> Path | None:
    """File holding the metrics token (``SUBMARINE_METRICS_TOKEN_FILE``), or None."""
    value = _get("SUBMARINE_METRICS_TOKEN_FILE")
    return Path(value).expanduser() if value else None


def metrics_tls_ca() -> Path | None:
    """PEM file of the CA that signed the metrics service's certificate (``SUBMARINE_METRICS_TLS_CA``)."""
    value = _get("SUBMARINE_METRICS_TLS_CA")
    return Path(value).expanduser() if value else None


def metrics_tls() -> bool:
    """Whether to reach the metrics service over TLS (``SUBMARINE_METRICS_TLS``, or a CA given)."""
    value = (_get("SUBMARINE_METRICS_TLS") or "").lower()
    return value in ("1", "true", "yes") or metrics_tls_ca() is not None


def metrics_every_n() -> int:
    """Report every N-th training step (``SUBMARINE_METRICS_EVERY_N``, default 1).

    Raises:
        ValueError: the variable is set but is not a positive integer.
    """
    return positive_int("SUBMARINE_METRICS_EVERY_N", 1)


def noise_every(default: int) -> int:
    """Measure the gradient noise scale every N-th training step (``SUBMARINE_NOISE_EVERY``; ``default`` when unset).

    Raises:
        ValueError: the variable is set but is not a positive integer.
    """
    return positive_int("SUBMARINE_NOISE_EVERY", default)


def positive_seconds(name: str, default: float) -> float:
    """A duration in seconds from the variable ``name`` (``default`` when unset).

    Raises:
        ValueError: the variable is set but is not a positive number (naming it).
    """
    value = _get(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def job_id() -> str | None:
    """The job's name (``SUBMARINE_JOB_ID``), or None."""
    return _get("SUBMARINE_JOB_ID")


def queue() -> str | None:
    """The YARN queue the job runs in (``SUBMARINE_QUEUE``), or None: the cluster's default."""
    return _get("SUBMARINE_QUEUE")


def sigkill_delay_s() -> float | None:
    """The NodeManagers' SIGTERM-to-SIGKILL delay in seconds (``SUBMARINE_SIGKILL_DELAY_MS``), None: not known.

    Raises:
        ValueError: not a whole number of milliseconds (naming the value).
    """
    value = _get("SUBMARINE_SIGKILL_DELAY_MS")
    if value is None:
        return None
    if not value.isdigit():
        raise ValueError(f"SUBMARINE_SIGKILL_DELAY_MS must be a whole number of milliseconds, got {value!r}")
    return int(value) / 1000


def node_id() -> str:
    """The NodeManager this container runs on as YARN names the node (``NM_HOST:NM_PORT``, which YARN sets in
    every container); empty outside a container. Two NodeManagers of one host are two nodes."""
    host, port = _get("NM_HOST"), _get("NM_PORT")
    return f"{host}:{port}" if host and port else ""


def worker_instance() -> str:
    """This worker's instance name (``SUBMARINE_WORKER_INSTANCE``, else the host name)."""
    return _get("SUBMARINE_WORKER_INSTANCE") or socket.gethostname()


#: Commits between two checkpoints when ``SUBMARINE_CHECKPOINT_EVERY`` is unset.
CHECKPOINT_EVERY_DEFAULT = 50


def checkpoint_path() -> str | None:
    """Directory of the job's checkpoints (``SUBMARINE_CHECKPOINT_PATH``), or None: none are written or read."""
    return _get("SUBMARINE_CHECKPOINT_PATH")


def checkpoint_every() -> int:
    """Commits between two checkpoints (``SUBMARINE_CHECKPOINT_EVERY``, default :data:`CHECKPOINT_EVERY_DEFAULT`).

    Raises:
        ValueError: the variable is set but is not a positive integer.
    """
    return positive_int("SUBMARINE_CHECKPOINT_EVERY", CHECKPOINT_EVERY_DEFAULT, unit="commits")


def pollux_data_dir() -> Path:
    """The measured job models and workloads the simulator replays (``SUBMARINE_POLLUX_DATA``): from the
    artifact of Pollux (OSDI 2021); by default the copy the package ships."""
    value = _get("SUBMARINE_POLLUX_DATA")
    return Path(value).expanduser() if value else resources.pollux_data()


def agent_fd() -> int | None:
    """The socket to the worker agent (``SUBMARINE_AGENT_FD``), or None outside an agent.

    Raises:
        ValueError: the variable is set but not a file descriptor number.
    """
    value = _get("SUBMARINE_AGENT_FD")
    if value is None:
        return None
    if not value.isdigit():
        raise ValueError(f"SUBMARINE_AGENT_FD must be a file descriptor number, got {value!r}")
    return int(value)


def driver_port() -> int | None:
    """Port of the job driver's control plane (``SUBMARINE_DRIVER_PORT``)."""
    value = _get("SUBMARINE_DRIVER_PORT")
    return int(value) if value else None


def job_token() -> str | None:
    """Token of the job driver's control plane (``SUBMARINE_JOB_TOKEN`` or ``..._TOKEN_FILE``).

    Raises:
        SecretFileError: the file cannot be read or is empty.
    """
    value = _get("SUBMARINE_JOB_TOKEN")
    if value:
        return value
    path = _get("SUBMARINE_JOB_TOKEN_FILE")
    return read_secret(Path(path), "SUBMARINE_JOB_TOKEN_FILE's token") if path else None


def driver_tls() -> tuple[bytes, bytes] | None:
    """The driver's certificate chain and key, PEM (``SUBMARINE_DRIVER_TLS_CERT_FILE`` and ``..._KEY_FILE``),
    or None when neither is set.

    Raises:
        ValueError: only one of the two is set.
        OSError: a file cannot be read.
    """
    cert, key = _get("SUBMARINE_DRIVER_TLS_CERT_FILE"), _get("SUBMARINE_DRIVER_TLS_KEY_FILE")
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError("SUBMARINE_DRIVER_TLS_CERT_FILE and SUBMARINE_DRIVER_TLS_KEY_FILE go together")
    return Path(cert).read_bytes(), Path(key).read_bytes()


def _pem_pair(cert_var: str, key_var: str) -> tuple[bytes, bytes] | None:
    cert, key = _get(cert_var), _get(key_var)
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError(f"{cert_var} and {key_var} go together")
    return Path(cert).read_bytes(), Path(key).read_bytes()


def driver_tls_client_ca() -> bytes | None:
    """The job's CA, PEM (``SUBMARINE_DRIVER_TLS_CLIENT_CA_FILE``): the driver requires client certificates
    it issued. None when unset.

    Raises:
        OSError: the file cannot be read.
    """
    path = _get("SUBMARINE_DRIVER_TLS_CLIENT_CA_FILE")
    return Path(path).read_bytes() if path else None


def driver_tls_name() -> str | None:
    """The name the driver's certificate carries (``SUBMARINE_DRIVER_TLS_NAME``), or None."""
    return _get("SUBMARINE_DRIVER_TLS_NAME")


def agent_tls() -> tuple[bytes, bytes] | None:
    """The agents' client certificate chain and key, PEM (``SUBMARINE_AGENT_TLS_CERT_FILE`` / ``..._KEY_FILE``).

    Raises:
        ValueError: only one of the two is set.
        OSError: a file cannot be read.
    """
    return _pem_pair("SUBMARINE_AGENT_TLS_CERT_FILE", "SUBMARINE_AGENT_TLS_KEY_FILE")


def metrics_tls_client() -> tuple[bytes, bytes] | None:
    """The hooks' client certificate chain and key for the metrics service, PEM
    (``SUBMARINE_METRICS_TLS_CERT_FILE`` / ``..._KEY_FILE``), or None.

    Raises:
        ValueError: only one of the two is set.
        OSError: a file cannot be read.
    """
    return _pem_pair("SUBMARINE_METRICS_TLS_CERT_FILE", "SUBMARINE_METRICS_TLS_KEY_FILE")


def driver_tls_ca() -> bytes | None:
    """Certificates the agents trust for the driver, PEM (``SUBMARINE_DRIVER_TLS_CA_FILE``), or None.

    Raises:
        OSError: the file cannot be read.
    """
    path = _get("SUBMARINE_DRIVER_TLS_CA_FILE")
    return Path(path).read_bytes() if path else None


def worker_limits() -> tuple[int, int, int]:
    """``(num, min, max)`` workers of the job (``SUBMARINE_NUM_WORKERS`` / ``_MIN_`` / ``_MAX_``).

    Raises:
        ValueError: a value is missing or not a positive integer.
    """
    return (
        positive_int("SUBMARINE_NUM_WORKERS"),
        positive_int("SUBMARINE_MIN_WORKERS"),
        positive_int("SUBMARINE_MAX_WORKERS"),
    )


def batch_limits() -> tuple[int, int] | None:
    """``(min, max)`` global batch of the job (``SUBMARINE_MIN_BATCH_SIZE`` / ``_MAX_``); None when neither is set.

    Raises:
        ValueError: one is set without the other, or a value is not a positive integer.
    """
    if _get("SUBMARINE_MIN_BATCH_SIZE") is None and _get("SUBMARINE_MAX_BATCH_SIZE") is None:
        return None
    return positive_int("SUBMARINE_MIN_BATCH_SIZE"), positive_int("SUBMARINE_MAX_BATCH_SIZE")


def job_outcome_file() -> Path | None:
    """Where the job's driver records how the job ended (``SUBMARINE_JOB_OUTCOME_FILE``), or None."""
    value = _get("SUBMARINE_JOB_OUTCOME_FILE")
    return Path(value) if value else None


def driver_state_file() -> Path | None:
    """Where the job's driver keeps what its next incarnation needs (``SUBMARINE_DRIVER_STATE_FILE``; by
    default ``<job>.driver.json`` beside the outcome file), or None when neither is set."""
    value = _get("SUBMARINE_DRIVER_STATE_FILE")
    if value:
        return Path(value)
    outcome = job_outcome_file()
    if outcome is None:
        return None
    return outcome.with_name(outcome.name.removesuffix(".outcome.json").removesuffix(".json") + ".driver.json")


def workdir() -> Path | None:
    """Directory the worker agent runs the training command in (``SUBMARINE_WORKDIR``)."""
    value = _get("SUBMARINE_WORKDIR")
    return Path(value) if value else None


def worker_gpus() -> int:
    """The GPUs of each worker container (``SUBMARINE_WORKER_GPUS``); 0 when unset.

    Raises:
        ValueError: not a positive whole number (naming the value).
    """
    return positive_int("SUBMARINE_WORKER_GPUS") if _get("SUBMARINE_WORKER_GPUS") else 0


def gpu_claims_dir() -> Path:
    """Where workers claim the GPUs YARN does not assign (``SUBMARINE_GPU_CLAIMS_DIR``)."""
    value = _get("SUBMARINE_GPU_CLAIMS_DIR")
    return Path(value) if value else Path("/tmp/submarine-elastic-gpus")


def gloo_iface() -> str | None:
    """Network interface Gloo uses (``SUBMARINE_GLOO_IFACE``)."""
    return _get("SUBMARINE_GLOO_IFACE")


def controller_dir() -> Path:
    """Directory of the controller's state, database and log (``SUBMARINE_CONTROLLER_DIR``)."""
    value = _get("SUBMARINE_CONTROLLER_DIR")
    return Path(value).expanduser() if value else Path.home() / ".submarine-elastic" / "controller"


def ca_dir() -> Path:
    """Directory of the cluster's certificate authority (``SUBMARINE_CA_DIR``)."""
    value = _get("SUBMARINE_CA_DIR")
    return Path(value).expanduser() if value else Path.home() / ".submarine-elastic" / "ca"


def insecure() -> bool:
    """Whether plaintext was asked for where TLS is the default (``SUBMARINE_INSECURE``: ``1``, ``true``, ``yes``).

    Raises:
        ValueError: any other non-empty value (a typo must not leave the choice unclear).
    """
    value = (_get("SUBMARINE_INSECURE") or "").lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"SUBMARINE_INSECURE must be 1/true/yes or 0/false/no, got {value!r}")


def jobs_dir() -> Path:
    """Where ``submarine job run`` keeps each job's token, secrets and TLS files (``SUBMARINE_JOBS_DIR``)."""
    value = _get("SUBMARINE_JOBS_DIR")
    return Path(value).expanduser() if value else Path.home() / ".submarine-elastic" / "jobs"
