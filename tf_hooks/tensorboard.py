"""A job's TensorBoard run: its training's scalars and its decisions, as event files in its TensorBoard directory.

1. :class:`TensorBoardSink` (a :class:`~tf_hooks.api.MetricsSink`) takes the steps rank 0 reports (a step of
   any other rank is ignored, so the run follows whichever process is rank 0 after a resize) and writes them
   as scalars from its own thread every ``flush_interval`` seconds (5), never on the training thread.
   :func:`tf_hooks.sender.make_sink` adds it beside the gRPC sender when the job has a TensorBoard directory
   (``SUBMARINE_TENSORBOARD_DIR``), so the Keras callback, the SessionRunHook and the example scripts write it
   with nothing more to call. :class:`FanoutSink` hands one hook's steps to both.
2. :class:`DecisionLog`: the job's driver notes each target it takes (a controller's decision, ``job flex``,
   a replacement, a preemption) with its reason, as the ``decision/workers`` and ``decision/batch`` scalars
   and a ``decision/reason`` text, at the target's version as the step.

The event files are written with TensorBoard's own record framing and protos (``tensorboard.compat.proto``),
on a plain file: neither side imports TensorFlow for it. Without the ``tensorboard`` package, or with a
directory that cannot be created, nothing is written and a warning says why once; training goes on.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from tf_hooks.api import MetricsSink, SenderStats, StepBlock, StepRecord, as_floats

if TYPE_CHECKING:
    from submarine_elastic.protocol.proto import elastic_pb2 as pb

logger = logging.getLogger(__name__)

#: The tags of a job's run: the training's, rank 0's steps (the step is the training step).
LOSS = "train/loss"
THROUGHPUT = "train/throughput"  # the job's samples a second: rank 0's rate times the workers
STEP_TIME = "train/step_time"  # seconds
WORKERS = "train/workers"
GLOBAL_BATCH = "train/global_batch"  # rank 0's batch times the workers
LEARNING_RATE = "train/learning_rate"
NOISE_SCALE = "train/gradient_noise_scale"
#: A user metric ``name`` (``accuracy``, ...) is ``train/name``.
USER_PREFIX = "train/"
#: The decisions' tags (the step is the target's version).
DECISION_WORKERS = "decision/workers"
DECISION_BATCH = "decision/batch"
DECISION_REASON = "decision/reason"

#: Seconds between two writes of the steps reported meanwhile.
FLUSH_INTERVAL_S = 5.0
_FILE_COUNTER = itertools.count()


def run_directory(value: str | os.PathLike[str] | None) -> Path | None:
    """The directory a setting names (``file://`` taken off); None for none."""
    if value is None:
        return None
    text = os.fspath(value).strip()
    return Path(text.removeprefix("file://")) if text else None


class EventFile:
    """One event file of this process in a run directory. One thread at a time writes it.

    Raises (constructor):
        ImportError: the ``tensorboard`` package is not installed.
        OSError: the directory cannot be created or the file cannot be opened.
    """

    def __init__(self, directory: Path) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._text_metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        self._tensor, self._scalar_shape = tensor_pb2.TensorProto, tensor_shape_pb2.TensorShapeProto()
        self._string = types_pb2.DT_STRING
        directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_COUNTER)}"
        self.path = directory / name
        self._file: IO[bytes] = self.path.open("ab")
        self._records = RecordWriter(self._file)
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def scalars(self, step: int, wall_time: float, values: Mapping[str, float]) -> None:
        """One event of ``values`` (tag -> number) at ``step``."""
        summary = self._summary(value=[self._summary.Value(tag=t, simple_value=v) for t, v in values.items()])
        self._write(self._event(wall_time=wall_time, step=step, summary=summary))

    def text(self, step: int, wall_time: float, tag: str, text: str) -> None:
        """A text summary (TensorBoard's Text tab renders it as Markdown)."""
        tensor = self._tensor(dtype=self._string, tensor_shape=self._scalar_shape, string_val=[text.encode()])
        value = self._summary.Value(tag=tag, metadata=self._text_metadata, tensor=tensor)
        self._write(self._event(wall_time=wall_time, step=step, summary=self._summary(value=[value])))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def _write(self, event: Any) -> None:
        self._records.write(event.SerializeToString())


def open_event_file(directory: Path, what: str) -> EventFile | None:
    """An :class:`EventFile` in ``directory``, or None (logged as an error naming ``what`` and why)."""
    try:
        return EventFile(directory)
    except ImportError:
        logger.error("%s: not written, the tensorboard package is not installed", what)
    except OSError as exc:
        logger.error("%s: not written, cannot write %s: %s", what, directory, exc.strerror or exc)
    return None


def step_scalars(block: StepBlock) -> list[tuple[int, float, dict[str, float]]]:
    """Each step of ``block`` as ``(step, wall time, {tag: value})``, the values it has (see the tags above)."""
    n, size = len(block), block.world_size
    columns: dict[str, np.ndarray | None] = {
        LOSS: block.loss,
        THROUGHPUT: None if block.examples_per_second is None else block.examples_per_second * size,
        STEP_TIME: block.step_time_seconds,
        WORKERS: np.full(n, float(size)),
        GLOBAL_BATCH: None if block.batch_size is None else block.batch_size.astype(np.float64) * size,
        LEARNING_RATE: block.learning_rate,
        NOISE_SCALE: block.gradient_noise_scale,
    }
    columns.update({USER_PREFIX + name: values for name, values in block.user_metrics.items()})
    present = {tag: np.asarray(v, dtype=np.float64) for tag, v in columns.items() if v is not None}
    steps, walls = block.step.tolist(), block.wall_time.tolist()
    rows = []
    for i in range(n):
        values = {tag: float(v[i]) for tag, v in present.items() if math.isfinite(v[i])}
        rows.append((int(steps[i]), float(walls[i]), values))
    return rows


def records_block(records: Sequence[StepRecord]) -> StepBlock:
    """Records of one (rank, world size) as a block (lazy values worked out here, off the training thread)."""
    cache: dict[int, float] = {}

    def column(name: str) -> np.ndarray | None:
        values = [getattr(r, name) for r in records]
        return None if all(v is None for v in values) else as_floats(values, cache)

    names = sorted({name for r in records for name in (r.user_metrics or {})})
    batch = [r.batch_size or 0 for r in records]
    return StepBlock(
        records[0].rank,
        records[0].world_size,
        np.array([r.step for r in records], dtype=np.int64),
        np.array([r.wall_time for r in records], dtype=np.float64),
        loss=column("loss"),
        examples_per_second=column("examples_per_second"),
        step_time_seconds=column("step_time_seconds"),
        batch_size=np.array(batch, dtype=np.int64) if any(batch) else None,
        learning_rate=column("learning_rate"),
        user_metrics={name: as_floats([(r.user_metrics or {}).get(name) for r in records], cache) for name in names},
        grad_sq_norm=column("grad_sq_norm"),
        grad_variance=column("grad_variance"),
        gradient_noise_scale=column("gradient_noise_scale"),
    )


class TensorBoardSink(MetricsSink):
    """Writes rank 0's steps into a run directory from a daemon thread; see the module docstring.

    Args:
        directory: the run's directory (created at the first step of rank 0).
        flush_interval: seconds between two writes.
        queue_size: steps kept between two writes; older ones are dropped (counted).
    """

    def __init__(self, directory: Path, *, flush_interval: float = FLUSH_INTERVAL_S, queue_size: int = 10_000) -> None:
        if not flush_interval > 0:
            raise ValueError(f"flush_interval must be positive, got {flush_interval}")
        self.directory = directory
        self._interval = flush_interval
        self._records: deque[StepRecord] = deque(maxlen=queue_size)
        self._sources: list[Callable[[], list[StepBlock | int]]] = []
        self._lock = threading.Lock()  # one write at a time: the thread's, flush()'s or close()'s
        self._file: EventFile | None = None
        self._failed = False  # the file could not be opened: nothing is written
        self._written = 0
        self._dropped = 0
        self._closed = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tf-hooks-tensorboard", daemon=True)
        self._thread.start()

    def record(self, record: StepRecord) -> None:
        if self._closed:
            self._dropped += 1
            return
        self._records.append(record)

    def add_source(self, drain: Callable[[], list[StepBlock | int]]) -> Callable[[], None]:
        with self._lock:
            self._sources.append(drain)
        return self._wake.set

    def flush(self, timeout: float) -> bool:
        return self._write_now(timeout)

    def close(self, timeout: float) -> SenderStats:
        if not self._closed:
            self._closed = True
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout)
            self._write_now(max(timeout, 1.0))  # the last steps: a local write, worth a second
            with self._lock:
                if self._file is not None:
                    self._file.close()
        return self.stats()

    def stats(self) -> SenderStats:
        with self._lock:
            pending = len(self._records)
            return SenderStats(
                recorded=self._written + self._dropped + pending,
                acked=self._written,
                dropped=self._dropped,
                pending=pending,
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            self._write_now(self._interval)

    def _write_now(self, timeout: float) -> bool:
        """Writes what was handed over since the last write and flushes the file; False when it could not
        start within ``timeout`` or the file cannot be written."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            return False
        try:
            blocks: list[StepBlock] = []
            for drain in self._sources:
                try:
                    items = drain()
                except Exception:  # noqa: BLE001  (a source's bug must not stop the others)
                    logger.debug("a metrics source failed", exc_info=True)
                    continue
                for item in items:
                    if isinstance(item, int):
                        self._dropped += item
                    else:
                        blocks.append(item)
            records = [self._records.popleft() for _ in range(len(self._records))]
            for _, run in itertools.groupby(records, key=lambda r: (r.rank, r.world_size)):
                blocks.append(records_block(list(run)))
            return self._write(blocks)
        except Exception:  # noqa: BLE001  (never into training: logged, its steps are lost)
            logger.warning("TensorBoard steps could not be written; omitted", exc_info=True)
            return False
        finally:
            self._lock.release()

    def _write(self, blocks: list[StepBlock]) -> bool:
        ours = [b for b in blocks if b.rank == 0 and len(b)]
        if not ours:
            return not self._failed
        if self._file is None and not self._failed:
            self._file = open_event_file(self.directory, "the job's TensorBoard scalars")
            self._failed = self._file is None
        if self._file is None:
            self._dropped += sum(len(b) for b in ours)
            return False
        for block in ours:
            for step, wall_time, values in step_scalars(block):
                self._file.scalars(step, wall_time, values)
            self._written += len(block)
        try:
            self._file.flush()
        except OSError as exc:
            logger.warning("TensorBoard file %s: %s", self._file.path, exc)
            return False
        return True


class _Split:
    """One source read by several sinks: each reader gets every item once, in order. What one reader's drain
    takes waits for the others, at most ``limit`` steps each (older ones become a lost count)."""

    def __init__(self, drain: Callable[[], list[StepBlock | int]], readers: int, limit: int) -> None:
        self._drain, self._limit = drain, limit
        self._pending: list[list[StepBlock | int]] = [[] for _ in range(readers)]
        self._lock = threading.Lock()
        self.dead = False

    def reader(self, index: int) -> Callable[[], list[StepBlock | int]]:
        def read() -> list[StepBlock | int]:
            with self._lock:
                if self.dead:
                    return []
                items = self._drain()
                for other, pending in enumerate(self._pending):
                    if other != index:
                        pending.extend(items)
                        self._bound(pending)
                out, self._pending[index] = self._pending[index] + items, []
                return out

        return read

    def _bound(self, pending: list[StepBlock | int]) -> None:
        rows = sum(len(item) for item in pending if not isinstance(item, int))
        lost = 0
        while rows > self._limit:
            head = pending.pop(0)
            if isinstance(head, int):
                lost += head
                continue
            rows -= len(head)
            lost += len(head) + (int(head.lost_before.sum()) if head.lost_before is not None else 0)
        if lost:
            pending.insert(0, lost)


class FanoutSink(MetricsSink):
    """Hands every step to each of ``sinks`` (the gRPC sender and a :class:`TensorBoardSink`); the first one's
    counters are its own. A hook's source is read by each sink that takes sources, or, when one does not,
    the hook records step by step (to every sink)."""

    def __init__(self, *sinks: MetricsSink, queue_size: int = 10_000) -> None:
        if not sinks:
            raise ValueError("FanoutSink needs at least one sink")
        self.sinks = sinks
        self._queue_size = queue_size

    def record(self, record: StepRecord) -> None:
        for sink in self.sinks:
            sink.record(record)

    def add_source(self, drain: Callable[[], list[StepBlock | int]]) -> Callable[[], None] | None:
        split = _Split(drain, len(self.sinks), self._queue_size)
        wakes = []
        for index, sink in enumerate(self.sinks):
            wake = sink.add_source(split.reader(index))
            if wake is None:
                split.dead = True
                return None
            wakes.append(wake)

        def wake_all() -> None:
            for wake in wakes:
                wake()

        return wake_all

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all([sink.flush(max(0.0, deadline - time.monotonic())) for sink in self.sinks])

    def close(self, timeout: float) -> SenderStats:
        """Closes the last sinks (local files) first, so that a slow service cannot take their time."""
        deadline = time.monotonic() + timeout
        stats = [sink.close(max(0.0, deadline - time.monotonic())) for sink in reversed(self.sinks)]
        return stats[-1]

    def stats(self) -> SenderStats:
        return self.sinks[0].stats()


class DecisionLog:
    """The job's decisions in its TensorBoard run, as its driver takes them (see the module docstring).

    Never raises: a decision that cannot be written is logged and lost.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._file: EventFile | None = None
        self._failed = False
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> DecisionLog | None:
        """The log of the job's TensorBoard directory (``SUBMARINE_TENSORBOARD_DIR``); None without one."""
        from submarine_elastic import env

        try:
            directory = run_directory(env.settings().tensorboard_dir)
        except ValueError as exc:
            logger.error("the job's decisions are not written to TensorBoard: %s", exc)
            return None
        return cls(directory) if directory is not None else None

    def note(self, target: pb.Target, in_force: int, wall_time: float | None = None) -> None:
        """``target`` as taken while the job's ring was sized ``in_force``: its workers, its batch (when it sets
        one) and a line with its reason, at its version; at ``wall_time``, else the time it was taken, else now."""
        try:
            with self._lock:
                if self._file is None and not self._failed:
                    self._file = open_event_file(self.directory, "the job's decisions in TensorBoard")
                    self._failed = self._file is None
                if self._file is None:
                    return
                now = wall_time if wall_time is not None else (target.time or time.time())
                values = {DECISION_WORKERS: float(target.workers)}
                line = f"target {target.workers} workers ({in_force} in force)"
                if target.HasField("batch_size"):
                    values[DECISION_BATCH] = float(target.batch_size)
                    line += f", global batch {target.batch_size}"
                if target.remove:
                    line += f", removing {', '.join(target.remove)}"
                line += f": {target.reason or 'no reason given'}"
                step = int(target.version)
                self._file.scalars(step, now, values)
                self._file.text(step, now, DECISION_REASON, line)
                self._file.flush()
        except Exception:  # noqa: BLE001  (a decision is carried out whether or not it is written)
            logger.warning("a decision could not be written to TensorBoard", exc_info=True)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
