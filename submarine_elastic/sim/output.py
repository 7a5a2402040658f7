"""Result files of a run: one CSV row per job, a JSON summary, and the time series behind the plots."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path

from submarine_elastic.sim.api import SimResult

JOB_COLUMNS = (
    "name",
    "application",
    "arrival_s",
    "requested_replicas",
    "requested_batch_size",
    "start_s",
    "completion_s",
    "jct_s",
    "queueing_s",
    "gpu_s",
    "resizes",
    "preemptions",
    "max_workers",
    "final_batch_size",
    "moves",
)


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return round(value, 3)
    return value


def _write_csv(path: Path, header: Iterable[str], rows: Iterable[Iterable[object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(header)
        out.writerows([_cell(v) for v in row] for row in rows)


def _json_safe(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def write_result(result: SimResult, out_dir: Path) -> dict[str, Path]:
    """Write ``jobs.csv``, ``summary.json``, ``utilisation.csv`` and ``allocations.csv``; return their paths.

    Raises:
        OSError: the directory cannot be created or a file cannot be written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "jobs": out_dir / "jobs.csv",
        "summary": out_dir / "summary.json",
        "utilisation": out_dir / "utilisation.csv",
        "allocations": out_dir / "allocations.csv",
    }
    _write_csv(
        paths["jobs"],
        JOB_COLUMNS,
        (
            (
                j.name,
                j.application,
                j.arrival_s,
                j.requested_replicas,
                j.requested_batch_size,
                j.start_s,
                j.completion_s,
                j.jct_s,
                j.queueing_s,
                j.gpu_s,
                j.resizes,
                j.preemptions,
                j.max_workers,
                j.final_batch_size,
                j.moves,
            )
            for j in result.jobs
        ),
    )
    paths["summary"].write_text(json.dumps(_json_safe(result.summary.as_dict()), indent=2) + "\n", encoding="utf-8")
    _write_csv(
        paths["utilisation"],
        ("time_s", "allocated_gpus", "running_jobs", "pending_jobs"),
        ((u.time_s, u.allocated_gpus, u.running_jobs, u.pending_jobs) for u in result.utilisation),
    )
    _write_csv(
        paths["allocations"],
        ("time_s", "job", "workers", "batch_size"),
        ((a.time_s, a.job, a.workers, a.batch_size) for a in result.allocations),
    )
    return paths
