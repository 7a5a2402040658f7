"""The controller's state in SQLite: jobs, decisions, throughput history by world size, policy state.

One file, WAL mode, so the CLI can read it (``submarine job show``, ``controller status``) and add
jobs while the controller runs. Every write is its own transaction; a controller killed at any point
restarts from what was committed and resizes nothing twice (a decision is recorded before it is
applied and marked applied once the job's driver confirms it).

A job name submitted again starts a new run of it: the job's row is reset (limits, times, application
id, throughput history) and its run number goes up by one; the decisions of earlier runs stay, marked
with their run.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from submarine_elastic.controller.api import DecisionRecord, JobRecord, UnknownJobError

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    min_workers INTEGER NOT NULL,
    max_workers INTEGER NOT NULL,
    workers INTEGER NOT NULL,
    target INTEGER NOT NULL,
    elastic INTEGER NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    source TEXT NOT NULL,
    policy TEXT,
    last_resize_at REAL,
    run INTEGER NOT NULL DEFAULT 1,
    app_id TEXT,
    observed_at REAL
);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    time REAL NOT NULL,
    from_workers INTEGER NOT NULL,
    to_workers INTEGER NOT NULL,
    reason TEXT NOT NULL,
    applied INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    run INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS throughput (
    job_id TEXT NOT NULL,
    world_size INTEGER NOT NULL,
    samples_per_second REAL NOT NULL,
    steps INTEGER NOT NULL,
    PRIMARY KEY (job_id, world_size)
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# Columns added after the first release: (table, column, declaration), for databases written before.
_ADDED_COLUMNS = (
    ("jobs", "run", "INTEGER NOT NULL DEFAULT 1"),
    ("jobs", "app_id", "TEXT"),
    ("jobs", "observed_at", "REAL"),
    ("decisions", "run", "INTEGER NOT NULL DEFAULT 1"),
)


class ControllerStore:
    """Thread-safe access to the controller database at ``path`` (created on first use)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=10.0, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives a crash of the process (what a restart needs); only a power
        # loss may drop the last few, at a fraction of the cost of an fsync per decision.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns a database written by an earlier version lacks."""
        for table, column, decl in _ADDED_COLUMNS:
            present = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ jobs

    def upsert_job(self, job: JobRecord, policy: str | None = None) -> int:
        """Start a run of ``job``: a new job, or a new run of a name seen before (its row is reset:
        limits, submission time, policy, application id, last resize; its throughput history and loss
        window are dropped). Returns the run number."""
        with self._tx() as db:
            row = db.execute("SELECT run FROM jobs WHERE job_id=?", (job.job_id,)).fetchone()
            run = 1 if row is None else int(row["run"]) + 1
            db.execute("DELETE FROM jobs WHERE job_id=?", (job.job_id,))
            db.execute("DELETE FROM throughput WHERE job_id=?", (job.job_id,))
            db.execute("DELETE FROM kv WHERE key=?", (f"loss/{job.job_id}",))
            db.execute(
                "INSERT INTO jobs (job_id, min_workers, max_workers, workers, target, elastic, state, submitted_at,"
                " source, policy, run, app_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job.job_id,
                    job.min_workers,
                    job.max_workers,
                    job.workers,
                    job.target,
                    int(job.elastic),
                    job.state,
                    job.submitted_at,
                    job.source,
                    policy,
                    run,
                    job.app_id,
                ),
            )
        return run

    def finish_run(self, job_id: str, run: int) -> bool:
        """Mark run ``run`` of a job finished; False (nothing changed) if the job has started another run
        since, or that run was finished already."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET state='finished' WHERE job_id=? AND run=? AND state != 'finished'", (job_id, run)
            )
            return cur.rowcount > 0

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set columns of one job.

        Raises:
            UnknownJobError: no such job.
        """
        allowed = {"workers", "target", "state", "last_resize_at", "policy", "app_id", "observed_at"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update job columns {sorted(bad)}")
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._tx() as db:
            cur = db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*fields.values(), job_id))  # noqa: S608
            if cur.rowcount == 0:
                raise UnknownJobError(f"no job {job_id!r}")

    def job(self, job_id: str) -> JobRecord:
        """Raises: UnknownJobError."""
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJobError(f"no job {job_id!r}")
        return _job(row)

    def jobs(self, *, live_only: bool = False) -> list[JobRecord]:
        query = "SELECT * FROM jobs" + (" WHERE state != 'finished'" if live_only else "") + " ORDER BY submitted_at"
        with self._lock:
            return [_job(r) for r in self._db.execute(query).fetchall()]

    def job_extra(self, job_id: str) -> tuple[str | None, float | None]:
        """``(policy, last_resize_at)`` of a job (columns not in :class:`JobRecord`)."""
        with self._lock:
            row = self._db.execute("SELECT policy, last_resize_at FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJobError(f"no job {job_id!r}")
        return row["policy"], row["last_resize_at"]

    # ------------------------------------------------------------------ decisions

    def add_decision(self, record: DecisionRecord) -> int:
        """Record a decision for the job's current run (``record.run`` is not read)."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO decisions (job_id, time, from_workers, to_workers, reason, applied, error, run)"
                " VALUES (?,?,?,?,?,?,?, COALESCE((SELECT run FROM jobs WHERE job_id=?), 1))",
                (
                    record.job_id,
                    record.time,
                    record.from_workers,
                    record.to_workers,
                    record.reason,
                    int(record.applied),
                    record.error,
                    record.job_id,
                ),
            )
            return int(cur.lastrowid or 0)

    def finish_decision(self, decision_id: int, *, applied: bool, error: str | None = None) -> None:
        with self._tx() as db:
            db.execute("UPDATE decisions SET applied=?, error=? WHERE id=?", (int(applied), error, decision_id))

    def decisions(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        """The decisions of the job's current run, oldest first; with ``all_runs``, those of every run of
        the name."""
        query = "SELECT * FROM decisions WHERE job_id=?"
        if not all_runs:
            query += " AND run = COALESCE((SELECT run FROM jobs WHERE job_id=?), 1)"
        with self._lock:
            rows = self._db.execute(query + " ORDER BY id", (job_id,) * (1 if all_runs else 2)).fetchall()
        return [_decision(r) for r in rows]

    def pending_decisions(self) -> list[tuple[int, DecisionRecord]]:
        """Decisions recorded but neither applied nor failed (a controller stopped while applying)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM decisions WHERE applied=0 AND error IS NULL ORDER BY id").fetchall()
        return [(int(r["id"]), _decision(r)) for r in rows]

    # ------------------------------------------------------------------ history and policy state

    def record_throughput(self, job_id: str, world_size: int, samples_per_second: float, steps: int) -> None:
        self.record_throughputs([(job_id, world_size, samples_per_second, steps)])

    def record_throughputs(self, rows: list[tuple[str, int, float, int]]) -> None:
        """Upsert ``(job_id, world_size, samples_per_second, steps)`` rows in one transaction."""
        if not rows:
            return
        with self._tx() as db:
            db.executemany(
                "INSERT INTO throughput VALUES (?,?,?,?) ON CONFLICT(job_id, world_size) DO UPDATE SET"
                " samples_per_second=excluded.samples_per_second, steps=excluded.steps",
                rows,
            )

    def throughput(self, job_id: str) -> dict[int, tuple[float, int]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT world_size, samples_per_second, steps FROM throughput WHERE job_id=?", (job_id,)
            ).fetchall()
        return {int(r["world_size"]): (float(r["samples_per_second"]), int(r["steps"])) for r in rows}

    def put(self, key: str, value: Any) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO kv VALUES (?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, json.dumps(value)),
            )

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        job_id=row["job_id"],
        min_workers=row["min_workers"],
        max_workers=row["max_workers"],
        workers=row["workers"],
        target=row["target"],
        elastic=bool(row["elastic"]),
        state=row["state"],
        submitted_at=row["submitted_at"],
        source=row["source"],
        run=row["run"],
        app_id=row["app_id"],
        observed_at=row["observed_at"],
    )


def _decision(row: sqlite3.Row) -> DecisionRecord:
    return DecisionRecord(
        job_id=row["job_id"],
        time=row["time"],
        from_workers=row["from_workers"],
        to_workers=row["to_workers"],
        reason=row["reason"],
        applied=bool(row["applied"]),
        error=row["error"],
        run=row["run"],
    )
