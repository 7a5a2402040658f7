"""A chaos run: a live replay (:class:`~submarine_elastic.replay.LiveReplay`) under a policy, its controller
running, with faults from the catalogue (:mod:`.catalogue`) injected at random times into random targets,
then the checker (:mod:`.check`) over what was recorded.

The injector draws, every ``every_s`` on average (uniformly 0.5 to 1.5 times it), a kind among those that
have a target now and a target among them, from one seeded generator: the same seed on the same workload
draws the same sequence where the cluster offers the same targets. Faults overlap: each is watched apart,
healed after its hold and held to its recovery deadline while the next ones come, so that a recovery is
itself hit. Injection stops after ``duration_s``; the replay goes on until its jobs end.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.chaos import check
from submarine_elastic.chaos.catalogue import FaultKind, catalogue, draw, select
from submarine_elastic.chaos.targets import (
    AGENT,
    AM,
    CONTROLLER,
    DAEMON,
    DRIVER,
    HOST,
    PROD,
    TRAINING,
    Target,
    controller,
    daemons,
    host_index,
    hosts,
    job_processes,
    newest_step,
)
from submarine_elastic.cluster import LocalCluster
from submarine_elastic.cluster.api import ClusterError, DaemonNotRunningError, DaemonStartError
from submarine_elastic.cluster.netns import HostNetwork, kill_namespace_processes
from submarine_elastic.controller.api import ControllerError, ControllerView, DecisionRecord, UnknownJobError
from submarine_elastic.controller.client import view
from submarine_elastic.replay.records import JobRecord, LiveRun, ReplayRunError
from submarine_elastic.replay.runner import LiveReplay, Say
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.webhdfs import WebHdfs
from submarine_elastic.yarn import (
    GPU_RESOURCE,
    Component,
    Resource,
    ResourceInformation,
    RestartPolicy,
    Service,
    YarnError,
    YarnServiceClient,
)

#: The roles of a job's own processes: a job takes one fault of these at a time.
PROCESS_ROLES = (TRAINING, AGENT, DRIVER, AM)
#: Seconds between two looks at whether a fault's damage is repaired.
WATCH_S = 1.0
#: The longest a heal waits for what it needs (a NodeManager's ResourceManager) to be back.
HEAL_WAIT_S = 240.0


@dataclass
class Injected:
    """One fault of a run; times in seconds after the run began."""

    kind: str
    target: str
    service: str | None
    at_s: float
    what: str
    deadline_s: float
    #: the jobs it touched: those training when it came (every one for a daemon or the controller)
    touched: list[str] = field(default_factory=list)
    #: it hits the whole cluster (a daemon, the controller, a host), not one job's process
    cluster_wide: bool = False
    #: when it must have recovered, after the run began: its deadline, or a later fault's that hit what it touched
    #: before it recovered (the damage of stacked faults is judged at the deadline of the last of them)
    due_s: float = 0.0
    #: the later faults stacked on it (that moved :attr:`due_s`)
    stacked: int = 0
    healed_s: float | None = None
    healed: str = ""
    recovered_s: float | None = None
    #: what was still not repaired at the deadline, when it did not recover
    missing: str = ""

    def __post_init__(self) -> None:
        self.due_s = self.due_s or round(self.at_s + self.deadline_s, 1)

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered_s is None else round(self.recovered_s - self.at_s, 1)

    def stack(self, later: Injected) -> None:
        """``later`` came before this fault recovered: when it hit what this one touched (or either hit the whole
        cluster), this one is due no sooner than ``later``."""
        overlaps = self.cluster_wide or later.cluster_wide or set(self.touched) & set(later.touched)
        if self.recovered_s is None and not self.missing and overlaps and later.due_s > self.due_s:
            self.due_s, self.stacked = later.due_s, self.stacked + 1


@dataclass
class ChaosResult:
    """What a chaos run injected and what the checker found."""

    seed: int
    policy: str
    duration_s: float
    every_s: float
    wall_s: float
    faults: list[Injected]
    violations: list[str]
    #: every job as the checker judged it: the replay's records, also where it did not complete
    records: list[JobRecord]
    #: when the run was interrupted (^C, SIGTERM), in seconds after its start (None: it ran to its end)
    interrupted_s: float | None = None

    @property
    def succeeded(self) -> int:
        """How many of the jobs ended SUCCEEDED."""
        return sum(1 for r in self.records if r.state == "SUCCEEDED")

    def as_dict(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "policy": self.policy,
            "duration_s": self.duration_s,
            "every_s": self.every_s,
            "wall_s": round(self.wall_s, 1),
            "interrupted_s": self.interrupted_s,
            "faults": [{**asdict(f), "recovery_s": f.recovery_s} for f in self.faults],
            "violations": self.violations,
            "jobs": [
                {"service": r.service, "state": r.state, "samples": r.samples, "planned": r.job.samples}
                for r in self.records
            ],
        }


class ChaosRun:
    """Replays ``replay``'s plan on ``cluster`` while injecting faults for ``duration_s``.

    Args:
        replay: the live replay, under a policy the controller runs (its jobs elastic).
        cluster: the running pseudo-cluster the replay submits to.
        duration_s: how long faults are injected.
        every_s: the mean time between two faults.
        seed: the seed of every random choice.
        kinds: the catalogue's kinds to inject (every one when empty).
        say: where progress lines go.
        prod_queue: the queue of another tenant's jobs (``prod-job``), on a cluster with queues whose replay
            submits to another (None: no such fault).

    Raises:
        ValueError: a kind the catalogue does not have, a duration or interval not above 0, or a replay
            that is not elastic (``static``, ``tiresias``: no controller to hit, no job limits to flex in).
    """

    def __init__(
        self,
        replay: LiveReplay,
        cluster: LocalCluster,
        *,
        duration_s: float,
        every_s: float,
        seed: int,
        kinds: Sequence[str] = (),
        say: Say = print,
        prod_queue: str | None = None,
    ) -> None:
        if not replay.elastic:
            raise ValueError(f"a chaos run replays under a policy the controller runs, not {replay.policy!r}")
        if not duration_s > 0 or not every_s > 0:
            raise ValueError(f"duration ({duration_s}) and interval ({every_s}) must be above 0 s")
        self.replay = replay
        self.cluster = cluster
        self.duration_s = duration_s
        self.every_s = every_s
        self.seed = seed
        self._rng = random.Random(seed)
        self.kinds = select(catalogue(self._rng), kinds)
        self.say = say
        self.faults: list[Injected] = []
        self.ended_by_fault: set[str] = set()
        self._apps: dict[str, str] = {}  # application id -> service
        self._stop = threading.Event()
        self._aborted = threading.Event()  # interrupted (Ctrl-C): heal at once, watch no more
        self._heal_lock = threading.Lock()
        self._watchers: list[threading.Thread] = []
        self._t0 = 0.0
        self._held: set[int] = set()  # the processes of faults not yet healed
        self._healing: set[str] = set()  # the targets (by name) of faults not yet healed: a daemon being restarted
        self._recovering: set[str] = set()  # the jobs a fault of one of their processes has not yet recovered
        self._health_lock = threading.Lock()
        self._health = (float("-inf"), "")
        self.prod_queue = prod_queue
        self._prod: list[str] = []  # the prod jobs submitted

    # --- the world a fault acts on --------------------------------------------------------------
    def targets(self, role: str) -> list[Target]:
        """What runs now in ``role`` (of a job: of the jobs not yet ended and not recovering from a fault of one of
        their processes), but a process a fault holds until its heal (stopped, say) and a target whose heal is under
        way (a daemon being started again, which a second kill would leave its heal waiting on a dead process)."""
        if role == DAEMON:
            found = daemons(self.cluster)
        elif role == CONTROLLER:
            found = controller(Path(self.replay.env["SUBMARINE_CONTROLLER_DIR"]))
        elif role == HOST:
            found = hosts(self.cluster)
        elif role == PROD:  # a new job each time
            found = [Target(PROD, f"{self.replay.tag}-prod-{len(self.faults)}", 0)] if self.prod_queue else []
        else:  # one process fault at a time in a job: its next comes once it recovered (cluster faults overlap)
            running = set(self.running_services()) - self._recovering
            apps = {app: service for app, service in self._applications().items() if service in running}
            found = [t for t in job_processes(self.cluster.dir, apps) if t.role == role]
        return [t for t in found if t.pid not in self._held and t.name not in self._healing]

    def restart_daemon(self, name: str) -> None:
        deadline = time.monotonic() + HEAL_WAIT_S
        while True:
            try:
                with self._heal_lock:  # one daemon started at a time: they share the cluster's state file
                    self.cluster.restart(name)
                return
            except (DaemonNotRunningError, DaemonStartError) as exc:
                if isinstance(exc, DaemonStartError) and exc.daemon != name and self._runs(name):
                    return  # it started; another daemon died while the cluster was waited for (that fault's)
                if time.monotonic() > deadline:
                    raise
                time.sleep(2.0)  # what it needs is down (another fault's): started again once that is

    def _runs(self, name: str) -> bool:
        return name in {d.name for d in self.cluster.running_daemons()}

    def restart_controller(self) -> None:
        self.replay.start_controller()

    def kill_host(self, target: Target) -> str:
        killed = kill_namespace_processes(self._network().host(host_index(target)).namespace)
        return f"SIGKILL to its {killed} processes"

    def set_link(self, target: Target, up: bool) -> str:
        self._network().set_link(host_index(target), up)
        return "joined again" if up else "cut off"

    def restart_host(self, target: Target) -> str:
        index = host_index(target)
        running = {d.name for d in self.cluster.running_daemons()}
        down = [n for n in self.cluster.spec().daemon_names() if n in (f"nm-{index}", f"dn-{index}")]
        down = [n for n in down if n not in running]
        for name in down:
            self.restart_daemon(name)
        return f"{', '.join(down) or 'nothing'} started again"

    def start_prod(self, target: Target) -> str:
        assert self.prod_queue is not None
        spec = self.cluster.spec()
        share = next(q.capacity for q in spec.queues if q.name == self.prod_queue)
        gpus = max(1, spec.nodes * spec.gpus_per_node * share // 100)
        one = Resource(cpus=1, memory="512", additional={GPU_RESOURCE: ResourceInformation(value=1)})
        main = Component(
            name="main", number_of_containers=gpus, launch_command="sleep 3600", resource=one,
            restart_policy=RestartPolicy.NEVER,
        )  # fmt: skip
        self._prod.append(target.name)
        with YarnServiceClient(self.replay.rm_url) as yarn:
            yarn.create(Service(name=target.name, version="1", queue=self.prod_queue, components=[main]), wait=False)
        return f"{gpus} containers of 1 GPU in queue {self.prod_queue}"

    def end_prod(self, target: Target) -> str:
        deadline = time.monotonic() + HEAL_WAIT_S
        while True:
            try:
                with YarnServiceClient(self.replay.rm_url) as yarn:
                    yarn.destroy(target.name, missing_ok=True)
                return "destroyed"
            except YarnError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2.0)  # the ResourceManager is down (another fault's): destroyed once it is back

    def _network(self) -> HostNetwork:
        network = self.cluster.network(self.cluster.spec())
        if network is None:
            raise ClusterError("a host fault on a cluster on loopback")
        return network

    def submarine(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.replay.submarine(*args, check=False)

    def job_limits(self, service: str) -> tuple[int, int] | None:
        record = self._running().get(service)
        return None if record is None else (1, record.job.max_workers)

    def running_services(self) -> list[str]:
        return sorted(self._running())

    def _running(self) -> dict[str, JobRecord]:
        return {r.service: r for r in self.replay.records if r.created and r.ended_s is None and not r.suspended}

    def _applications(self) -> dict[str, str]:
        """Application id -> service of every job of the run that YARN has given one (read once each)."""
        known = set(self._apps.values())
        missing = [r.service for r in self.replay.records if r.created and r.service not in known]
        if missing:
            try:
                with YarnServiceClient(self.replay.rm_url) as yarn:
                    for service in missing:
                        app = yarn.status(service).id
                        if app:
                            self._apps[app] = service
            except YarnError:
                pass  # the ResourceManager is down (a fault): the jobs known so far
        return dict(self._apps)

    # --- the run -----------------------------------------------------------------------------------
    def run(self) -> ChaosResult:
        """Replay the plan with faults; return what was injected and every violation the checker found.

        Interrupted (^C, or SIGTERM in the main thread), the replay kills its jobs, what a fault holds is healed
        at once, and the checker judges what the run got to: the faults whose deadlines had passed, the step logs
        of the jobs it cut short (:attr:`ChaosResult.interrupted_s`)."""
        self._t0 = time.time()
        injector = threading.Thread(target=self._inject_loop, name="chaos-injector", daemon=True)
        injector.start()
        run: LiveRun | None = None
        violations: list[str] = []
        interrupted_s: float | None = None
        try:
            run = self.replay.run()
        except ReplayRunError as exc:
            violations.append(f"the replay did not complete: {exc}")
        except KeyboardInterrupt:
            interrupted_s = round(time.time() - self._t0, 1)
            self._aborted.set()  # the replay killed its jobs; what a fault holds is healed now
            self.say(f"!{interrupted_s:6.0f} s  interrupted: healing what the faults hold; judging what ran")
        finally:
            self._stop.set()
            injector.join()
            for watcher in self._watchers:
                watcher.join()
        records = run.records if run is not None else self.replay.records
        violations += check.faults(self.faults, interrupted_s)
        violations += check.jobs(
            records, self.replay.log_dir, self.ended_by_fault, interrupted=interrupted_s is not None
        )
        violations += self._controller_agrees(records)
        violations += check.leftovers(
            self.cluster, self.replay.rm_url, self._applications(), self._prod, self._job_files()
        )
        return ChaosResult(
            self.seed, self.replay.policy, self.duration_s, self.every_s, time.time() - self._t0, self.faults,
            violations, list(records), interrupted_s,
        )  # fmt: skip

    def _job_files(self) -> HdfsJobFiles | None:
        """The jobs' directories on the cluster's HDFS (None: the cluster has none)."""
        spec = self.cluster.spec()
        if spec.webhdfs_url is None:
            return None
        return HdfsJobFiles(WebHdfs(spec.webhdfs_url, env.settings().user()), spec.default_fs)

    def _controller_agrees(self, records: Sequence[JobRecord]) -> list[str]:
        """:func:`check.controller_agrees` over what the run's controller left in its database."""
        if not self.replay.elastic:
            return []
        ended = [r for r in records if r.service not in self.ended_by_fault]
        try:
            with view(Path(self.replay.env["SUBMARINE_CONTROLLER_DIR"])) as controller:
                if controller is None:
                    return ["the controller left no records"]
                return check.controller_agrees(ended, lambda service: _decisions(controller, service))
        except ControllerError as exc:
            return [f"the controller's records cannot be read: {exc}"]

    def _inject_loop(self) -> None:
        end = self._t0 + self.duration_s
        while not self._stop.wait(self._rng.uniform(0.5, 1.5) * self.every_s) and time.time() < end:
            drawn = draw(self.kinds, self, self._rng)
            if drawn is not None:
                self._inject(*drawn)

    def _inject(self, kind: FaultKind, target: Target) -> None:
        touched = self.running_services() if kind.cluster_wide else [target.service or ""]
        touched = [s for s in touched if self._training(s)]
        at = time.time()
        try:
            what = kind.inject(self, target)
        except (ClusterError, YarnError, OSError, subprocess.SubprocessError) as exc:
            what = f"could not inject: {exc}"
        if kind.ends_job and target.service:
            self.ended_by_fault.add(target.service)
        if kind.heal is not None:
            self._healing.add(target.name)
            if target.pid:
                self._held.add(target.pid)
        if target.service and target.role in PROCESS_ROLES:
            self._recovering.add(target.service)
        fault = Injected(kind.name, target.name, target.service, round(at - self._t0, 1), what, kind.deadline_s,
                         touched, cluster_wide=kind.cluster_wide)  # fmt: skip
        for earlier in self.faults:
            earlier.stack(fault)
        self.faults.append(fault)
        self.say(f"!{fault.at_s:6.0f} s  {kind.name} on {target.name}: {what}")
        watcher = threading.Thread(target=self._watch, args=(kind, target, fault, at), daemon=True)
        self._watchers.append(watcher)
        watcher.start()

    def _training(self, service: str) -> bool:
        record = self._running().get(service)
        return record is not None and newest_step(self.replay.log_dir(record.job)) is not None

    def _watch(self, kind: FaultKind, target: Target, fault: Injected, at: float) -> None:
        """Heals the fault after its hold, then waits until what it touched is repaired or its deadline."""
        if kind.heal is not None:
            self._aborted.wait(kind.hold_s)
            try:
                fault.healed = kind.heal(self, target)
            except (ClusterError, ReplayRunError, YarnError, OSError) as exc:
                fault.healed = f"could not heal: {exc}"
            self._held.discard(target.pid)
            self._healing.discard(target.name)
            fault.healed_s = round(time.time() - self._t0, 1)
            self.say(f"!{fault.healed_s:6.0f} s  {kind.name} on {target.name}: {fault.healed}")
        since = time.time()
        while True:
            missing = self._unrepaired(fault.touched, since)
            now = time.time()
            if not missing:
                fault.recovered_s = round(now - self._t0, 1)
                break
            if now >= self._t0 + fault.due_s or self._aborted.is_set():
                fault.missing = missing
                self.say(f"!{now - self._t0:6.0f} s  {kind.name} on {target.name}: not recovered: {missing}")
                break
            self._aborted.wait(WATCH_S)
        self._recovering.discard(target.service or "")

    def _cluster_unhealthy(self) -> str:
        """:func:`check.cluster_unhealthy`, read at most once per :data:`WATCH_S` for every watcher."""
        with self._health_lock:
            if time.monotonic() - self._health[0] >= WATCH_S:
                self._health = (time.monotonic(), check.cluster_unhealthy(self.cluster))
            return self._health[1]

    def _unrepaired(self, services: Sequence[str], since: float) -> str:
        """What is not yet repaired ("" when nothing): a daemon not running or stopped, the ResourceManager
        not answering or not every NodeManager RUNNING in it, a touched job that has not committed a step since
        ``since`` or whose YARN READY workers are not its ring."""
        missing = self._cluster_unhealthy()
        if missing:
            return missing
        records = {r.service: r for r in self.replay.records}
        try:
            with YarnServiceClient(self.replay.rm_url) as yarn:
                for service in services:
                    record = records[service]
                    if record.ended_s is not None:
                        continue
                    newest = newest_step(self.replay.log_dir(record.job))
                    if newest is None or newest[0] < since:
                        return f"{service}: no committed step since"
                    worker = yarn.status(service).component("worker")
                    ready = worker.ready_count if worker is not None else 0
                    if ready != newest[1]:
                        return f"{service}: YARN has {ready} READY workers, its ring {newest[1]}"
        except YarnError as exc:
            return f"the ResourceManager: {exc}"
        return ""


def _decisions(controller: ControllerView, service: str) -> list[DecisionRecord]:
    """The controller's decisions on ``service``'s current run (none when it never counted the job)."""
    try:
        return controller.timeline(service)
    except UnknownJobError:
        return []
