"""A checked batch's steps as the store keeps them.

Whether a batch came as ``points`` or as ``columns``, the store keeps its steps as NumPy columns
(:class:`ColumnSteps`), 8 bytes a value, and builds ``StepPoint`` messages from them only when
someone reads the points (``GetJob``, ``Watch``). They are immutable, so a reader may build messages
from them without holding the store's lock.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from submarine_elastic.metrics.proto import metrics_pb2


class Steps(Protocol):
    """Steps of one batch, seq strictly rising."""

    def __len__(self) -> int: ...

    @property
    def last_seq(self) -> int: ...

    @property
    def last_step(self) -> int: ...

    def after(self, seq: int) -> Steps:
        """The steps whose seq is above ``seq`` (a suffix, since seqs rise)."""
        ...

    def tail(self, count: int) -> Steps:
        """The last ``count`` steps (0 < count <= len)."""
        ...

    def values(self, name: str) -> np.ndarray:
        """The values of the optional float field ``name``, in step order, left-out ones skipped."""
        ...

    def losses(self, limit: int) -> list[tuple[int, float]]:
        """``(step, loss)`` of the last ``limit`` steps that carry a loss."""
        ...

    def last_with(self, name: str, *others: str) -> tuple[int, float, tuple[float | None, ...]] | None:
        """``(step, value, others' values)`` of the last step that carries the optional float field
        ``name`` (None for an other the step leaves out); None when no step carries it."""
        ...

    def edge(self, *, last: bool) -> tuple[int, float, float | None]:
        """``(step, wall time, step time or None)`` of the first step, or of the last with ``last``."""
        ...

    def step_times(self, after_seq: int = 0) -> dict[int, np.ndarray]:
        """The step times the steps with a seq above ``after_seq`` carry, by their batch size (0: none
        reported), in step order."""
        ...

    def points(self) -> list[metrics_pb2.StepPoint]:
        """The steps as messages (built, for columns)."""
        ...

    def rows(self, limit: int) -> list[tuple[int, float | None, float | None, int | None]]:
        """``(step, loss, step time, batch size)`` of the last ``limit`` steps, None where a step leaves one
        out."""
        ...

    @property
    def nbytes(self) -> int:
        """Memory the steps hold, arrays and their Python objects counted (an upper estimate)."""
        ...


#: What a NumPy array costs besides its data (``sys.getsizeof(np.empty(0))`` is 112 on 64-bit CPython).
ARRAY_OVERHEAD_BYTES = 128
#: What the Python objects around one batch's arrays cost (the object, its dicts, a user metric's name).
STEPS_OVERHEAD_BYTES = 1024


class ColumnSteps:
    """Steps that arrived as ``StepColumns``: NaN (batch size 0) where a step leaves a field out.

    ``optional`` and ``user`` hold only the columns the batch carried.
    """

    __slots__ = ("seq", "step", "wall_time", "optional", "batch_size", "user")

    def __init__(
        self,
        seq: np.ndarray,
        step: np.ndarray,
        wall_time: np.ndarray,
        optional: dict[str, np.ndarray],
        batch_size: np.ndarray | None,
        user: dict[str, np.ndarray],
    ) -> None:
        self.seq = seq
        self.step = step
        self.wall_time = wall_time
        self.optional = optional
        self.batch_size = batch_size
        self.user = user

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def nbytes(self) -> int:
        arrays = [self.seq, self.step, self.wall_time, *self.optional.values(), *self.user.values()]
        if self.batch_size is not None:
            arrays.append(self.batch_size)
        names = sum(len(name) + 64 for name in self.user)
        return STEPS_OVERHEAD_BYTES + names + sum(a.nbytes + ARRAY_OVERHEAD_BYTES for a in arrays)

    @property
    def last_seq(self) -> int:
        return int(self.seq[-1])

    @property
    def last_step(self) -> int:
        return int(self.step[-1])

    def after(self, seq: int) -> ColumnSteps:
        if self.seq[0] > seq:
            return self
        return self._rows(int(np.searchsorted(self.seq, np.uint64(seq), side="right")))

    def tail(self, count: int) -> ColumnSteps:
        return self._rows(len(self.seq) - count)

    def _rows(self, start: int) -> ColumnSteps:
        """Rows ``start:``, copied so a kept tail does not hold the whole batch's arrays."""
        return ColumnSteps(
            self.seq[start:].copy(),
            self.step[start:].copy(),
            self.wall_time[start:].copy(),
            {name: values[start:].copy() for name, values in self.optional.items()},
            None if self.batch_size is None else self.batch_size[start:].copy(),
            {name: values[start:].copy() for name, values in self.user.items()},
        )

    def values(self, name: str) -> np.ndarray:
        column = self.optional.get(name)
        if column is None:
            return np.empty(0)
        return column[~np.isnan(column)]

    def losses(self, limit: int) -> list[tuple[int, float]]:
        loss = self.optional.get("loss")
        if loss is None:
            return []
        present = np.flatnonzero(~np.isnan(loss))[-limit:]
        return list(zip(self.step[present].tolist(), loss[present].tolist(), strict=True))

    def last_with(self, name: str, *others: str) -> tuple[int, float, tuple[float | None, ...]] | None:
        column = self.optional.get(name)
        if column is None:
            return None
        present = np.flatnonzero(~np.isnan(column))
        if not present.size:
            return None
        i = int(present[-1])
        found = []
        for other in others:
            values = self.optional.get(other)
            found.append(None if values is None or np.isnan(values[i]) else float(values[i]))
        return int(self.step[i]), float(column[i]), tuple(found)

    def edge(self, *, last: bool) -> tuple[int, float, float | None]:
        i = -1 if last else 0
        times = self.optional.get("step_time_seconds")
        time = None if times is None or np.isnan(times[i]) else float(times[i])
        return int(self.step[i]), float(self.wall_time[i]), time

    def step_times(self, after_seq: int = 0) -> dict[int, np.ndarray]:
        times = self.optional.get("step_time_seconds")
        if times is None:
            return {}
        timed = ~np.isnan(times)
        if after_seq > 0:
            timed &= self.seq > np.uint64(after_seq)
        if self.batch_size is None:
            return {0: times[timed]} if timed.any() else {}
        sizes = self.batch_size[timed]
        times = times[timed]
        return {int(size): times[sizes == size] for size in np.unique(sizes)}

    def rows(self, limit: int) -> list[tuple[int, float | None, float | None, int | None]]:
        start = max(0, len(self.seq) - limit)
        steps = self.step[start:].tolist()
        columns = []
        for name in ("loss", "step_time_seconds"):
            values = self.optional.get(name)
            columns.append(
                [None] * len(steps) if values is None else [v if v == v else None for v in values[start:].tolist()]
            )
        batch = self.batch_size
        sizes = [None] * len(steps) if batch is None else [b or None for b in batch[start:].tolist()]
        return list(zip(steps, *columns, sizes, strict=True))

    def points(self) -> list[metrics_pb2.StepPoint]:
        # One conversion to Python per column, not one per value.
        rows: list[dict[str, object]] = [
            {"seq": q, "step": s, "wall_time": w}
            for q, s, w in zip(self.seq.tolist(), self.step.tolist(), self.wall_time.tolist(), strict=True)
        ]
        for name, values in self.optional.items():
            for row, value in zip(rows, values.tolist(), strict=True):
                if value == value:  # not NaN
                    row[name] = value
        if self.batch_size is not None:
            for row, size in zip(rows, self.batch_size.tolist(), strict=True):
                if size:
                    row["batch_size"] = size
        points = [metrics_pb2.StepPoint(**row) for row in rows]  # type: ignore[arg-type]
        for name, values in self.user.items():
            for point, value in zip(points, values.tolist(), strict=True):
                if value == value:
                    point.user_metrics[name] = value
        return points
