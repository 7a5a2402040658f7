"""Measure the points of a space, resumably: one CSV row per point, appended as each point finishes.

``<out>/results.csv`` has the columns ``point_id, status, <parameters...>, wall_s, error, <metrics...>``;
``<out>/space.json`` records the space the rows belong to. A rerun skips every point with an ``ok`` row and
measures the rest (failed points are tried again; the last row of a point wins), so an interrupted run
(Ctrl-C, a crash, a killed machine) loses at most the points being measured when it stopped.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.dse.api import Backend, BackendError, Point, PointResult, ResultsError, Space

RESULTS = "results.csv"
SPACE = "space.json"
FIXED_COLUMNS = ("point_id", "status")
TRAILING_COLUMNS = ("wall_s", "error")


@dataclass(frozen=True)
class RunSummary:
    """What a run did: points measured now, skipped (already measured), and failed now."""

    total: int
    measured: int
    skipped: int
    failed: int


def space_record(space: Space) -> dict[str, object]:
    """The JSON-ready description of a space stored beside its results."""
    return {
        "name": space.name,
        "parameters": {p.name: list(p.levels) for p in space.parameters},
        "fixed": dict(space.fixed),
        "strategy": space.strategy.value,
        "samples": space.samples,
        "seed": space.seed,
        "backend": space.backend,
        "objective": space.objective,
        "minimize": space.minimize,
    }


class ResultStore:
    """The results file of one space (see the module docstring)."""

    def __init__(self, out_dir: Path, parameters: tuple[str, ...], metrics: tuple[str, ...]) -> None:
        self.path = out_dir / RESULTS
        self.parameters = parameters
        self.metrics = metrics
        self.header = (*FIXED_COLUMNS, *parameters, *TRAILING_COLUMNS, *metrics)

    def rows(self) -> list[dict[str, str]]:
        """Every complete row (a torn last line from a crash is ignored), in file order.

        Raises:
            ResultsError: the file's header does not match this space's parameters and metrics.
        """
        if not self.path.exists():
            return []
        with open(self.path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = tuple(next(reader, ()))
            if header != self.header:
                raise ResultsError(
                    f"{self.path} has columns {', '.join(header)}; this space needs {', '.join(self.header)}. "
                    "Use another --out, or move the old results away."
                )
            return [dict(zip(header, row, strict=True)) for row in reader if len(row) == len(header)]

    def done(self) -> set[str]:
        """Ids of points whose last row is ``ok``."""
        last: dict[str, str] = {}
        for row in self.rows():
            last[row["point_id"]] = row["status"]
        return {pid for pid, status in last.items() if status == "ok"}

    def append(self, result: PointResult) -> None:
        """Append one row and make it durable before returning.

        Raises:
            OSError: the file cannot be written.
        """
        new = not self.path.exists() or self.path.stat().st_size == 0
        values = result.point.values
        row = [
            result.point.point_id,
            result.status,
            *(values.get(p, "") for p in self.parameters),
            f"{result.wall_s:.3f}",
            result.error.replace("\n", " "),
            *(_fmt(result.metrics.get(m)) for m in self.metrics),
        ]
        with open(self.path, "a", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh)
            if new:
                out.writerow(self.header)
            out.writerow(row)
            fh.flush()
            os.fsync(fh.fileno())


def _fmt(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def measure_point(backend: Backend, point: Point) -> PointResult:
    """Measure one point, turning a :class:`BackendError` into a ``failed`` result. Blocks while it runs."""
    t0 = time.perf_counter()
    try:
        metrics = backend.measure(point)
    except BackendError as exc:
        return PointResult(point, {}, "failed", str(exc), time.perf_counter() - t0)
    return PointResult(point, metrics, "ok", "", time.perf_counter() - t0)


ProgressCallback = Callable[[PointResult, int, int], None]


def run_space(
    space: Space,
    backend: Backend,
    points: list[Point],
    out_dir: Path,
    *,
    parallel: int = 1,
    progress: ProgressCallback | None = None,
) -> RunSummary:
    """Measure every point of ``points`` that ``out_dir`` has no ``ok`` row for.

    Blocks until all are measured. ``parallel`` > 1 measures that many points at once in worker
    processes (the backend must be picklable). ``progress(result, done, total)`` is called after each.
    Interrupting (KeyboardInterrupt) stops at once; finished points stay recorded.

    Raises:
        ResultsError: ``out_dir`` holds results of another space.
        BackendError: a setting of the space is unknown to the backend, or the backend is not ready
            (:meth:`Backend.check_ready`).
        OSError: the results cannot be written.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    known = backend.parameters()
    if known is not None:
        names = {p.name for p in space.parameters} | set(space.fixed)
        unknown = sorted(names - known)
        if unknown:
            raise BackendError(
                f"space {space.name!r}: the {backend.name} backend has no setting {', '.join(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    store = ResultStore(out_dir, tuple(p.name for p in space.parameters), backend.metrics())
    done = store.done()
    record = out_dir / SPACE
    current = space_record(space)
    if record.exists():
        try:
            previous = json.loads(record.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ResultsError(f"{record}: unreadable space record: {exc}") from exc
        for key in ("fixed", "backend"):
            if previous.get(key) != current[key]:
                raise ResultsError(
                    f"{out_dir} holds results measured with {key} {previous.get(key)!r}, not {current[key]!r}: "
                    "they would not be comparable. Use another --out."
                )
    record.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    todo = [p for p in points if p.point_id not in done]
    skipped = len(points) - len(todo)
    if todo:
        backend.check_ready()
    failed = 0
    count = skipped
    for result in _results(backend, todo, parallel):
        store.append(result)
        failed += result.status != "ok"
        count += 1
        if progress is not None:
            progress(result, count, len(points))
    return RunSummary(len(points), len(todo), skipped, failed)


def _results(backend: Backend, points: list[Point], parallel: int) -> Iterator[PointResult]:
    if parallel == 1 or len(points) <= 1:
        for point in points:
            yield measure_point(backend, point)
        return
    pool = ProcessPoolExecutor(max_workers=parallel)
    try:
        pending: set[Future[PointResult]] = set()
        queue = iter(points)
        for point in queue:
            pending.add(pool.submit(measure_point, backend, point))
            if len(pending) >= parallel:
                break
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                for point in queue:
                    pending.add(pool.submit(measure_point, backend, point))
                    break
                yield future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def read_results(out_dir: Path) -> tuple[dict[str, object], list[dict[str, str]]]:
    """The space record and the last row of every point in ``out_dir``.

    Raises:
        ResultsError: no results or no space record there, or they do not match.
    """
    record_path = out_dir / SPACE
    if not record_path.exists() or not (out_dir / RESULTS).exists():
        raise ResultsError(f"{out_dir} holds no results of `submarine dse run` ({SPACE} and {RESULTS})")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        parameters = tuple(record["parameters"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ResultsError(f"{record_path}: unreadable space record: {exc}") from exc
    with open(out_dir / RESULTS, newline="", encoding="utf-8") as fh:
        header = tuple(next(csv.reader(fh), ()))
    start = len(FIXED_COLUMNS) + len(parameters) + len(TRAILING_COLUMNS)
    if header[len(FIXED_COLUMNS) : len(FIXED_COLUMNS) + len(parameters)] != parameters:
        raise ResultsError(f"{out_dir / RESULTS} does not match the parameters of {record_path}")
    store = ResultStore(out_dir, parameters, header[start:])
    last: dict[str, dict[str, str]] = {}
    for row in store.rows():
        last[row["point_id"]] = row
    return record, list(last.values())
