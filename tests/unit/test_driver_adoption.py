"""A relaunched driver's adoption as a unit: it waits for its predecessor's ring, adopts it when at least
--min_workers came back (offering Horovod only them), and admits joiners again once that ring re-formed."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from submarine_elastic.elastic.adoption import Adopter
from submarine_elastic.elastic.ringhost import AgentHandle, AgentRegistry
from submarine_elastic.protocol.api import Adoption, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import DriverState


def adopted(registry: AgentRegistry, number: int) -> AgentHandle:
    agent = AgentHandle(f"a{number}", f"worker-{number}", f"c{number}", "h")
    agent.state, agent.joined, agent.adoption, agent.adopted_rank = WorkerState.RUNNING, True, Adoption.ADOPTED, number
    registry.add(agent)
    return agent


def test_the_first_driver_adopts_nothing() -> None:
    registry = AgentRegistry()
    assert not Adopter(registry, None, 1).await_ring(threading.Event())
    assert not registry.adopting


def test_a_ring_that_came_back_is_adopted_and_offered_alone_until_it_re_formed() -> None:
    registry = AgentRegistry()
    first, second = adopted(registry, 1), adopted(registry, 0)
    joiner = AgentHandle("a9", "worker-9", "c9", "h", state=WorkerState.WARM)
    registry.add(joiner)
    adopter = Adopter(registry, DriverState(app="a", target=3, world_size=2), 2)
    assert adopter.await_ring(threading.Event())
    assert registry.adopting and registry.available() == [second, first]  # old rank order, no joiner
    me = pb.DriverIncarnation(number=2, started=0.0)
    ring = SimpleNamespace(finished=lambda: False, get_coordinator_info=lambda: "rank0", get_worker_client=lambda c: c)
    adopter.await_reform(ring, 2, me)
    assert me.adopted_workers == 2 and me.recovered_after > 0
    assert not registry.adopting and joiner in registry.available()


def test_too_few_of_the_ring_back_forms_a_new_one() -> None:
    registry = AgentRegistry()
    adopted(registry, 0)
    fatal = threading.Event()
    fatal.set()  # nothing more comes: the wait ends at once
    assert not Adopter(registry, DriverState(app="a", target=3, world_size=3), 2).await_ring(fatal)
    assert not registry.adopting


def test_a_worker_the_previous_ring_went_on_without_is_not_adopted() -> None:
    """A chaos run: a driver lost the streams of 4 of its 6 workers (their host cut off), counted them out and
    re-formed a ring of the other 2, which trained on to step 63; the next incarnation adopted the 4, never told,
    and they trained steps 32-35 again from their own state. The ring its predecessor last opened
    (``DriverState.ring``) refuses them; a worker of that ring is adopted, a warm joiner admitted."""
    previous = DriverState(app="a", target=6, world_size=2, ring=("c2-a7", "c3-a8"))
    adopter = Adopter(AgentRegistry(), previous, 1)
    stale = AgentHandle("c0-a1", "worker-0", "c0", "h")
    assert adopter.admit(stale, pb.Resume(state=pb.AGENT_RUNNING, rank=3, driver_incarnation=1), incarnation=2,
                         ring_formed=False) == (
        "worker-0 trains in a ring its previous driver had re-formed without; it cannot rejoin"
    )  # fmt: skip
    kept = AgentHandle("c2-a7", "worker-2", "c2", "h")
    assert adopter.admit(kept, pb.Resume(state=pb.AGENT_RUNNING, rank=0, driver_incarnation=1), incarnation=2,
                         ring_formed=False) == ""  # fmt: skip
    assert kept.adoption is Adoption.ADOPTED and kept.adopted_rank == 0
    joiner = AgentHandle("c9-a1", "worker-9", "c9", "h")
    assert adopter.admit(joiner, pb.Resume(state=pb.AGENT_WARM), incarnation=2, ring_formed=False) == ""
    assert joiner.state is WorkerState.WARM and not joiner.adopted


def test_a_driver_cut_off_from_every_worker_leaves_its_whole_ring_to_its_successor() -> None:
    """A driver whose own host is cut off counts every worker out, but opens no ring without them: the ring it
    leaves is still theirs, and its successor adopts them all (they hold the job's newest state)."""
    ring = ("c0-a1", "c1-a1", "c2-a1")
    adopter = Adopter(AgentRegistry(), DriverState(app="a", target=3, world_size=3, ring=ring), 1)
    for rank, agent_id in enumerate(ring):
        agent = AgentHandle(agent_id, f"worker-{rank}", agent_id[:2], "h")
        running = pb.Resume(state=pb.AGENT_RUNNING, rank=rank, driver_incarnation=1)
        assert adopter.admit(agent, running, incarnation=2, ring_formed=False) == ""
        assert agent.adopted


def test_the_previous_ring_is_kept_until_this_driver_opens_its_own() -> None:
    """A driver that died before its adopted ring re-formed around it leaves its predecessor's ring, not none."""
    registry = AgentRegistry()
    Adopter(registry, DriverState(app="a", target=2, world_size=2, ring=("c0-a1", "c1-a1")), 1)
    assert registry.ring == ("c0-a1", "c1-a1")
