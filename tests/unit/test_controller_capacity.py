"""Capacity as YARN counts it: memory and vcores per node, each job's container sizes, what fits where;
a dip that lasts a moment is not acted on; the cooldown holds every decision for a job.

The scenario tests run the controller against :class:`MiniYarn`, a cluster in miniature that places
containers on nodes first-fit by memory and vcores, as the ResourceManager does, and hands room that
frees to the oldest open request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import responses

from submarine_elastic.controller.api import (
    ClusterApp,
    JobBackend,
    JobFootprint,
    JobSize,
    JobState,
    NodeResources,
    Resources,
)
from submarine_elastic.controller.capacity import CapacityFilter, count_slots, place, slot_unit
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy
from submarine_elastic.protocol.proto import elastic_pb2 as pb

MB2048 = Resources(2048, 1)
SMALL = Resources(512, 1)


# --------------------------------------------------------------------------------------- the counting


def node(name: str, free_mb: int, free_vcores: int) -> NodeResources:
    return NodeResources(name, free=Resources(free_mb, free_vcores))


def test_a_worker_fits_only_where_memory_and_vcores_both_are() -> None:
    assert Resources(4096, 4).count(MB2048) == 2
    assert Resources(4096, 1).count(MB2048) == 1  # vcores bind
    assert Resources(1536, 4).count(MB2048) == 0  # memory binds
    assert Resources(-512, 2).count(MB2048) == -1  # short: one worker has to go first
    with pytest.raises(ValueError, match="positive"):
        Resources(4096, 4).count(Resources(0, 1))


def test_room_split_over_two_nodes_is_no_slot() -> None:
    """The layout seen live: each NodeManager runs one container of the job's AM or driver and one worker;
    1536 MB are free on each node, 3072 MB in all, and not one more 2048 MB worker fits."""
    jobs = {"big": JobFootprint(MB2048, workers_allocated=2)}
    slots = count_slots([node("n0", 1536, 2), node("n1", 1536, 2)], jobs)
    assert slots is not None
    assert (slots.unit, slots.held, slots.free, slots.capacity) == (MB2048, 2, 0, 2)
    assert dict(slots.per_node) == {"n0": 0, "n1": 0}


def test_containers_still_to_be_placed_take_room_first() -> None:
    # An arrival's AM and driver (512 MB, 1 vcore each) fit in the room left on n0: they cost no slot.
    jobs = {"big": JobFootprint(MB2048, 3), "small": JobFootprint(MB2048, 0, unplaced=(SMALL, SMALL))}
    slots = count_slots([node("n0", 1024, 2), node("n1", 2048, 2)], jobs)
    assert slots is not None and (slots.free, slots.reserved, slots.capacity) == (1, 0, 4)
    # With one vcore left on n0 the driver has to go elsewhere: it costs n1's free slot.
    slots = count_slots([node("n0", 1024, 1), node("n1", 2048, 2)], jobs)
    assert slots is not None and (slots.free, slots.reserved, slots.capacity) == (0, 1, 3)
    # Where no room is left they cost a slot: a worker has to go before they fit.
    slots = count_slots([node("n0", 0, 0), node("n1", 0, 2)], jobs)
    assert slots is not None and (slots.free, slots.reserved, slots.capacity) == (-1, 1, 2)


def test_the_slot_is_the_largest_worker_and_small_containers_pack_tightly() -> None:
    assert slot_unit([Resources(1024, 2), MB2048]) == Resources(2048, 2)
    left = place({"n0": Resources(1536, 2), "n1": Resources(3584, 3)}, [SMALL], MB2048)
    assert left == {"n0": Resources(1024, 1), "n1": Resources(3584, 3)}  # the hole of 3584 MB stays whole


def test_no_job_no_slots() -> None:
    assert count_slots([node("n0", 4096, 4)], {}) is None


def test_a_drop_counts_only_once_it_has_lasted_a_round() -> None:
    f = CapacityFilter(window=5.0)
    assert f.update(0.0, MB2048, 4) == 4
    assert f.update(1.0, MB2048, 3) == 4  # a moment's dip: ignored
    assert f.update(2.0, MB2048, 4) == 4
    assert f.update(7.0, MB2048, 3) == 4  # seen once more: not yet a whole round
    assert f.update(12.0, MB2048, 3) == 3  # it lasted from 7 s to 12 s: it counts
    assert f.update(13.0, MB2048, 5) == 5  # a rise counts at once
    assert f.update(13.5, Resources(1024, 1), 9) == 9  # another slot unit: nothing to compare with


# ------------------------------------------------------------------------------------ YARN in miniature


@dataclass
class MiniJob:
    worker: Resources
    min_ring: int
    target: int
    app_id: str
    started_at: float
    workers: list[str] = field(default_factory=list)  # the node of each worker, worker-0 first
    overhead: list[tuple[str, Resources]] = field(default_factory=list)
    unplaced: int = 0  # of its AM and driver
    held: bool = False  # YARN has not got round to placing its AM and driver yet
    finished: bool = False  # its service has ended; the RM still lists its application (the AM finishing)


class MiniYarn(JobBackend):
    """Nodes with memory, vcores and GPUs; containers placed first-fit; freed room goes to the oldest open
    request; a job's ring is the workers it got (once it has its minimum)."""

    def __init__(self, nodes: int = 2, memory_mb: int = 4096, vcores: int = 4, gpus: int = 0) -> None:
        self.total = {f"n{i}": Resources(memory_mb, vcores, gpus) for i in range(nodes)}
        self.jobs: dict[str, MiniJob] = {}
        self.resizes: list[tuple[str, int]] = []
        self.flexes: list[tuple[str, int]] = []
        self.ended: list[str] = []
        self.foreign: dict[str, Resources] = {}  # node -> room held by containers of no job

    def free(self, node_id: str) -> Resources:
        used = Resources(0, 0)
        for job in self.jobs.values():
            for n in job.workers:
                used = used + job.worker if n == node_id else used
            for n, size in job.overhead:
                used = used + size if n == node_id else used
        return self.total[node_id] - used - self.foreign.get(node_id, Resources(0, 0))

    def _first_fit(self, size: Resources) -> str | None:
        for node_id in self.total:
            if self.free(node_id).holds(size):
                return node_id
        return None

    def submit(
        self,
        name: str,
        workers: int,
        *,
        min_ring: int = 1,
        worker: Resources = MB2048,
        on: tuple[str, ...] = (),
        held: bool = False,
    ) -> None:
        """Place the AM and the driver (on the nodes ``on`` names, else first-fit; with ``held``, once
        :meth:`release` is called), then the workers."""
        job = MiniJob(worker, min_ring, workers, f"application_{len(self.jobs) + 1}", float(len(self.jobs)))
        self.jobs[name] = job
        job.unplaced, job.held = 2 - len(on), held
        job.overhead = [(where, SMALL) for where in on]
        self._fill()

    def release(self, name: str) -> None:
        self.jobs[name].held = False
        self._fill()

    def _fill(self) -> None:
        for job in sorted(self.jobs.values(), key=lambda j: j.started_at):
            while job.unplaced and not job.held and (where := self._first_fit(SMALL)) is not None:
                job.overhead.append((where, SMALL))
                job.unplaced -= 1
            while (
                not job.unplaced
                and len(job.workers) < job.target
                and (where := self._first_fit(job.worker)) is not None
            ):
                job.workers.append(where)

    def kill(self, name: str) -> None:
        del self.jobs[name]
        self._fill()

    def finish(self, name: str) -> None:
        """The job's service ends: its containers go; the RM lists its application until :meth:`kill`."""
        job = self.jobs[name]
        job.finished, job.workers, job.overhead, job.unplaced = True, [], [], 0
        self._fill()

    # JobBackend
    def nodes(self) -> list[NodeResources] | None:
        return [NodeResources(n, free=self.free(n), gpus=self.total[n].gpus) for n in self.total]

    def footprint(self, job_id: str) -> JobFootprint | None:
        job = self.jobs.get(job_id)
        if job is not None and job.finished:
            return JobFootprint(job.worker, ended_app=job.app_id)
        return None if job is None else JobFootprint(job.worker, len(job.workers), unplaced=(SMALL,) * job.unplaced)

    def ring_size(self, job_id: str) -> int | None:
        job = self.jobs.get(job_id)
        return len(job.workers) if job is not None and len(job.workers) >= job.min_ring else None

    def set_target(self, job_id: str, target: pb.Target) -> None:
        workers = target.workers
        self.resizes.append((job_id, workers))
        job = self.jobs[job_id]
        job.target = workers
        del job.workers[workers:]
        self._fill()

    def size(self, job_id: str) -> JobSize | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return JobSize(job.target, self.ring_size(job_id) or 0, yarn_ready=len(job.workers))

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return {n: ClusterApp(n, j.app_id, len(j.workers), j.started_at) for n, j in self.jobs.items()}

    def job_ended(self, job_id: str) -> None:
        self.ended.append(job_id)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def controller(tmp_path: Path, yarn: JobBackend, clock: Clock, cooldown: float = 30.0) -> ControllerService:
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"), cooldown_s=cooldown)
    return ControllerService(ControllerStore(tmp_path / "c.db"), engine, yarn, interval=5, clock=clock)


def test_a_job_asking_for_more_than_fits_holds_what_it_got(tmp_path: Path) -> None:
    """Seen live: `big` asked for 4 workers of 2048 MB on 2 nodes of 4096 MB; its AM and driver sat on
    different nodes, so only 2 workers fit, while the controller counted 4 (it counted vcores)."""
    yarn, clock = MiniYarn(), Clock()
    yarn.submit("big", 4, on=("n0", "n1"))
    assert len(yarn.jobs["big"].workers) == 2
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 4, policy="greedy")
    assert c.tick() == []
    assert (c.store.job("big").workers, c.store.job("big").target) == (2, 4)
    clock.now += 9
    assert c.tick() == []  # YARN may not have shown a container it just gave yet
    clock.now += 1  # still short 10 s later: the open request for 2 more is withdrawn
    [lowered] = c.tick()
    assert c.wait_idle(5)
    assert (lowered.from_workers, lowered.to_workers) == (4, 2)
    assert lowered.reason.startswith("only 2 of its 4 workers fit (2048 MB, 1 vcore each")
    assert c.decision("big").applied and yarn.jobs["big"].target == 2
    assert c.store.job("big").last_resize_at is None, "withdrawing a request that never ran is no resize"


def test_an_arrival_takes_only_what_it_needs_from_a_memory_bound_job(tmp_path: Path) -> None:
    yarn, clock = MiniYarn(), Clock()
    yarn.submit("big", 2, on=("n0", "n1"))
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 2, policy="greedy")
    assert c.tick() == []  # nothing fits beyond its 2
    clock.now += 60
    yarn.submit("small", 1)  # its AM and driver take n0's last 1024 MB; its worker fits nowhere
    c.job_submitted("small", 1, 1, 1, elastic=False)
    decided = c.tick()
    assert c.wait_idle(5)
    assert [(d.job_id, d.from_workers, d.to_workers) for d in decided] == [("big", 2, 1)]
    assert len(yarn.jobs["small"].workers) == 1, "the worker big gave up went to small"
    assert yarn.resizes == [("big", 1)]


def test_an_arrival_that_cannot_fit_even_so_takes_nothing(tmp_path: Path) -> None:
    """`small` wants 2 workers of 2048 MB; with big at its minimum only one would fit (its AM and driver
    took the rest): shrinking big would not start it, so big is left alone."""
    yarn, clock = MiniYarn(), Clock()
    yarn.submit("big", 2, on=("n0", "n1"))
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 2, policy="greedy")
    c.tick()
    clock.now += 60
    yarn.submit("small", 2, min_ring=2)
    c.job_submitted("small", 2, 2, 2, elastic=False)
    assert c.tick() == []
    clock.now += 60
    assert c.tick() == []
    assert yarn.resizes == [] and len(yarn.jobs["big"].workers) == 2


def test_a_moments_dip_in_free_room_resizes_nothing(tmp_path: Path) -> None:
    """A container of no job appears for one round and takes n1's free worker slot: `small`, whose worker
    was about to be placed there, is not taken for waiting, so `big` is not shrunk for it."""
    yarn, clock = MiniYarn(vcores=8), Clock()
    yarn.submit("big", 2, on=("n0", "n0"))  # AM and driver on n0: n0 has one 2048 MB worker, n1 one
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 2, 2)
    c.tick()
    clock.now += 60
    yarn.submit("small", 1, on=("n0", "n0"))  # its AM and driver fill n0; its worker goes to n1
    yarn.jobs["small"].workers.clear()  # ... but that container is not allocated yet
    c.job_submitted("small", 1, 1, 1, elastic=False)
    assert c.tick() == []  # it fits in n1's free slot: it holds it
    yarn.foreign["n1"] = Resources(1024, 1)  # for a moment
    clock.now += 1
    assert c.tick() == []
    clock.now += 5
    assert c.tick() == []
    clock.now += 5  # the room stays taken for 10 s: now it counts
    decided = c.tick()
    assert [(d.job_id, d.to_workers) for d in decided] == [("big", 1)]


def test_nobody_gives_workers_to_a_job_yarn_does_not_show_yet(tmp_path: Path) -> None:
    """`job run` registers a job before submitting it, and the submission can fail (seen: the name was
    taken by a stopped service); the controller shrank `big` for a job that never came."""
    yarn, clock = MiniYarn(), Clock()
    yarn.submit("big", 2, on=("n0", "n1"))
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 2)
    c.tick()
    clock.now += 60
    c.job_submitted("small", 1, 1, 1, elastic=False)
    assert c.tick() == [] and yarn.resizes == []
    yarn.submit("small", 1)
    clock.now += 5
    assert [(d.job_id, d.to_workers) for d in c.tick()] == [("big", 1)]


def test_someone_elses_application_takes_room_but_sets_no_slot_size(tmp_path: Path) -> None:
    class WithForeign(MiniYarn):
        def footprint(self, job_id: str) -> JobFootprint | None:
            return JobFootprint(Resources(3072, 2), 1) if job_id == "web" else super().footprint(job_id)

        def ring_size(self, job_id: str) -> int | None:
            return None if job_id == "web" else super().ring_size(job_id)

        def cluster_jobs(self) -> dict[str, ClusterApp] | None:
            return {**(super().cluster_jobs() or {}), "web": ClusterApp("web", "application_9", 1)}

    yarn, clock = WithForeign(nodes=3), Clock()
    yarn.foreign["n2"] = Resources(3072, 2)  # its container
    yarn.submit("big", 2, on=("n0", "n0"))  # n0: AM, driver, one worker; n1: one worker and room for one more
    c = controller(tmp_path, yarn, clock, cooldown=0)
    c.job_submitted("big", 1, 4, 2, policy="greedy")
    assert [(d.job_id, d.from_workers, d.to_workers) for d in c.tick()] == [("big", 2, 3)]
    assert c.store.job("web").source == "yarn"


def test_an_arrival_gets_workers_once_yarn_has_placed_its_am_and_driver(tmp_path: Path) -> None:
    """Seen live: workers were taken from `big` before the arrival's AM and driver ran; YARN put those in
    the room that was freed for the arrival's worker, which then fitted nowhere (and `big` gave again)."""
    yarn, clock = MiniYarn(vcores=8), Clock()
    yarn.submit("big", 3, on=("n0", "n0"))  # n0: AM, driver, a worker and 1024 MB free; n1: two workers
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 3, 3)
    c.tick()
    clock.now += 60
    yarn.submit("small", 1, held=True)
    c.job_submitted("small", 1, 1, 1, elastic=False)
    assert c.tick() == []  # its AM and driver fit in n0's 1024 MB: YARN places them first
    yarn.release("small")
    clock.now += 1
    assert [(d.job_id, d.to_workers) for d in c.tick()] == [("big", 2)]
    assert c.wait_idle(5)
    assert len(yarn.jobs["small"].workers) == 1


def test_the_room_an_arrivals_minimum_needs_is_kept_while_yarn_places_its_am_and_driver(tmp_path: Path) -> None:
    """Seen live (a replay of 4 jobs): while YARN placed an arrival's AM and driver the arbiter grew a running
    job into the free slot the arrival's one worker needed; the arrival then waited two minutes for a GPU."""
    yarn, clock = MiniYarn(vcores=8), Clock()
    yarn.submit("big", 1, on=("n0", "n0"))  # n0: AM, driver, a worker, 1024 MB free; n1: room for two more
    yarn.submit("small", 1, held=True)
    c = controller(tmp_path, yarn, clock, cooldown=0)
    c.job_submitted("big", 1, 4, 1, policy="greedy")
    c.job_submitted("small", 1, 1, 1, elastic=False)
    # Its AM and driver take n0's 1024 MB; of n1's two slots one is kept for its worker, the other goes to big.
    assert [(d.job_id, d.from_workers, d.to_workers) for d in c.tick()] == [("big", 1, 2)]
    assert c.wait_idle(5)
    yarn.release("small")
    clock.now += 5
    assert c.tick() == []
    assert len(yarn.jobs["small"].workers) == 1 and len(yarn.jobs["big"].workers) == 2
    assert yarn.resizes == [("big", 2)], "nothing given to big had to be taken back"


def test_a_job_whose_service_ended_is_ended_before_the_rm_stops_listing_it(tmp_path: Path) -> None:
    """Seen live (a replay of 12 jobs): the RM listed a finished job's application as running for up to 40 s while
    its ApplicationMaster finished; the controller went on deciding for it (growing it to 2 workers 37 s after it
    ended) and kept its slot from the jobs still training."""
    yarn, clock = MiniYarn(vcores=8), Clock()
    yarn.submit("done", 1, on=("n0", "n0"))
    yarn.submit("big", 1, on=("n1", "n1"))
    yarn.jobs["done"].started_at = clock.now  # its application: the run the controller is told of
    c = controller(tmp_path, yarn, clock, cooldown=0)
    c.job_submitted("done", 1, 1, 1, elastic=False)
    c.job_submitted("big", 1, 4, 1, policy="greedy")
    c.tick()
    assert c.wait_idle(5)
    assert c.store.job("done").app_id == yarn.jobs["done"].app_id
    held = len(yarn.jobs["big"].workers)
    yarn.finish("done")
    clock.now += 5
    [grown] = c.tick()
    assert (grown.job_id, grown.from_workers, grown.to_workers) == ("big", held, held + 1)
    assert c.store.job("done").state is JobState.FINISHED and yarn.ended == ["done"]
    assert c.wait_idle(5)
    assert len(yarn.jobs["big"].workers) == held + 1


def test_a_job_whose_service_shows_ended_before_its_application_is_seen_is_not_ended(tmp_path: Path) -> None:
    """YARN Services shows a service just submitted as STOPPED until the RM has its application (seen live: the
    controller ended an arrival in its first round, never counted it, and did not shrink a job for it); and a
    new run of a name is not ended for the run before it."""
    yarn, clock = MiniYarn(vcores=8), Clock()
    yarn.submit("big", 1, on=("n1", "n1"))
    c = controller(tmp_path, yarn, clock, cooldown=0)
    c.job_submitted("big", 1, 4, 1, policy="greedy")
    c.job_submitted("new", 1, 1, 1, elastic=False)  # `job run` tells the controller before YARN has it
    yarn.submit("new", 1, held=True)
    yarn.jobs["new"].finished = True  # YARN shows an ended run of the name, not one the controller knows
    c.tick()
    assert c.store.job("new").app_id is None
    assert c.store.job("new").state is not JobState.FINISHED and yarn.ended == []


def test_an_arrival_whose_am_fits_nowhere_gets_room_for_it_too(tmp_path: Path) -> None:
    yarn, clock = MiniYarn(), Clock()
    yarn.submit("big", 3, on=("n0", "n0"))
    yarn.foreign["n0"] = Resources(1024, 1)  # the cluster is full
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 3, 3)
    c.tick()
    clock.now += 60
    yarn.submit("small", 1)
    assert yarn.jobs["small"].unplaced == 2
    c.job_submitted("small", 1, 1, 1, elastic=False)
    assert [(d.job_id, d.to_workers) for d in c.tick()] == [("big", 1)]  # one for its AM and driver, one for it
    assert c.wait_idle(5)
    assert yarn.jobs["small"].unplaced == 0 and len(yarn.jobs["small"].workers) == 1


class _Unknown(MiniYarn):
    def nodes(self) -> list[NodeResources] | None:
        return None


def test_no_decision_while_the_nodes_are_unknown(tmp_path: Path) -> None:
    yarn, clock = _Unknown(), Clock()
    yarn.submit("big", 1)
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 1, policy="greedy")
    assert c.tick() == [] and yarn.resizes == []


# ------------------------------------------------------------------------------ the backend on the RM


RM = "http://rm.test:8088"


def component(name: str, memory: str, cpus: int, containers: int) -> dict[str, object]:
    return {
        "name": name,
        "resource": {"cpus": cpus, "memory": memory},
        "number_of_containers": containers,
        "containers": [
            {"id": f"c{i}", "state": "READY", "component_instance_name": f"{name}-{i}"} for i in range(containers)
        ],
    }


def test_the_backend_reads_a_jobs_sizes_from_its_service_and_the_am_size_from_the_rm() -> None:
    from submarine_elastic.controller.backend import YarnJobBackend

    backend = YarnJobBackend(RM)
    with responses.RequestsMock() as rsps:
        rsps.get(f"{RM}/conf", json={"property": {"key": "yarn.service.am-resource.memory", "value": "768"}})
        rsps.get(f"{RM}/conf", status=404, body="not found")  # yarn.service.am-resource.cpus: YARN's default
        # Before its AM runs the RM shows the service's name and state only: the template's sizes, and the
        # AM and the driver still to be placed.
        rsps.get(f"{RM}/app/v1/services/big", json={"name": "big", "state": "ACCEPTED"})
        assert backend.footprint("big") == JobFootprint(MB2048, 0, unplaced=(Resources(768, 1), SMALL))
        running = {
            "name": "big",
            "state": "STARTED",
            "components": [component("driver", "512", 1, 0), component("worker", "1024", 2, 3)],
        }
        rsps.get(f"{RM}/app/v1/services/big", json=running)
        assert backend.footprint("big") == JobFootprint(Resources(1024, 2), 3, unplaced=(SMALL,))
        rsps.get(f"{RM}/app/v1/services/web", json={"name": "web", "components": [component("web", "256", 1, 2)]})
        assert backend.footprint("web") is None  # not one of our jobs
        rsps.get(f"{RM}/app/v1/services/gone", status=404, json={"diagnostics": "Service gone not found"})
        assert backend.footprint("gone") is None
        # The RM's STOPPED alone (a service just submitted, with no application yet; or one the RM does not know
        # after a restart) is no end: only the ApplicationMaster's own answer, while it finishes.
        rsps.get(f"{RM}/app/v1/services/new", json={"name": "new", "state": "STOPPED"})
        assert backend.footprint("new") is None
        rsps.get(f"{RM}/app/v1/services/lost", json={"name": "lost", "state": "STOPPED", "id": "application_9_2"})
        assert backend.footprint("lost") is None
        done = {**running, "name": "done", "state": "SUCCEEDED", "id": "application_9_1"}
        rsps.get(f"{RM}/app/v1/services/done", json=done)
        assert backend.footprint("done") == JobFootprint(MB2048, ended_app="application_9_1")
    backend.close()


def test_the_backend_removes_the_secrets_of_a_job_that_ended(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from submarine_elastic.controller.backend import YarnJobBackend

    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "job.token").write_text("secret")
    (tmp_path / "other").mkdir()
    from submarine_elastic.controller import backend as controller_backend

    monkeypatch.setattr(controller_backend, "cluster_job_files", lambda rm_url: None)  # a cluster without HDFS
    backend = YarnJobBackend(RM)
    backend.job_ended("big")
    backend.close()
    assert not (tmp_path / "big").exists() and (tmp_path / "other").is_dir()
