"""The reconcile step's resize plan (``elastic/reconcile.plan_resize``): who leaves the ring and what YARN is
told, as a function of the count in force, the target and the live workers."""

from __future__ import annotations

from submarine_elastic.elastic.reconcile import Member, ResizePlan, choose_leavers, lost_agents, plan_resize
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import ContainerState, ContainerStatus


def members(ranks: dict[str, int], count: int = 4) -> list[Member]:
    return [Member(f"worker-{i}", i, ranks.get(f"worker-{i}", -1)) for i in range(count)]


def test_scale_in_removes_workers_outside_the_ring_first_then_the_highest_ranks() -> None:
    # worker-2 holds rank 0 (it is the oldest host), worker-3 is warm but not in the ring yet.
    live = members({"worker-2": 0, "worker-0": 1, "worker-1": 2})
    assert [m.instance for m in choose_leavers(live, 1)] == ["worker-3"]
    assert [m.instance for m in choose_leavers(live, 2)] == ["worker-3", "worker-1"]
    assert [m.instance for m in choose_leavers(live, 3)] == ["worker-3", "worker-1", "worker-0"]
    assert choose_leavers(live, 0) == []


def test_nothing_to_do_at_the_count_in_force() -> None:
    assert plan_resize(3, pb.Target(workers=3), members({}, 3)) is None


def test_a_scale_out_only_tells_yarn() -> None:
    assert plan_resize(2, pb.Target(workers=4), members({"worker-0": 0, "worker-1": 1}, 2)) == ResizePlan(4)


def test_a_scale_in_of_the_highest_instances_leaves_the_choice_to_yarn() -> None:
    plan = plan_resize(4, pb.Target(workers=2), members({f"worker-{i}": i for i in range(4)}))
    assert plan == ResizePlan(2, ("worker-3", "worker-2"), ())


def test_a_scale_in_that_keeps_a_higher_instance_names_the_leavers_to_yarn() -> None:
    # rank 0 on worker-3: YARN's own choice (the highest numbers) would take it away.
    plan = plan_resize(4, pb.Target(workers=3), members({"worker-3": 0, "worker-0": 1, "worker-1": 2, "worker-2": 3}))
    assert plan == ResizePlan(3, ("worker-2",), ("worker-2",))


def test_named_workers_are_replaced_at_the_same_count() -> None:
    plan = plan_resize(3, pb.Target(workers=3, remove=["worker-0"]), members({"worker-0": 0}, 3))
    assert plan == ResizePlan(3, ("worker-0",), ("worker-0",))


def test_only_yarns_word_counts_an_agent_lost() -> None:
    def container(cid: str, instance: str, state: ContainerState) -> ContainerStatus:
        return ContainerStatus(id=cid, component_instance_name=instance, state=state, hostname="node-1")

    old = AgentHandle("a0", "worker-0", "container_1_0001_01_000002", "node-1")
    quiet = AgentHandle("a1", "worker-1", "container_1_0001_01_000003", "node-1")
    running = AgentHandle("a2", "worker-2", "container_1_0001_01_000004", "node-2")
    listed = [
        container("container_1_0001_01_000002", "worker-0", ContainerState.STOPPED),
        container("container_1_0001_01_000004", "worker-2", ContainerState.READY),
    ]
    lost = lost_agents([old, quiet, running], listed)
    # worker-1 is not listed and has no successor: no word from YARN, so it stays.
    assert [(a.instance, "STOPPED" in why) for a, why in lost] == [("worker-0", True)]


def test_an_agent_stays_while_attached_live_and_on_its_way_out_by_nobodys_word() -> None:
    from submarine_elastic.protocol.api import WorkerState

    agent = AgentHandle("a0", "worker-0", "c0", "h")
    assert agent.staying
    for state in (WorkerState.WARM, WorkerState.RUNNING):
        agent.state = state
        assert agent.staying
    agent.preempted = True
    assert not agent.staying
    agent.preempted, agent.connected = False, False
    assert not agent.staying
    agent.connected = True
    for state in (WorkerState.LEAVING, WorkerState.LEFT, WorkerState.EXITED):
        agent.state = state
        assert not agent.staying
