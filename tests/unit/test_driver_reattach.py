"""An agent that loses its stream to the driver while its process trains on (the driver paused past the
stream's keepalive, a short network cut) has a grace to re-attach: over real gRPC, it gets its place back in
the ring as it was, with what the lost stream had not sent; one that does not come back in time counts lost."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from submarine_elastic.elastic import jobdriver
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.failures import ended_by, lost_on_the_way
from submarine_elastic.elastic.ringhost import LOST_EXIT, AgentHandle
from submarine_elastic.protocol.api import AgentState, JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit.test_driver_scale import RecordingYarn

#: What a test waits at most for the driver to take in what an agent sent.
WITHIN_S = 10.0


def until(check: object, what: str) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WITHIN_S} s: {what}"
        time.sleep(0.01)


class Stream:
    """One Attach stream of agent ``a0`` (worker-0 in container c0), opened with ``resume``; it reads the driver's
    commands on a thread of its own."""

    def __init__(self, target: str, resume: pb.Resume) -> None:
        self._channel = grpc.insecure_channel(target)
        self._events: queue.Queue[pb.AgentEvent | None] = queue.Queue()
        hello = pb.Hello(instance="worker-0", container_id="c0", agent_id="a0", host="127.0.0.1", resume=resume)
        self._events.put(pb.AgentEvent(hello=hello))
        self._call = pb_grpc.ElasticDriverStub(self._channel).Attach(iter(self._events.get, None))
        self.commands: list[str] = []
        self.ended: grpc.RpcError | None = None
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for command in self._call:
                self.commands.append(command.WhichOneof("command"))
        except grpc.RpcError as exc:
            self.ended = exc
        finally:
            self.closed.set()

    def lose(self) -> None:
        """The stream breaks as a keepalive timeout breaks it: the agent's side cancels it."""
        self._call.cancel()
        self.closed.wait(WITHIN_S)
        self._channel.close()


def resume(state: AgentState, incarnation: int = 1) -> pb.Resume:
    return pb.Resume(state=state.wire, rank=0 if state is AgentState.RUNNING else -1, driver_incarnation=incarnation)


@pytest.fixture()
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[JobDriver, str]]:
    """A job at 1 worker (1 to 2) whose ring has formed: its driver serves on port 0."""
    monkeypatch.setattr(jobdriver, "REATTACH_GRACE_S", 0.5)
    job = JobDriver("reattach", Limits(1, 1, 2), RecordingYarn(), token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    served = job.serve(0)
    assert served is not None
    server, port = served
    yield job, f"127.0.0.1:{port}"
    for agent in job.registry.snapshot():
        agent.commands.put(None)
    server.stop(None)


def running_worker(job: JobDriver, target: str) -> tuple[AgentHandle, Stream]:
    """worker-0 attached warm and placed in the ring (as Horovod's slot start does)."""
    stream = Stream(target, resume(AgentState.WARM, incarnation=0))
    until(lambda: job.registry.get("a0") is not None, "worker-0 attached")
    agent = job.registry.get("a0")
    assert agent is not None and agent.state is WorkerState.WARM
    job.registry.move("a0", WorkerState.RUNNING)
    return agent, stream


def a_lost_stream(served: tuple[JobDriver, str]) -> tuple[JobDriver, str, AgentHandle]:
    """The job, its driver's address and worker-0, running, whose stream has just broken."""
    job, target = served
    agent, first = running_worker(job, target)
    first.lose()
    return job, target, agent


def test_a_worker_whose_stream_was_lost_takes_its_place_back_with_the_commands_it_missed(
    served: tuple[JobDriver, str],
) -> None:
    job, target, agent = a_lost_stream(served)
    until(lambda: agent.stream_lost_at is not None, "the driver saw the stream go")
    # Within the grace it is still the job's: its process may train on in the ring, so Horovod keeps it.
    assert agent.state is WorkerState.RUNNING and [a.agent_id for a in job.registry.available()] == ["a0"]
    lost_commands = agent.commands
    agent.commands.put(pb.AgentCommand(target=pb.Target(workers=1, batch_size=64, version=3)))  # sent into the gap

    second = Stream(target, resume(AgentState.RUNNING))
    until(lambda: len(second.commands) >= 2, "the re-attached stream got its commands")
    assert second.commands[:2] == ["reattached", "target"]  # first the word that its ring stands, then what it missed
    assert job.registry.get("a0") is agent and agent.state is WorkerState.RUNNING and agent.stream_lost_at is None
    assert not agent.exited.is_set() and not job.failures

    job._stream_gone(agent, lost_commands)  # the lost stream's grace ends: it is no longer the agent's stream
    job.detach(agent, lost_commands)  # and its late end changes nothing either
    assert agent.connected and agent.state is WorkerState.RUNNING and agent.stream_lost_at is None
    assert [a.agent_id for a in job.registry.available()] == ["a0"]
    assert second.ended is None and not second.closed.is_set()


def test_a_worker_that_does_not_re_attach_within_the_grace_counts_lost_and_is_refused_after(
    served: tuple[JobDriver, str],
) -> None:
    job, target, agent = a_lost_stream(served)
    until(agent.exited.is_set, "the grace ended")
    assert agent.stream_lost_at is not None  # when the driver saw the stream go, on this process's clock
    assert time.monotonic() - agent.stream_lost_at >= jobdriver.REATTACH_GRACE_S
    # Lost as killed, not as an error of its script's: a job whose other workers finish is not failed by it.
    assert (agent.state, agent.exit_code, agent.connected) == (WorkerState.EXITED, LOST_EXIT, False)
    assert lost_on_the_way({agent.instance: agent.exit_code}, {"worker-1"})
    assert job.registry.available() == []

    late = Stream(target, resume(AgentState.RUNNING))
    assert late.closed.wait(WITHIN_S) and late.ended is not None
    assert late.ended.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "counted out" in (late.ended.details() or "")


def test_a_worker_that_re_attaches_in_another_state_than_the_driver_holds_is_refused(
    served: tuple[JobDriver, str],
) -> None:
    """The driver placed it (RUNNING) but the Start went down with the stream: its process still waits warm for a
    slot that Horovod counts taken. It cannot take that place back; it counts lost when its grace ends."""
    job, target, agent = a_lost_stream(served)
    until(lambda: agent.stream_lost_at is not None, "the driver saw the stream go")
    again = Stream(target, resume(AgentState.WARM, incarnation=0))
    assert again.closed.wait(WITHIN_S) and again.ended is not None
    assert again.ended.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "re-attached warm while this driver holds it running" in (again.ended.details() or "")
    until(agent.exited.is_set, "the grace ended")
    assert agent.state is WorkerState.EXITED


def test_a_leaving_worker_whose_stream_ends_is_counted_gone_at_once() -> None:
    job = JobDriver("leaver", Limits(2, 1, 2), RecordingYarn(), token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    leaver = AgentHandle("a1", "worker-1", "c1", "127.0.0.1")
    job.registry.add(leaver)
    for to in (WorkerState.WARM, WorkerState.RUNNING, WorkerState.LEAVING):
        job.registry.move("a1", to)
    job.detach(leaver)
    assert leaver.state is WorkerState.LEFT and not leaver.connected


def test_the_next_agent_in_a_lost_agents_container_ends_the_lost_one_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """YARN relaunched the agent that died in its container: the lost one is not coming back, and its grace is
    not waited out."""
    monkeypatch.setattr(jobdriver, "REATTACH_GRACE_S", 3600.0)
    job = JobDriver("relaunch", Limits(2, 1, 2), RecordingYarn(), token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    dead = AgentHandle("c0-pid1", "worker-0", "c0", "127.0.0.1")
    job.registry.add(dead)
    job.registry.move(dead.agent_id, WorkerState.WARM)
    job.detach(dead)
    assert dead.stream_lost_at is not None and not dead.state.ended
    taken, refusal = job.attach(AgentHandle("c0-pid2", "worker-0", "c0", "127.0.0.1"), None)
    assert refusal == "" and taken.agent_id == "c0-pid2"
    assert dead.state is WorkerState.EXITED and not dead.connected
    assert [a.agent_id for a in job.registry.snapshot()] == ["c0-pid2"]


def test_a_driver_that_leaves_for_the_next_incarnation_cuts_its_agents_streams() -> None:
    """An agent whose stream ends cleanly takes it as the job's end and stops looking for a driver: a driver that
    exits for YARN to relaunch it (its ring lost whole, the job resumable from a checkpoint) must cut the streams,
    so that its agents look for the next incarnation (seen in a chaos run: a worker attached just before never
    joined the next driver, which waited for it)."""
    job = JobDriver("relaunch", Limits(1, 1, 2), RecordingYarn(), token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = job.serve(0)
    assert served is not None
    server, port = served
    stream = Stream(f"127.0.0.1:{port}", resume(AgentState.WARM, incarnation=0))
    until(lambda: job.registry.get("a0") is not None, "worker-0 attached")
    assert job._relaunch(server) == jobdriver.RELAUNCH_EXIT
    assert stream.closed.wait(WITHIN_S)
    assert stream.ended is not None, "the stream ended cleanly: the agent would take it as the job's end"
    assert stream.ended.code() is not grpc.StatusCode.FAILED_PRECONDITION  # not a refusal: it looks for the next


def test_a_job_whose_last_worker_went_with_its_agent_says_so() -> None:
    """A one-worker job without checkpoints whose agent was killed: its reason named Horovod's slot and -9 alone
    ("Horovod ended the job: {'c-0[0]': -9}"). It names the worker lost with its agent; other ends keep
    Horovod's words."""
    reason = ended_by("", {"container_1_01_000002-a1[0]": LOST_EXIT}, ["worker-0"])
    assert reason.startswith("worker-0 lost with its agent (no word past the re-attach grace")
    assert "no worker of the ring was left" in reason
    assert ended_by("", {"c-0[0]": 1}, ["worker-0"]) == "Horovod ended the job: {'c-0[0]': 1}"
    assert ended_by("gloo timeout", {}, []) == "Horovod ended the job: gloo timeout"
