"""Protocol-buffer wire encoding of ``ReportBatch``, written by hand for the sender thread.

Building ``StepPoint`` messages field by field through the protobuf API costs the sender thread
4-7 µs per point, CPU that a training step on the same cores pays for. The points the sender
streams have a fixed, flat shape, so it writes their bytes directly (about 2 µs a point) and hands
the finished ``ReportBatch`` bytes to gRPC without a serializer. The bytes are ordinary protobuf:
the service parses them with the generated ``metrics_pb2`` classes, and a property test checks
that they parse to exactly the message the protobuf API would build.

Callers pass values that already satisfy the service's rules (see ``tf_hooks.sender``): integers
non-negative and below 2**63, floats finite. Fields are written in any order (parsers accept
that); optional fields that are None are left out.

:func:`columns` writes a whole batch of steps as one ``StepColumns``: each column is one packed
field whose bytes are the NumPy array's own (little-endian fixed64 and double), so a batch costs
a few copies instead of a message per step. The sender uses it; :func:`point` stays for callers
that build points one by one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

import numpy as np

_TAG_DOUBLE = struct.Struct("<Bd").pack
_BYTE = [bytes((i,)) for i in range(128)]

# Tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited).
# StepPoint
_SEQ = b"\x08"  # 1 uint64
_STEP = b"\x10"  # 2 int64
_LOSS = 0x19  # 3 double
_EXAMPLES_PER_SECOND = 0x21  # 4 double
_STEP_TIME = 0x29  # 5 double
_BATCH_SIZE = b"\x30"  # 6 int64
_LEARNING_RATE = 0x39  # 7 double
_WALL_TIME = 0x41  # 8 double
_USER_METRIC = b"\x4a"  # 9 map<string, double> entry
_MAP_KEY = b"\x0a"  # entry field 1 string
_MAP_VALUE = 0x11  # entry field 2 double
# ReportBatch
_JOB_ID = b"\x0a"  # 1 string
_WORKER = b"\x12"  # 2 WorkerRef
_INCARNATION = b"\x1a"  # 3 string
_WORLD_SIZE = b"\x20"  # 4 int32
_POINT = b"\x2a"  # 5 repeated StepPoint
_COLUMNS = b"\x32"  # 6 StepColumns
# WorkerRef
_INSTANCE = b"\x0a"  # 1 string
_RANK = b"\x10"  # 2 int32
# StepColumns: every column packed (wire type 2)
_COLUMN_TAGS = {
    name: bytes((number << 3 | 2,))
    for number, name in enumerate(
        (
            "seq",
            "step",
            "wall_time",
            "loss",
            "examples_per_second",
            "step_time_seconds",
            "batch_size",
            "learning_rate",
            "user_metrics",
            "grad_sq_norm",
            "grad_variance",
            "gradient_noise_scale",
        ),
        start=1,
    )
}
_METRIC_NAME = b"\x0a"  # MetricColumn 1 string
_METRIC_VALUES = b"\x12"  # MetricColumn 2 packed double
_U64 = np.dtype("<u8")
_I64 = np.dtype("<i8")
_F64 = np.dtype("<f8")


def varint(n: int) -> bytes:
    """The base-128 varint of ``0 <= n < 2**64``."""
    if n < 0x80:
        return _BYTE[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _delimited(tag: bytes, body: bytes) -> bytes:
    return tag + varint(len(body)) + body


def point(
    seq: int,
    step: int,
    wall_time: float,
    loss: float | None = None,
    examples_per_second: float | None = None,
    step_time_seconds: float | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    user_metrics: Iterable[tuple[str, float]] = (),
) -> bytes:
    """One ``StepPoint``, framed as an element of ``ReportBatch.points`` (tag and length included)."""
    parts = [_SEQ, varint(seq), _TAG_DOUBLE(_WALL_TIME, wall_time)]
    if step:
        parts += (_STEP, varint(step))
    if loss is not None:
        parts.append(_TAG_DOUBLE(_LOSS, loss))
    if examples_per_second is not None:
        parts.append(_TAG_DOUBLE(_EXAMPLES_PER_SECOND, examples_per_second))
    if step_time_seconds is not None:
        parts.append(_TAG_DOUBLE(_STEP_TIME, step_time_seconds))
    if batch_size is not None:
        parts += (_BATCH_SIZE, varint(batch_size))
    if learning_rate is not None:
        parts.append(_TAG_DOUBLE(_LEARNING_RATE, learning_rate))
    for name, value in user_metrics:
        key = name.encode()
        parts.append(_delimited(_USER_METRIC, _MAP_KEY + varint(len(key)) + key + _TAG_DOUBLE(_MAP_VALUE, value)))
    body = b"".join(parts)
    return _POINT + varint(len(body)) + body


def header(job_id: str, instance: str, rank: int, incarnation: str, world_size: int) -> bytes:
    """The ``ReportBatch`` fields before its points; ``rank`` and ``world_size`` non-negative."""
    worker = _delimited(_INSTANCE, instance.encode()) + (_RANK + varint(rank) if rank else b"")
    parts = [_delimited(_WORKER, worker), _delimited(_INCARNATION, incarnation.encode())]
    if job_id:
        parts.append(_delimited(_JOB_ID, job_id.encode()))
    if world_size:
        parts += (_WORLD_SIZE, varint(world_size))
    return b"".join(parts)


def _packed(tag: bytes, array: np.ndarray, dtype: np.dtype) -> bytes:
    data = np.ascontiguousarray(array, dtype=dtype).tobytes()
    return tag + varint(len(data)) + data


def columns(
    seq: np.ndarray,
    step: np.ndarray,
    wall_time: np.ndarray,
    optional: Mapping[str, np.ndarray | None],
    user_metrics: Iterable[tuple[str, np.ndarray]] = (),
) -> bytes:
    """``ReportBatch.columns`` (tag and length included) for steps given as equally long arrays.

    ``optional`` maps the optional column names (``loss``, ``examples_per_second``,
    ``step_time_seconds``, ``batch_size``, ``learning_rate`` and the gradient noise ones) to their
    arrays; None or a missing name leaves the column empty. Floats are written as float64 (NaN marks an absent value),
    ``seq`` as uint64 and ``step`` and ``batch_size`` as int64.
    """
    tags = _COLUMN_TAGS
    parts = [
        _packed(tags["seq"], seq, _U64),
        _packed(tags["step"], step, _I64),
        _packed(tags["wall_time"], wall_time, _F64),
    ]
    for name, array in optional.items():
        if array is not None:
            parts.append(_packed(tags[name], array, _I64 if name == "batch_size" else _F64))
    for name, values in user_metrics:
        key = name.encode()
        body = _METRIC_NAME + varint(len(key)) + key + _packed(_METRIC_VALUES, values, _F64)
        parts.append(_delimited(tags["user_metrics"], body))
    return _delimited(_COLUMNS, b"".join(parts))
