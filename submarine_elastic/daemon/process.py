"""Starting and stopping the controller's process (``submarine controller start|stop``).

The process is found by its state file (:func:`submarine_elastic.controller.locate.running`: its pid and
the start time psutil reports, so a recycled pid is never taken for it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerError, ControllerInfo

#: Seconds between looks at the starting process's state file.
POLL_S = 0.2


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
    bind: str | None = None,
    advertise: str | None = None,
    directory: Path | None = None,
    timeout: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
) -> ControllerInfo:
    """Start the controller in the background (unless one runs from ``directory``) and wait until it
    serves; blocks at most ``timeout`` s. ``bind`` and ``advertise``: where its services listen and the
    address jobs are told (``netif.service_addresses``: by default the address towards the ResourceManager).

    Raises:
        ControllerError: it exited, or did not serve within ``timeout`` s (with its log's last lines).
    """
    where = locate.directory(directory)
    info = locate.running(where)
    if info is not None:
        return info
    where.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "submarine_elastic.daemon", "--dir", str(where), "--rm-url", rm_url]
    cmd += ["--policy", policy, "--arbiter", arbiter, "--interval", str(interval), "--cooldown", str(cooldown)]
    if capacity is not None:
        cmd += ["--capacity", str(capacity)]
    if bridge_port is not None:
        cmd += ["--bridge-port", str(bridge_port), "--bridge-java-port", str(bridge_java_port)]
    for flag, value in (("--bind", bind), ("--advertise", advertise)):
        if value is not None:
            cmd += [flag, value]
    with (where / locate.OUT).open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def serving() -> ControllerInfo | None:
        if proc.poll() is not None:
            raise ControllerError(f"the controller exited with status {proc.returncode}; {_last_lines(where)}")
        found = locate.running(where)
        return found if found is not None and found.pid == proc.pid else None

    def gave_up(state: RetryCallState) -> None:
        proc.kill()
        proc.wait(10)
        raise ControllerError(f"the controller did not serve within {timeout:.0f} s; {_last_lines(where)}")

    wait = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_fixed(POLL_S),
        retry=retry_if_result(lambda found: found is None),
        retry_error_callback=gave_up,
        sleep=sleep,
    )
    started = wait(serving)
    if started is None:  # gave_up raised; kept for the type checker
        raise ControllerError("the controller did not start")
    return started


def stop(directory: Path | None = None, timeout: float = 20.0) -> bool:
    """SIGTERM the controller that serves from ``directory`` and wait until it has exited (it removes its
    state file first); False if none ran. Blocks at most ``timeout`` s.

    Raises:
        ControllerError: it did not exit within ``timeout`` s.
    """
    info = locate.running(directory)
    if info is None:
        return False
    try:
        process = psutil.Process(info.pid)
        process.terminate()
    except psutil.NoSuchProcess:
        return True
    _, alive = psutil.wait_procs([process], timeout=timeout)
    if alive and locate.running(directory) is not None:
        raise ControllerError(f"the controller (pid {info.pid}) did not stop within {timeout:.0f} s")
    return True


def _last_lines(where: Path, lines: int = 20) -> str:
    for name in (locate.LOG, locate.OUT):
        try:
            tail = (where / name).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        if tail:
            return f"last lines of {where / name}:\n" + "\n".join(tail)
    return f"nothing in {where / locate.LOG}"
