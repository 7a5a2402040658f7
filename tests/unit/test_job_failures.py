"""Failures explained: what the agent keeps of a training process, what the driver makes of an exit,
which workers a scale-in removes, and the outcome record ``submarine job show`` reads."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest

from submarine_elastic.elastic import agent as agent_mod
from submarine_elastic.elastic import jobdriver, trainlog
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.failures import last_line as _last_line
from submarine_elastic.elastic.failures import lost_on_the_way
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.jobspec import outcome_path
from submarine_elastic.submit.store import load_outcome

TRACEBACK = """\
2026-11-24 04:33:30.132885: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.
Traceback (most recent call last):
  File "/work/train.py", line 48, in <module>
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
tf_hooks.elastic.keras.KerasVersionError: horovod.tensorflow.keras.DistributedOptimizer cannot be used here:
tf.keras is Keras 3.15.1
"""


def make_driver() -> JobDriver:
    return JobDriver("job", Limits(2, 1, 3), yarn=None, token="t", iface="lo", elastic_timeout=60)  # type: ignore[arg-type]


def handle(instance: str, number_key: str | None = None) -> AgentHandle:
    return AgentHandle(number_key or f"c-{instance}", instance, f"container-{instance}", "127.0.0.1")


def test_the_reason_is_the_exception_a_traceback_ends_with() -> None:
    assert _last_line(TRACEBACK) == (
        "tf_hooks.elastic.keras.KerasVersionError: horovod.tensorflow.keras.DistributedOptimizer cannot be used "
        "here: tf.keras is Keras 3.15.1"
    )
    assert _last_line("just a line\n\n") == "just a line"
    assert _last_line("") == ""


def test_a_failure_before_the_ring_formed_fails_the_job_with_the_workers_reason() -> None:
    driver = make_driver()
    worker = handle("worker-1")
    exited = pb.Exited(exit_code=1, joined=False, stderr_tail=TRACEBACK, log_path="/logs/training-1.log")
    driver._note_exit(worker, exited)
    assert driver._fatal.is_set()
    assert driver.error.startswith("worker-1's training process exited with status 1 before it joined the ring: ")
    assert "KerasVersionError" in driver.error
    (failure,) = driver.failures
    assert (failure.instance, failure.exit_code, failure.rank, failure.log_path) == (
        "worker-1",
        1,
        -1,
        "/logs/training-1.log",
    )
    assert failure.stderr_tail == TRACEBACK


def test_a_process_killed_before_the_ring_formed_is_relaunched_a_few_times_then_fails_the_job() -> None:
    """Seen in a chaos run: kill -9 of one of a new job's processes while the job's eight workers were starting
    failed the whole job, as a broken script would. A signal is no verdict on the script: YARN relaunches the
    worker, up to MAX_KILLED_BEFORE_RING times (a script the OOM killer ends each time still fails the job)."""
    driver = make_driver()
    for n in range(jobdriver.MAX_KILLED_BEFORE_RING):
        driver._note_exit(handle(f"worker-{n}"), pb.Exited(exit_code=-9, joined=False))
        assert not driver._fatal.is_set() and driver.error == ""
    assert len(driver.failures) == jobdriver.MAX_KILLED_BEFORE_RING  # each is listed in `job show`
    driver._note_exit(handle("worker-0"), pb.Exited(exit_code=-9, joined=False))
    assert driver._fatal.is_set()
    assert driver.error.startswith("worker-0's training process was killed by SIGKILL before it joined the ring")


def test_a_ring_lost_whole_goes_to_the_next_driver_only_when_a_checkpoint_can_resume_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = make_driver()
    driver.phase = JobPhase.RUNNING
    lost = {"c-worker-0": -9}
    assert not driver._ring_lost_to_checkpoint(lost)  # no --checkpoint_path: nothing to resume from
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", "/checkpoints")
    assert driver._ring_lost_to_checkpoint(lost)
    assert not driver._ring_lost_to_checkpoint({})  # nobody failed
    driver.finished_workers.add("worker-1")
    assert not driver._ring_lost_to_checkpoint(lost)  # a worker finished: the job's end, not a loss
    driver.finished_workers.clear()
    driver.incarnations = driver.incarnations * jobdriver.MAX_INCARNATIONS
    assert not driver._ring_lost_to_checkpoint(lost)  # lost again and again: the job fails
    driver.incarnations = driver.incarnations[:1]
    driver._fatal.set()  # failed on purpose (a start-up failure, a loss it cannot resume from)
    assert not driver._ring_lost_to_checkpoint(lost)


def test_a_process_that_finished_without_joining_fails_the_job_even_after_the_ring_formed() -> None:
    driver = make_driver()
    driver.phase = JobPhase.RUNNING
    driver._note_exit(handle("worker-0"), pb.Exited(exit_code=0, joined=False))
    assert driver._fatal.is_set()
    assert "never called hvd.init()" in driver.error


def test_after_the_ring_formed_a_failed_worker_is_recorded_and_horovod_carries_on() -> None:
    driver = make_driver()
    driver.phase = JobPhase.RUNNING
    driver._note_exit(handle("worker-0"), pb.Exited(exit_code=-9, joined=True))
    assert not driver._fatal.is_set() and driver.error == ""
    assert driver.failures[0].reason == "worker-0's training process was killed by SIGKILL"


@pytest.mark.parametrize("exited", [pb.Exited(exit_code=0, joined=True), pb.Exited(exit_code=-6, leaving=True)])
def test_clean_ends_and_leavers_are_no_failures(exited: pb.Exited) -> None:
    driver = make_driver()
    driver._note_exit(handle("worker-0"), exited)
    assert not driver.failures and not driver._fatal.is_set()


def test_only_the_first_failures_are_kept() -> None:
    driver = make_driver()
    driver.phase = JobPhase.RUNNING
    for i in range(20):
        driver._note_exit(handle(f"worker-{i}"), pb.Exited(exit_code=1, joined=True))
    assert [f.instance for f in driver.failures] == [f"worker-{i}" for i in range(8)]


def test_a_ring_that_cannot_form_says_why() -> None:
    driver = make_driver()
    assert driver._waiting_reason() == "no worker agent has attached yet (containers starting?)"
    driver.registry.add(handle("worker-0"))
    driver.registry.add(handle("worker-1"))
    assert driver._waiting_reason() == (
        "2 worker(s) attached, 0 asked to join the ring (need 1): the training processes have not called hvd.init() yet"
    )
    driver.registry.move("c-worker-0", WorkerState.WARM)
    assert driver._waiting_reason() == ""


def test_the_outcome_record_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path))
    monkeypatch.setenv("SUBMARINE_JOB_OUTCOME_FILE", str(outcome_path("job")))
    driver = make_driver()
    driver._note_exit(handle("worker-1"), pb.Exited(exit_code=1, joined=False, stderr_tail=TRACEBACK))
    driver.targets.take(
        pb.Target(workers=2, batch_size=128, accum_steps=1, reason="goodput: batch 64 -> 128"),
        driver.limits,
        None,
        (),
    )
    driver.targets.applied(2, "goodput: 2 workers")
    driver.phase = JobPhase.FAILED
    driver._record_outcome()
    outcome = load_outcome("job")
    assert outcome is not None
    assert outcome.phase == "failed" and outcome.error == driver.error
    assert list(outcome.failures) == list(driver.failures)
    assert list(outcome.batch_timeline) == list(driver.batch_timeline) and len(outcome.batch_timeline) == 1
    assert [(e.to_workers, e.reason) for e in outcome.timeline] == [(2, "goodput: 2 workers")]
    outcome_path("job").write_text("{not json")
    assert load_outcome("job") is None


def test_every_incarnation_of_the_training_process_keeps_its_own_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_DIRS", f"{tmp_path}/logs,{tmp_path}/other")
    monkeypatch.delenv("SUBMARINE_WORKDIR", raising=False)
    codes = []
    for incarnation in (1, 2):
        worker = agent_mod.Agent(
            f"echo out-{incarnation}; echo err-{incarnation} >&2; exit 3", "worker-0", "container-1", "host"
        )
        worker.start_training()
        code = worker.training.wait()
        codes.append(code)
        event = worker.exited_event(code, leaving=False).exited
        assert event.stderr_tail == f"err-{incarnation}\n"
        assert event.log_path == str(tmp_path / "logs" / f"training-{incarnation}.log")
        assert not event.joined
    assert codes == [3, 3]
    assert sorted((tmp_path / "logs" / "training-1.log").read_text().split()) == ["err-1", "out-1"]
    assert "err-2" in (tmp_path / "logs" / "training-2.log").read_text()
    captured = capfd.readouterr()
    assert "out-1" in captured.out and "err-2" in captured.err  # and still on the agent's own streams


def test_a_leaver_sends_no_stderr_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    worker = agent_mod.Agent("echo bye >&2", "worker-0", "container-1", "host")
    worker.joined = True
    worker.start_training()
    event = worker.exited_event(worker.training.wait(), leaving=True).exited
    assert (event.exit_code, event.leaving, event.stderr_tail) == (0, True, "")


def test_a_long_stderr_is_cut_to_its_last_lines() -> None:
    read, write = os.pipe()
    sink = io.BytesIO()
    tee = trainlog.Tee(os.fdopen(read, "rb"), sink, io.BytesIO(), threading.Lock())
    with os.fdopen(write, "wb") as w:
        for i in range(100):
            w.write(f"line {i}\n".encode())
    tee.thread.join(5)
    assert tee.text().splitlines() == [f"line {i}" for i in range(70, 100)]
    assert sink.getvalue().count(b"\n") == 100


def test_a_line_without_end_is_copied_in_bounded_pieces() -> None:
    read, write = os.pipe()
    sink = io.BytesIO()
    tee = trainlog.Tee(os.fdopen(read, "rb"), sink, io.BytesIO(), threading.Lock())
    with os.fdopen(write, "wb") as w:
        w.write(b"\r" + b"=" * (3 * trainlog.CHUNK_BYTES))  # a progress bar's redraws, no newline
    tee.thread.join(5)
    assert sink.getvalue() == b"\r" + b"=" * (3 * trainlog.CHUNK_BYTES)
    assert all(len(piece) <= trainlog.CHUNK_BYTES for piece in tee.tail)
    assert len(tee.text()) <= trainlog.TAIL_CHARS


def test_a_job_whose_training_finished_is_not_failed_by_a_worker_killed_on_the_way() -> None:
    """A chaos run: a worker hung (SIGSTOP) and killed by its agent 2.6 s before rank 0 finished; Horovod listed
    its -9 with the results and the job ended FAILED though its training was complete."""
    assert lost_on_the_way({"c2[0]": -9}, {"worker-0"})
    assert lost_on_the_way({"c2[0]": -9, "c3[0]": -15}, {"worker-0"})
    assert not lost_on_the_way({"c2[0]": 1}, {"worker-0"})  # the script's own error fails the job
    assert not lost_on_the_way({"c2[0]": -9, "c3[0]": 2}, {"worker-0"})
    assert not lost_on_the_way({"c2[0]": -9}, set())  # nobody finished: the ring was lost, not done
    assert not lost_on_the_way({}, {"worker-0"})  # nothing failed: nothing to forgive
