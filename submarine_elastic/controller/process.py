"""Starting, finding and stopping the controller process, and telling it about jobs (used by the CLI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from submarine_elastic import env
from submarine_elastic.controller.api import ControllerError, JobRecord
from submarine_elastic.controller.daemon import DB, STATE, token_for
from submarine_elastic.controller.store import ControllerStore


def running(directory: Path | None = None) -> dict[str, Any] | None:
    """The running controller's state (pid, metrics endpoint, database), or None."""
    directory = directory or env.controller_dir()
    try:
        state: dict[str, Any] = json.loads((directory / STATE).read_text())
    except (OSError, ValueError):
        return None
    cmdline = Path(f"/proc/{state['pid']}/cmdline")
    try:
        if b"submarine_elastic.controller.daemon" not in cmdline.read_bytes():
            return None
    except OSError:
        return None
    return state


def start(
    rm_url: str,
    *,
    policy: str = "static",
    arbiter: str = "fair-share",
    interval: float = 5.0,
    capacity: int | None = None,
    cooldown: float = 30.0,
    bridge_port: int | None = None,
    bridge_java_port: int = 25333,
    directory: Path | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Start the controller in the background (unless one runs) and wait until it serves.

    Raises:
        ControllerError: it exited or did not serve within ``timeout`` s (with its log's tail).
    """
    directory = directory or env.controller_dir()
    state = running(directory)
    if state is not None:
        return state
    directory.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "submarine_elastic.controller.daemon",
        "--dir",
        str(directory),
        "--rm-url",
        rm_url,
        "--policy",
        policy,
        "--arbiter",
        arbiter,
        "--interval",
        str(interval),
        "--cooldown",
        str(cooldown),
    ]
    if capacity is not None:
        cmd += ["--capacity", str(capacity)]
    if bridge_port is not None:
        cmd += ["--bridge-port", str(bridge_port), "--bridge-java-port", str(bridge_java_port)]
    with (directory / "controller.out").open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = running(directory)
        if state is not None and state["pid"] == proc.pid:
            return state
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    log_tail = _tail(directory / "controller.log") or _tail(directory / "controller.out")
    if proc.poll() is None:
        proc.kill()
    raise ControllerError(f"the controller did not start; last lines of its log:\n{log_tail}")


def stop(directory: Path | None = None, timeout: float = 20.0) -> bool:
    """SIGTERM the running controller and wait until it has gone (it removes its state file); False if none ran.

    Raises:
        ControllerError: it did not stop within ``timeout`` s.
    """
    state = running(directory)
    if state is None:
        return False
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running(directory) is not None:
        if time.monotonic() > deadline:
            raise ControllerError(f"the controller (pid {state['pid']}) did not stop within {timeout:.0f} s")
        time.sleep(0.1)
    return True


def store(directory: Path | None = None) -> ControllerStore | None:
    """The controller database, if one exists."""
    path = (directory or env.controller_dir()) / DB
    return ControllerStore(path) if path.exists() else None


def register_job(state: dict[str, Any], record: JobRecord, policy: str | None) -> None:
    """Add a job to the running controller's table and wake it."""
    db = ControllerStore(Path(state["db"]))
    try:
        db.upsert_job(record, policy)
    finally:
        db.close()
    os.kill(state["pid"], signal.SIGUSR1)


def finish_job(job_id: str, directory: Path | None = None) -> None:
    """Mark a job finished in the controller's table (if it knows it) and wake the controller."""
    db = store(directory)
    if db is None:
        return
    try:
        if any(j.job_id == job_id for j in db.jobs()):
            db.update_job(job_id, state="finished")
    finally:
        db.close()
    state = running(directory)
    if state is not None:
        os.kill(state["pid"], signal.SIGUSR1)


def metrics_env(state: dict[str, Any], directory: Path | None = None) -> dict[str, str]:
    """What a job needs to stream its metrics to this controller."""
    return {
        "SUBMARINE_METRICS_ENDPOINT": state["metrics_endpoint"],
        "SUBMARINE_METRICS_TOKEN": token_for(directory or env.controller_dir()),
    }


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
