"""Workload files: the jobs a simulation replays.

The first supported format is the one of the Pollux artifact's workloads (``workloads/workload-N.csv`` in
the data the package ships, see its README): a CSV with the header ``name,time,application,num_replicas,batch_size``,
one job per row, ``time`` the arrival in seconds. Two optional columns, ``min_replicas`` and
``max_replicas``, bound what an elastic policy may give a job; an optional ``queue`` names the YARN queue a job
is submitted to (``sim run --queues``; empty: the first queue). Rows may come in any order; jobs are
replayed in arrival order (ties keep file order).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Collection, Iterable
from dataclasses import replace
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.sim.api import JobSpec, WorkloadError

REQUIRED_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
OPTIONAL_COLUMNS = ("min_replicas", "max_replicas")


def resolve_workload(name_or_path: str, data_dir: Path | None = None) -> Path:
    """Find a workload by path, or by name in the shared Pollux data.

    ``workload-1`` means ``<data>/workloads/workload-1.csv``; ``realistic/workload-1`` (or
    ``workloads-realistic/workload-1``) the realistic variant. An existing path always wins.

    Raises:
        WorkloadError: neither a file nor a known workload name.
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    base = data_dir if data_dir is not None else env.settings().pollux_data_directory()
    stem = name_or_path.removesuffix(".csv")
    folder, _, leaf = stem.rpartition("/")
    folder = {"": "workloads", "realistic": "workloads-realistic"}.get(folder, folder)
    candidate = base / folder / f"{leaf}.csv"
    if candidate.is_file():
        return candidate
    raise WorkloadError(name_or_path, f"no such file, and not a workload under {base} (tried {candidate})")


def load_workload(path: Path, applications: Collection[str] | None = None) -> list[JobSpec]:
    """Read a workload CSV into jobs sorted by arrival.

    ``applications``, when given, are the names a job may train; any other is refused naming the row.

    Raises:
        WorkloadError: the file cannot be read, a required column is missing, or a row is bad (the
            message names the line and job: an unknown application, a negative or non-numeric time,
            a replica count or batch size that is not a positive integer, a duplicate name).
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return parse_workload(fh, source=str(path), applications=applications)
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read: {exc.strerror or exc}") from exc


def parse_workload(
    lines: Iterable[str], source: str = "<workload>", applications: Collection[str] | None = None
) -> list[JobSpec]:
    """Parse workload CSV text (see :func:`load_workload`).

    Raises:
        WorkloadError: as :func:`load_workload`.
    """
    reader = csv.DictReader(lines)
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise WorkloadError(source, "empty file: expected the header " + ",".join(REQUIRED_COLUMNS))
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise WorkloadError(source, f"missing column(s) {', '.join(missing)}; the header is {','.join(header)}", line=1)
    reader.fieldnames = header
    known = sorted(applications) if applications is not None else None
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not any((v or "").strip() for k, v in row.items() if k is not None):
            continue
        name = (row.get("name") or "").strip()
        if not name:
            raise WorkloadError(source, "empty job name", line=line)
        if None in row:
            raise WorkloadError(source, f"more fields than the header has columns: {row[None]}", line, name)
        if name in seen:
            raise WorkloadError(source, f"duplicate job name (first on line {seen[name]})", line, name)
        seen[name] = line
        app = (row.get("application") or "").strip()
        if known is not None and app not in known:
            raise WorkloadError(source, f"unknown application {app!r}; known: {', '.join(known)}", line, name)
        arrival = _number(row, "time", source, line, name)
        if arrival < 0:
            raise WorkloadError(source, f"time must be >= 0 seconds, got {row['time'].strip()}", line, name)
        replicas = _positive_int(row, "num_replicas", source, line, name)
        batch = _positive_int(row, "batch_size", source, line, name)
        limits = {c: _positive_int(row, c, source, line, name) for c in OPTIONAL_COLUMNS if (row.get(c) or "").strip()}
        queue = (row.get("queue") or "").strip() or None
        try:
            jobs.append(JobSpec(name, arrival, app, replicas, batch, **limits, queue=queue))
        except ValueError as exc:
            raise WorkloadError(source, str(exc), line, name) from exc
    if not jobs:
        raise WorkloadError(source, "no jobs: the file has a header but no rows")
    jobs.sort(key=lambda j: j.arrival_s)
    return jobs


def write_workload(jobs: Iterable[JobSpec], path: Path) -> None:
    """Write jobs in the format :func:`load_workload` reads (limits, and queues, only when some job has them).

    Raises:
        OSError: the file cannot be written.
    """
    jobs = list(jobs)
    limits = any(j.min_replicas is not None or j.max_replicas is not None for j in jobs)
    queues = any(j.queue is not None for j in jobs)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(REQUIRED_COLUMNS + (OPTIONAL_COLUMNS if limits else ()) + (("queue",) if queues else ()))
        for j in jobs:
            arrival = int(j.arrival_s) if float(j.arrival_s).is_integer() else j.arrival_s
            row: list[object] = [j.name, arrival, j.application, j.num_replicas, j.batch_size]
            if limits:
                row += [
                    "" if j.min_replicas is None else j.min_replicas,
                    "" if j.max_replicas is None else j.max_replicas,
                ]
            if queues:
                row.append(j.queue or "")
            out.writerow(row)


def sample_jobs(jobs: list[JobSpec], count: int, seed: int) -> list[JobSpec]:
    """``count`` jobs drawn without replacement (deterministic for a seed), in arrival order.

    Raises:
        ValueError: ``count`` is not in 1..len(jobs).
    """
    if not 1 <= count <= len(jobs):
        raise ValueError(f"count must be in 1..{len(jobs)}, got {count}")
    picked = random.Random(seed).sample(range(len(jobs)), count)
    return [jobs[i] for i in sorted(picked)]


def scale_arrivals(jobs: list[JobSpec], factor: float) -> list[JobSpec]:
    """The same jobs with every arrival time multiplied by ``factor`` (< 1: a denser, more contended load).

    Raises:
        ValueError: ``factor`` is not a positive finite number.
    """
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"arrival scale factor must be > 0, got {factor}")
    return [replace(j, arrival_s=j.arrival_s * factor) for j in jobs]


def _number(row: dict[str, str], column: str, source: str, line: int, name: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(source, f"{column} must be a number, got {text!r}", line, name) from None
    if not math.isfinite(value):
        raise WorkloadError(source, f"{column} must be finite, got {text!r}", line, name)
    return value


def _positive_int(row: dict[str, str], column: str, source: str, line: int, name: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise WorkloadError(source, f"{column} must be a positive integer, got {text!r}", line, name) from None
    if value < 1:
        raise WorkloadError(source, f"{column} must be a positive integer, got {text!r}", line, name)
    return value
