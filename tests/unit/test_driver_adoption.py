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
