"""Finding the controller: its directory (``SUBMARINE_CONTROLLER_DIR``), the files in it, and whether the
process that wrote its state file still runs.

The directory holds:

    controller.json   ControllerInfo: pid, gRPC address, metrics endpoint, ... (written once it serves)
    controller.db     its SQLite state (jobs, decisions, throughput history, policy state)
    controller.token  the bearer token of its gRPC API (mode 0600)
    metrics.token     the metrics service's operator token (mode 0600): the CLI reads every job's metrics with it
    metrics.key       the metrics service's key (mode 0600): each job's own metrics credential is made from it
    bridge.token      the py4j bridge's token (mode 0600), with --bridge-port
    bridge-tls/       the bridge's mutual TLS files for the JVM (jvm.crt, jvm.key, ca.crt; mode 0700)
    controller.log    its log; controller.out its stdout and stderr
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import psutil

from submarine_elastic import env
from submarine_elastic.controller.api import ControllerAuthError, ControllerInfo
from submarine_elastic.files import write_atomic

STATE = "controller.json"
DB = "controller.db"
API_TOKEN = "controller.token"
METRICS_TOKEN = "metrics.token"
METRICS_KEY = "metrics.key"
BRIDGE_TOKEN = "bridge.token"
#: The bridge's TLS files for the JVM, issued at each start (a directory).
BRIDGE_TLS_DIR = "bridge-tls"
LOG = "controller.log"
OUT = "controller.out"
#: ``create_time`` as psutil reports it is rounded; a recycled pid starts at least this much later.
_SAME_START_S = 0.01


def directory(given: Path | None = None) -> Path:
    """``given``, else ``SUBMARINE_CONTROLLER_DIR`` (default ``~/.submarine-elastic/controller``)."""
    return given if given is not None else env.settings().controller_directory()


def token_for(where: Path, name: str) -> str:
    """A token kept in ``where`` (created, mode 0600, on first use): the API's, the metrics service's or the
    bridge's. Only the controller's own process creates them."""
    path = where / name
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def read_token(where: Path, name: str) -> str:
    """A token the controller keeps in ``where``, for a caller.

    Raises:
        ControllerAuthError: the file cannot be read (named, with why); never shows the token.
    """
    path = where / name
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ControllerAuthError(f"cannot read the controller's token {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ControllerAuthError(f"the controller's token file {path} is empty")
    return token


def metrics_credential(where: Path, job_id: str) -> str:
    """The metrics credential of job ``job_id``, made from the key the controller keeps in ``where``: it
    reports and reads that job's metrics only (``submarine_elastic.metrics.auth``).

    Raises:
        ControllerAuthError: the key cannot be read or cannot make a credential (named, with why); never
            shows the key.
    """
    from submarine_elastic.metrics.auth import CredentialError, job_credential

    key = read_token(where, METRICS_KEY)
    try:
        return job_credential(key.encode(), job_id)
    except CredentialError as exc:
        raise ControllerAuthError(f"cannot make job {job_id!r}'s metrics credential: {exc}") from exc


def running(where: Path | None = None) -> ControllerInfo | None:
    """What the controller that serves from ``where`` wrote about itself, or None when none runs there
    (no state file, or its process is gone: killed, or a recycled pid)."""
    path = directory(where) / STATE
    try:
        info = ControllerInfo.from_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        process = psutil.Process(info.pid)
        alive = process.status() != psutil.STATUS_ZOMBIE
        same = abs(process.create_time() - info.create_time) < _SAME_START_S
    except psutil.Error:
        return None
    return info if alive and same else None


def write_info(where: Path, info: ControllerInfo) -> None:
    """Publish ``info`` atomically: a reader sees the whole file or none."""
    write_atomic(where / STATE, info.to_json())


def remove_info(where: Path) -> None:
    (where / STATE).unlink(missing_ok=True)
