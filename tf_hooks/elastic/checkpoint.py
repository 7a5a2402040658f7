"""Checkpoints of the committed elastic state, so that a job that lost every worker resumes where it was.

In memory, the committed state survives any resize and the loss of some workers (the others hold it).
When the whole job is lost (every worker, and the driver), only what is on disk survives. With a checkpoint
directory (``SUBMARINE_CHECKPOINT_PATH``, which ``submarine job run --checkpoint_path`` sets), rank 0 writes
the state of every K-th commit (``SUBMARINE_CHECKPOINT_EVERY``, default 50): the host copies of the variables
that the commit made anyway (model weights, optimizer slots and step counter) and the committed attributes
(the commit count, epoch, data cursor, the batch rule's ramp, ...).

The training thread only hands the commit's arrays over (and pickles the small attributes, which may change
after the commit); a background thread writes them. A step never waits for the disk: a checkpoint that falls
due while the previous one is still being written is skipped (and logged), never queued; a write that fails
is logged and counted, and training goes on.

On disk, one ``ckpt-<commit count, 12 digits>.npz`` per checkpoint (NumPy's uncompressed zip): ``v00000``,
``v00001``, ... the variables in the state's order; ``meta`` a JSON header (format, commit count, shapes,
dtypes, time); ``attrs`` the pickled attributes. Each is written under a hidden temporary name in the same
directory, flushed to disk and renamed, so a reader sees whole checkpoints only; the newest two are kept.
The attributes are a pickle, like the ones Horovod broadcasts between ranks: the directory must be the
job's own.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import socket
import threading
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from submarine_elastic import env
from submarine_elastic.limits import CHECKPOINT_EVERY_DEFAULT
from tf_hooks.api import TfHooksError

logger = logging.getLogger(__name__)

#: Version of the file layout; a checkpoint of another version is refused, not guessed at.
FORMAT = 1
#: Checkpoints kept in the directory: the newest and the one before (should the newest be unreadable).
KEEP = 2
_FILE = re.compile(r"ckpt-(\d{12})\.npz")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")

#: What writes one checkpoint: ``(directory, commits, host arrays, pickled attributes) -> the file written``.
WriteFn = Callable[[Path, int, Sequence[np.ndarray], bytes], Path]


class CheckpointError(TfHooksError):
    """Base of the checkpoint errors."""


class CheckpointConfigError(CheckpointError, ValueError):
    """A checkpoint setting (argument or environment variable) is unusable; the message names it."""


class CheckpointReadError(CheckpointError):
    """A checkpoint exists but cannot be resumed from; the message names the file and the reason."""


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint as read back: the commit count it was taken at, the variables' values in the
    state's order, and the committed attributes (``commits`` among them)."""

    path: Path
    commits: int
    values: list[np.ndarray]
    attrs: dict[str, Any]
    written_at: float


def file_name(commits: int) -> str:
    """The name of the checkpoint of commit ``commits`` (ordered by name as by commit)."""
    return f"ckpt-{commits:012d}.npz"


def checkpoints_in(directory: Path) -> list[tuple[int, Path]]:
    """The checkpoints in ``directory`` as ``(commits, path)``, oldest first; [] when it does not exist.

    Raises:
        CheckpointReadError: ``directory`` exists but is not a directory that can be listed.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointReadError(f"cannot list the checkpoint directory {directory}: {exc}") from exc
    found = [(int(m.group(1)), directory / name) for name in names if (m := _FILE.fullmatch(name))]
    return sorted(found)


def write_checkpoint(directory: Path, commits: int, values: Sequence[np.ndarray], attrs: bytes) -> Path:
    """Writes one checkpoint atomically (a temporary file in ``directory``, flushed, then renamed) and
    returns its path. Creates ``directory`` when missing. Blocks for the whole write.

    Raises:
        OSError: the directory or the file cannot be written (the temporary file is removed).
    """
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / file_name(commits)
    tmp = directory / f".{final.name}.{socket.gethostname()}.{os.getpid()}.tmp"
    meta = {
        "format": FORMAT,
        "commits": commits,
        "variables": [[list(v.shape), str(v.dtype)] for v in values],
        "written_at": time.time(),
    }
    entries: dict[str, Any] = {f"v{i:05d}": v for i, v in enumerate(values)}
    entries["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    entries["attrs"] = np.frombuffer(attrs, np.uint8)
    try:
        with open(tmp, "wb") as f:
            _write_npz(f, entries)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(directory)
    return final


def _write_npz(f: Any, entries: Mapping[str, np.ndarray]) -> None:
    """What ``np.savez`` writes (an uncompressed zip of ``.npy`` files, which ``np.load`` reads), without
    its copy of every array in 16 MiB pieces: the bytes go from the array to the file, and the zip's CRC
    and the write release the interpreter's lock, so the writer takes little from the training thread."""
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in entries.items():
            array = np.require(array, requirements="C")  # keeps a 0-d array 0-d
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(array))
                member.write(array.reshape(-1).view(np.uint8).data)


def _fsync_directory(directory: Path) -> None:
    """Makes the rename durable where the filesystem allows it (some cannot open or sync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        logger.debug("cannot sync the checkpoint directory %s: %s", directory, exc)
    finally:
        os.close(fd)


def read_checkpoint(path: Path) -> Checkpoint:
    """Reads one checkpoint whole.

    Raises:
        CheckpointReadError: it cannot be read, is not a checkpoint, is of another format, or its parts
            disagree; the message names the file and what is wrong.
    """

    def bad(reason: str) -> CheckpointReadError:
        return CheckpointReadError(f"cannot resume from the checkpoint {path}: {reason}")

    try:
        if not zipfile.is_zipfile(path):
            raise bad("it is not a zip archive (truncated, or overwritten by something else)")
        with np.load(path, allow_pickle=False) as npz:
            if "meta" not in npz.files or "attrs" not in npz.files:
                raise bad("it is not a checkpoint of the elastic helpers (no meta or attrs entry)")
            meta = json.loads(npz["meta"].tobytes().decode())
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                found = meta.get("format") if isinstance(meta, dict) else meta
                raise bad(f"it is of format {found!r}, this version reads format {FORMAT}")
            count = len(meta["variables"])
            values = [npz[f"v{i:05d}"] for i in range(count)]
            attrs = pickle.loads(npz["attrs"].tobytes())
    except CheckpointReadError:
        raise
    except (
        OSError,
        EOFError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        ImportError,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
    ) as exc:
        raise bad(f"{type(exc).__name__}: {exc}") from exc
    commits = meta.get("commits")
    if not isinstance(attrs, dict) or attrs.get("commits") != commits or not isinstance(commits, int):
        raise bad(f"its header says commit {commits!r} but its attributes do not agree")
    for i, (value, (shape, dtype)) in enumerate(zip(values, meta["variables"], strict=True)):
        if list(value.shape) != shape or str(value.dtype) != dtype:
            raise bad(f"variable {i} is {value.dtype}{list(value.shape)}, its header says {dtype}{shape}")
    return Checkpoint(path, commits, values, attrs, float(meta.get("written_at", 0.0)))


class Checkpointer:
    """The checkpoints of one job in one directory: written in the background every ``every`` commits,
    the newest ``keep`` kept, the latest read back when the job starts.

    One instance per process. Only the process that holds rank 0 calls :meth:`submit`
    (:class:`~tf_hooks.elastic.state.ElasticState` does so at its commits).

    Args:
        directory: a directory on a filesystem every worker host mounts at the same path (created at the
            first write); a relative path is taken from the current directory (a job's workdir).
        every: write the state of every ``every``-th commit (``commits % every == 0``).
        keep: checkpoints kept, newest first.
        write: the I/O edge, :func:`write_checkpoint` unless given (tests inject a slow or failing one).

    Raises:
        CheckpointConfigError: an empty directory, a URL (``hdfs://...``: not a filesystem path), or
            ``every``/``keep`` < 1.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        every: int = CHECKPOINT_EVERY_DEFAULT,
        *,
        keep: int = KEEP,
        write: WriteFn | None = None,
    ) -> None:
        text = os.fspath(directory)
        if not text.strip():
            raise CheckpointConfigError("the checkpoint directory must not be empty")
        if _URL.match(text):
            raise CheckpointConfigError(
                f"the checkpoint directory {text!r} is a URL: the elastic helpers write checkpoints to a directory "
                f"that every worker host mounts at the same path (pass checkpoint=False to ElasticState or "
                f"ElasticKerasTrainer to keep SUBMARINE_CHECKPOINT_PATH for your own checkpoints)"
            )
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise CheckpointConfigError(f"every must be a whole number of commits >= 1, got {every!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointConfigError(f"keep must be >= 1, got {keep!r}")
        self.directory = Path(text).absolute()
        self.every = every
        self.keep = keep
        self._write = write or write_checkpoint
        self._lock = threading.Lock()
        self._running: int | None = None  # commit count of the write in progress
        self._idle = threading.Event()
        self._idle.set()
        #: Commit counts written, skipped (a write was still running) and failed, in order.
        self.written: list[int] = []
        self.skipped: list[int] = []
        self.failed: list[int] = []
        #: Why the latest write failed ("" while none has).
        self.last_error = ""

    def __repr__(self) -> str:
        return f"Checkpointer({str(self.directory)!r}, every={self.every}, keep={self.keep})"

    @classmethod
    def from_env(cls) -> Checkpointer | None:
        """The job's checkpoints (``SUBMARINE_CHECKPOINT_PATH``, ``SUBMARINE_CHECKPOINT_EVERY``), or None
        when no path is set.

        Raises:
            CheckpointConfigError: either variable is unusable (named).
        """
        settings = env.settings()
        path = settings.checkpoint_path
        if path is None:
            return None
        try:
            every = settings.checkpoint_every
        except ValueError as exc:
            raise CheckpointConfigError(str(exc)) from None
        try:
            return cls(path, every)
        except CheckpointConfigError as exc:
            raise CheckpointConfigError(f"SUBMARINE_CHECKPOINT_PATH: {exc}") from None

    def due(self, commits: int) -> bool:
        """Whether the state of commit ``commits`` is to be written."""
        return commits > 0 and commits % self.every == 0

    def submit(self, commits: int, values: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> bool:
        """Hands the state of commit ``commits`` to a background thread that writes it; returns at once.

        ``values`` are host arrays the caller will not change (a commit's copies); ``attrs`` are pickled
        here, since they may change after the commit. Returns False, writing nothing, when the previous
        write is still running (this checkpoint is skipped, and a line logged) or the attributes cannot
        be pickled (logged as a failed write). Never raises for either.
        """
        try:
            blob = pickle.dumps(dict(attrs), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            self._record_failure(commits, f"its attributes cannot be pickled: {type(exc).__name__}: {exc}")
            return False
        with self._lock:
            if self._running is not None:
                self.skipped.append(commits)
                logger.warning(
                    "checkpoint of commit %d skipped: the one of commit %d is still being written to %s",
                    commits,
                    self._running,
                    self.directory,
                )
                return False
            self._running = commits
            self._idle.clear()
        thread = threading.Thread(
            target=self._run, args=(commits, list(values), blob), name=f"checkpoint-{commits}", daemon=True
        )
        thread.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until no write is running (at most ``timeout`` s); True when none is."""
        return self._idle.wait(timeout)

    @property
    def writing(self) -> int | None:
        """The commit count of the checkpoint being written, or None."""
        with self._lock:
            return self._running

    def latest(self) -> Path | None:
        """The newest checkpoint file, or None when there is none (or no directory yet).

        Raises:
            CheckpointReadError: the path exists but cannot be listed (a file, no permission).
        """
        found = checkpoints_in(self.directory)
        return found[-1][1] if found else None

    def load_latest(self) -> Checkpoint | None:
        """The newest checkpoint, read whole; None when there is none (a fresh start).

        Raises:
            CheckpointReadError: the newest checkpoint cannot be read (the path and the reason named, with
                the way out); the one before it is not tried silently, which would lose commits unseen.
        """
        found = checkpoints_in(self.directory)
        if not found:
            return None
        try:
            return read_checkpoint(found[-1][1])
        except CheckpointReadError as exc:
            before = f" to resume from {found[-2][1].name} instead" if len(found) > 1 else ""
            raise CheckpointReadError(
                f"{exc}. Move that file out of {self.directory}{before}, or give the job another checkpoint "
                f"path to train from scratch"
            ) from exc

    def _run(self, commits: int, values: list[np.ndarray], blob: bytes) -> None:
        try:
            started = time.monotonic()
            try:
                path = self._write(self.directory, commits, values, blob)
            except OSError as exc:
                self._record_failure(commits, f"{type(exc).__name__}: {exc}")
                return
            except BaseException:
                # Not an I/O failure: threading's excepthook prints the traceback; training goes on all the same.
                self._record_failure(commits, "an unexpected error in the writer (its traceback follows)")
                raise
            self.written.append(commits)
            logger.info("checkpoint of commit %d written to %s in %.2f s", commits, path, time.monotonic() - started)
            self._prune(commits)
        finally:
            with self._lock:
                self._running = None
                self._idle.set()

    def _record_failure(self, commits: int, reason: str) -> None:
        self.failed.append(commits)
        self.last_error = reason
        logger.error(
            "checkpoint of commit %d could not be written to %s (training goes on): %s", commits, self.directory, reason
        )

    def _prune(self, written: int) -> None:
        """Removes the checkpoints older than the newest ``keep``, counting from the one just written (a
        newer one of another writer is never touched)."""
        older = [path for commits, path in checkpoints_in(self.directory) if commits < written]
        for path in older[: max(0, len(older) - (self.keep - 1))]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.warning("cannot remove the old checkpoint %s: %s", path, exc)


def resolve(checkpoint: Checkpointer | str | os.PathLike[str] | bool | None) -> Checkpointer | None:
    """What the ``checkpoint`` argument of the elastic helpers means: None, the job's setting
    (:meth:`Checkpointer.from_env`); False, none; a path, that directory (every
    ``SUBMARINE_CHECKPOINT_EVERY`` commits); a :class:`Checkpointer`, itself.

    Raises:
        CheckpointConfigError: an unusable setting (named); True (say which directory).
    """
    if checkpoint is None:
        return Checkpointer.from_env()
    if checkpoint is False:
        return None
    if checkpoint is True:
        raise CheckpointConfigError("checkpoint=True: pass a directory, a Checkpointer, None (the job's) or False")
    if isinstance(checkpoint, Checkpointer):
        return checkpoint
    try:
        every = env.settings().checkpoint_every
    except ValueError as exc:
        raise CheckpointConfigError(str(exc)) from None
    return Checkpointer(checkpoint, every)


__all__ = [
    "KEEP",
    "Checkpoint",
    "CheckpointConfigError",
    "CheckpointError",
    "CheckpointReadError",
    "Checkpointer",
    "checkpoints_in",
    "file_name",
    "read_checkpoint",
    "resolve",
    "write_checkpoint",
]
