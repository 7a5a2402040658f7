"""The TensorBoard side of the metrics path without TensorBoard or TensorFlow: which sinks ``make_sink`` builds,
one hook's steps handed to two sinks (each gets every step once, in order, a slow one bounded), the tags a
block of steps becomes, and where a saved model may go."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tf_hooks.api import NullSink, StepBlock, StepRecord
from tf_hooks.config import MetricsConfig
from tf_hooks.saved_model import SavedModelError, export_path
from tf_hooks.sender import GrpcSink, make_sink
from tf_hooks.tensorboard import (
    GLOBAL_BATCH,
    LOSS,
    THROUGHPUT,
    WORKERS,
    FanoutSink,
    TensorBoardSink,
    _Split,
    records_block,
    run_directory,
    step_scalars,
)


def block(first: int, n: int, rank: int = 0, lost_before: np.ndarray | None = None) -> StepBlock:
    steps = np.arange(first, first + n, dtype=np.int64)
    return StepBlock(
        rank, 2, steps, steps.astype(np.float64), loss=steps / 10.0, lost_before=lost_before,
        examples_per_second=np.full(n, 100.0), batch_size=np.full(n, 8, dtype=np.int64),
    )  # fmt: skip


def test_make_sink_adds_tensorboard_only_with_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")
    assert isinstance(make_sink(MetricsConfig()), NullSink)
    alone = make_sink(MetricsConfig(tensorboard_dir=tmp_path))
    assert isinstance(alone, TensorBoardSink) and alone.directory == tmp_path
    both = make_sink(MetricsConfig(endpoint="127.0.0.1:1", job_id="j", tensorboard_dir=tmp_path))
    assert isinstance(both, FanoutSink)
    assert [type(s) for s in both.sinks] == [GrpcSink, TensorBoardSink]
    for sink in (alone, both):
        sink.close(0.1)
    assert not tmp_path.joinpath("x").exists() and list(tmp_path.iterdir()) == []  # nothing reported: no file


def test_the_setting_names_the_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SUBMARINE_TENSORBOARD_DIR", f"file://{tmp_path}/job")
    assert MetricsConfig.from_env().tensorboard_dir == tmp_path / "job"
    assert MetricsConfig.from_env(tensorboard_dir=tmp_path / "mine").tensorboard_dir == tmp_path / "mine"
    monkeypatch.delenv("SUBMARINE_TENSORBOARD_DIR")
    assert MetricsConfig.from_env().tensorboard_dir is None
    assert run_directory("  ") is None


def test_one_source_read_by_two_sinks_gives_each_every_step_once_in_order() -> None:
    handed = [[block(1, 3)], [3, block(7, 2)], [], [block(9, 1)]]
    split = _Split(lambda: handed.pop(0) if handed else [], 2, limit=100)
    fast, slow = split.reader(0), split.reader(1)
    got_fast = [*fast(), *fast(), *fast()]
    got_slow = slow()
    got_fast += fast()
    got_slow += slow()

    def flat(items: list[StepBlock | int]) -> list[int | str]:
        out: list[int | str] = []
        for item in items:
            out += [f"lost {item}"] if isinstance(item, int) else item.step.tolist()
        return out

    assert flat(got_fast) == flat(got_slow) == [1, 2, 3, "lost 3", 7, 8, 9]


def test_a_reader_that_falls_behind_keeps_the_newest_and_counts_the_rest() -> None:
    handed = [[block(1 + 10 * i, 10)] for i in range(5)]
    split = _Split(lambda: handed.pop(0) if handed else [], 2, limit=25)
    fast, slow = split.reader(0), split.reader(1)
    for _ in range(5):
        fast()
    behind = slow()
    assert behind[0] == 30 and isinstance(behind[0], int)
    assert [int(s) for b in behind[1:] for s in b.step] == list(range(31, 51))


def test_a_sink_that_takes_no_sources_makes_the_hook_record_step_by_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="TensorBoard is not installed (pip install tensorboard)")
    board = TensorBoardSink(tmp_path)
    fanout = FanoutSink(NullSink(), board)
    assert fanout.add_source(lambda: [block(1, 2)]) is None
    board.flush(5)
    assert board.stats().acked == 0  # the source is not read: the hook records instead
    fanout.record(StepRecord(1, 1.0, 0, 1, loss=0.5))
    assert fanout.flush(5)
    assert board.stats().acked == 1
    board.close(1)


def test_a_block_becomes_the_runs_tags() -> None:
    rows = step_scalars(block(5, 2))
    assert [(step, wall) for step, wall, _ in rows] == [(5, 5.0), (6, 6.0)]
    values = rows[0][2]
    assert values[LOSS] == 0.5 and values[WORKERS] == 2 and values[GLOBAL_BATCH] == 16 and values[THROUGHPUT] == 200
    assert "train/learning_rate" not in values  # absent values are not written


def test_records_turn_into_a_block_with_their_lazy_values() -> None:
    made = records_block(
        [StepRecord(3, 1.0, 0, 1, loss=lambda: 2.0, user_metrics={"acc": 0.5}), StepRecord(4, 2.0, 0, 1)]
    )
    assert made.step.tolist() == [3, 4]
    assert made.loss is not None and made.loss[0] == 2.0 and np.isnan(made.loss[1])
    assert made.user_metrics["acc"][0] == 0.5 and made.batch_size is None


def test_steps_of_other_ranks_are_not_written(tmp_path: Path) -> None:
    board = TensorBoardSink(tmp_path / "run")
    board.add_source(lambda: [block(1, 4, rank=1)])
    assert board.flush(5)
    assert not (tmp_path / "run").exists()
    board.close(1)


def test_saved_model_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_SAVED_MODEL_PATH", raising=False)
    assert export_path() is None and export_path(False) is None
    monkeypatch.setenv("SUBMARINE_SAVED_MODEL_PATH", f"file://{tmp_path}/a/b/model")
    assert export_path() == tmp_path / "a" / "b" / "model"
    assert (tmp_path / "a" / "b").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SavedModelError, match=f"{blocker}: it is a file"):
        export_path(blocker)
    with pytest.raises(SavedModelError, match=f"cannot create {blocker}"):
        export_path(blocker / "model")
    with pytest.raises(SavedModelError, match="only a local directory"):
        export_path("hdfs://nn:8020/models/m")
