"""A training process's exit as a failure, or none, as a function: the reasons a user reads in ``job show``."""

from __future__ import annotations

import signal

from submarine_elastic.elastic.failures import describe_exit, exit_failure, job_reason, lost_failure
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb


def agent(state: WorkerState = WorkerState.RUNNING, *, preempted: bool = False) -> AgentHandle:
    handle = AgentHandle("a1", "worker-1", "c1", "h")
    handle.state, handle.preempted = state, preempted
    return handle


def test_a_process_that_left_or_finished_in_its_ring_is_no_failure() -> None:
    assert exit_failure(agent(), pb.Exited(exit_code=1, leaving=True), 0) is None
    assert exit_failure(agent(preempted=True), pb.Exited(exit_code=-15, joined=True), 0) is None
    assert exit_failure(agent(WorkerState.LEAVING), pb.Exited(exit_code=1, joined=True), 0) is None
    assert exit_failure(agent(), pb.Exited(exit_code=0, joined=True), 0) is None


def test_each_failure_says_why_with_the_processs_own_words() -> None:
    never = exit_failure(agent(), pb.Exited(exit_code=0, joined=False), -1, now=5.0)
    assert never is not None and never.reason.startswith("worker-1's training process finished without joining")
    assert (never.time, never.rank, never.container_id) == (5.0, -1, "c1")
    hung = exit_failure(agent(), pb.Exited(exit_code=-9, joined=True, hung_seconds=31.5), 2)
    assert hung is not None and "it sent no heartbeat for 31.5 s" in hung.reason
    killed = exit_failure(agent(), pb.Exited(exit_code=-9, joined=False, stderr_tail="x\nValueError: bad\n"), 0)
    assert (
        killed is not None
        and killed.reason == "worker-1's training process was killed by SIGKILL before it joined the ring"
    )
    assert job_reason(killed) == killed.reason + ": ValueError: bad"
    assert job_reason(never) == never.reason  # exit 0: its stderr is not the reason
    noise = "I0000 00:00:1796628640.508675 20511 port.cc:153] oneDNN custom operations are on.\n"
    hung.stderr_tail = noise
    assert job_reason(hung) == hung.reason  # killed from outside: a last line that is no exception says nothing
    failed = exit_failure(agent(), pb.Exited(exit_code=3, joined=True, stderr_tail="disk full\n"), 0)
    assert failed is not None and job_reason(failed) == failed.reason + ": disk full"
    assert describe_exit(3) == "exited with status 3" and describe_exit(-200) == "was killed by signal 200"


def test_a_lost_container_is_recorded_as_stopped() -> None:
    failure = lost_failure(agent(), "lost with its NodeManager", 1, now=2.0)
    assert (failure.exit_code, failure.reason, failure.rank, failure.time) == (
        -int(signal.SIGTERM),
        "lost with its NodeManager",
        1,
        2.0,
    )
