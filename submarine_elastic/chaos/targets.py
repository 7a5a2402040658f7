"""What a chaos run can hit: the training processes, agents and drivers of the jobs a live replay submitted,
and the pseudo-cluster's daemons and controller; and what a run reads back of a job (its newest committed step).

A job's processes are found from YARN's own record of them: a container's launch script names the container's
directory (``<cluster>/nm-<i>/.../<application>/<container>/``), and every process below it belongs to that
container; the application id says which service. Never by what a process's environment says (a tenant's
code could say anything).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from submarine_elastic.cluster import LocalCluster
from submarine_elastic.cluster.processes import descendants, named_processes
from submarine_elastic.controller import locate

TRAINING = "training"
AGENT = "agent"
DRIVER = "driver"
#: a job's YARN service ApplicationMaster
AM = "am"
DAEMON = "daemon"
CONTROLLER = "controller"
#: a host of a cluster on hosts (a network namespace) other than host 0, which holds ZooKeeper, the
#: ResourceManager and the NameNode
HOST = "host"
#: a job of another tenant arriving in the cluster's prod queue (a cluster with queues)
PROD = "prod"

_CONTAINER = re.compile(r"/(application_\d+_\d+)/(container_[0-9a-z_]+)/")
#: The bytes read from the end of a step log file for its newest committed step (a line is well under 8 KiB
#: for the replay's batches; a longer one is read whole).
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class Target:
    """One process a fault can hit."""

    role: str
    #: what the results name: a daemon's name (``rm``, ``nm-1``), ``controller``, or ``<service>/<container>``
    name: str
    pid: int
    service: str | None = None


def job_processes(cluster_dir: Path, services: Mapping[str, str]) -> list[Target]:
    """The agents, drivers, training processes and ApplicationMasters that run now in the containers of the applications
    ``services`` names (application id -> service name)."""
    found: dict[int, Target] = {}
    for root in named_processes(cluster_dir):
        with contextlib.suppress(psutil.Error):
            match = next(filter(None, map(_CONTAINER.search, root.cmdline())), None)
            if match is None or match.group(1) not in services:
                continue
            service, container = services[match.group(1)], match.group(2)
            for proc in descendants([root], including=True):
                with contextlib.suppress(psutil.Error):
                    role = _role(proc.cmdline())
                    if role is not None and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                        found[proc.pid] = Target(role, f"{service}/{container}", proc.pid, service)
    return sorted(found.values(), key=lambda t: (t.role, t.name, t.pid))


def _role(args: list[str]) -> str | None:
    if "submarine_elastic.elastic.agent" in args:
        return AGENT
    if "submarine_elastic.elastic.driver" in args:
        return DRIVER
    if any(arg.endswith("train_elastic.py") for arg in args):
        return TRAINING
    if "org.apache.hadoop.yarn.service.ServiceMaster" in args:
        return AM
    return None


def daemons(cluster: LocalCluster) -> list[Target]:
    """The cluster's daemons that run now (a stopped one, SIGSTOP, runs)."""
    return [Target(DAEMON, d.name, d.pid) for d in cluster.running_daemons()]


def hosts(cluster: LocalCluster) -> list[Target]:
    """The hosts a fault may cut off or kill (named ``host-K``): every one but host 0; none on loopback."""
    spec = cluster.spec()
    return [Target(HOST, f"host-{i}", 0) for i in range(1, spec.hosts)]


def host_index(target: Target) -> int:
    """The index of a :data:`HOST` target."""
    return int(target.name.removeprefix("host-"))


def controller(directory: Path) -> list[Target]:
    """The controller serving from ``directory``, if one runs."""
    info = locate.running(directory)
    return [] if info is None else [Target(CONTROLLER, CONTROLLER, info.pid)]


def newest_step(log_dir: Path) -> tuple[float, int] | None:
    """The time and ring size of the newest committed step in a job's step log (``steps-*.jsonl``, a line
    per rank and step); None before its first. A line cut short by a killed writer is skipped."""
    newest: tuple[float, int] | None = None
    for path in log_dir.glob("steps-*.jsonl"):
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - _TAIL_BYTES))
                tail = f.read().decode(errors="replace")
        except OSError:
            continue
        for line in reversed(tail[: tail.rfind("\n") + 1].splitlines()):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "time" in record and "size" in record:
                if newest is None or record["time"] > newest[0]:
                    newest = (float(record["time"]), int(record["size"]))
                break
    return newest
