"""Host faults under a training elastic TensorFlow + Horovod job on the session's 3-host cluster (root).

Each test runs ``examples/train_elastic.py`` through :func:`tests.integration.faults.run_fault` with its
containers placed on chosen hosts (:func:`placed`: the service's ApplicationMaster always on host 0, beside
the ResourceManager), injects one host fault and holds the job to what a user expects afterwards: the ring
back at full size with YARN's READY workers exactly its members, every committed step once, every sample once
per epoch, the same final weights on every rank, and the cluster healthy again (every NodeManager RUNNING):

- a host dies: every process in its namespace SIGKILLed at once, its NodeManager included;
- a host is cut off (its link to the bridge down) past the ResourceManager's expiry, then joined again;
- the job driver's host is cut off the same way.

Each writes what the fault cost to ``recovery.json`` in its temporary directory and prints it; the bounds
they assert are in :data:`RING_WITHOUT_DEAD_HOST_S` and :data:`RING_WITHOUT_CUT_HOST_S`, and
``docs/jobs.md`` lists what was measured.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from submarine_elastic.cluster import LocalCluster
from submarine_elastic.cluster.netns import kill_namespace_processes
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import DriverUnreachableError, JobClient
from submarine_elastic.yarn import YarnError, YarnServiceClient
from tests.integration.conftest import container_processes, eventually
from tests.integration.faults import (
    STEPS,
    FaultRun,
    Scenario,
    container_nodes,
    driver_pids,
    flex_to_three,
    lost_window,
    recorded,
    restore,
    ring,
    run_fault,
    wait_relaunched,
)
from tests.integration.hosts import HostsCluster
from tests.integration.jobcheck import step_times
from tests.integration.placement import am_node, node_of, nodes_of_containers, only_on, set_node_size

pytestmark = pytest.mark.integration

#: Where the service's ApplicationMaster runs in every scenario: host 0, with the ResourceManager and ZooKeeper,
#: which no scenario faults.
AM_NODE = "nm-0"
#: What the ApplicationMaster, the driver and a worker ask YARN for (``yarn.service.am-resource.memory``, the
#: job's driver component, :data:`WORKER_FLAGS`), to size a NodeManager to hold exactly one more of them.
#: Workers as small as the rest: the ResourceManager refuses a request larger than its largest NodeManager
#: (``yarn.scheduler.maximum-allocation-mb`` is capped by it), and while the AM is placed only the AM's node
#: offers anything, 512 MB, first as room and then as the AM's own.
AM_MB, DRIVER_MB, WORKER_MB = 512, 512, 512
WORKER_FLAGS = ("--worker_resources", f"memory-mb={WORKER_MB},vcores=1")
#: A host whose processes all die at once takes its TCP connections with it (the kernel resets them): the
#: survivors' collective fails at once and the ring re-forms without the host's workers. Measured 0.3 s from
#: the kill (its first committed step at the smaller size; the kill itself returns after about 1 s, once the
#: processes are gone); asserted with margin for a loaded machine.
RING_WITHOUT_DEAD_HOST_S = 15.0
#: A host cut off resets nothing: the survivors' collective waits for its peer until Gloo's timeout (the job's
#: ``HOROVOD_GLOO_TIMEOUT_SECONDS``, 20 s), then the ring re-forms without it. Measured 20.2 s; asserted
#: with margin.
RING_WITHOUT_CUT_HOST_S = 40.0


# ------------------------------------------------------------------------------------------- placement


def host_index(node: str) -> int:
    return int(node.removeprefix("nm-"))


def make_room(run_or_spec: FaultRun | LocalCluster, yarn: YarnServiceClient, node: str, mb: int, vcores: int) -> None:
    """Sizes NodeManager ``node`` to what its containers hold now plus ``mb`` and ``vcores``: the scheduler
    places there exactly what fits in that room, and nothing once it is taken (0: nothing more)."""
    spec = run_or_spec.spec if isinstance(run_or_spec, FaultRun) else run_or_spec.spec()
    (report,) = [n for n in yarn.nodes() if node_of(spec, n.node_id) == node]
    set_node_size(spec, yarn, node, report.used_memory_mb + mb, report.used_vcores + vcores)


def placed(
    *, driver: str, workers: list[str]
) -> Callable[[LocalCluster, YarnServiceClient, str], contextlib.AbstractContextManager[object]]:
    """A scenario's placing: the job's ApplicationMaster on :data:`AM_NODE`, its driver on ``driver`` and its
    workers, one for each entry of ``workers``, on those NodeManagers. Each NodeManager offers room for exactly
    what goes there next, one component at a time (:func:`make_room`); every one offers its whole size again
    once the job's containers are placed (or the submission failed)."""

    @contextlib.contextmanager
    def placing(cluster: LocalCluster, yarn: YarnServiceClient, name: str) -> Iterator[None]:
        spec = cluster.spec()
        nodes = [f"nm-{i}" for i in range(spec.nodes)]
        # An earlier job's containers still stopping would free their room after it was measured, and the
        # scheduler would place a second container where one was meant to go.
        eventually(
            lambda: not [n for n in yarn.nodes() if n.used_memory_mb], "no container left of an earlier job", 120
        )
        try:
            for node in nodes:
                set_node_size(spec, yarn, node, 0, 0)
            make_room(cluster, yarn, AM_NODE, AM_MB, 1)
            yield
            eventually(lambda: am_node(spec, yarn, name) == AM_NODE, f"job {name}'s AM on {AM_NODE}", 120)
            make_room(cluster, yarn, AM_NODE, 0, 0)
            make_room(cluster, yarn, driver, DRIVER_MB, 1)

            def on(component: str, count: int) -> bool:
                comp = yarn.status(name).component(component)
                return comp is not None and len([c for c in comp.containers if c.bare_host]) == count

            eventually(lambda: on("driver", 1), f"job {name}'s driver on {driver}", 120)
            make_room(cluster, yarn, driver, 0, 0)
            for node, count in collections.Counter(workers).items():
                make_room(cluster, yarn, node, WORKER_MB * count, count)
            eventually(lambda: on("worker", len(workers)), f"job {name}'s workers on {workers}", 120)
            where = nodes_of_containers(spec, yarn, name)
            comps = yarn.status(name)
            driver_at = [where[c.id] for c in comps.component("driver").containers]  # type: ignore[union-attr]
            workers_at = sorted(where[c.id] for c in comps.component("worker").containers)  # type: ignore[union-attr]
            assert driver_at == [driver] and workers_at == sorted(workers), (driver_at, workers_at)
        finally:
            for node in nodes:
                set_node_size(spec, yarn, node, spec.node_memory_mb, spec.node_vcores)

    return placing


# ------------------------------------------------------------------------------------------- the faults


def network_of(run: FaultRun):  # type: ignore[no-untyped-def]
    network = run.cluster.network(run.spec)
    assert network is not None, "not a cluster on hosts"
    return network


def faulted_worker_host(run: FaultRun) -> tuple[str, dict[str, str]]:
    """The host to fault: one holding a worker that is not rank 0, and neither the AM nor the driver; with the
    ring's members (instance -> container) on it."""
    nodes = container_nodes(run)
    driver = run.yarn.status(run.name).component("driver")
    assert driver is not None
    keep = {AM_NODE, *(nodes[c.id] for c in driver.containers)}
    ranks = {w.instance: w.rank for w in run.job.status().workers if w.rank >= 0}
    workers = ring(run.job)
    candidates = sorted(
        {nodes[c] for i, c in workers.items() if nodes[c] not in keep and ranks[i] != 0},
        reverse=True,
    )
    assert candidates, f"no host holds a worker without the AM, the driver or rank 0: {nodes}, ranks {ranks}"
    victim = candidates[0]
    return victim, {i: c for i, c in workers.items() if nodes[c] == victim}


def node_state(run: FaultRun, node: str) -> str:
    states = ("RUNNING", "LOST", "UNHEALTHY", "SHUTDOWN", "DECOMMISSIONED", "NEW", "REBOOTED")
    try:
        found = [n.state for n in run.yarn.nodes(states=states) if node_of(run.spec, n.node_id) == node]
    except YarnError:
        return ""
    return found[0] if found else ""


def ring_without(run: FaultRun, size: int, what: str) -> float:
    """Blocks until a step is committed by a ring of ``size`` after the fault; marks and returns the seconds."""
    run.wait_steps(1, after=run.injected_at, size=size, timeout=120)
    step = next(s for s in step_times(run.log_dir) if s.time > run.injected_at and s.size == size)
    run.timings[what] = round(step.time - run.injected_at, 2)
    return run.timings[what]


def declared_lost(run: FaultRun, node: str) -> float:
    """Blocks until the ResourceManager counts ``node`` LOST; marks and returns the seconds since the fault,
    which must lie within the RM's expiry window (:func:`~tests.integration.faults.lost_window`)."""
    bound, earliest, latest = lost_window(run)
    eventually(lambda: node_state(run, node) == "LOST", f"the ResourceManager to declare {node} LOST", bound * 2 + 30)
    lost_s = run.mark("nm_lost_s")
    assert earliest <= lost_s <= latest, f"{node} was declared LOST {lost_s} s after the fault, bound {bound} s"
    return lost_s


def relaunched_elsewhere(run: FaultRun, lost: dict[str, str], node: str) -> dict[str, str]:
    """Blocks until YARN runs every instance of ``lost`` (instance -> its old container) READY in a new
    container, on another host than ``node``; marks it and returns instance -> new container."""
    moved = wait_relaunched(run, lost)
    where = container_nodes(run)
    assert node not in {where[c] for c in moved.values()}, f"YARN relaunched {moved} on {node}, the faulted host"
    run.notes["relaunched_on"] = sorted(where[c] for c in moved.values())
    return moved


def kill_host(run: FaultRun) -> int:
    """Every process on a host SIGKILLed at once (its NodeManager and the job's worker there): the ring
    re-forms without that worker within :data:`RING_WITHOUT_DEAD_HOST_S`, the ResourceManager declares the
    node LOST after its expiry bound, YARN relaunches the worker on another host and it rejoins the ring.
    :func:`~tests.integration.faults.restore` starts the host's daemons again once the worker is relaunched."""
    victim, lost = faulted_worker_host(run)
    workers = ring(run.job)
    network = network_of(run)
    run.notes["host"] = victim
    run.notes["workers_on_host"] = sorted(lost)
    run.inject()
    killed = kill_namespace_processes(network.host(host_index(victim)).namespace)
    run.mark("host_killed_s")
    run.notes["processes_killed"] = killed
    ring_without(run, run.workers - len(lost), "ring_without_host_s")
    declared_lost(run, victim)
    moved = relaunched_elsewhere(run, lost, victim)
    # The host's daemons start again while the relaunched worker starts (it is placed; nothing more is).
    restore(run.cluster)
    run.mark("host_restarted_s")
    eventually(lambda: ring(run.job) == {**workers, **moved}, f"the ring to take in {moved}", 120, 0.2)
    run.mark("full_size_again_s")
    return run.workers


def cut_host(run: FaultRun) -> int:
    """A worker's host cut off its bridge until the ResourceManager declared it LOST, YARN relaunched its
    worker on another host and that one rejoined the ring; then joined again. The ring re-forms without the
    cut-off worker within :data:`RING_WITHOUT_CUT_HOST_S`; once back, the host's NodeManager registers again
    (RUNNING) and the old worker's processes there end without touching the ring (its agent is refused: the
    ring re-formed without it); :func:`flex_onto_cut_host` then uses the host again."""
    victim, lost = faulted_worker_host(run)
    workers = ring(run.job)
    network = network_of(run)
    index = host_index(victim)
    run.notes["host"] = victim
    run.notes["workers_on_host"] = sorted(lost)
    old = {c: container_processes(c) for c in lost.values()}
    assert all(old.values()), f"no processes of the containers on {victim}: {old}"
    run.inject()
    network.set_link(index, False)
    try:
        ring_without(run, run.workers - len(lost), "ring_without_host_s")
        declared_lost(run, victim)
        moved = relaunched_elsewhere(run, lost, victim)
        eventually(lambda: ring(run.job) == {**workers, **moved}, f"the ring to take in {moved}", 120, 0.2)
        run.mark("full_size_again_s")
        # The cut-off host's processes outlived the cut: nothing reached them.
        run.notes["old_processes_alive_at_rejoin"] = sum(
            1 for pids in old.values() for p in pids if psutil.pid_exists(p)
        )
    finally:
        network.set_link(index, True)
    run.mark("link_back_s")
    eventually(lambda: node_state(run, victim) == "RUNNING", f"{victim} to register again (RUNNING)", 120)
    run.mark("nm_rejoined_s")
    eventually(
        lambda: not any(container_processes(c) for c in lost.values()),
        f"the old worker processes on {victim} to end",
        120,
    )
    run.mark("old_processes_gone_s")
    # What the driver said of the returning agent, if it came back before its NodeManager stopped it.
    run.notes["failures"] = [f.reason for f in run.job.status().failures]
    return run.workers


def flex_onto_cut_host(run: FaultRun) -> int:
    """After :func:`cut_host`: the job flexed to one worker less and back, while only the host that was cut off
    offers room: the new worker runs there, in the ring."""
    host = str(run.notes["host"])
    out = run.job.set_target(
        pb.Target(workers=run.workers - 1, reason="make room for a worker on the host that came back")
    )
    assert out is not None
    run.job.wait_for_size(run.workers - 1, timeout=120)
    eventually(
        lambda: (
            (w := run.yarn.status(run.name).component("worker")) is not None and len(w.containers) == run.workers - 1
        ),
        "YARN to stop the leaving worker",
        120,
    )
    flexed = time.time()
    with only_on(run.cluster, run.yarn, host):
        run.job.set_target(pb.Target(workers=run.workers, reason=f"a worker on {host}, which was cut off"))
        run.job.wait_for_size(run.workers, timeout=180)
    run.timings["flex_onto_the_host_after_s"] = round(time.time() - flexed, 2)
    where = container_nodes(run)
    on_host = sorted(i for i, c in ring(run.job).items() if where.get(c) == host)
    assert on_host, f"no worker of the ring on {host} after the flex: {ring(run.job)}, {where}"
    run.notes["workers_on_host_after_flex"] = on_host
    return run.workers


def cut_driver_host(run: FaultRun) -> int:
    """The host of the job's driver (and of no worker) cut off until the ResourceManager declared it LOST and
    YARN relaunched the driver on another host, whose incarnation adopts every worker; then joined again. The
    workers train on meanwhile (their ring needs no driver); once back, the host's NodeManager registers again
    and the old driver, replaced, ends without touching the job."""
    nodes = container_nodes(run)
    driver = run.yarn.status(run.name).component("driver")
    assert driver is not None and len(driver.containers) == 1
    old_container = driver.containers[0].id
    victim = nodes[old_container]
    assert victim != AM_NODE and victim not in {nodes[c] for c in ring(run.job).values()}, nodes
    (old_driver,) = driver_pids(run)
    network = network_of(run)
    index = host_index(victim)
    run.notes["host"] = victim
    run.inject()
    network.set_link(index, False)
    try:
        run.wait_steps(STEPS, after=run.injected_at + 0.5, size=run.workers, timeout=60)
        run.mark("trained_on_without_the_driver_s")
        declared_lost(run, victim)

        def adopted() -> tuple[JobClient, pb.DriverIncarnation] | None:
            # The driver YARN runs now, found through YARN as `job show` finds it: the old one at its address,
            # cut off, does not answer until YARN lists its successor on another host.
            try:
                client = JobClient(run.name, run.yarn, locate_timeout=5, timeout=5)
            except (DriverUnreachableError, YarnError):
                return None
            try:
                incarnations = client.status().incarnations
            except DriverUnreachableError:
                incarnations = []
            if len(incarnations) >= 2 and incarnations[-1].recovered_after > 0:
                return client, incarnations[-1]
            client.close()
            return None

        found = eventually(adopted, "the relaunched driver to adopt the ring", 180, 0.5)
        assert found is not None
        run.job, second = found
        run.timings["driver_relaunched_s"] = round(second.started - run.injected_at, 2)
        run.timings["ring_adopted_s"] = round(second.started + second.recovered_after - run.injected_at, 2)
        run.notes["adopted_workers"] = second.adopted_workers
        assert second.adopted_workers == run.workers, f"the relaunched driver adopted {second.adopted_workers}"
        now = run.yarn.status(run.name).component("driver")
        assert now is not None
        run.notes["driver_relaunched_on"] = sorted({container_nodes(run).get(c.id, "?") for c in now.containers})
        assert victim not in run.notes["driver_relaunched_on"], run.notes
        since = [s for s in step_times(run.log_dir) if s.time > run.injected_at]
        assert {s.size for s in since} == {run.workers}, f"the ring changed size without its driver: {since}"
    finally:
        network.set_link(index, True)
    run.mark("link_back_s")
    eventually(lambda: node_state(run, victim) == "RUNNING", f"{victim} to register again (RUNNING)", 120)
    run.mark("nm_rejoined_s")
    eventually(lambda: not psutil.pid_exists(old_driver) or _zombie(old_driver), "the old driver to end", 120)
    run.mark("old_driver_gone_s")
    return run.workers


def _zombie(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return True


@pytest.fixture(autouse=True)
def on_the_hosts_cluster(hosts_cluster: HostsCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """``job run`` puts a job's files on the HDFS of the cluster ``SUBMARINE_CLUSTER_DIR`` names."""
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(hosts_cluster.cluster.dir))


HOST_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="host_kill",
            title="every process of a worker's host SIGKILLed at once (its NodeManager too), then restarted",
            workers=3,
            inject=kill_host,
            placing=placed(driver="nm-0", workers=["nm-0", "nm-1", "nm-2"]),
            job_flags=WORKER_FLAGS,
        ),
        Scenario(
            name="host_cut",
            title="a worker's host cut off past the RM's expiry, then joined again; then a flex onto it",
            workers=3,
            inject=cut_host,
            then=flex_onto_cut_host,
            placing=placed(driver="nm-0", workers=["nm-0", "nm-1", "nm-2"]),
            job_flags=WORKER_FLAGS,
        ),
        Scenario(
            name="driver_host_cut",
            title="the driver's host cut off past the RM's expiry, then joined again; then a flex 2 -> 3",
            workers=2,
            inject=cut_driver_host,
            then=flex_to_three,
            placing=placed(driver="nm-1", workers=["nm-0", "nm-2"]),
            job_flags=WORKER_FLAGS,
        ),
    )
}


def test_a_host_that_dies_loses_its_worker_for_a_relaunched_one_and_no_committed_step(
    hosts_cluster: HostsCluster, tmp_path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(HOST_SCENARIOS["host_kill"], hosts_cluster.cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.timings_s["ring_without_host_s"] <= RING_WITHOUT_DEAD_HOST_S, report.timings_s
    assert report.notes["workers_on_host"] and report.full_size == 3
    assert sorted(report.containers_replaced) == report.notes["workers_on_host"]
    assert len(report.containers_kept) == 2


def test_a_host_cut_off_and_back_does_not_corrupt_the_ring_and_a_later_flex_uses_it(
    hosts_cluster: HostsCluster, tmp_path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(HOST_SCENARIOS["host_cut"], hosts_cluster.cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.timings_s["ring_without_host_s"] <= RING_WITHOUT_CUT_HOST_S, report.timings_s
    assert report.timings_s["nm_rejoined_s"] > report.timings_s["link_back_s"]
    assert report.notes["workers_on_host_after_flex"]


def test_the_drivers_host_cut_off_the_job_trains_on_and_a_driver_relaunched_elsewhere_adopts_it(
    hosts_cluster: HostsCluster, tmp_path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(HOST_SCENARIOS["driver_host_cut"], hosts_cluster.cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.containers_kept == ["worker-0", "worker-1"] and report.steps_redone == 0
    assert report.notes["adopted_workers"] == 2
    assert "flex_after_recovery_s" in report.timings_s
