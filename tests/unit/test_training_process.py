"""The training process's owner on its own (no agent, no driver): its environment, the hung rule, its log."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from submarine_elastic.elastic.training import TrainingProcess, hung_for, site_dir, training_env
from submarine_elastic.elastic.trainlog import IncarnationLog, next_log_path
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.settings import SettingsError

#: A training process that says it is ready, pings its agent and prints the answer's number.
READY_THEN_PING = """
import os, socket, sys
from submarine_elastic.protocol.channel import FrameReader, send
from submarine_elastic.protocol.proto import elastic_pb2 as pb
s = socket.socket(fileno=int(os.environ["SUBMARINE_AGENT_FD"]))
send(s, pb.FromTraining(ready=pb.Ready(pid=os.getpid())))
send(s, pb.FromTraining(ping=7))
reader = FrameReader(pb.ToTraining)
while True:
    answers = reader.feed(s.recv(4096))
    if answers:
        print("pong", answers[0].pong)
        sys.exit(0)
"""


def test_the_environment_has_the_channel_the_site_first_and_the_devices_not_the_agents_command() -> None:
    base = {"PYTHONPATH": f"/job{os.pathsep}{os.pathsep}/lib", "SUBMARINE_WORKER_CMD_B64": "ZWNobw==", "HOME": "/h"}
    child = training_env(base, 7, {"CUDA_VISIBLE_DEVICES": "GPU-1"})
    assert child["SUBMARINE_AGENT_FD"] == "7"
    assert child["PYTHONPATH"].split(os.pathsep) == [str(site_dir()), "/job", "/lib"]
    assert child["CUDA_VISIBLE_DEVICES"] == "GPU-1" and child["HOME"] == "/h"
    assert "SUBMARINE_WORKER_CMD_B64" not in child
    assert base["PYTHONPATH"] == f"/job{os.pathsep}{os.pathsep}/lib"  # the agent's own is left as it was
    assert training_env({}, 3, {})["PYTHONPATH"] == str(site_dir())


def test_a_bad_descriptor_is_refused_naming_it() -> None:
    with pytest.raises(SettingsError, match="SUBMARINE_AGENT_FD must be a file descriptor number, got -1"):
        training_env({}, -1, {})


def test_a_process_is_hung_once_silent_past_its_bound() -> None:
    assert hung_for(10.0, 5.0, None, 4.0, 120.0) == (5.0, 4.0)
    assert hung_for(10.0, 5.0, None, 5.0, 120.0) is None  # at the bound: not yet
    assert hung_for(10.0, 9.5, None, 4.0, 120.0) is None


def test_a_process_that_said_it_is_exiting_gets_the_exit_grace_from_the_later_of_its_beat_and_that() -> None:
    assert hung_for(100.0, 5.0, 50.0, 4.0, 120.0) is None  # silent 95 s, well past the hung bound
    assert hung_for(200.0, 5.0, 50.0, 4.0, 120.0) == (150.0, 120.0)
    assert hung_for(200.0, 90.0, 50.0, 4.0, 120.0) is None  # a beat after the word counts from the beat
    assert hung_for(220.0, 90.0, 50.0, 4.0, 120.0) == (130.0, 120.0)


def test_an_incarnation_log_holds_both_streams_and_keeps_the_stderr_tail(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    log = IncarnationLog(next_log_path(tmp_path))
    assert log.stderr_tail() == ""
    log.follow(os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    with os.fdopen(out_w, "wb") as out, os.fdopen(err_w, "wb") as err:
        out.write(b"out\n")
        err.write(b"err-1\nerr-2\n")
    log.close()
    assert log.path == tmp_path / "training-1.log"
    assert sorted(log.path.read_text().split()) == ["err-1", "err-2", "out"]
    assert log.stderr_tail() == "err-1\nerr-2\n"
    captured = capfd.readouterr()
    assert "out" in captured.out and "err-2" in captured.err
    assert next_log_path(tmp_path) == tmp_path / "training-2.log"


def test_the_process_on_its_own_hands_on_ready_and_answers_a_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    monkeypatch.delenv("SUBMARINE_WORKDIR", raising=False)
    ready: list[pb.Ready] = []
    said = threading.Event()

    def on_ready(message: pb.Ready) -> None:
        ready.append(message)
        said.set()

    training = TrainingProcess(
        f"{sys.executable} -c {shlex.quote(READY_THEN_PING)}",
        "worker-0",
        hung_after=10.0,
        on_ready=on_ready,
        in_ring=lambda: False,
    )
    assert not training.alive and training.log_path is None and training.stderr_tail() == ""
    training.start(None)
    assert training.wait() == 0
    assert said.wait(5) and training.proc is not None and ready[0].pid == training.proc.pid
    assert not training.alive and training.log_path == tmp_path / "training-1.log"
    assert "pong 7" in capfd.readouterr().out


def test_stopping_ends_a_process_that_ignores_sigterm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    training = TrainingProcess(
        "trap '' TERM; echo deaf; sleep 60", "worker-0", hung_after=10.0, on_ready=lambda _: None, in_ring=lambda: False
    )
    training.stop(1.0)  # not started: nothing to stop
    training.start(None)
    assert training.log_path is not None
    deadline = time.monotonic() + 30
    while "deaf" not in training.log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGTERM ignored from here on
    training.stop(0.5)
    assert training.wait() == -signal.SIGKILL
