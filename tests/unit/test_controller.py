"""The controller's loop on a scripted cluster: arrivals, departures, persistence, restart."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import pytest

from submarine_elastic.controller.api import (
    ClusterApp,
    DecisionRecord,
    DecisionState,
    IllegalTransitionError,
    InvalidJobError,
    JobBackend,
    JobFootprint,
    JobRecord,
    JobSource,
    JobState,
    NodeResources,
    UnknownJobError,
)
from submarine_elastic.controller.service import (
    FULL_COLLECTION_ROUNDS,
    LEFT_KEY,
    LEFT_RETRY_S,
    MISSING_ENDED_S,
    SENDERS,
    ControllerService,
)
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy
from submarine_elastic.protocol.proto import elastic_pb2 as pb


class FakeCluster(JobBackend):
    """Jobs resize instantly (or fail, when told); records every resize. The controller is given
    ``capacity`` slots (``--capacity``), so the nodes are never asked for."""

    def __init__(self, capacity: int) -> None:
        self.slots = capacity
        self.sizes: dict[str, int] = {}
        self.resizes: list[tuple[str, int]] = []
        self.fail: set[str] = set()
        self.lock = threading.Lock()

    def nodes(self) -> list[NodeResources] | None:
        raise AssertionError("with --capacity the nodes are not read")

    def footprint(self, job_id: str) -> JobFootprint | None:
        raise AssertionError("with --capacity no footprint is read")

    def ring_size(self, job_id: str) -> int | None:
        return self.sizes.get(job_id)

    def set_target(self, job_id: str, target: pb.Target) -> None:
        workers = target.workers
        with self.lock:
            self.resizes.append((job_id, workers))
        if job_id in self.fail:
            raise RuntimeError(f"driver of {job_id} refused")
        self.sizes[job_id] = workers

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def controller(
    tmp_path: Path, cluster: FakeCluster, clock: Clock, policy: str = "greedy", cooldown: float = 0
) -> ControllerService:
    engine = PolicyEngine(load_job_policy(policy), load_arbiter("fair-share"), cooldown_s=cooldown)
    return ControllerService(
        ControllerStore(tmp_path / "c.db"), engine, cluster, interval=1, capacity=cluster.slots, clock=clock
    )


def settle(c: ControllerService) -> None:
    assert c.wait_idle(10)


def test_an_arrival_to_a_full_cluster_takes_workers_from_the_elastic_job(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 4)
    cluster.sizes["big"] = 4
    assert c.tick() == []  # it already has the whole cluster
    clock.now += 10
    c.job_submitted("small", 2, 2, 2, elastic=False)
    decided = c.tick()
    settle(c)
    assert [(d.job_id, d.from_workers, d.to_workers) for d in decided] == [("big", 4, 2)]
    assert cluster.resizes == [("big", 2)]
    [record] = c.timeline("big")
    assert record.applied and record.error is None and record.reason
    assert {j.job_id: (j.workers, j.target) for j in c.jobs()} == {"big": (2, 2), "small": (2, 2)}


def test_a_departure_gives_the_capacity_back(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    c.job_submitted("small", 2, 2, 2, elastic=False)
    cluster.sizes.update(big=2, small=2)
    assert c.tick() == []
    clock.now += 10
    c.job_finished("small")
    del cluster.sizes["small"]
    decided = c.tick()
    settle(c)
    assert [(d.job_id, d.to_workers) for d in decided] == [("big", 4)]
    assert cluster.sizes["big"] == 4
    assert c.decision("big").applied


def test_a_failed_resize_is_recorded_and_the_job_keeps_its_size(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    cluster.sizes["big"] = 2
    cluster.fail.add("big")
    c.tick()
    settle(c)
    record = c.decision("big")
    assert record is not None and not record.applied and "refused" in record.error
    assert c.store.job("big").target == 2 and c.store.job("big").workers == 2


def test_state_survives_a_restart_and_nothing_is_resized_twice(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    first = controller(tmp_path, cluster, clock)
    first.job_submitted("job", 1, 4, 2)
    first.report_metrics("job", 2, 100, 512.0, loss=0.5)
    # A decision recorded but not applied when the controller died; the job did reach the size.
    first.store.add_decision(DecisionRecord("job", clock.now, 2, 3, "probe"))
    cluster.sizes["job"] = 3
    first.store.close()

    second = controller(tmp_path, cluster, clock, policy="static")
    assert cluster.resizes == []
    [record] = second.timeline("job")
    assert record.applied and record.to_workers == 3
    assert second.store.job("job").workers == 3
    assert second.store.throughput("job") == {2: (512.0, 1)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("Bad_Name", 1, 2, 1), "job name 'Bad_Name' is not a YARN service name"),
        (("ok", 1, 200_000, 1), r"max_workers must be an integer in \[1, 100000\], got 200000"),
        (("ok", 0, 2, 1), "min_workers"),
        (("ok", 2, 4, 1), "workers 1"),
        (("ok", 1, 2, 2), "fixed-size"),
    ],
)
def test_bad_jobs_are_refused_naming_the_value(tmp_path: Path, args: tuple, message: str):
    c = controller(tmp_path, FakeCluster(4), Clock())
    elastic = args != ("ok", 1, 2, 2)
    with pytest.raises(InvalidJobError, match=message):
        c.job_submitted(*args, elastic=elastic)
    assert c.jobs() == []


def test_unknown_jobs_and_bad_metrics(tmp_path: Path):
    c = controller(tmp_path, FakeCluster(4), Clock())
    with pytest.raises(UnknownJobError):
        c.job_finished("nope")
    with pytest.raises(UnknownJobError):
        c.decision("nope")
    c.job_submitted("job", 1, 2, 1)
    with pytest.raises(InvalidJobError, match="samples_per_second"):
        c.report_metrics("job", 1, 5, float("nan"))


def test_a_job_that_fits_starts_at_the_size_it_asked_for(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    c.job_submitted("job", 1, 4, 3)
    assert c.tick() == []  # its ring has not formed yet, but 3 slots are free: nothing to decide
    cluster.sizes["job"] = 3
    assert c.tick() == []
    assert cluster.resizes == []


class ReplacingCluster(FakeCluster):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.replaced: list[tuple[str, tuple[str, ...]]] = []

    def instances(self, job_id: str) -> tuple[str, ...]:
        return tuple(f"worker-{i}" for i in range(self.sizes.get(job_id, 0)))

    def replace(self, job_id: str, instances: tuple[str, ...], timeout: float) -> None:
        self.replaced.append((job_id, instances))


def test_a_straggler_seen_in_the_metrics_is_replaced(tmp_path: Path):
    from submarine_elastic.metrics.proto import metrics_pb2
    from submarine_elastic.metrics.store import InMemoryStore

    cluster, clock, metrics = ReplacingCluster(capacity=8), Clock(), InMemoryStore()
    engine = PolicyEngine(load_job_policy("straggler"), load_arbiter("fair-share"), cooldown_s=0)
    c = ControllerService(
        ControllerStore(tmp_path / "c.db"), engine, cluster, metrics=metrics, capacity=cluster.slots, clock=clock
    )
    c.job_submitted("job", 1, 4, 4)
    cluster.sizes["job"] = 4
    for rank in range(4):
        step_time = 0.9 if rank == 2 else 0.3
        metrics.ingest(
            metrics_pb2.ReportBatch(
                job_id="job",
                worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                incarnation="a",
                world_size=4,
                points=[
                    metrics_pb2.StepPoint(
                        seq=s + 1,
                        step=s,
                        loss=1.0,
                        step_time_seconds=step_time,
                        examples_per_second=100.0,
                        batch_size=16,
                        wall_time=1.0 + s,
                    )
                    for s in range(10)
                ],
            )
        )
    [record] = c.tick()
    settle(c)
    assert cluster.replaced == [("job", ("worker-2",))]
    assert (record.from_workers, record.to_workers) == (4, 4) and "worker-2" in record.reason
    assert c.decision("job").applied


def test_a_restarted_controller_gives_jobs_their_own_policies_back(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    first = controller(tmp_path, cluster, clock, policy="static")
    first.job_submitted("job", 1, 4, 2, policy="greedy")
    cluster.sizes["job"] = 2
    first.tick()
    settle(first)
    first.store.close()
    second = controller(tmp_path, cluster, clock, policy="static")
    assert type(second.engine.policy_for("job")).__name__ == "GreedyPolicy"


def test_no_job_is_shrunk_twice_within_its_cooldown(tmp_path: Path):
    """Seen live: big 4 -> 2 for an arrival, then 2 -> 1 seven seconds later while the arrival's ring had
    not formed yet and the cluster looked a slot smaller."""
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock, policy="static", cooldown=30)
    c.job_submitted("big", 1, 4, 4)
    cluster.sizes["big"] = 4
    c.tick()
    clock.now += 60
    c.job_submitted("small", 2, 2, 2, elastic=False)
    assert [(d.job_id, d.from_workers, d.to_workers) for d in c.tick()] == [("big", 4, 2)]
    settle(c)
    c.capacity = 3
    clock.now += 7
    assert c.tick() == []
    clock.now += 22
    assert c.tick() == []
    clock.now += 1  # 30 s after the shrink
    assert [(d.job_id, d.to_workers) for d in c.tick()] == [("big", 1)]


class Listing(FakeCluster):
    """A FakeCluster whose applications the test lists; records the jobs whose end it was told."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.apps: dict[str, ClusterApp] = {}
        self.ended: list[str] = []

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return dict(self.apps)

    def job_ended(self, job_id: str) -> None:
        self.ended.append(job_id)


def test_a_job_that_ended_on_its_own_leaves_and_its_secrets_go(tmp_path: Path):
    cluster, clock = Listing(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    c.job_submitted("big", 1, 4, 2)
    c.tick()
    assert cluster.ended == [] and c.store.job("big").state is JobState.PENDING  # not listed yet: it may be starting
    cluster.apps["big"] = ClusterApp("big", "application_1", 2, started_at=clock.now + 2)
    c.tick()
    assert c.store.job("big").app_id == "application_1"
    assert c.store.job("big").state is JobState.RUNNING
    clock.now += 120
    c.tick()
    assert cluster.ended == []
    del cluster.apps["big"]  # its driver ended the service
    c.tick()
    c.tick()
    assert c.store.job("big").state == "finished"
    assert cluster.ended == ["big"]


def running(c: ControllerService, cluster: Listing, clock: Clock, *names: str) -> None:
    """Jobs ``names`` submitted, listed running by ``cluster``, and seen so by a round."""
    for name in names:
        c.job_submitted(name, 1, 4, 2)
        cluster.apps[name] = ClusterApp(name, f"app-{name}", 2, started_at=clock.now + 2)
    c.tick()


class HdfsAway(Listing):
    """A cluster whose HDFS refuses to remove an ended job's files until ``back`` (a NameNode in safe mode)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.back = False

    def job_ended(self, job_id: str) -> None:
        self.ended.append(job_id)
        if not self.back:
            raise OSError("its files on HDFS: Cannot delete: Name node is in safe mode")


def test_an_ended_jobs_files_that_hdfs_kept_are_removed_once_it_is_back_also_after_a_restart(tmp_path: Path):
    """Seen in a chaos run: a job ended while the NameNode was in safe mode, and its token, keys and
    certificates stayed on HDFS for good. The controller tries again every LEFT_RETRY_S, a restarted one too;
    a job submitted again since owns its files anew and is left alone."""
    cluster, clock = HdfsAway(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    running(c, cluster, clock, "big", "again")
    cluster.apps.clear()  # both ended
    c.tick()
    assert sorted(cluster.ended) == ["again", "big"]
    c.job_submitted("again", 1, 4, 2)  # its next run
    c.store.close()
    c = controller(tmp_path, cluster, clock, policy="static")  # a restarted controller
    cluster.ended.clear()
    c.tick()
    assert cluster.ended == ["big"]  # tried again at once; "again" is not touched
    c.tick()
    assert cluster.ended == ["big"]  # not before LEFT_RETRY_S
    cluster.back = True
    clock.now += LEFT_RETRY_S
    c.tick()
    clock.now += LEFT_RETRY_S
    c.tick()
    assert cluster.ended == ["big", "big"]  # removed, then not tried again
    assert c.store.get(LEFT_KEY) == []


class Recovering(Listing):
    """A ResourceManager that restarted: its listing may leave out an application it still runs; asked about
    one application, it answers with what ``states`` holds (None: it does not know it)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.states: dict[str, bool | None] = {}

    def application_ended(self, app_id: str) -> bool | None:
        return self.states.get(app_id)


def test_a_job_left_out_of_a_restarted_rms_listing_lives_on_while_the_rm_says_it_runs(tmp_path: Path):
    """Seen in a chaos run: the listing of a ResourceManager just restarted left a running job out; the controller
    ended it and removed its files, which YARN needed to relaunch its containers: every relaunch of its driver
    then failed and the job never ended. It ends only when the RM says its application did, or after being
    unknown to the RM for MISSING_ENDED_S."""
    cluster, clock = Recovering(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    running(c, cluster, clock, "big", "lost")
    clock.now += 120
    cluster.apps.clear()  # the restarted RM lists nothing yet
    cluster.states = {"app-big": False, "app-lost": None}
    c.tick()
    assert cluster.ended == [] and {j.job_id for j in c.jobs() if j.live} == {"big", "lost"}
    clock.now += MISSING_ENDED_S - 1
    c.tick()
    assert cluster.ended == []
    clock.now += 2
    c.tick()
    assert cluster.ended == ["lost"]  # unknown to the RM for MISSING_ENDED_S
    cluster.states["app-big"] = True  # the RM says it finished
    c.tick()
    assert cluster.ended == ["lost", "big"]


def test_a_job_name_submitted_again_is_a_new_job(tmp_path: Path):
    """Seen live: the controller logged `job big left` a second after big was submitted again, because the
    job kept the first run's submission time and was finished as long gone."""
    cluster, clock = Listing(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    cluster.apps["big"] = ClusterApp("big", "application_1", 2, started_at=clock.now)
    cluster.sizes["big"] = 2
    [grow] = c.tick()
    settle(c)
    assert (grow.from_workers, grow.to_workers, grow.run) == (2, 4, 1)
    del cluster.apps["big"], cluster.sizes["big"]
    clock.now += 600
    c.tick()
    assert c.store.job("big").state == "finished" and cluster.ended == ["big"]

    clock.now += 600
    # `submarine job run --name big` tells the controller before YARN sees the job.
    c.job_submitted("big", 2, 2, 2, elastic=False)
    clock.now += 1
    c.tick()
    job = c.store.job("big")
    assert (job.state, job.run, job.submitted_at, job.min_workers, job.app_id) == ("pending", 2, clock.now - 1, 2, None)
    assert type(c.engine.policy_for("big")).__name__ == "GreedyPolicy"  # the default: no --policy this time
    cluster.apps["big"] = ClusterApp("big", "application_2", 2, started_at=clock.now)
    clock.now += 1
    c.tick()
    assert (c.store.job("big").app_id, c.store.job("big").state) == ("application_2", "running")
    assert c.timeline("big") == []  # this run's decisions; the first run's stay in the history
    assert [(d.run, d.to_workers) for d in c.store.decisions("big", all_runs=True)] == [(1, 4)]
    assert cluster.ended == ["big"]


def test_a_new_run_of_a_name_drops_the_old_runs_policy_and_history(tmp_path: Path):
    cluster, clock = Listing(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    c.job_submitted("job", 1, 4, 2, policy="greedy")
    c.report_metrics("job", 2, 10, 100.0, loss=1.0)
    cluster.sizes["job"] = 2
    c.tick()
    settle(c)
    assert type(c.engine.policy_for("job")).__name__ == "GreedyPolicy"
    c.job_submitted("job", 1, 4, 2)
    c.tick()
    assert type(c.engine.policy_for("job")).__name__ == "StaticPolicy"
    assert c.store.throughput("job") == {} and c.store.get("loss/job") is None


def test_an_application_of_a_known_name_started_elsewhere_is_a_new_run(tmp_path: Path):
    cluster, clock = Listing(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    c.job_submitted("big", 1, 4, 2)
    cluster.apps["big"] = ClusterApp("big", "application_1", 2, started_at=clock.now)
    c.tick()
    clock.now += 300
    cluster.apps["big"] = ClusterApp("big", "application_7", 3, started_at=clock.now)  # destroyed and re-created
    c.tick()
    job = c.store.job("big")
    assert (job.run, job.app_id, job.source, job.state, job.min_workers) == (2, "application_7", "yarn", "running", 3)
    assert cluster.ended == [], "the secrets belong to the application that runs now"


def test_ring_sizes_are_read_every_round_even_while_a_resize_runs(tmp_path: Path):
    class Slow(FakeCluster):
        def __init__(self) -> None:
            super().__init__(capacity=8)
            self.release = threading.Event()

        def set_target(self, job_id: str, target: pb.Target) -> None:
            self.release.wait(10)
            super().set_target(job_id, target)

    cluster, clock = Slow(), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("job", 1, 4, 2)
    cluster.sizes["job"] = 2
    c.tick()  # greedy: 2 -> 4, in flight
    cluster.sizes["job"] = 3  # one worker joined so far
    clock.now += 5
    c.tick()
    job = c.store.job("job")
    assert (job.workers, job.target, job.observed_at) == (3, 4, clock.now)
    cluster.release.set()
    settle(c)
    assert c.store.job("job").workers == 4


class Blocking(FakeCluster):
    """Each flex call waits for ``gate``; counts the calls under way at once."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.gate = threading.Event()
        self.changed = threading.Condition()
        self.running = self.most = 0

    def set_target(self, job_id: str, target: pb.Target) -> None:
        with self.changed:
            self.running += 1
            self.most = max(self.most, self.running)
            self.changed.notify_all()
        self.gate.wait(10)
        super().set_target(job_id, target)
        with self.changed:
            self.running -= 1


def test_a_round_that_resizes_many_jobs_sends_every_decision_through_at_most_senders_threads(tmp_path: Path):
    jobs = 3 * SENDERS
    cluster, clock = Blocking(capacity=2 * jobs), Clock()
    c = controller(tmp_path, cluster, clock)
    for i in range(jobs):
        c.job_submitted(f"job-{i}", 1, 2, 1)
        cluster.sizes[f"job-{i}"] = 1
    assert len(c.tick()) == jobs  # greedy: every job 1 -> 2
    with cluster.changed:
        assert cluster.changed.wait_for(lambda: cluster.running >= SENDERS, timeout=10)
        # While every sender waits, no other flex call starts.
        assert not cluster.changed.wait_for(lambda: cluster.running > SENDERS, timeout=0.5)
    cluster.gate.set()
    settle(c)
    assert cluster.most == SENDERS
    assert sorted(cluster.resizes) == sorted((f"job-{i}", 2) for i in range(jobs))
    assert all(c.store.job(f"job-{i}").workers == 2 for i in range(jobs))


def test_decisions_still_queued_for_a_sender_when_the_controller_stops_are_dropped_not_waited_for(tmp_path: Path):
    jobs = SENDERS + 2
    cluster, clock = Blocking(capacity=2 * jobs), Clock()
    c = controller(tmp_path, cluster, clock)
    for i in range(jobs):
        c.job_submitted(f"job-{i}", 1, 2, 1)
        cluster.sizes[f"job-{i}"] = 1
    assert len(c.tick()) == jobs
    with cluster.changed:
        assert cluster.changed.wait_for(lambda: cluster.running >= SENDERS, timeout=10)
    c.stop()
    cluster.gate.set()
    assert c.wait_idle(5)  # the two queued sends are dropped, the sixteen under way end
    assert len(cluster.resizes) == SENDERS
    c.tick()  # a round after stop() sends nothing and leaves nothing in flight
    assert c.wait_idle(0) and len(cluster.resizes) == SENDERS


def test_what_survives_a_round_is_kept_from_the_collector_until_the_periodic_full_collection(tmp_path: Path):
    class Node:
        pass

    c = controller(tmp_path, FakeCluster(capacity=4), Clock())
    try:
        cycle = Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        c.collect_garbage()  # still referenced: it survives, frozen
        del cycle
        for _ in range(FULL_COLLECTION_ROUNDS - 2):
            c.collect_garbage()
        assert alive() is not None  # the collections between rounds scan only what came since
        c.collect_garbage()
        assert alive() is None  # the full one frees the cycle
    finally:
        gc.unfreeze()


def test_controller_status_lists_live_jobs_with_their_ring_and_all_with_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import time as _time

    from click.testing import CliRunner

    from submarine_elastic.cli.main import cli

    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path))
    store = ControllerStore(tmp_path / "controller.db")
    now = _time.time()
    store.upsert_job(JobRecord("big", 1, 4, 4, 4, True, "running", now - 100, "cli"))
    store.update_job("big", workers=2, target=2, observed_at=now - 1)
    store.upsert_job(JobRecord("old", 1, 1, 1, 1, False, "running", now - 200, "cli"))
    store.change_state("old", JobState.FINISHED)
    store.close()
    out = CliRunner().invoke(cli, ["controller", "status"], terminal_width=200)
    assert out.exit_code == 0, out.output
    [row] = [line for line in out.output.splitlines() if "big" in line]
    assert [cell.strip() for cell in row.split("│")[1:5]] == ["big", "running", "2", "2"]
    assert "old" not in out.output
    out = CliRunner().invoke(cli, ["controller", "status", "--all"], terminal_width=200)
    assert "old" in out.output and "finished" in out.output


def test_controller_history_shows_a_finished_jobs_decisions_and_every_run_with_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from click.testing import CliRunner

    from submarine_elastic.cli.main import cli

    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path))
    store = ControllerStore(tmp_path / "controller.db")
    store.upsert_job(JobRecord("big", 1, 4, 4, 4, True, "running", 1000.0, "cli"))
    store.add_decision(DecisionRecord("big", 1010.0, 4, 2, "fair share: gives 2 to small (2)", DecisionState.APPLIED))
    store.change_state("big", JobState.FINISHED)
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, "running", 2000.0, "cli"))
    store.add_decision(DecisionRecord("big", 2010.0, 2, 3, "wants its maximum of 4"))
    store.close()
    runner = CliRunner()
    out = runner.invoke(cli, ["controller", "history", "big"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "run 2" in out.output and "wants its maximum" in out.output and "gives 2 to small" not in out.output
    out = runner.invoke(cli, ["controller", "history", "big", "--all"], terminal_width=200)
    assert "gives 2 to small" in out.output and "wants its maximum" in out.output
    out = runner.invoke(cli, ["controller", "history", "nope"])
    assert out.exit_code != 0 and "knows no job 'nope'" in out.output


def test_a_restart_after_a_job_with_its_own_policy_left_keeps_the_policy_state(tmp_path: Path):
    cluster, clock = Listing(capacity=8), Clock()
    first = controller(tmp_path, cluster, clock, policy="static")
    first.job_submitted("gone", 1, 4, 2, policy="greedy")
    first.job_submitted("stays", 1, 4, 2, policy="scaling-efficiency(probe_every_steps=30)")
    cluster.sizes.update(gone=2, stays=2)
    first.tick()
    settle(first)
    first.job_finished("gone")
    first.tick()
    first.store.close()
    second = controller(tmp_path, cluster, clock, policy="static")
    assert "stays" in second.engine.state_dict()["jobs"], "the saved policy state was thrown away"


# ----------------------------------------------------------------------------- typed state


def test_job_states_move_one_way() -> None:
    allowed = {
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.FINISHED),
        (JobState.RUNNING, JobState.FINISHED),
    }
    for old in JobState:
        for new in JobState:
            if old is new or (old, new) in allowed:
                assert old.check(new) is new
            else:
                with pytest.raises(IllegalTransitionError, match=f"a {old} job cannot become {new}"):
                    old.check(new)


def test_a_job_starts_pending_or_running_by_who_reported_it_and_finishes_once(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    assert c.job_submitted("cli-job", 1, 2, 1).state is JobState.PENDING  # job run tells it before YARN hears
    assert c.job_submitted("jvm-job", 1, 2, 1, source=JobSource.BRIDGE).state is JobState.RUNNING
    assert c.job_submitted("seen", 1, 1, 1, elastic=False, source=JobSource.YARN).state is JobState.RUNNING
    with pytest.raises(InvalidJobError, match="source must be one of cli, bridge, yarn, got 'web'"):
        c.job_submitted("web-job", 1, 2, 1, source="web")  # type: ignore[arg-type]
    cluster.sizes["cli-job"] = 1
    c.tick()
    assert c.job("cli-job").state is JobState.RUNNING  # its ring formed
    c.job_finished("cli-job")
    c.job_finished("cli-job")  # finishing a finished job changes nothing
    with pytest.raises(IllegalTransitionError, match="a finished job cannot become running"):
        c.store.change_state("cli-job", JobState.RUNNING)
    assert c.job("cli-job").state is JobState.FINISHED
    assert c.job_submitted("cli-job", 1, 2, 1).state is JobState.PENDING  # a new run, not a transition


def test_a_decision_finishes_once_and_has_an_error_exactly_when_it_failed(tmp_path: Path):
    store = ControllerStore(tmp_path / "c.db")
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, JobState.RUNNING, 1.0, JobSource.CLI))
    decision_id = store.add_decision(DecisionRecord("big", 2.0, 2, 4, "grow"))
    with pytest.raises(ValueError, match="error exactly when it failed"):
        store.finish_decision(decision_id, DecisionState.APPLIED, "but it failed")
    store.finish_decision(decision_id, DecisionState.FAILED, "driver gone")
    with pytest.raises(IllegalTransitionError, match="a decision failed cannot become applied"):
        store.finish_decision(decision_id, DecisionState.APPLIED)
    [record] = store.decisions("big")
    assert (record.state, record.error, record.applied) == (DecisionState.FAILED, "driver gone", False)
    with pytest.raises(ValueError, match="error exactly when it failed"):
        DecisionRecord("big", 2.0, 2, 4, "grow", DecisionState.FAILED)


def test_a_policy_that_does_not_load_is_refused_when_the_job_is_submitted(tmp_path: Path):
    c = controller(tmp_path, FakeCluster(4), Clock())
    with pytest.raises(InvalidJobError, match="job 'job': policy 'no-such' cannot be used: no policy named 'no-such'"):
        c.job_submitted("job", 1, 2, 1, policy="no-such")
    with pytest.raises(InvalidJobError, match="policy 'greedy\\(speed=3\\)' cannot be used"):
        c.job_submitted("job", 1, 2, 1, policy="greedy(speed=3)")
    assert c.jobs() == []


def test_a_stopped_controllers_state_is_read_without_writing_it(tmp_path: Path):
    import sqlite3

    from submarine_elastic.controller.store import SavedState

    store = ControllerStore(tmp_path / "c.db")
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, JobState.RUNNING, 1.0, JobSource.CLI))
    store.add_decision(DecisionRecord("big", 2.0, 2, 4, "grow"))
    store.close()
    before = (tmp_path / "c.db").read_bytes()
    with SavedState(tmp_path / "c.db") as saved:
        assert [j.job_id for j in saved.jobs()] == ["big"]
        assert saved.decision("big") == DecisionRecord("big", 2.0, 2, 4, "grow")
        with pytest.raises(UnknownJobError):
            saved.timeline("ghost")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            saved._store.put("x", 1)
    assert (tmp_path / "c.db").read_bytes() == before
    with pytest.raises(sqlite3.OperationalError):
        SavedState(tmp_path / "missing.db")


def test_the_loss_windows_an_earlier_version_kept_in_the_database_are_dropped(tmp_path: Path):
    store = ControllerStore(tmp_path / "c.db")
    store.put("loss/job", [0.5, 0.4])  # where an earlier version kept a reported loss window
    store.put("policy_engine", {"kept": True})
    store.close()
    store = ControllerStore(tmp_path / "c.db")
    assert store.get("loss/job") is None and store.get("policy_engine") == {"kept": True}


def test_a_rounds_ring_sizes_are_recorded_together_and_unknown_jobs_skipped(tmp_path: Path) -> None:
    store = ControllerStore(tmp_path / "c.db")
    store.upsert_job(JobRecord("a", 1, 4, 2, 2, True, "running", 1.0, "cli"))
    store.upsert_job(JobRecord("b", 1, 4, 1, 1, True, "running", 2.0, "cli"))
    store.observe({"a": 3, "b": 1, "gone": 5}, 50.0)
    assert [(j.job_id, j.workers, j.observed_at, j.target) for j in store.jobs()] == [
        ("a", 3, 50.0, 2),
        ("b", 1, 50.0, 1),
    ]
    store.close()


def test_the_throughput_history_a_round_reads_is_what_the_database_holds(tmp_path: Path) -> None:
    store = ControllerStore(tmp_path / "c.db")
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, JobState.RUNNING, 1.0, JobSource.CLI))
    store.record_throughputs([("big", 2, 100.0, 5)])

    def queried() -> dict[int, tuple[float, int]]:
        reader = ControllerStore(tmp_path / "c.db", readonly=True)  # no history kept: a query each time
        try:
            return reader.throughput("big")
        finally:
            reader.close()

    assert store.throughput("big") == queried() == {2: (100.0, 5)}
    store.record_throughputs([("big", 2, 110.0, 9), ("big", 4, 190.0, 3)])
    assert store.throughput("big") == queried() == {2: (110.0, 9), 4: (190.0, 3)}
    store.throughput("big")[8] = (1.0, 1)  # a copy: what the caller does with it is not kept
    assert store.throughput("big") == queried()
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, JobState.RUNNING, 2.0, JobSource.CLI))  # a new run
    assert store.throughput("big") == queried() == {}
    store.record_throughputs([("big", 1, 60.0, 2)])
    assert store.throughput("big") == queried() == {1: (60.0, 2)}
    store.close()


def test_a_rounds_decisions_are_recorded_together_with_their_jobs_changes_or_not_at_all(tmp_path: Path) -> None:
    store = ControllerStore(tmp_path / "c.db")
    for job in ("a", "b"):
        store.upsert_job(JobRecord(job, 1, 4, 2, 2, True, JobState.RUNNING, 1.0, JobSource.CLI))
    one, other = DecisionRecord("a", 10.0, 2, 3, "grow"), DecisionRecord("b", 10.0, 2, 2, "batch only")
    ids = store.add_decisions([(one, {"target": 3, "last_resize_at": 10.0}), (other, {})])
    assert ids[1] == ids[0] + 1
    assert [(d.to_workers, d.reason) for d in store.decisions("a")] == [(3, "grow")]
    assert [(d.to_workers, d.reason) for d in store.decisions("b")] == [(2, "batch only")]
    assert (store.job("a").target, store.job("a").last_resize_at) == (3, 10.0)
    assert (store.job("b").target, store.job("b").last_resize_at) == (2, None)
    with pytest.raises(UnknownJobError, match="nope"):
        store.add_decisions(
            [
                (DecisionRecord("a", 20.0, 3, 4, "more"), {"target": 4}),
                (DecisionRecord("nope", 20.0, 1, 2, "more"), {"target": 2}),
            ]
        )
    assert len(store.decisions("a")) == 1 and store.job("a").target == 3  # nothing of the failed round
    store.close()
