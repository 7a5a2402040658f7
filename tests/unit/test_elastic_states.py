"""The state machines of a job, its workers and their agents: every legal path, and illegal steps refused
with a message that names whose state it is, both states and what is allowed."""

from __future__ import annotations

import shlex
import signal
import sys
from enum import StrEnum
from pathlib import Path

import pytest

from submarine_elastic.elastic import agent as agent_mod
from submarine_elastic.protocol.api import (
    Adoption,
    AgentState,
    IllegalTransitionError,
    JobPhase,
    WorkerState,
    advance,
    can_advance,
)
from submarine_elastic.protocol.proto import elastic_pb2 as pb

J, W, A = JobPhase, WorkerState, AgentState

LEGAL_PATHS: list[list[StrEnum]] = [
    [J.WAITING, J.RUNNING, J.FINISHED],
    [J.WAITING, J.RUNNING, J.FAILED],
    [J.WAITING, J.FAILED],
    [W.ATTACHED, W.WARM, W.RUNNING, W.LEAVING, W.LEFT],
    [W.ATTACHED, W.WARM, W.LEAVING, W.LEFT],
    [W.ATTACHED, W.WARM, W.RUNNING, W.EXITED],
    [W.ATTACHED, W.EXITED],
    [A.STARTING, A.WARM, A.RUNNING, A.LEAVING, A.EXITED],
    [A.STARTING, A.WARM, A.RUNNING, A.LEAVING, A.STOPPING, A.EXITED],
    [A.STARTING, A.STOPPING, A.EXITED],
    [A.STARTING, A.EXITED],
    [Adoption.NONE, Adoption.ADOPTED, Adoption.REFORMED],
]


@pytest.mark.parametrize("path", LEGAL_PATHS, ids=lambda p: "-".join(s.value for s in p))
def test_legal_paths_are_walked(path: list) -> None:
    state = path[0]
    for step in path[1:]:
        state = advance("x", state, step)
    assert state is path[-1]


@pytest.mark.parametrize(
    ("current", "requested", "message"),
    [
        (J.FINISHED, J.RUNNING, "job mnist: no transition from finished to running (finished is final)"),
        (
            J.WAITING,
            J.FINISHED,
            "job mnist: no transition from waiting to finished (from waiting only to failed, running)",
        ),
        (
            W.ATTACHED,
            W.LEAVING,
            "job mnist: no transition from attached to leaving (from attached only to exited, warm)",
        ),
        (W.LEAVING, W.EXITED, "job mnist: no transition from leaving to exited (from leaving only to left)"),
        (W.RUNNING, W.RUNNING, "job mnist: no transition from running to running"),
        (A.STARTING, A.RUNNING, "job mnist: no transition from starting to running"),
        (A.EXITED, A.STOPPING, "job mnist: no transition from exited to stopping (exited is final)"),
        (
            Adoption.REFORMED,
            Adoption.ADOPTED,
            "job mnist: no transition from reformed to adopted (reformed is final)",
        ),
        (
            Adoption.NONE,
            Adoption.REFORMED,
            "job mnist: no transition from none to reformed (from none only to adopted)",
        ),
    ],
)
def test_illegal_steps_raise_naming_both_states(current: StrEnum, requested: StrEnum, message: str) -> None:
    assert not can_advance(current, requested)  # type: ignore[type-var]
    with pytest.raises(IllegalTransitionError) as err:
        advance("job mnist", current, requested)  # type: ignore[type-var]
    assert str(err.value).startswith(message)
    assert (err.value.current, err.value.requested) == (current, requested)


def test_final_states_have_no_way_out() -> None:
    for final in (J.FINISHED, J.FAILED, W.LEFT, W.EXITED, A.EXITED):
        assert not any(can_advance(final, other) for other in type(final))  # type: ignore[type-var]


def test_a_left_worker_reads_exited_on_the_wire() -> None:
    assert [pb.WorkerState.Name(s.wire) for s in WorkerState] == [
        "WORKER_ATTACHED",
        "WORKER_WARM",
        "WORKER_RUNNING",
        "WORKER_LEAVING",
        "WORKER_EXITED",
        "WORKER_EXITED",
    ]


@pytest.mark.parametrize(("kind", "prefix"), [(JobPhase, "JOB_"), (WorkerState, "WORKER_"), (AgentState, "AGENT_")])
def test_every_state_is_the_enum_of_its_name_on_the_wire_and_back(kind: type, prefix: str) -> None:
    wire = getattr(pb, kind.__name__)
    for state in kind:
        if state is WorkerState.LEFT:
            continue
        assert wire.Name(state.wire) == prefix + state.name
        assert kind.from_wire(state.wire) is state
    assert len(wire.keys()) == len([s for s in kind if s is not WorkerState.LEFT]) + 1  # and UNSPECIFIED
    with pytest.raises(ValueError, match=f"0 is not a {kind.__name__} on the wire"):
        kind.from_wire(0)


# A training process as tf_hooks.elastic.autojoin makes it: says it is warm, then does what the agent tells.
CHILD = """
import os, socket, sys
from submarine_elastic.protocol.channel import FrameReader, send
from submarine_elastic.protocol.proto import elastic_pb2 as pb
s = socket.socket(fileno=int(os.environ["SUBMARINE_AGENT_FD"]))
send(s, pb.FromTraining(ready=pb.Ready(pid=os.getpid())))
reader, messages = FrameReader(pb.ToTraining), []
while not messages:
    messages = reader.feed(s.recv(4096))
sys.exit(0 if messages[0].WhichOneof("message") == "leave" else 5)
"""


def test_an_agent_told_to_leave_reports_an_exit_that_is_no_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    worker = agent_mod.Agent(f"{sys.executable} -c {shlex.quote(CHILD)}", "worker-1", "c-1", "host")
    outbox = worker._open_stream()  # what the driver's stream carries, Hello first
    assert outbox.get_nowait().hello.resume.state == pb.AGENT_STARTING
    worker.start_training()
    warm = outbox.get(timeout=60)
    assert warm.WhichOneof("event") == "warm" and worker.state is AgentState.WARM and worker.joined

    worker._handle(pb.AgentCommand(leave=pb.Leave()))
    assert worker.state is AgentState.LEAVING
    event = worker.exited(worker.training.wait()).exited
    assert (event.exit_code, event.leaving, event.joined, event.stderr_tail) == (0, True, True, "")
    assert worker.state is AgentState.EXITED
    with pytest.raises(IllegalTransitionError, match="worker-1: no transition from exited to exited"):
        worker.exited(0)


def test_a_start_before_warm_is_refused_and_a_stop_ends_the_process_as_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    worker = agent_mod.Agent("exec sleep 60", "worker-0", "c-0", "host")
    worker.start_training()
    with pytest.raises(IllegalTransitionError, match="worker-0: no transition from starting to running"):
        worker._handle(pb.AgentCommand(start=pb.Start(env={"HOROVOD_RANK": "0"})))
    assert worker.state is AgentState.STARTING

    worker._handle(pb.AgentCommand(stop=pb.Stop(grace_seconds=10)))
    assert worker.state is AgentState.STOPPING
    event = worker.exited(worker.training.wait()).exited
    assert (event.exit_code, event.leaving, event.joined) == (-signal.SIGTERM, True, False)
    worker._handle(pb.AgentCommand(leave=pb.Leave()))  # too late to matter: nothing changes, nothing raised
    assert worker.state is AgentState.EXITED


def test_an_illegal_step_is_the_shared_error_and_an_elastic_one() -> None:
    from submarine_elastic import states
    from submarine_elastic.protocol.api import MACHINES, ElasticError

    with pytest.raises(ElasticError) as err:
        advance("worker-1", W.LEFT, W.WARM)
    assert isinstance(err.value, states.IllegalTransitionError)
    assert str(err.value) == "worker-1: no transition from left to warm (left is final)"
    assert all(isinstance(m, states.Transitions) for m in MACHINES.values())
    assert MACHINES[WorkerState].final(W.EXITED) and not MACHINES[JobPhase].final(J.RUNNING)
