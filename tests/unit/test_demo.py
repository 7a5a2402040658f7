"""The demo's picture: a job's series from its ranks' step logs, and the PNG of every job with its decisions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from submarine_elastic.demo import Series, draw, main, predicted_speedup, read_steps


def write_log(directory: Path, rank: int, records: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"rank": rank, **r}) for r in records]
    (directory / f"steps-{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_a_step_counts_once_at_its_last_ranks_time_with_rank_0s_loss(tmp_path: Path) -> None:
    log = tmp_path / "log"
    write_log(log, 0, [
        {"step": 0, "size": 1, "global_batch": 64, "loss": 2.0, "time": 10.0},
        {"step": 1, "size": 2, "global_batch": 64, "loss": 1.5, "time": 11.0},
        {"step": 2, "size": 2, "global_batch": 96, "loss": 1.2, "time": 12.0},
    ])  # fmt: skip
    write_log(log, 1, [
        {"step": 1, "size": 2, "global_batch": 64, "loss": 1.6, "time": 11.4},
        {"step": 2, "size": 2, "global_batch": 96, "loss": 1.3, "time": 12.2},
    ])  # fmt: skip
    with (log / "steps-1.jsonl").open("a") as f:
        f.write('{"step": 3, "rank": 1, "si')  # a line cut short by a killed writer
    s = read_steps(log)
    assert s.times == [10.0, 11.4, 12.2]
    assert s.sizes == [1, 2, 2] and s.batches == [64, 64, 96] and s.losses == [2.0, 1.5, 1.2]


def test_the_picture_is_a_png_of_every_job(tmp_path: Path) -> None:
    series = {
        "a": Series([100.0, 101.0, 102.0], [2, 3, 3], [64, 64, 128], [2.0, 1.0, 0.5]),
        "b": Series([100.5, 103.0], [1, 1], [64, 64], [2.2, 1.9]),
    }
    decisions = {"a": [(100.8, 2, 3, "goodput: 3 workers")]}
    out = draw(series, decisions, 100.0, tmp_path / "pic" / "demo.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_each_decision_is_marked_with_the_speedup_it_predicted_at_the_count_it_chose() -> None:
    assert predicted_speedup("goodput: 1 -> 2 workers, speedup 1.34; batch 64 -> 96") == 1.34
    assert predicted_speedup("goodput: most speedup (1.80) at 3 workers") == 1.8
    shrink = "goodput: fewer workers are as fast: predicted at 1: 5075 useful samples/s (speedup 1.00); measured at 2"
    assert predicted_speedup(shrink + " workers 2531 samples/s (13 ms a step of 32), ... (speedup 0.69)") == 1.0
    measured_first = "goodput: fewer workers are as fast: measured at 2 workers ... (speedup 0.61); predicted at 1: "
    assert predicted_speedup(measured_first + "6399 useful samples/s (speedup 1.00)") == 1.0
    assert predicted_speedup("fair share: 2 of the 4 it wants") is None


def test_bad_arguments_are_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--epochs", "0"])
    assert "--epochs must be at least 1, got 0" in capsys.readouterr().err
