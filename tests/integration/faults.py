"""Infrastructure faults injected into a training elastic job, and what each cost it.

:func:`run_fault` starts ``examples/train_elastic.py`` as an elastic job on a running pseudo-cluster, lets it
train at its start size, injects one :class:`Scenario`'s fault, and then holds the job to what a user expects
once the fault is over:

- the ring is back at its full size, nobody leaving, and YARN agrees: the READY worker containers are exactly
  the ring's members (instance and container id), as many as the component asks for, and it stays so while
  the job trains on;
- the job finishes; the step log has every committed step once, every epoch trained on each sample once,
  every rank ended with the same weights (:func:`~tests.integration.jobcheck.check_training`);
- the cluster is healthy again: every daemon runs, every NodeManager is RUNNING.

What it measures (:class:`FaultReport`): the time from the fault to training at full size again (the first
committed step at full size after the last one at another size), the longest pause between committed steps
around the fault, the time until YARN agrees, the steps trained and thrown away (redone), and what the
scenario itself marked (a daemon back, say). The steps redone come from the metrics stream, which sees every
step a rank 0 ran, rolled back or not; the step log has only the committed ones.

A scenario is one function that injects its fault into a :class:`FaultRun` and returns the ring size the job
should train at afterwards; register it in :data:`SCENARIOS` and ``benchmarks/bench_faults.py`` runs it too.
The faults: a NodeManager killed under the workers, the ResourceManager killed and restarted, the
ResourceManager frozen during a flex (``tests/integration/test_job_faults.py``); the job's driver killed, the
job's driver frozen past its agents' keepalive, a worker's training process stopped past the hung bound
(``tests/integration/test_job_recovery.py``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import pytest
import requests

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.cluster.api import Daemon
from submarine_elastic.elastic.agent import HUNG_AFTER_S
from submarine_elastic.metrics.api import MetricsStore
from submarine_elastic.metrics.server import MetricsServer
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnError, YarnServiceClient
from tests.integration.conftest import container_processes, eventually, submarine
from tests.integration.jobcheck import Step, check_training, finish, start_job, step_times, training_pids
from tests.integration.placement import am_node, nodes_of_containers, only_on
from tests.tls import cluster_metrics_tls

METRICS_TOKEN = "fault-metrics-token"
#: Committed steps the job must train at a given size to count as training there (two commits).
STEPS = 8
#: How long the frozen ResourceManager stays frozen after the ring has shrunk without it.
FROZEN_PAST_SHRINK_S = 15.0


@dataclass
class FaultRun:
    """What a scenario acts on: the cluster, the running job, and where to note what happened.

    ``yarn`` answers within seconds and does not retry, so a scenario can read YARN while a daemon is down.
    ``job`` asks the driver at the address it had when the job started; a scenario whose fault moves the
    driver to another host (a new address) puts a client of the new one there.
    """

    cluster: LocalCluster
    spec: ClusterSpec
    yarn: YarnServiceClient
    job: JobClient
    name: str
    work: Path
    workers: int
    injected_at: float = 0.0
    #: seconds from the fault, by what happened then (see :meth:`mark`)
    timings: dict[str, float] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        return self.work / "log"

    def inject(self) -> float:
        """Note the moment of the fault (call it right before injecting); returns it (seconds since the epoch)."""
        self.injected_at = time.time()
        return self.injected_at

    def mark(self, what: str) -> float:
        """Note that ``what`` happened now; returns the seconds since the fault."""
        self.timings[what] = round(time.time() - self.injected_at, 2)
        return self.timings[what]

    def wait_steps(
        self, count: int, *, after: float | None = None, size: int | None = None, timeout: float = 120
    ) -> list[Step]:
        """Block until ``count`` steps were committed after ``after`` (seconds since the epoch, default now),
        by a ring of ``size`` when given; returns them. Fails naming what it waited for after ``timeout`` s."""
        since = time.time() if after is None else after

        def trained() -> list[Step]:
            steps = [s for s in step_times(self.log_dir) if s.time > since and (size is None or s.size == size)]
            return steps if len(steps) >= count else []

        at = f" at ring size {size}" if size is not None else ""
        return eventually(trained, f"{count} steps committed{at} by job {self.name}", timeout, 0.2)


@dataclass(frozen=True)
class Scenario:
    """One fault. ``inject`` injects it into a job training with ``workers`` workers (calling
    :meth:`FaultRun.inject` at the fault) and returns the ring size the job should train at afterwards;
    ``then`` (optional) acts on the recovered job and returns its new size. YARN must agree with the ring for
    ``hold_s`` seconds once it does."""

    name: str
    title: str
    workers: int
    inject: Callable[[FaultRun], int]
    then: Callable[[FaultRun], int] | None = None
    hold_s: float = 0.0
    #: wraps the job's submission (given the cluster, a YARN client and the job's name) to place its
    #: containers where the fault needs them; None: wherever YARN puts them
    placing: Callable[[LocalCluster, YarnServiceClient, str], contextlib.AbstractContextManager[object]] | None = None
    #: more ``job run`` flags (they win over :func:`~tests.integration.conftest.run_job`'s own)
    job_flags: tuple[str, ...] = ()


@dataclass
class FaultReport:
    """What one fault cost the job; seconds are measured from the fault."""

    scenario: str
    fault: str
    workers: int
    full_size: int
    #: when the fault was injected, seconds since the epoch (the step log's clock)
    injected_at: float
    #: the fault -> the first committed step at full size after the last one at another size
    recovery_s: float
    #: the longest time between two committed steps, from the last step before the fault to recovery
    longest_pause_s: float
    #: the fault -> YARN's READY worker containers are exactly the ring's members
    yarn_agrees_s: float
    #: steps rank 0 ran whose result was thrown away (rolled back and run again), in the whole run
    steps_redone: int
    steps_committed: int
    timings_s: dict[str, float]
    #: worker instances whose container lived through the fault, and those YARN replaced
    containers_kept: list[str]
    containers_replaced: list[str]
    notes: dict[str, object]

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path


def recorded(report: FaultReport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A test's record of what its fault cost: the report in ``recovery.json``, printed past pytest's capture."""
    path = report.write(tmp_path / "recovery.json")
    with capsys.disabled():
        print(f"\n    {report.fault}: {path}\n    {json.dumps(asdict(report))}")


# ---------------------------------------------------------------------------------------------- harness


def run_fault(scenario: Scenario, cluster: LocalCluster, work: Path) -> FaultReport:
    """Run the example job on ``cluster``, inject ``scenario``'s fault, check the job and the cluster
    afterwards (see the module) and measure what it cost. Blocks for the whole job (a minute or two).
    Whatever happens, the cluster is left with every daemon running and none stopped (:func:`restore`).

    Raises:
        AssertionError: the job, YARN or the cluster did not do what a user expects, naming what.
    """
    spec = cluster.spec()
    name = f"fault-{scenario.name.replace('_', '-')}"
    log_dir = work / "log"
    # On hosts, the containers reach the root namespace at the bridge's address, not at its loopback.
    network = cluster.network(spec)
    bind = network.bridge_address if network is not None else "127.0.0.1"
    metrics = MetricsServer(
        InMemoryStore(points_per_job=100_000), token=METRICS_TOKEN, tls=cluster_metrics_tls(bind), host=bind
    ).start()
    metrics_env = {"SUBMARINE_METRICS_ENDPOINT": metrics.address, "SUBMARINE_METRICS_TOKEN": METRICS_TOKEN}
    yarn = YarnServiceClient(spec.rm_url, poll_interval=0.5, timeout=(5.0, 20.0), retries=0)
    try:
        with scenario.placing(cluster, yarn, name) if scenario.placing else contextlib.nullcontext():
            start_job(spec.rm_url, name, work, scenario.workers, metrics_env, *scenario.job_flags)
        try:
            with contextlib.ExitStack() as clients:
                job = clients.enter_context(JobClient(name, yarn, locate_timeout=120))
                job.wait_for_size(scenario.workers, timeout=240)
                run = FaultRun(cluster, spec, yarn, job, name, work, scenario.workers)
                run.wait_steps(STEPS, size=scenario.workers)
                before = ring(job)
                try:
                    full = scenario.inject(run)
                finally:
                    restore(cluster)
                    if run.job is not job:
                        # The fault moved the driver to another host; the scenario found it there.
                        clients.enter_context(run.job)
                run.job.wait_for_size(full, timeout=180)
                after = agreed(run, full)
                yarn_agrees_s = round(time.time() - run.injected_at, 2)
                hold(run, full, scenario.hold_s)
                recovered_by = run.wait_steps(STEPS, size=full)[-1].time
                assert agrees(run, full) == after, "YARN's workers changed while the job trained on"
                if scenario.then is not None:
                    size = scenario.then(run)
                    agreed(run, size)
                    run.wait_steps(STEPS, size=size)
                # The job ends at the end of the epoch it is in: let it reach its second, so that the step log
                # holds a whole epoch before the stop and one after, whatever the machine's speed.
                eventually(lambda: any(s.epoch >= 1 for s in step_times(log_dir)), f"{name} in its second epoch", 120)
            finish(yarn, name, work)
        finally:
            yarn.destroy(name, missing_ok=True)
        steps = check_training(log_dir)
        redone = steps_redone(metrics.store, name, steps)
    finally:
        metrics.stop()
        yarn.close()
        restore(cluster)
    assert_healthy(cluster)
    timeline = step_times(log_dir)
    recovered, pause = recovery(timeline, run.injected_at, recovered_by, full)
    return FaultReport(
        scenario=scenario.name,
        fault=scenario.title,
        workers=scenario.workers,
        full_size=full,
        injected_at=round(run.injected_at, 3),
        recovery_s=round(recovered - run.injected_at, 2),
        longest_pause_s=round(pause, 2),
        yarn_agrees_s=yarn_agrees_s,
        steps_redone=redone,
        steps_committed=len(steps),
        timings_s=run.timings,
        containers_kept=sorted(i for i, c in before.items() if after.get(i) == c),
        containers_replaced=sorted(i for i, c in before.items() if i in after and after[i] != c),
        notes=run.notes,
    )


def ring(job: JobClient) -> dict[str, str]:
    """The ring's members as the job's driver reports them: instance -> container id."""
    return {w.instance: w.container_id for w in job.status().workers if w.rank >= 0}


def agrees(run: FaultRun, size: int) -> dict[str, str] | None:
    """The ring's members (instance -> container id) when the ring has ``size`` ranks, the job's target is
    ``size``, and YARN's worker component asks for ``size`` containers and has exactly the ring's members
    READY, nothing else; else None (also while YARN does not answer)."""
    status = run.job.status()
    members = {w.instance: w.container_id for w in status.workers if w.rank >= 0}
    if status.world_size != size or status.target != size or len(members) != size:
        return None
    try:
        worker = run.yarn.status(run.name).component("worker")
    except YarnError:
        return None
    if worker is None or worker.number_of_containers != size or len(worker.containers) != size:
        return None
    ready = {c.component_instance_name: c.id for c in worker.ready_containers}
    return members if ready == members else None


def agreed(run: FaultRun, size: int, timeout: float = 150) -> dict[str, str]:
    """Block until :func:`agrees`; fails naming the ring and YARN's workers as last seen."""

    def check() -> dict[str, str]:
        return agrees(run, size) or {}

    try:
        return eventually(check, f"YARN's READY workers to be the ring's {size} members", timeout)
    except AssertionError as exc:
        seen: object
        try:
            worker = run.yarn.status(run.name).component("worker")
            seen = [(c.component_instance_name, c.id, str(c.state)) for c in worker.containers] if worker else None
            desired = worker.number_of_containers if worker else None
        except YarnError as err:
            seen, desired = f"nothing: YARN not answering: {err}", None
        status = run.job.status()
        raise AssertionError(
            f"{exc}: ring {ring(run.job)} (world size {status.world_size}, target {status.target}, "
            f"{status.error or 'no error'}); YARN wants {desired} workers, has {seen}"
        ) from exc


def hold(run: FaultRun, size: int, seconds: float) -> None:
    """Assert that YARN keeps agreeing with the ring of ``size`` for ``seconds`` (read every half second)."""
    first = agrees(run, size)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        now = agrees(run, size)
        assert now == first, f"YARN's workers moved away from the ring's: {first} then {now}"
        time.sleep(0.5)


def recovery(steps: list[Step], injected_at: float, until: float, full: int) -> tuple[float, float]:
    """(when training was at full size again, the longest pause between committed steps up to then): the
    first step at ``full`` after the last step at another size, among the steps after the fault and up to
    ``until``."""
    window = [s for s in steps if injected_at < s.time <= until]
    last_other = max((s.time for s in window if s.size != full), default=injected_at)
    back = next(s.time for s in window if s.time > last_other and s.size == full)
    times = [max((s.time for s in steps if s.time <= injected_at), default=injected_at)]
    times += [s.time for s in window if s.time <= back]
    return back, max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def steps_redone(store: MetricsStore, name: str, steps: dict[int, list[dict]]) -> int:
    """Steps rank 0 ran minus the steps committed: the work a fault threw away. Every committed step must
    have been reported, else the count would be short."""
    runs = collections.Counter(p.point.step for p in store.series(name, 100_000) if p.worker.rank == 0)
    missing = sorted(set(steps) - set(runs))
    assert not missing, f"rank 0 reported no metrics for committed steps {missing[:10]}"
    return sum(runs.values()) - len(steps)


# ---------------------------------------------------------------------------------------------- cluster


def daemon(cluster: LocalCluster, name: str) -> Daemon:
    found = [d for d in cluster.running_daemons() if d.name == name]
    assert found, f"{name} is not running in the cluster at {cluster.dir}"
    return found[0]


def restart(cluster: LocalCluster, name: str) -> str:
    """``submarine cluster restart NAME``, as an operator types it; a non-zero exit fails."""
    return submarine(cluster.spec().rm_url, "cluster", "restart", name, "--cluster-dir", str(cluster.dir))


def answers(url: str) -> bool:
    try:
        requests.get(url, timeout=2)
    except requests.RequestException:
        return False
    return True


def restore(cluster: LocalCluster) -> None:
    """Join every host of a cluster on hosts to its bridge again, wake every stopped daemon (SIGCONT) and start
    again every one that died, ZooKeeper first."""
    network = cluster.network(cluster.spec())
    for host in network.all_hosts if network is not None else ():
        network.set_link(host.index, True)
    for d in cluster.running_daemons():
        os.kill(d.pid, signal.SIGCONT)
    running = {d.name for d in cluster.running_daemons()}
    for name in cluster.spec().daemon_names():
        if name not in running:
            restart(cluster, name)


def assert_healthy(cluster: LocalCluster) -> None:
    """Every daemon runs, the RM answers and every NodeManager is RUNNING in it."""
    spec = cluster.spec()
    assert {d.name for d in cluster.running_daemons()} == set(spec.daemon_names())
    status = cluster.status()
    assert status.rm_error is None, status.rm_error
    assert sorted(n.state for n in status.nodes) == ["RUNNING"] * spec.nodes, status.nodes


def driver_pids(run: FaultRun) -> list[int]:
    """The job driver's python processes in its container (not the shell YARN runs it from)."""
    driver = run.yarn.status(run.name).component("driver")
    assert driver is not None and driver.containers, f"job {run.name} has no driver container"
    pids = []
    for pid in container_processes(driver.containers[0].id):
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).cmdline()[1:3] == ["-m", "submarine_elastic.elastic.driver"]:
                pids.append(pid)
    return pids


def container_nodes(run: FaultRun) -> dict[str, str]:
    """Container id -> the NodeManager (``nm-<i>``) it runs on, as the ResourceManager reports the job's
    containers (:func:`node_of` names the NodeManager of a node id)."""
    return nodes_of_containers(run.spec, run.yarn, run.name)


# -------------------------------------------------------------------------------------------- scenarios


def kill_node_manager(run: FaultRun) -> int:
    """kill -9 of the NodeManager holding the most workers; training goes on, then ``submarine cluster
    restart nm-K`` (the pseudo-cluster has no supervisor of its own) brings it back."""
    workers = ring(run.job)
    nodes = container_nodes(run)
    held = collections.Counter(nodes[c] for c in workers.values())
    victim = held.most_common(1)[0][0]
    run.notes["node"] = victim
    run.notes["workers_on_node"] = sorted(i for i, c in workers.items() if nodes[c] == victim)
    index = int(victim.removeprefix("nm-"))
    web = f"http://{run.spec.host}:{run.spec.nm_ports(index)['yarn.nodemanager.webapp.address']}/ws/v1/node/info"
    nm = daemon(run.cluster, victim)
    processes = {c: container_processes(c) for c in workers.values()}
    run.inject()
    os.kill(nm.pid, signal.SIGKILL)
    eventually(lambda: not answers(web), f"the killed {victim} to stop answering", 10, 0.1)
    # Its containers run on without it, and the ring trains on.
    run.wait_steps(STEPS, after=run.injected_at)
    run.mark("trained_on_without_the_nm_s")
    run.notes["worker_processes_untouched"] = {c: container_processes(c) for c in workers.values()} == processes
    restart(run.cluster, victim)
    run.mark("nm_back_s")
    return run.workers


def kill_resource_manager(run: FaultRun) -> int:
    """kill -9 of the ResourceManager; training goes on, then ``submarine cluster restart rm``."""
    rm = daemon(run.cluster, "rm")
    run.inject()
    os.kill(rm.pid, signal.SIGKILL)
    eventually(lambda: not answers(f"{run.spec.rm_url}/ws/v1/cluster/info"), "the killed RM to stop answering", 10, 0.1)
    run.wait_steps(STEPS, after=run.injected_at)
    run.mark("trained_on_without_the_rm_s")
    restart(run.cluster, "rm")
    run.mark("rm_back_s")
    return run.workers


def flex_to_three(run: FaultRun) -> int:
    """``submarine job flex JOB --workers 3`` after the fault: the restarted RM places the new worker."""
    flexed = time.time()
    out = submarine(run.spec.rm_url, "job", "flex", run.name, "--workers", "3", "--timeout", "180")
    assert "ring has 3 workers" in out, out
    run.timings["flex_after_recovery_s"] = round(time.time() - flexed, 2)
    return 3


def freeze_resource_manager(run: FaultRun) -> int:
    """SIGSTOP of the ResourceManager, the job flexed from 3 workers to 1 while it is frozen, SIGCONT well
    after the ring has shrunk: the ring trains at 1 while YARN still runs the leavers' containers, and YARN
    catches up once the RM runs again.

    The flex goes to the job's driver over its control plane, as the controller's does: ``submarine job
    flex`` asks the ResourceManager for the job first and refuses while it does not answer."""
    rm = daemon(run.cluster, "rm")
    workers = ring(run.job)
    run.inject()
    os.kill(rm.pid, signal.SIGSTOP)
    try:
        run.job.set_target(pb.Target(workers=1, reason="flex while the ResourceManager is frozen"))
        run.job.wait_for_size(1, timeout=120)
        run.mark("ring_shrunk_s")
        kept = ring(run.job)
        shrunk = time.time()

        # ``submarine job show`` asks the driver while the RM does not answer: it says why YARN lags (once a
        # reconciliation slice of the driver has ended without an answer).
        def lag_said() -> str:
            error = run.job.status().error
            return error if "unreachable" in error else ""

        lag = eventually(lag_said, "the driver to say that YARN lags behind the ring (the RM unreachable)", 60)
        run.notes["driver_error_while_frozen"] = lag
        # Well past the shrink: the ring trains at 1 all along, while YARN, frozen, still runs the leavers.
        run.wait_steps(1, after=shrunk + FROZEN_PAST_SHRINK_S, size=1, timeout=FROZEN_PAST_SHRINK_S + 60)
        assert all(s.size == 1 for s in step_times(run.log_dir) if s.time > shrunk), "the ring grew while frozen"
        leavers = [c for i, c in workers.items() if i not in kept]
        assert len(leavers) == 2 and all(container_processes(c) for c in leavers), (
            f"the leavers' containers {leavers} stopped while the RM was frozen"
        )
    finally:
        os.kill(rm.pid, signal.SIGCONT)
    run.mark("rm_resumed_s")
    return 1


def kill_driver(run: FaultRun) -> int:
    """kill -9 of the job's driver: the workers train on without it, YARN relaunches it (restart policy
    ON_FAILURE) and its second incarnation adopts every worker: their ring re-forms around it at the size it
    had, and ``submarine job show`` says which incarnation drives the job.

    The kill comes about a second after the ring formed, often before the driver recorded the ring for its
    next incarnation (it does so once a second): that one then waits for as many workers as the job's target."""
    (victim,) = driver_pids(run)
    run.inject()
    os.kill(victim, signal.SIGKILL)
    # Committed half a second after the kill: with no driver running.
    run.wait_steps(1, after=run.injected_at + 0.5, timeout=30)
    run.mark("trained_on_without_the_driver_s")

    def adopted() -> pb.DriverIncarnation | None:
        incarnations = run.job.status().incarnations
        return incarnations[1] if len(incarnations) == 2 and incarnations[1].recovered_after > 0 else None

    second = eventually(adopted, "the relaunched driver to adopt the ring", 120, 0.5)
    assert second is not None
    run.notes["adopted_workers"] = second.adopted_workers
    assert second.adopted_workers == run.workers, f"the relaunched driver adopted {second.adopted_workers} workers"
    run.timings["driver_relaunched_s"] = round(second.started - run.injected_at, 2)
    adopted_at = second.started + second.recovered_after
    run.timings["ring_adopted_s"] = round(adopted_at - run.injected_at, 2)
    since = [s for s in step_times(run.log_dir) if s.time > run.injected_at]
    run.notes["steps_before_adoption"] = sum(s.time < adopted_at for s in since)
    assert {s.size for s in since} == {run.workers}, f"the ring changed size without its driver: {since}"
    shown = submarine(run.spec.rm_url, "job", "show", run.name)
    line = next((x.strip() for x in shown.splitlines() if x.startswith("driver: incarnation")), "")
    assert line.startswith("driver: incarnation 2 "), f"job show names no second driver incarnation:\n{shown}"
    run.notes["job_show"] = line
    return run.workers


#: How long :func:`freeze_driver` holds the driver stopped: past its agents' keepalive (a ping every 10 s, 5 s to
#: answer), so that every stream to it closes while it cannot answer.
DRIVER_FROZEN_S = 20.0


def freeze_driver(run: FaultRun) -> int:
    """SIGSTOP of the job's driver for :data:`DRIVER_FROZEN_S` (a stalled VM, a long pause), then SIGCONT: the
    workers train on; their agents' streams close on the keepalive and re-attach once the driver runs again,
    which takes each back in its ring as it was. No worker counts lost, nothing is relaunched, and the driver
    is still its first incarnation."""
    (victim,) = driver_pids(run)
    run.inject()
    os.kill(victim, signal.SIGSTOP)
    try:
        run.wait_steps(1, after=run.injected_at + 0.5, timeout=30)
        run.mark("trained_on_while_frozen_s")
        time.sleep(max(0.0, run.injected_at + DRIVER_FROZEN_S - time.time()))  # the fault is the pause itself
    finally:
        os.kill(victim, signal.SIGCONT)
    run.mark("driver_resumed_s")
    run.wait_steps(STEPS, after=time.time(), size=run.workers, timeout=60)
    status = run.job.status()
    assert [i.number for i in status.incarnations] == [1], f"the driver was replaced: {status.incarnations}"
    assert not status.failures, f"the pause counted workers lost: {[f.reason for f in status.failures]}"
    since = [s for s in step_times(run.log_dir) if s.time > run.injected_at]
    assert {s.size for s in since} == {run.workers}, "the ring changed size over the driver's pause"
    return run.workers


def hang_worker(run: FaultRun) -> int:
    """SIGSTOP of the training process of the ring's rank 1, left stopped: once it sent its agent no heartbeat
    for the hung bound (``SUBMARINE_HUNG_AFTER_S``, default :data:`HUNG_AFTER_S`) the agent kills it, the ring
    re-forms and trains without it, ``job show`` lists it as hung, and YARN relaunches it and it rejoins.

    Not rank 0: the steps redone are counted from rank 0's metrics, which it sends once a second, so a rank 0
    killed takes its last second of them with it."""
    bound = HUNG_AFTER_S
    (hung,) = [w for w in run.job.status().workers if w.rank == 1]
    run.notes["hung_worker"] = hung.instance
    (victim,) = training_pids(hung.container_id)

    def killed() -> bool:
        with contextlib.suppress(psutil.Error):
            return psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
        return True

    run.inject()
    os.kill(victim, signal.SIGSTOP)
    try:
        eventually(killed, f"the agent to kill the stopped training process of {hung.instance}", bound + 10, 0.2)
        run.mark("hung_process_killed_s")
        eventually(lambda: run.job.status().world_size == 1, f"the ring to re-form without {hung.instance}", 30, 0.2)
        run.mark("ring_without_it_s")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
    run.wait_steps(1, after=run.injected_at, size=1, timeout=30)
    run.mark("trained_without_it_s")
    run.notes["hung_bound_s"] = bound
    assert run.timings["hung_process_killed_s"] < bound + 3, (
        f"the stopped process was killed {run.timings['hung_process_killed_s']} s after the stop, bound {bound} s"
    )
    failures = run.job.status().failures
    reasons = [f.reason for f in failures if f.instance == hung.instance and "hung" in f.reason]
    assert reasons, f"the driver lists no hung failure of {hung.instance}: {failures}"
    run.notes["failure"] = reasons[0]
    return run.workers


def preempt_worker_at_min(run: FaultRun) -> int:
    """SIGTERM of the agent of the ring's rank 1 (not rank 0, see :func:`hang_worker`), as its NodeManager sends
    when YARN preempts its container, in a job already at ``--min_workers``: it cannot shrink, so the worker
    stays in the ring until its agent stops its process (the kill delay less a margin later), the ring rolls
    back to its last commit, YARN starts a replacement and the ring re-forms with it; no failure is listed."""
    before = ring(run.job)
    (victim,) = [w for w in run.job.status().workers if w.rank == 1]
    run.notes["preempted_worker"] = victim.instance
    (agent,) = [
        p
        for p in map(psutil.Process, container_processes(victim.container_id))
        if "submarine_elastic.elastic.agent" in p.cmdline()
    ]
    run.inject()
    agent.send_signal(signal.SIGTERM)
    eventually(lambda: not training_pids(victim.container_id), f"{victim.instance}'s agent to stop its process", 30)
    run.mark("process_stopped_s")

    def re_formed() -> dict[str, str]:
        members = ring(run.job)
        return members if len(members) == run.workers and victim.container_id not in members.values() else {}

    # The replacement: the same instance in a new container, or a new instance where the driver had YARN remove
    # the preempted one by name (it was not the highest-numbered).
    after = eventually(re_formed, f"the ring to re-form at {run.workers} without {victim.container_id}", 120, 0.2)
    run.mark("ring_re_formed_s")
    run.notes["replacement"] = [f"{i} {c}" for i, c in after.items() if before.get(i) != c]
    failures = run.job.status().failures
    assert not [f for f in failures if f.instance == victim.instance], f"a preemption listed as failure: {failures}"
    return run.workers


def wait_relaunched(run: FaultRun, lost: dict[str, str]) -> dict[str, str]:
    """Blocks (at most 120 s) until YARN runs every instance of ``lost`` (instance -> its old container) READY
    in a new container; marks ``relaunched_s`` and returns instance -> new container."""

    def relaunched() -> dict[str, str]:
        worker = run.yarn.status(run.name).component("worker")
        ready = {c.component_instance_name: c.id for c in worker.ready_containers} if worker else {}
        moved = {i: ready.get(i, c) for i, c in lost.items()}
        return moved if all(moved[i] != c for i, c in lost.items()) else {}

    moved = eventually(relaunched, f"YARN to relaunch {sorted(lost)} READY in new containers", 120)
    run.mark("relaunched_s")
    return moved


#: The NodeManager :func:`lose_node_manager`'s job starts on (with its ApplicationMaster and driver); the other
#: one is the node it loses.
HOME_NODE = "nm-0"


@contextlib.contextmanager
def all_on_home_node(cluster: LocalCluster, yarn: YarnServiceClient, name: str) -> Iterator[None]:
    """The job's submission with every container it starts with (ApplicationMaster, driver, workers) placed on
    :data:`HOME_NODE`: the others offer nothing until the driver and every worker have a container."""
    with only_on(cluster, yarn, HOME_NODE):
        yield

        def placed() -> bool:
            status = yarn.status(name)
            return bool(status.components) and all(
                len(c.containers) == (c.number_of_containers or 0) for c in status.components
            )

        eventually(placed, f"job {name}'s driver and workers to get containers on {HOME_NODE}", 180)


def lost_window(run: FaultRun) -> tuple[float, float, float]:
    """The RM's NodeManager expiry bound and when, in seconds after a NodeManager is silenced, the RM may declare
    it LOST: it checks its NodeManagers every third of the bound, so LOST comes 1 to 4/3 bounds after the last
    heartbeat, which came up to a heartbeat interval before the fault (29.84 s after it was seen in CI, bound
    30 s). Noted in ``run.notes`` as ``expiry_bound_s``, ``lost_earliest_s`` and ``lost_latest_s``."""
    bound_ms = run.yarn.config_value("yarn.nm.liveness-monitor.expiry-interval-ms")
    assert bound_ms is not None, "the RM does not set yarn.nm.liveness-monitor.expiry-interval-ms"
    beat_ms = run.yarn.config_value("yarn.resourcemanager.nodemanagers.heartbeat-interval-ms") or "1000"
    bound = int(bound_ms) / 1000
    earliest, latest = bound - int(beat_ms) / 1000, bound * 4 / 3 + 5
    run.notes.update(expiry_bound_s=bound, lost_earliest_s=earliest, lost_latest_s=latest)
    return bound, earliest, latest


def lose_node_manager(run: FaultRun) -> int:
    """kill -9 of a NodeManager holding a worker (and neither the job's driver nor its ApplicationMaster), left
    dead: the ring trains on; the ResourceManager declares the node LOST once it was silent for its expiry
    bound (``yarn.nm.liveness-monitor.expiry-interval-ms``); YARN relaunches the node's worker on the other
    NodeManager and it rejoins the ring; the job's driver stops the orphaned worker, still running on the
    dead node, and says why in its failures. :func:`restore` restarts the NodeManager afterwards.

    The job starts with everything on :data:`HOME_NODE` (:func:`all_on_home_node`); a flex to one more worker
    while only the other NodeManager takes containers puts the new worker there, on the node to lose."""
    nodes = container_nodes(run)
    home = am_node(run.spec, run.yarn, run.name)
    assert set(nodes.values()) == {home} == {HOME_NODE}, f"the job's containers are not all on {HOME_NODE}: {nodes}"
    (victim,) = {f"nm-{i}" for i in range(run.spec.nodes)} - {home}
    size = run.workers + 1
    with only_on(run.cluster, run.yarn, victim):
        run.job.set_target(pb.Target(workers=size, reason=f"a worker on {victim}, the node to lose"))

        def flexed() -> bool:
            worker = run.yarn.status(run.name).component("worker")
            return worker is not None and len(worker.containers) == size

        eventually(flexed, f"worker-{run.workers} to get a container on {victim}", 120)
    run.job.wait_for_size(size, timeout=180)
    run.wait_steps(STEPS, size=size)
    workers = ring(run.job)
    nodes = container_nodes(run)
    lost = {i: c for i, c in workers.items() if nodes[c] == victim}
    assert lost, f"no worker on {victim}: {workers}, {nodes}"
    run.notes["node"] = victim
    run.notes["workers_on_node"] = sorted(lost)
    bound, earliest, latest = lost_window(run)
    port = run.spec.nm_ports(int(victim.removeprefix("nm-")))["yarn.nodemanager.address"]
    nm = daemon(run.cluster, victim)
    run.inject()
    os.kill(nm.pid, signal.SIGKILL)
    run.wait_steps(STEPS, after=run.injected_at, size=size)
    run.mark("trained_on_without_the_nm_s")

    def node_lost() -> bool:
        return any(n.node_id.endswith(f":{port}") for n in run.yarn.nodes(states=("LOST",)))

    eventually(node_lost, f"the ResourceManager to declare {victim} LOST", bound * 4 / 3 + 30, 0.2)
    lost_s = run.mark("nm_lost_s")
    assert earliest <= lost_s <= latest, f"{victim} was declared LOST {lost_s} s after the kill, bound {bound} s"

    moved = wait_relaunched(run, lost)
    placed = container_nodes(run)
    assert {placed[c] for c in moved.values()} == {home}, f"YARN relaunched {moved} elsewhere than {home}: {placed}"
    run.notes["relaunched"] = moved
    # The orphans: each old container's training process is stopped, and the driver says why.
    eventually(
        lambda: not any(training_pids(c) for c in lost.values()), "the job's driver to stop the orphans", 60, 0.2
    )
    run.mark("orphans_stopped_s")
    failures = {f.container_id: f.reason for f in run.job.status().failures}
    for instance, old in lost.items():
        reason = failures.get(old, "")
        assert f"{instance}'s container {old} was lost with its NodeManager" in reason, (
            f"the driver lists no lost container for {instance}: {failures}"
        )
        run.notes[f"failure_{instance}"] = reason
    run.notes["orphan_agent_processes_left"] = sum(len(container_processes(c)) for c in lost.values())
    # Back at full size with the relaunched workers in the ring, before the NodeManager comes back.
    eventually(lambda: ring(run.job) == {**workers, **moved}, f"the ring to take in {moved}", 120, 0.2)
    run.mark("full_size_again_s")
    return size


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="nm_kill",
            title="kill -9 of a NodeManager holding workers, then cluster restart nm-K",
            workers=2,
            inject=kill_node_manager,
        ),
        Scenario(
            name="rm_kill",
            title="kill -9 of the ResourceManager, then cluster restart rm; then a flex 2 -> 3",
            workers=2,
            inject=kill_resource_manager,
            then=flex_to_three,
        ),
        Scenario(
            name="rm_freeze",
            title="SIGSTOP of the ResourceManager, a flex 3 -> 1 while it is frozen, SIGCONT",
            workers=3,
            inject=freeze_resource_manager,
            hold_s=10.0,
        ),
        Scenario(
            name="driver_kill",
            title="kill -9 of the job's driver (YARN relaunches it); then a flex 2 -> 3",
            workers=2,
            inject=kill_driver,
            then=flex_to_three,
        ),
        Scenario(
            name="driver_freeze",
            title=f"SIGSTOP of the job's driver for {DRIVER_FROZEN_S:.0f} s (past its agents' keepalive), SIGCONT",
            workers=2,
            inject=freeze_driver,
        ),
        Scenario(
            name="nm_lost",
            title="kill -9 of a NodeManager holding a worker (flexed 2 -> 3 onto it), left dead: declared LOST",
            workers=2,
            inject=lose_node_manager,
            placing=all_on_home_node,
        ),
        Scenario(
            name="worker_hang",
            title=f"SIGSTOP of a worker's training process past the hung bound ({HUNG_AFTER_S:.0f} s)",
            workers=2,
            inject=hang_worker,
        ),
        Scenario(
            name="worker_preempted_at_min",
            title="SIGTERM of a worker's agent (YARN preempts it, kill delay 5 s) in a job at --min_workers 2",
            workers=2,
            inject=preempt_worker_at_min,
            job_flags=("--min_workers", "2", "--max_workers", "2", "--env", "SUBMARINE_SIGKILL_DELAY_MS=5000"),
        ),
    )
}
