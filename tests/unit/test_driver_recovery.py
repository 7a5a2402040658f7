"""What a relaunched driver takes over from its predecessor, and how it adopts the workers that kept
training; the agent's and the training process's side of a lost driver and of a hung process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from submarine_elastic import env
from submarine_elastic.elastic import agent as agent_mod
from submarine_elastic.elastic import training as training_mod
from submarine_elastic.elastic.driver import JobDriver, application_of
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import AgentState, Limits, WorkerState
from submarine_elastic.protocol.channel import FrameReader, encode
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tf_hooks.elastic import ring

APP = "application_1795518217586_0001"


def make_driver(state_file: Path | None = None, app: str = APP) -> JobDriver:
    return JobDriver(
        "job", Limits(2, 1, 3), yarn=None, token="t", iface="lo", elastic_timeout=60, state_file=state_file, app=app
    )  # type: ignore[arg-type]


def handle(n: int) -> AgentHandle:
    return AgentHandle(f"container_{n}-a1", f"worker-{n}", f"container_{n}", "127.0.0.1")


def resume(state: str, rank: int = -1, incarnation: int = 1) -> pb.Resume:
    return pb.Resume(state=AgentState(state).wire, rank=rank, driver_incarnation=incarnation)


def test_container_ids_name_their_application() -> None:
    assert application_of("container_1795518217586_0001_01_000005") == APP
    assert application_of("container_e17_1795518217586_0001_01_000005") == APP
    assert application_of("") == "" and application_of("worker-0-123") == ""


def test_a_relaunched_driver_takes_over_its_predecessors_target_timeline_and_incarnations(tmp_path: Path) -> None:
    state_file = tmp_path / "job.driver.json"
    first = make_driver(state_file)
    assert first.previous is None and first.incarnation == 1
    first.targets.applied(3, "requested")  # its timeline: 2 -> 3
    # a scale-in was asked for and not done when it died
    first.targets.take(pb.Target(workers=1, reason="shrink"), first.limits, None, ())
    first.failures.append(pb.WorkerFailure(instance="worker-1", exit_code=-9, reason="killed"))
    first._persist()

    second = make_driver(state_file)
    assert second.incarnation == 2 and second.previous is not None
    assert (second.target, second.requested, second.targets.version) == (3, 1, 1)
    assert [e.to_workers for e in second.timeline] == [3]
    assert [f.instance for f in second.failures] == ["worker-1"]
    status = second.servicer.Status(pb.StatusRequest(), None)  # type: ignore[arg-type]
    assert [i.number for i in status.incarnations] == [1, 2]
    second._persist()
    assert [i["number"] for i in json.loads(state_file.read_text())["incarnations"]] == [1, 2]


def test_state_left_by_another_run_of_a_job_of_the_same_name_is_ignored(tmp_path: Path) -> None:
    state_file = tmp_path / "job.driver.json"
    make_driver(state_file, app="application_1_0001")._persist()
    fresh = make_driver(state_file, app="application_1_0002")
    assert fresh.previous is None and fresh.incarnation == 1


def test_an_unreadable_state_file_is_ignored_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state_file = tmp_path / "job.driver.json"
    state_file.write_text("{not json")
    assert make_driver(state_file).previous is None
    assert "ignoring the previous driver's state" in caplog.text


def test_the_state_file_sits_beside_the_outcome_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SUBMARINE_DRIVER_STATE_FILE", raising=False)
    monkeypatch.setenv("SUBMARINE_JOB_OUTCOME_FILE", str(tmp_path / "mnist.outcome.json"))
    assert env.settings().state_file() == tmp_path / "mnist.driver.json"


def test_agents_that_kept_training_are_adopted_and_stale_ones_refused() -> None:
    driver = make_driver()
    driver.incarnation = 2
    running, warm, fresh, leaving = handle(0), handle(1), handle(2), handle(3)
    assert driver.admit(running, resume("running", rank=0, incarnation=1)) == ""
    assert running.state is WorkerState.RUNNING and running.adopted and running.adopted_rank == 0
    assert driver.admit(warm, resume("warm")) == "" and warm.state is WorkerState.WARM and not warm.adopted
    assert driver.admit(fresh, None) == "" and fresh.state is WorkerState.ATTACHED
    assert driver.admit(leaving, resume("leaving", rank=2)) == "" and leaving.state is WorkerState.LEAVING
    # Placed by this very incarnation: it lost the stream, and the ring re-formed without it.
    assert "re-formed without it" in driver.admit(handle(4), resume("running", rank=1, incarnation=2))
    assert "ending" in driver.admit(handle(5), resume("exited"))
    # A worker this driver counted out cannot come back.
    gone = handle(6)
    driver.registry.add(gone)
    driver.registry.end(gone, 1)
    assert "counted out" in driver.admit(handle(6), resume("running", rank=1, incarnation=1))
    # Once this incarnation's ring formed, a late worker of an earlier ring is refused.
    driver.phase = driver.phase.RUNNING
    assert "earlier driver" in driver.admit(handle(7), resume("running", rank=1, incarnation=1))


def test_while_adopting_horovod_is_offered_only_the_adopted_workers_in_their_old_rank_order() -> None:
    driver = make_driver()
    driver.incarnation = 2
    agents = {n: handle(n) for n in range(3)}
    driver.admit(agents[0], resume("running", rank=1, incarnation=1))
    driver.admit(agents[1], resume("running", rank=0, incarnation=1))
    driver.admit(agents[2], resume("warm"))
    for a in agents.values():
        driver.registry.add(a)
    driver.registry.adopting = True
    assert [a.instance for a in driver.registry.available()] == ["worker-1", "worker-0"]
    driver.registry.end_adoption()
    assert {a.instance for a in driver.registry.available()} == {"worker-0", "worker-1", "worker-2"}


def test_an_adopted_worker_is_sent_reform_with_this_incarnations_rendezvous_not_start() -> None:
    from horovod.runner.common.util.hosts import SlotInfo

    driver = make_driver()
    driver.incarnation = 2
    adopted = handle(0)
    driver.admit(adopted, resume("running", rank=0, incarnation=1))
    driver.registry.add(adopted)
    driver.registry.end(adopted, 0)  # so _create_worker does not wait
    adopted.state = WorkerState.RUNNING  # the Reform is chosen before the process's end is seen
    slot = SlotInfo(hostname=adopted.agent_id, rank=0, local_rank=0, cross_rank=0, size=1, local_size=1, cross_size=1)
    driver._create_worker(slot, [])
    command = adopted.commands.get_nowait()
    assert command.WhichOneof("command") == "reform"
    assert command.reform.env["SUBMARINE_DRIVER_INCARNATION"] == "2"
    assert command.reform.env["HOROVOD_HOSTNAME"] == adopted.agent_id


def test_a_hung_workers_failure_says_so() -> None:
    driver = make_driver()
    driver._ring_formed = True
    worker = handle(1)
    worker.state = WorkerState.RUNNING
    driver._note_exit(worker, pb.Exited(exit_code=-9, joined=True, hung_seconds=10.4))
    (failure,) = driver.failures
    assert "hung: it sent no heartbeat for 10.4 s" in failure.reason
    assert not driver._fatal.is_set()


# ------------------------------------------------------------------ the agent and the training process


def test_the_agent_kills_a_training_process_that_stopped_sending_heartbeats(tmp_path: Path) -> None:
    worker = agent_mod.Agent("sleep 60", "worker-0", "container_0", "127.0.0.1")
    worker.training.hung_after = 0.5
    os.environ["LOG_DIRS"] = str(tmp_path)
    try:
        worker.start_training()
    finally:
        del os.environ["LOG_DIRS"]
    assert worker.training.proc is not None
    os.kill(worker.training.proc.pid, signal.SIGSTOP)  # stopped: no heartbeat, and SIGTERM would not end it
    worker._state = agent_mod.AgentState.RUNNING
    worker.training.last_beat = time.monotonic()
    worker.training.watch_heartbeats()
    assert worker.training.wait() == -signal.SIGKILL
    assert worker.training.hung_seconds > 0.5
    assert worker.exited_event(-signal.SIGKILL, leaving=False).exited.hung_seconds == worker.training.hung_seconds


def test_a_process_that_beats_is_not_hung(tmp_path: Path) -> None:
    worker = agent_mod.Agent("sleep 1.5", "worker-0", "container_0", "127.0.0.1")
    worker.training.hung_after = 0.5
    os.environ["LOG_DIRS"] = str(tmp_path)
    try:
        worker.start_training()
    finally:
        del os.environ["LOG_DIRS"]
    worker._state = agent_mod.AgentState.RUNNING

    def beat() -> None:
        while worker.training.proc is not None and worker.training.proc.poll() is None:
            worker.training.on_message(pb.FromTraining(beat=1))
            time.sleep(0.1)

    threading.Thread(target=beat, daemon=True).start()
    worker.training.watch_heartbeats()
    assert worker.training.wait() == 0 and worker.training.hung_seconds == 0


def answer_ping(ours: socket.socket, replies: FrameReader[pb.FromTraining]) -> None:
    """The agent's side of one :meth:`ring.AgentChannel.sync`: skips heartbeats, answers the first ping."""
    while True:
        for message in replies.feed(ours.recv(4096)):
            if message.WhichOneof("message") == "ping":
                ours.sendall(encode(pb.ToTraining(pong=message.ping)))
                return


def test_the_training_process_beats_reads_leave_lost_reform_and_waits_while_the_driver_is_lost() -> None:
    ours, theirs = socket.socketpair()
    channel = ring.AgentChannel(theirs)
    ours.settimeout(5)
    replies = FrameReader(pb.FromTraining)
    assert replies.feed(ours.recv(4096))[0].WhichOneof("message") == "beat"  # the first heartbeat at once
    ours.sendall(encode(pb.ToTraining(leave=pb.Leave())) + encode(pb.ToTraining(driver_lost=True)))

    threading.Thread(target=answer_ping, args=(ours, replies), daemon=True).start()
    assert channel.sync()
    assert channel.leave and channel.driver_lost
    with pytest.raises(ring.RingJoinError, match="driver is gone"):
        channel.take_reform(timeout=0.3)
    new_env = {"HOROVOD_GLOO_RENDEZVOUS_PORT": "4242", "SUBMARINE_DRIVER_INCARNATION": "2"}
    reform = encode(pb.ToTraining(reform=pb.Reform(env=new_env)))
    threading.Timer(0.2, lambda: ours.sendall(reform)).start()
    assert channel.take_reform(timeout=5) == new_env  # waited for the new driver
    assert not channel.driver_lost and channel.take_reform(timeout=0) is None  # taken once
    ours.close()


def test_the_same_driver_taking_its_agent_back_ends_the_wait_for_a_new_one() -> None:
    """The agent lost its stream and told the process the driver is gone; the same driver took it back
    (``Reattached``): a re-init then goes ahead in the ring as it stands, with no Reform to wait for."""
    ours, theirs = socket.socketpair()
    channel = ring.AgentChannel(theirs)
    ours.settimeout(5)
    replies = FrameReader(pb.FromTraining)
    ours.sendall(encode(pb.ToTraining(driver_lost=True)))
    threading.Thread(target=answer_ping, args=(ours, replies), daemon=True).start()
    assert channel.sync() and channel.driver_lost
    ours.sendall(encode(pb.ToTraining(driver_lost=False)))
    threading.Thread(target=answer_ping, args=(ours, replies), daemon=True).start()
    assert channel.sync() and not channel.driver_lost
    assert channel.take_reform(timeout=0) is None  # no RingJoinError: nothing to wait for
    ours.close()


def test_a_channel_whose_reading_fails_counts_as_its_agent_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever ends the reading of the agent's channel, an error in it too, ends in ``on_lost``: a process that
    can no longer hear its agent would never be told to leave or re-form."""
    lost = threading.Event()

    def broken(self: ring.AgentChannel, message: pb.ToTraining) -> None:
        raise KeyError(message.WhichOneof("message"))

    monkeypatch.setattr(ring.AgentChannel, "_dispatch", broken)
    ours, theirs = socket.socketpair()
    channel = ring.AgentChannel(theirs, on_lost=lost.set)
    ours.sendall(encode(pb.ToTraining(driver_lost=True)))
    assert lost.wait(10) and channel.closed
    ours.close()


def test_the_agent_tells_its_process_when_the_same_driver_took_it_back() -> None:
    worker = agent_mod.Agent("true", "worker-0", "container_0", "127.0.0.1")
    ours, worker.training.channel_end = socket.socketpair()
    worker._state = AgentState.RUNNING
    worker._handle(pb.AgentCommand(reattached=pb.Reattached()))
    ours.settimeout(5)
    (told,) = FrameReader(pb.ToTraining).feed(ours.recv(4096))
    assert told.WhichOneof("message") == "driver_lost" and told.driver_lost is False
    ours.close()


def test_a_re_init_takes_the_new_drivers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = socket.socketpair()
    monkeypatch.setattr(ring, "_channel", ring.AgentChannel(theirs))
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "1111")
    ours.sendall(encode(pb.ToTraining(reform=pb.Reform(env={"HOROVOD_GLOO_RENDEZVOUS_PORT": "2222"}))))
    threading.Thread(target=answer_ping, args=(ours, FrameReader(pb.FromTraining)), daemon=True).start()
    ring.prepare_reinit(timeout=5)
    assert os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "2222"
    ours.close()


def test_the_hung_bound_and_the_driver_grace_must_be_positive_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_HUNG_AFTER_S", "2.5")
    assert env.settings().hung_after_s == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("SUBMARINE_HUNG_AFTER_S", bad)
        with pytest.raises(ValueError, match="SUBMARINE_HUNG_AFTER_S must be a positive number of seconds"):
            _ = env.settings().hung_after_s
    monkeypatch.delenv("SUBMARINE_DRIVER_GRACE_S", raising=False)
    assert env.settings().driver_grace_s is None  # unset: the agent's default (DRIVER_GRACE_S)


def exiting_worker(command: str, grace: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> agent_mod.Agent:
    """An agent whose training process (``command``) is in a ring, beat once and said it is exiting; the hung
    bound 0.3 s, the exit grace ``grace``."""
    worker = agent_mod.Agent(command, "worker-0", "container_0", "127.0.0.1")
    worker.training.hung_after = 0.3
    monkeypatch.setattr(training_mod, "EXIT_GRACE_S", grace)
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    worker.start_training()
    worker._state = agent_mod.AgentState.RUNNING
    worker.training.on_message(pb.FromTraining(beat=1))
    worker.training.on_message(pb.FromTraining(exiting=True))
    return worker


def test_a_process_that_said_it_is_exiting_gets_the_exit_grace_not_the_hung_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its teardown beats no more (interpreter finalisation): on a loaded machine that outlasted the hung
    # bound and a job that had finished was recorded as failed with a "hung" worker.
    worker = exiting_worker("sleep 1.5", 5.0, tmp_path, monkeypatch)
    worker.training.watch_heartbeats()
    assert worker.training.wait() == 0 and worker.training.hung_seconds == 0


def test_a_process_hung_in_its_teardown_is_killed_after_the_exit_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = exiting_worker("sleep 60", 1.0, tmp_path, monkeypatch)
    started = time.monotonic()
    worker.training.watch_heartbeats()
    assert worker.training.wait() == -signal.SIGKILL
    assert 1.0 < worker.training.hung_seconds and time.monotonic() - started >= 1.0


def test_the_training_process_says_exiting_at_interpreter_exit(tmp_path: Path) -> None:
    ours, theirs = socket.socketpair()
    code = (
        "import socket, sys; from tf_hooks.elastic import ring; "
        "ring.AgentChannel(socket.socket(fileno=int(sys.argv[1])))"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=True,
    )
    theirs.close()
    ours.settimeout(5)
    received = b""
    while chunk := ours.recv(4096):
        received += chunk
    messages = FrameReader(pb.FromTraining).feed(received)
    assert child.returncode == 0 and messages[-1] == pb.FromTraining(exiting=True)


def test_a_ring_is_recorded_before_its_workers_may_rendezvous_in_it(tmp_path: Path) -> None:
    """Horovod's driver opens each ring's rendezvous (``init``); the driver's state names that ring's hosts before
    ``init`` returns, so a successor never adopts a worker the ring went on without (:class:`Adopter`)."""
    from horovod.runner.common.util.hosts import SlotInfo

    state_file = tmp_path / "job.driver.json"
    driver = make_driver(state_file)
    port = driver._rendezvous.start(host="127.0.0.1")
    assert port > 0
    try:
        plan = [SlotInfo(h, r, 0, r, 2, 1, 2) for r, h in enumerate(["c1", "c0"])]
        driver._rendezvous.init(plan)
        assert json.loads(state_file.read_text())["ring"] == ["c0", "c1"]
        driver._rendezvous.init(plan[:1])  # the ring re-formed without c0
        assert json.loads(state_file.read_text())["ring"] == ["c1"]
    finally:
        driver._rendezvous.stop()
    assert make_driver(state_file).registry.ring == ("c1",)
