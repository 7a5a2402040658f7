"""The driver's two records: its state for the next incarnation and the job's outcome, typed and validated,
written and read back as JSON; a bad field is refused naming it, and a bad state file is ignored with a warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from submarine_elastic.protocol.api import JobPhase
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import DriverState, JobOutcome

STATE = DriverState(
    app="application_1_0001",
    target=3,
    requested=4,
    world_size=3,
    removing=("worker-1",),
    timeline=(pb.ResizeEvent(time=1.5, from_workers=2, to_workers=3, reason="requested"),),
    failures=(pb.WorkerFailure(instance="worker-0", exit_code=1, reason="it failed"),),
    incarnations=(pb.DriverIncarnation(number=1, started=2.0, host="h"),),
    error="",
    batch_timeline=(pb.Target(workers=3, batch_size=64, version=2),),
    version=2,
    preempted_from=4,
)


def test_the_state_round_trips_with_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "job.driver.json"
    STATE.save(path)
    assert DriverState.load(path, "application_1_0001") == STATE
    raw = json.loads(path.read_text())
    assert raw["failures"] == [{"instance": "worker-0", "exit_code": 1, "reason": "it failed"}]
    assert raw["removing"] == ["worker-1"] and raw["version"] == 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_state_of_another_application_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "job.driver.json"
    STATE.save(path)
    assert DriverState.load(path, "application_1_0002") is None
    assert DriverState.load(tmp_path / "none.json", "application_1_0001") is None
    assert DriverState.load(None, "application_1_0001") is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"target": -1}, "target: Input should be greater than or equal to 0"),
        ({"version": "2"}, "version: Input should be a valid integer"),
        ({"world_size": True}, "world_size: Input should be a valid integer"),
        ({"failures": [3]}, "failures.0: Value error, a WorkerFailure is a JSON object, not int"),
        ({"timeline": [{"bogus": 1}]}, "timeline.0: Value error, not a ResizeEvent: "),
        ({"removing": "worker-1"}, "removing: Input should be a valid"),
    ],
)
def test_a_bad_field_is_refused_naming_it(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match="^not a DriverState record: ") as err:
        DriverState.from_json(json.dumps({"app": "a", **fields}))
    assert named in str(err.value)


def test_a_bad_state_file_is_ignored_with_a_warning_naming_the_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "job.driver.json"
    path.write_text(json.dumps({"app": "a", "target": "three"}))
    with caplog.at_level(logging.WARNING):
        assert DriverState.load(path, "a") is None
    assert "ignoring the previous driver's state" in caplog.text and "target: " in caplog.text


def test_unknown_fields_of_a_newer_driver_are_ignored() -> None:
    assert DriverState.from_json(json.dumps({"app": "a", "target": 2, "later": [1]})) == DriverState(app="a", target=2)


def test_the_outcome_round_trips_and_is_finished_or_failed(tmp_path: Path) -> None:
    outcome = JobOutcome(
        job="mnist",
        phase=JobPhase.FAILED,
        error="worker-0 failed",
        time=3.0,
        failures=(pb.WorkerFailure(instance="worker-0", exit_code=1),),
        batch_timeline=(pb.Target(workers=2, batch_size=32),),
    )
    path = tmp_path / "mnist.outcome.json"
    outcome.save(path)
    assert JobOutcome.from_json(path.read_text()) == outcome
    assert json.loads(path.read_text())["phase"] == "failed"
    with pytest.raises(ValueError, match="phase: Value error, a job's outcome is finished or failed, not running"):
        JobOutcome.from_json(json.dumps({"phase": "running"}))
    with pytest.raises(ValueError, match="phase: Field required"):
        JobOutcome.from_json("{}")


def test_the_keeper_writes_a_state_only_when_it_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from submarine_elastic.protocol.records import StateKeeper

    path = tmp_path / "job.driver.json"
    keeper = StateKeeper(path)
    keeper.keep(lambda: STATE)
    first = path.stat().st_mtime_ns
    path.write_text("changed behind its back")
    keeper.keep(lambda: STATE)  # the same state: not written again
    assert path.read_text() == "changed behind its back" and path.stat().st_mtime_ns >= first
    keeper.keep(lambda: DriverState(app="a", target=1))
    assert DriverState.load(path, "a") == DriverState(app="a", target=1)
    gone = StateKeeper(tmp_path / "no" / "such" / "dir.json")
    with caplog.at_level(logging.WARNING):
        gone.keep(lambda: STATE)
    assert "cannot keep the driver's state" in caplog.text


def test_a_target_book_goes_on_from_the_state_its_predecessor_left() -> None:
    from submarine_elastic.elastic.reconcile import TargetBook

    book = TargetBook.resumed(2, STATE)
    assert (book.workers, book.requested, book.version) == (3, 4, 2)
    assert book.timeline == list(STATE.timeline) and book.batch_timeline == list(STATE.batch_timeline)
    fresh = TargetBook.resumed(2, None)
    assert (fresh.workers, fresh.requested, fresh.version, fresh.timeline) == (2, 2, 0, [])
    assert TargetBook.resumed(2, DriverState(app="a")).workers == 2  # no target recorded: the job's own
