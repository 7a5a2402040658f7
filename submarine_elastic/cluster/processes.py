"""The pseudo-cluster's processes: starting a daemon, telling whether a recorded one still runs, stopping
daemons in order, and finding what a cluster left behind.

A daemon is named by its pid and its start time (:class:`~submarine_elastic.cluster.api.Daemon`), so that a
reused pid is not taken for it. What belongs to a cluster is said in :mod:`submarine_elastic.cluster.local`'s
docstring: never a process for what its environment says.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.cluster.api import Daemon, DaemonStartError, Host

log = logging.getLogger(__name__)

#: Seconds a daemon has between SIGTERM and SIGKILL on ``down``, and a leftover container process.
DAEMON_GRACE_S = 15.0
LEFTOVER_GRACE_S = 3.0

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def spawn(
    cluster_dir: Path,
    name: str,
    cmd: list[str],
    env: dict[str, str] | None,
    *,
    append_output: bool = False,
    host: Host | None = None,
) -> Daemon:
    """Start one daemon in a session of its own, in ``cluster_dir``, its stdout and stderr to
    ``logs/<name>.out`` (appended to on a restart, so what the previous run printed stays); on ``host``, inside
    its namespace (the commands that enter it replace themselves with the daemon, so the pid is the daemon's).

    Raises:
        OSError: the command could not be started, or the log not opened.
    """
    out = cluster_dir / "logs" / f"{name}.out"
    proc_env = dict(os.environ)
    proc_env.update(env or {})
    with out.open("ab" if append_output else "wb") as stdout:
        proc = subprocess.Popen(
            host.command(cmd) if host else cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cluster_dir,
            env=proc_env,
            start_new_session=True,
        )
    log.info("started %s pid %d", name, proc.pid)
    daemon = Daemon(name, proc.pid, start_ticks(proc.pid), cluster_dir / "logs" / f"{name}.log")
    _CHILDREN[proc.pid] = proc
    return daemon


def start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot, or -1 when there is no such process. With the
    pid it names one process: a pid is reused, a start time is not (and, unlike the wall-clock
    ``create_time``, it does not move when the system clock is set)."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return -1
    return round((created - psutil.boot_time()) * _CLOCK_TICKS)


def process_of(d: Daemon) -> psutil.Process | None:
    """The recorded daemon's process while it runs (not a zombie, not another process with its pid)."""
    try:
        proc = psutil.Process(d.pid)
        if start_ticks(d.pid) != d.start_ticks or proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc


def alive(d: Daemon) -> bool:
    """Whether the recorded daemon still runs."""
    child = _CHILDREN.get(d.pid)
    if child is not None and child.poll() is not None:
        return False
    return process_of(d) is not None


def still_runs(proc: psutil.Process) -> bool:
    """The same process as when ``proc`` was made (psutil checks its start time) and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(roots: Iterable[psutil.Process], *, including: bool = False) -> list[psutil.Process]:
    """Every process below ``roots`` (and the roots themselves, ``including``), each once."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        if including:
            found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found.setdefault(child.pid, child)
    return list(found.values())


def terminate(daemons: list[Daemon], grace: float, *, group: bool = True) -> None:
    """SIGTERM every daemon, wait up to ``grace`` seconds for all, then SIGKILL the process group of each
    one left (each daemon leads its own session), or with ``group=False`` the daemon alone: a NodeManager's
    group holds its containers' launch scripts, which a restarted NodeManager takes back."""
    procs = {d.name: p for d in daemons if (p := process_of(d)) is not None}
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, left = psutil.wait_procs(list(procs.values()), timeout=grace)
    for name, proc in procs.items():
        if proc in left:
            log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", name, proc.pid, grace)
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                if group:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
    psutil.wait_procs(left, timeout=5.0)
    for d in daemons:
        _reap(d.pid)


def stop_in_order(daemons: Iterable[Daemon]) -> None:
    """NodeManagers together, then the RM, the DataNodes, the NameNode, then ZooKeeper and the KDC; each wave
    gets SIGTERM and :data:`DAEMON_GRACE_S` before SIGKILL. Blocks until they are gone."""
    by_name = list(daemons)
    for wave in (
        [d for d in by_name if d.name.startswith("nm-")],
        [d for d in by_name if d.name == "rm"],
        [d for d in by_name if d.name.startswith("dn-")],
        [d for d in by_name if d.name == "nn"],
        [d for d in by_name if d.name in ("zk", "kdc")],
    ):
        terminate(wave, grace=DAEMON_GRACE_S)


def kill_leftovers(cluster_dir: Path, known: Iterable[psutil.Process] = ()) -> list[int]:
    """Stop what is left of the cluster in ``cluster_dir``: the ``known`` processes (found below its daemons
    before they stopped) that still run, and the processes that name this cluster on their command line, with
    everything below them. Never this process or its ancestors. SIGTERM, then SIGKILL after
    :data:`LEFTOVER_GRACE_S`; blocks until they are gone (at most a few seconds more).

    Returns:
        The pids stopped.
    """
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    roots = [p for p in known if still_runs(p)] + named_processes(cluster_dir)
    victims = [p for p in descendants(roots, including=True) if p.pid not in spared]
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, left = psutil.wait_procs(victims, timeout=LEFTOVER_GRACE_S)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=5.0)
    return [p.pid for p in victims]


def named_processes(cluster_dir: Path) -> list[psutil.Process]:
    """Processes whose command line names the cluster in ``cluster_dir``: a daemon
    (``-Dsubmarine.cluster.dir=<dir>``, the KDC's pid file ``<dir>/krb5/kdc.pid``), or a container's launch
    script or ApplicationMaster (a path under ``<dir>/nm-<i>/``)."""
    daemon_flag = f"-Dsubmarine.cluster.dir={cluster_dir}"
    kdc_pid_file = str(cluster_dir / "krb5" / "kdc.pid")
    container_paths = f"{cluster_dir}/nm-"
    named = []
    for proc in psutil.process_iter(["cmdline"]):
        args = proc.info["cmdline"] or []
        if daemon_flag in args or kdc_pid_file in args or any(container_paths in arg for arg in args):
            named.append(proc)
    return named


def clear_container_pid_files(cluster_dir: Path) -> list[Path]:
    """Removes the pid file of every container a dead cluster's NodeManagers recorded as running (under
    ``nm-<i>/local/nmPrivate/<app>/<container>/``) that left no exit code beside it, so that a NodeManager
    recovering its containers reports each lost at once: with the file it would wait on that pid, which after a
    reboot may be another process's. Call it only once every process of the cluster is gone
    (:func:`kill_leftovers`).

    Returns:
        The pid files removed.
    """
    removed = []
    for pid_file in sorted(cluster_dir.glob("nm-*/local/nmPrivate/*/*/*.pid")):
        if pid_file.with_name(pid_file.name + ".exitcode").exists():
            continue  # the container ended before the cluster did: the NodeManager reads its exit code
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()
            removed.append(pid_file)
    return removed


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)


def tail(d: Daemon, lines: int = 25) -> str:
    """The last ``lines`` of the daemon's log and of its output, for an error message."""
    chunks = []
    for path in (d.log, d.log.with_suffix(".out")):
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        if text:
            chunks.append("\n".join(text))
    return "\n".join(chunks) or "(no log output)"


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the JVM servers do: a port in TIME_WAIT after a previous cluster is free to bind.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_ready(ready: Callable[[], bool], timeout: float, daemon: Daemon, what: str) -> None:
    """Block until ``ready()`` (polled every 0.3 s, at most ``timeout`` s).

    Raises:
        DaemonStartError: the daemon exited meanwhile, or ``ready()`` stayed false (``what``).
    """

    def check() -> bool:
        if ready():
            return True
        if not alive(daemon):
            raise DaemonStartError(daemon.name, "exited during start", daemon.log, tail(daemon))
        return False

    def timed_out(_state: RetryCallState) -> bool:
        raise DaemonStartError(daemon.name, f"{what} within {timeout:.0f} s", daemon.log, tail(daemon))

    poll(check, timeout, 0.3, timed_out)


def poll(check: Callable[[], bool], timeout: float, interval: float, give_up: Callable[[RetryCallState], bool]) -> None:
    """Call ``check`` every ``interval`` s until it returns True; after ``timeout`` s, ``give_up`` (which
    raises). What ``check`` raises ends the polling."""
    Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_fixed(interval),
        retry=retry_if_result(lambda done: not done),
        retry_error_callback=give_up,
    )(check)
