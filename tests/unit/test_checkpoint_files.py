"""The checkpoint files of the elastic helpers, without TensorFlow: written whole or not at all, the newest
two kept, one write at a time in the background, and anything unreadable refused naming the file."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tf_hooks.elastic.checkpoint import (
    Checkpointer,
    CheckpointReadError,
    checkpoints_in,
    file_name,
    read_checkpoint,
    write_checkpoint,
)

VALUES = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, dtype=np.int64)]


def attrs(commits: int, **more: object) -> dict:
    return {"commits": commits, "epoch": 1, "cursor": 32, **more}


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_a_checkpoint_reads_back_as_written(tmp_path: Path):
    path = write_checkpoint(tmp_path / "new", 12, VALUES, pickle.dumps(attrs(12, history=[{"loss": 0.5}])))
    assert path == tmp_path / "new" / "ckpt-000000000012.npz"
    back = read_checkpoint(path)
    assert back.commits == 12
    assert back.attrs == attrs(12, history=[{"loss": 0.5}])
    for want, got in zip(VALUES, back.values, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert names(tmp_path / "new") == ["ckpt-000000000012.npz"]  # no temporary file left


def test_the_newest_two_are_kept_and_a_newer_one_of_another_writer_is_never_removed(tmp_path: Path):
    write_checkpoint(tmp_path, 100, VALUES, pickle.dumps(attrs(100)))
    checkpoints = Checkpointer(tmp_path, every=4)
    for commits in (4, 8, 12):
        assert checkpoints.submit(commits, VALUES, attrs(commits))
        assert checkpoints.wait(30)
    assert checkpoints.written == [4, 8, 12]
    assert names(tmp_path) == [file_name(8), file_name(12), file_name(100)]


def test_a_write_that_fails_midway_leaves_the_previous_checkpoint_whole_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    checkpoints = Checkpointer(tmp_path, every=4)
    assert checkpoints.submit(4, VALUES, attrs(4)) and checkpoints.wait(30)

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with caplog.at_level(logging.ERROR, logger="tf_hooks.elastic.checkpoint"):
        assert checkpoints.submit(8, VALUES, attrs(8)) and checkpoints.wait(30)
    assert (checkpoints.written, checkpoints.failed) == ([4], [8])
    assert "No space left on device" in checkpoints.last_error
    assert f"checkpoint of commit 8 could not be written to {tmp_path} (training goes on)" in caplog.text
    assert names(tmp_path) == [file_name(4)]
    assert read_checkpoint(tmp_path / file_name(4)).commits == 4
    monkeypatch.undo()
    assert checkpoints.submit(12, VALUES, attrs(12)) and checkpoints.wait(30)  # the next one is written
    assert names(tmp_path) == [file_name(4), file_name(12)]


def test_a_checkpoint_due_while_one_is_written_is_skipped_not_queued(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    release = threading.Event()
    threads: list[int] = []

    def slow(directory: Path, commits: int, values: object, blob: bytes) -> Path:
        threads.append(threading.get_ident())
        release.wait(30)
        return write_checkpoint(directory, commits, values, blob)  # type: ignore[arg-type]

    checkpoints = Checkpointer(tmp_path, every=4, write=slow)
    assert checkpoints.submit(4, VALUES, attrs(4))
    with caplog.at_level(logging.WARNING, logger="tf_hooks.elastic.checkpoint"):
        assert not checkpoints.submit(8, VALUES, attrs(8))
        assert not checkpoints.submit(12, VALUES, attrs(12))
    assert checkpoints.writing == 4 and checkpoints.skipped == [8, 12]
    assert "checkpoint of commit 8 skipped: the one of commit 4 is still being written" in caplog.text
    release.set()
    assert checkpoints.wait(30)
    assert checkpoints.written == [4] and threads != [threading.get_ident()]
    assert names(tmp_path) == [file_name(4)]


def test_attributes_that_cannot_be_pickled_fail_that_checkpoint_only(tmp_path: Path):
    checkpoints = Checkpointer(tmp_path, every=1)
    assert not checkpoints.submit(1, VALUES, attrs(1, hook=threading.Lock()))
    assert checkpoints.failed == [1] and "cannot be pickled" in checkpoints.last_error
    assert checkpoints.submit(2, VALUES, attrs(2)) and checkpoints.wait(30)
    assert checkpoints.written == [2]


def test_no_directory_or_an_empty_one_is_a_fresh_start(tmp_path: Path):
    assert Checkpointer(tmp_path / "absent").load_latest() is None
    assert Checkpointer(tmp_path).load_latest() is None


def _zip(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _meta(**over: object) -> bytes:
    meta = {"format": 1, "commits": 4, "variables": [[[2, 3], "float32"], [[], "int64"]], **over}
    return _npy(np.frombuffer(json.dumps(meta).encode(), np.uint8))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: p.write_bytes(b"not a checkpoint"), "it is not a zip archive"),
        (lambda p: _zip(p, {"weights.npy": _npy(VALUES[0])}), "not a checkpoint of the elastic helpers"),
        (
            lambda p: _zip(p, {"meta.npy": _meta(format=99), "attrs.npy": _npy(np.zeros(1, np.uint8))}),
            "it is of format 99, this version reads format 1",
        ),
        (
            lambda p: _zip(
                p,
                {
                    "meta.npy": _meta(),
                    "attrs.npy": _npy(np.frombuffer(pickle.dumps(attrs(5)), np.uint8)),
                    "v00000.npy": _npy(VALUES[0]),
                    "v00001.npy": _npy(VALUES[1]),
                },
            ),
            "its header says commit 4 but its attributes do not agree",
        ),
        (
            lambda p: _zip(
                p,
                {
                    "meta.npy": _meta(),
                    "attrs.npy": _npy(np.frombuffer(b"\x80\x05junk", np.uint8)),
                    "v00000.npy": _npy(VALUES[0]),
                    "v00001.npy": _npy(VALUES[1]),
                },
            ),
            "UnpicklingError",
        ),
    ],
    ids=["garbage", "another-zip", "other-format", "disagreeing-parts", "bad-pickle"],
)
def test_an_unreadable_checkpoint_is_refused_naming_the_file_and_why(tmp_path: Path, make, reason: str):
    path = tmp_path / file_name(4)
    make(path)
    with pytest.raises(CheckpointReadError, match=f"cannot resume from the checkpoint {path}: .*{reason}"):
        read_checkpoint(path)


def test_a_truncated_newest_checkpoint_is_refused_and_the_one_before_is_named_not_taken(tmp_path: Path):
    write_checkpoint(tmp_path, 4, VALUES, pickle.dumps(attrs(4)))
    newest = write_checkpoint(tmp_path, 8, VALUES, pickle.dumps(attrs(8)))
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    with pytest.raises(CheckpointReadError) as caught:
        Checkpointer(tmp_path).load_latest()
    message = str(caught.value)
    assert f"cannot resume from the checkpoint {newest}" in message
    assert f"Move that file out of {tmp_path} to resume from {file_name(4)} instead" in message


def test_a_checkpoint_path_that_is_a_file_is_refused(tmp_path: Path):
    (tmp_path / "ckpt").write_text("")
    with pytest.raises(CheckpointReadError, match=f"cannot list the checkpoint directory {tmp_path / 'ckpt'}"):
        Checkpointer(tmp_path / "ckpt").load_latest()


def test_stray_files_in_the_directory_are_not_checkpoints(tmp_path: Path):
    for name in (".ckpt-000000000009.npz.host.1.tmp", "ckpt-9.npz", "notes.txt"):
        (tmp_path / name).write_text("")
    write_checkpoint(tmp_path, 3, VALUES, pickle.dumps(attrs(3)))
    assert checkpoints_in(tmp_path) == [(3, tmp_path / file_name(3))]
