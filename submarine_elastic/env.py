"""Every environment variable submarine-elastic reads, one accessor each.

This module imports nothing from the rest of the project, so the training side (``tf_hooks``) may
import it without pulling in the controller. The job spec sets the training-side variables in each
container; the user sets the cluster-side ones in their shell.

| variable | side | meaning |
|---|---|---|
| ``SUBMARINE_CLUSTER_DIR`` | cluster | where ``submarine cluster up`` keeps configs, logs, pids (default ``~/.submarine-elastic/cluster``) |
| ``SUBMARINE_HADOOP_LIB`` | cluster | directory of the Hadoop jars (default ``build/hadoop/lib`` of the checkout) |
| ``SUBMARINE_HADOOP_CONF`` | cluster | the shared Hadoop configuration files (default ``docker/hadoop/conf`` of the checkout) |
| ``SUBMARINE_RM_URL`` | client | ResourceManager web address (default: the local pseudo-cluster's) |
| ``SUBMARINE_YARN_USER`` | client | user for simple auth (``?user.name=``); default: the login user |
| ``SUBMARINE_YARN_AUTH`` | client | ``simple`` (default) or ``kerberos`` (SPNEGO) |
| ``SUBMARINE_METRICS_ENDPOINT`` | training | ``host:port`` of the metrics service; unset: hooks do nothing |
| ``SUBMARINE_METRICS_TOKEN`` | training, service | bearer token the hooks send and the service checks |
| ``SUBMARINE_METRICS_TOKEN_FILE`` | training, service | file holding the token (when no ``..._TOKEN``) |
| ``SUBMARINE_METRICS_TLS_CA`` | training | PEM of the CA that signed the service's certificate; set: TLS |
| ``SUBMARINE_METRICS_TLS`` | training | ``1``: TLS with the system's CAs (when no ``..._TLS_CA``) |
| ``SUBMARINE_METRICS_EVERY_N`` | training | report every N-th step (default 1) |
| ``SUBMARINE_JOB_ID`` | training | the job's name (the job spec sets ``${SERVICE_NAME}``) |
| ``SUBMARINE_WORKER_INSTANCE`` | training | ``${COMPONENT_INSTANCE_NAME}``; default: the host name |
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _get(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def cluster_dir() -> Path:
    """Directory of the local pseudo-cluster's state (``SUBMARINE_CLUSTER_DIR``)."""
    value = _get("SUBMARINE_CLUSTER_DIR")
    return Path(value).expanduser() if value else Path.home() / ".submarine-elastic" / "cluster"


def hadoop_lib() -> Path:
    """Directory holding the Hadoop jars resolved by ``scripts/install.sh`` (``SUBMARINE_HADOOP_LIB``)."""
    value = _get("SUBMARINE_HADOOP_LIB")
    return Path(value).expanduser() if value else _REPO_ROOT / "build" / "hadoop" / "lib"


def hadoop_conf_template() -> Path:
    """The Hadoop configuration shared with the docker-compose cluster (``SUBMARINE_HADOOP_CONF``)."""
    value = _get("SUBMARINE_HADOOP_CONF")
    return Path(value).expanduser() if value else _REPO_ROOT / "docker" / "hadoop" / "conf"


def rm_url() -> str | None:
    """ResourceManager web address given by the user (``SUBMARINE_RM_URL``), or None."""
    return _get("SUBMARINE_RM_URL")


def yarn_user() -> str:
    """User name for YARN simple auth (``SUBMARINE_YARN_USER``, else the login user)."""
    return _get("SUBMARINE_YARN_USER") or getpass.getuser()


def yarn_auth() -> str:
    """``simple`` or ``kerberos`` (``SUBMARINE_YARN_AUTH``); anything else is rejected by the client."""
    return (_get("SUBMARINE_YARN_AUTH") or "simple").lower()


def metrics_endpoint() -> str | None:
    """``host:port`` of the metrics service (``SUBMARINE_METRICS_ENDPOINT``), or None: report nothing."""
    return _get("SUBMARINE_METRICS_ENDPOINT")


def metrics_token() -> str | None:
    """Bearer token of the metrics service (``SUBMARINE_METRICS_TOKEN``), or None."""
    return _get("SUBMARINE_METRICS_TOKEN")


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
    value = _get("SUBMARINE_METRICS_EVERY_N")
    if value is None:
        return 1
    try:
        every_n = int(value)
    except ValueError:
        raise ValueError(f"SUBMARINE_METRICS_EVERY_N must be a positive integer, got {value!r}") from None
    if every_n < 1:
        raise ValueError(f"SUBMARINE_METRICS_EVERY_N must be a positive integer, got {value!r}")
    return every_n


def job_id() -> str | None:
    """The job's name (``SUBMARINE_JOB_ID``), or None."""
    return _get("SUBMARINE_JOB_ID")


def worker_instance() -> str:
    """This worker's instance name (``SUBMARINE_WORKER_INSTANCE``, else the host name)."""
    return _get("SUBMARINE_WORKER_INSTANCE") or socket.gethostname()
