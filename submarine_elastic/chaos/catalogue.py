"""The faults a chaos run injects: each kind, what it hits, how it heals, and the deadline by which the cluster
and the jobs it touched must have recovered.

A kind picks its target among what runs now (:mod:`.targets`), injects (kill -9, SIGSTOP, an operator's
command), and may heal after ``hold_s`` (SIGCONT, the daemon started again as an operator does, the
controller started again): the pseudo-cluster has no supervisor of its own, so a killed daemon stays down
until someone starts it, as on a host without systemd. Recovered means, within ``deadline_s`` of the
injection: every daemon runs and every NodeManager is RUNNING in the ResourceManager, and every job the fault
touched has ended or has committed a step after the heal with YARN's READY workers equal to that step's ring
(:class:`~submarine_elastic.chaos.run.ChaosRun`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from submarine_elastic.chaos.targets import AGENT, AM, CONTROLLER, DAEMON, DRIVER, HOST, PROD, TRAINING, Target


class World(Protocol):
    """What a fault acts on: the running cluster, its jobs and their processes."""

    def targets(self, role: str) -> list[Target]:
        """What runs now in ``role``."""

    def restart_daemon(self, name: str) -> None:
        """Starts the daemon ``name`` again, as ``submarine cluster restart`` does."""

    def restart_controller(self) -> None:
        """Starts the run's controller again, with the policy it ran."""

    def kill_host(self, target: Target) -> str:
        """SIGKILLs every process of a host at once (its daemons and containers: a host losing power)."""

    def set_link(self, target: Target, up: bool) -> str:
        """Cuts a host off the cluster's network (its processes live on), or joins it again."""

    def restart_host(self, target: Target) -> str:
        """Starts again every daemon of a host that is not running, as its reboot would."""

    def start_prod(self, target: Target) -> str:
        """Submits a fixed-size job named ``target.name`` to the prod queue, as large as the queue's guarantee
        of GPUs: YARN preempts the replay's workers where they hold it."""

    def end_prod(self, target: Target) -> str:
        """Destroys the prod job ``target.name``."""

    def submarine(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Runs ``submarine ARGS`` as an operator types it."""

    def job_limits(self, service: str) -> tuple[int, int] | None:
        """The worker limits of a running elastic job (None: not elastic, or not running)."""

    def running_services(self) -> list[str]:
        """The services of the jobs that run now (submitted, not ended)."""


Pick = Callable[[World, random.Random], Target | None]
Act = Callable[[World, Target], str]


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault in the catalogue."""

    name: str
    #: one line for the docs and the results
    what: str
    deadline_s: float
    pick: Pick
    inject: Act
    heal: Act | None = None
    #: seconds between the injection and the heal
    hold_s: float = 0.0
    #: every running job is touched (a daemon, the controller), not only the target's
    cluster_wide: bool = False
    #: how often it is drawn, relative to the others
    weight: float = 1.0
    #: the job it hits is meant to end (an operator's kill): its end is no violation
    ends_job: bool = False


def _one_of(role: str, prefix: str = "") -> Pick:
    def pick(world: World, rng: random.Random) -> Target | None:
        found = [t for t in world.targets(role) if t.name.startswith(prefix)]
        return rng.choice(found) if found else None

    return pick


def _signal(signum: signal.Signals) -> Act:
    def act(_world: World, target: Target) -> str:
        try:
            os.kill(target.pid, signum)
        except ProcessLookupError:
            return f"pid {target.pid} had already ended"
        return f"{signum.name} to pid {target.pid}"

    return act


def _restart_daemon(world: World, target: Target) -> str:
    world.restart_daemon(target.name)
    return f"{target.name} started again"


def _restart_controller(world: World, _target: Target) -> str:
    world.restart_controller()
    return "controller started again"


def _kill_host(world: World, target: Target) -> str:
    return world.kill_host(target)


def _restart_host(world: World, target: Target) -> str:
    return world.restart_host(target)


def _link(up: bool) -> Act:
    def act(world: World, target: Target) -> str:
        return world.set_link(target, up)

    return act


def _start_prod(world: World, target: Target) -> str:
    return world.start_prod(target)


def _end_prod(world: World, target: Target) -> str:
    return world.end_prod(target)


def _job(elastic: bool) -> Pick:
    """A running job (with ``elastic``: one with worker limits to flex within) as the target."""

    def pick(world: World, rng: random.Random) -> Target | None:
        services = [s for s in world.running_services() if not elastic or world.job_limits(s) is not None]
        if not services:
            return None
        service = rng.choice(services)
        return Target("job", service, 0, service)

    return pick


def _flex(rng: random.Random) -> Act:
    def act(world: World, target: Target) -> str:
        assert target.service is not None
        limits = world.job_limits(target.service)
        if limits is None:
            return "the job was no longer running"
        workers = rng.randint(*limits)
        done = world.submarine("job", "flex", target.service, "--workers", str(workers), "--no-wait")
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"job flex --workers {workers}: exit {done.returncode}" + (f" ({said[-1]})" if said else "")

    return act


def _kill_job(world: World, target: Target) -> str:
    assert target.service is not None
    done = world.submarine("job", "kill", target.service)
    said = (done.stderr or done.stdout).strip().splitlines()
    return f"job kill: exit {done.returncode}" + (f" ({said[-1]})" if said else "")


def catalogue(rng: random.Random) -> tuple[FaultKind, ...]:
    """Every kind of fault, drawing its random choices (a flex's count) from ``rng``."""
    kill, stop, cont = _signal(signal.SIGKILL), _signal(signal.SIGSTOP), _signal(signal.SIGCONT)
    return (
        FaultKind("kill-training", "kill -9 of a worker's training process", 180, _one_of(TRAINING), kill),
        FaultKind(
            "stop-training",
            "SIGSTOP of a training process for 20 s (past the hung bound), then SIGCONT",
            180,
            _one_of(TRAINING),
            stop,
            cont,
            hold_s=20,
        ),
        FaultKind("kill-agent", "kill -9 of a worker's agent", 180, _one_of(AGENT), kill),
        FaultKind("kill-driver", "kill -9 of a job's driver", 180, _one_of(DRIVER), kill),
        FaultKind(
            "stop-driver",
            "SIGSTOP of a job's driver for 4 s (under its agents' keepalive timeout, a long pause), then SIGCONT",
            120,
            _one_of(DRIVER),
            stop,
            cont,
            hold_s=4,
        ),
        FaultKind(
            "freeze-driver",
            "SIGSTOP of a job's driver for 20 s (past its agents' keepalive timeout), then SIGCONT",
            150,
            _one_of(DRIVER),
            stop,
            cont,
            hold_s=20,
        ),
        FaultKind("kill-am", "kill -9 of a job's YARN service ApplicationMaster", 240, _one_of(AM), kill),
        FaultKind(
            "kill-nm",
            "kill -9 of a NodeManager, started again 10 s later",
            240,
            _one_of(DAEMON, "nm-"),
            kill,
            _restart_daemon,
            hold_s=10,
            cluster_wide=True,
        ),
        FaultKind(
            "kill-rm",
            "kill -9 of the ResourceManager, started again 5 s later",
            240,
            _one_of(DAEMON, "rm"),
            kill,
            _restart_daemon,
            hold_s=5,
            cluster_wide=True,
        ),
        FaultKind(
            "stop-rm",
            "SIGSTOP of the ResourceManager for 20 s, then SIGCONT",
            180,
            _one_of(DAEMON, "rm"),
            stop,
            cont,
            hold_s=20,
            cluster_wide=True,
        ),
        FaultKind(
            "kill-zk",
            "kill -9 of ZooKeeper, started again 5 s later",
            180,
            _one_of(DAEMON, "zk"),
            kill,
            _restart_daemon,
            hold_s=5,
            cluster_wide=True,
        ),
        FaultKind(
            "kill-nn",
            "kill -9 of HDFS's NameNode, started again 5 s later",
            180,
            _one_of(DAEMON, "nn"),
            kill,
            _restart_daemon,
            hold_s=5,
            cluster_wide=True,
        ),
        FaultKind(
            "kill-dn",
            "kill -9 of an HDFS DataNode, started again 10 s later",
            180,
            _one_of(DAEMON, "dn-"),
            kill,
            _restart_daemon,
            hold_s=10,
            cluster_wide=True,
        ),
        FaultKind(
            "kill-host",
            "every process of a host (not host 0) killed at once, its daemons started again 30 s later",
            300,
            _one_of(HOST),
            _kill_host,
            _restart_host,
            hold_s=30,
            cluster_wide=True,
            weight=0.5,
        ),
        FaultKind(
            "cut-host",
            "a host (not host 0) cut off the network for 45 s (past YARN's liveness expiry), then joined again",
            300,
            _one_of(HOST),
            _link(False),
            _link(True),
            hold_s=45,
            cluster_wide=True,
            weight=0.5,
        ),
        FaultKind(
            "prod-job",
            "a fixed-size job of another tenant in the prod queue, as large as its guarantee of GPUs (YARN "
            "preempts workers for it), destroyed 60 s later",
            300,
            _one_of(PROD),
            _start_prod,
            _end_prod,
            hold_s=60,
            cluster_wide=True,
            weight=0.5,
        ),
        FaultKind(
            "kill-controller",
            "kill -9 of the controller, started again 3 s later",
            120,
            _one_of(CONTROLLER),
            kill,
            _restart_controller,
            hold_s=3,
            cluster_wide=True,
        ),
        FaultKind(
            "flex",
            "an operator's `job flex` to a random count within the job's limits",
            180,
            _job(elastic=True),
            _flex(rng),
        ),
        FaultKind(
            "kill-job",
            "an operator's `job kill` of a running job",
            120,
            _job(elastic=False),
            _kill_job,
            weight=0.25,
            ends_job=True,
        ),
    )


def draw(kinds: Sequence[FaultKind], world: World, rng: random.Random) -> tuple[FaultKind, Target] | None:
    """A kind drawn by weight among those that have a target now, and its target; None when none has."""
    left = list(kinds)
    while left:
        kind = rng.choices(left, weights=[k.weight for k in left])[0]
        target = kind.pick(world, rng)
        if target is not None:
            return kind, target
        left.remove(kind)
    return None


def select(kinds: Sequence[FaultKind], names: Sequence[str]) -> tuple[FaultKind, ...]:
    """The kinds named (all when ``names`` is empty).

    Raises:
        ValueError: a name that is no kind of the catalogue (the message lists them).
    """
    if not names:
        return tuple(kinds)
    known = {k.name: k for k in kinds}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no fault kind {', '.join(unknown)}; the catalogue has {', '.join(known)}")
    return tuple(known[n] for n in dict.fromkeys(names))
