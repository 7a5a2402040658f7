"""The controller's state in SQLite: jobs, decisions, throughput history by world size, policy state.

One file, WAL mode, written only by the controller's process. Others read it only when the controller
does not run (``submarine controller status|history`` of a stopped controller), through
:class:`SavedState`, which opens it read-only. Every write is its own transaction; a controller killed at
any point restarts from what was committed and resizes nothing twice (a decision is recorded before it
is sent to the job's driver, and marked applied once YARN and the job's ring both have its size).

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

from submarine_elastic.controller.api import (
    ControllerView,
    DecisionRecord,
    DecisionState,
    IllegalTransitionError,
    JobRecord,
    JobSource,
    JobState,
    UnknownJobError,
)

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
    observed_at REAL,
    queue TEXT,
    requested INTEGER
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
    run INTEGER NOT NULL DEFAULT 1,
    stalled INTEGER NOT NULL DEFAULT 0,
    progress TEXT
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
    ("jobs", "queue", "TEXT"),
    ("jobs", "requested", "INTEGER"),
    ("decisions", "run", "INTEGER NOT NULL DEFAULT 1"),
    ("decisions", "stalled", "INTEGER NOT NULL DEFAULT 0"),
    ("decisions", "progress", "TEXT"),
)
#: Seconds a statement waits for another connection's write lock.
BUSY_TIMEOUT_S = 10.0
_UNSET: Any = object()


class ControllerStore:
    """Thread-safe access to the controller database at ``path``.

    Args:
        path: the database; created (with its directory) on first use unless ``readonly``.
        readonly: open an existing database for reading only: nothing is created or migrated, and every
            write raises ``sqlite3.OperationalError``.

    Raises:
        sqlite3.OperationalError: ``readonly`` and the database cannot be opened.
    """

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        self._lock = threading.Lock()
        # job id -> its throughput history as written: this store is its only writer, so a round reads every
        # job's without a query (a read-only store, beside a running controller, queries every time).
        self._throughput: dict[str, dict[int, tuple[float, int]]] = {}
        if readonly:
            self._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False, timeout=BUSY_TIMEOUT_S
            )
            self._db.row_factory = sqlite3.Row
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives a crash of the process (what a restart needs); only a power
        # loss may drop the last few, at a fraction of the cost of an fsync per decision.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns a database written by an earlier version lacks, and drop the loss windows it kept
        (the metrics store holds every job's losses now)."""
        for table, column, decl in _ADDED_COLUMNS:
            present = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        self._db.execute("DELETE FROM kv WHERE key LIKE 'loss/%'")

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

    def upsert_job(self, job: JobRecord) -> int:
        """Start a run of ``job``: a new job, or a new run of a name seen before (its row is reset:
        limits, state, submission time, policy, queue, application id, last resize; its throughput history is
        dropped). ``job.run`` is not read. Returns the run number."""
        with self._tx() as db:
            row = db.execute("SELECT run FROM jobs WHERE job_id=?", (job.job_id,)).fetchone()
            run = 1 if row is None else int(row["run"]) + 1
            db.execute("DELETE FROM jobs WHERE job_id=?", (job.job_id,))
            db.execute("DELETE FROM throughput WHERE job_id=?", (job.job_id,))
            self._throughput.pop(job.job_id, None)
            db.execute(
                "INSERT INTO jobs (job_id, min_workers, max_workers, workers, target, elastic, state, submitted_at,"
                " source, policy, run, app_id, queue, requested) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job.job_id,
                    job.min_workers,
                    job.max_workers,
                    job.workers,
                    job.target,
                    int(job.elastic),
                    job.state.value,
                    job.submitted_at,
                    job.source.value,
                    job.policy,
                    run,
                    job.app_id,
                    job.queue,
                    job.requested,
                ),
            )
        return run

    def change_state(self, job_id: str, state: JobState, *, run: int | None = None) -> bool:
        """Move a job's latest run (only if it is run ``run``, when given) to ``state``; False when nothing
        changed (it is in that state already, or another run is the latest).

        Raises:
            UnknownJobError: no such job.
            IllegalTransitionError: the run cannot move to ``state`` (see :class:`JobState`).
        """
        with self._tx() as db:
            row = db.execute("SELECT state, run FROM jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None:
                raise UnknownJobError(f"no job named {job_id!r}")
            current = JobState(row["state"])
            if (run is not None and int(row["run"]) != run) or current is state:
                return False
            current.check(state)
            db.execute("UPDATE jobs SET state=? WHERE job_id=?", (state.value, job_id))
            if state is JobState.FINISHED:
                self._throughput.pop(job_id, None)  # no round reads it again
            return True

    def update_job(
        self,
        job_id: str,
        *,
        workers: int = _UNSET,
        target: int = _UNSET,
        observed_at: float | None = _UNSET,
        last_resize_at: float | None = _UNSET,
        app_id: str | None = _UNSET,
    ) -> None:
        """Set the given fields of a job's latest run (its state changes through :meth:`change_state`).

        Raises:
            UnknownJobError: no such job.
        """
        fields = {
            name: value
            for name, value in (
                ("workers", workers),
                ("target", target),
                ("observed_at", observed_at),
                ("last_resize_at", last_resize_at),
                ("app_id", app_id),
            )
            if value is not _UNSET
        }
        if not fields:
            return
        with self._tx() as db:
            _update_job(db, job_id, fields)

    def observe(self, sizes: dict[str, int], observed_at: float) -> None:
        """Record each job's ring size as read at ``observed_at``, all in one transaction (a round reads
        every live job's; one commit each had cost 500 jobs 20-30 ms a round). Jobs not stored are skipped."""
        with self._tx() as db:
            db.executemany(
                "UPDATE jobs SET workers=?, observed_at=? WHERE job_id=?",
                [(workers, observed_at, job_id) for job_id, workers in sizes.items()],
            )

    def job(self, job_id: str) -> JobRecord:
        """Raises: UnknownJobError."""
        with self._lock:
            row = self._tuples().execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id=?", (job_id,)).fetchone()  # noqa: S608
        if row is None:
            raise UnknownJobError(f"no job named {job_id!r}")
        return _job(row)

    def jobs(self, *, live_only: bool = False) -> list[JobRecord]:
        query = f"SELECT {_JOB_COLUMNS} FROM jobs" + (" WHERE state != 'finished'" if live_only else "")  # noqa: S608
        with self._lock:
            return [_job(r) for r in self._tuples().execute(query + " ORDER BY submitted_at").fetchall()]

    def _tuples(self) -> sqlite3.Cursor:
        """A cursor whose rows are plain tuples (a round reads every live job: names looked up in a
        ``sqlite3.Row`` cost a third of it)."""
        cursor = self._db.cursor()
        cursor.row_factory = None
        return cursor

    # ------------------------------------------------------------------ decisions

    def add_decision(self, record: DecisionRecord) -> int:
        """Record a decision for the job's current run (``record.run`` is not read)."""
        with self._tx() as db:
            return _insert_decision(db, record)

    def add_decisions(self, decisions: list[tuple[DecisionRecord, dict[str, Any]]]) -> list[int]:
        """Record a round's decisions, each with the fields of its job that change with it (as
        :meth:`update_job` takes them), in one transaction (one commit each had cost a round of 500 resizes
        0.15 s); their ids, in order.

        Raises:
            UnknownJobError: a job to change is not stored (nothing is recorded).
        """
        with self._tx() as db:
            ids = []
            for record, fields in decisions:
                ids.append(_insert_decision(db, record))
                if fields:
                    _update_job(db, record.job_id, fields)
            return ids

    def finish_decision(self, decision_id: int, state: DecisionState, error: str | None = None) -> None:
        """Mark a pending or stalled decision applied, or failed with ``error`` (its progress is cleared).

        Raises:
            IllegalTransitionError: it is applied or failed already, or ``state`` is not a finished one.
            ValueError: an error without a failure, or a failure without one.
            LookupError: no decision of that id.
        """
        if (state is DecisionState.FAILED) != (error is not None):
            raise ValueError(f"a decision has an error exactly when it failed, got {state} and {error!r}")
        if state.converging:
            raise IllegalTransitionError(f"a decision is finished as applied or failed, not {state}")
        with self._tx() as db:
            self._decision_row(db, decision_id).state.check(state)
            db.execute(
                "UPDATE decisions SET applied=?, error=?, stalled=0, progress=NULL WHERE id=?",
                (int(state is DecisionState.APPLIED), error, decision_id),
            )

    def note_progress(self, decision_id: int, why: str | None, *, stalled: bool = False) -> None:
        """Keep why a pending or stalled decision has not converged yet; with ``stalled``, a pending one
        becomes stalled (a stalled one stays stalled either way).

        Raises:
            IllegalTransitionError: it is applied or failed already.
            LookupError: no decision of that id.
        """
        with self._tx() as db:
            state = self._decision_row(db, decision_id).state
            if not state.converging:
                raise IllegalTransitionError(f"a decision {state} has no progress")
            if stalled and state is DecisionState.PENDING:
                state.check(DecisionState.STALLED)
            db.execute(
                "UPDATE decisions SET progress=?, stalled=? WHERE id=?",
                (why, int(stalled or state is DecisionState.STALLED), decision_id),
            )

    @staticmethod
    def _decision_row(db: sqlite3.Connection, decision_id: int) -> DecisionRecord:
        row = db.execute("SELECT * FROM decisions WHERE id=?", (decision_id,)).fetchone()
        if row is None:
            raise LookupError(f"no decision {decision_id}")
        return _decision(row)

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
        """Decisions neither applied nor failed (pending or stalled), oldest first, with their ids."""
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
        with self._lock:  # committed: the histories read before follow
            for job_id, world_size, samples_per_second, steps in rows:
                known = self._throughput.get(job_id)
                if known is not None:
                    known[world_size] = (float(samples_per_second), int(steps))

    def throughput(self, job_id: str) -> dict[int, tuple[float, int]]:
        """``world_size -> (samples_per_second, steps)`` measured for the job's current run."""
        with self._lock:
            known = self._throughput.get(job_id)
            if known is not None:
                return dict(known)
            rows = self._db.execute(
                "SELECT world_size, samples_per_second, steps FROM throughput WHERE job_id=?", (job_id,)
            ).fetchall()
            found = {int(r["world_size"]): (float(r["samples_per_second"]), int(r["steps"])) for r in rows}
            if not self.readonly:
                self._throughput[job_id] = dict(found)
        return found

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


class SavedState(ControllerView):
    """What a stopped controller left in its database, opened read-only.

    Args:
        path: the database.

    Raises:
        sqlite3.OperationalError: it cannot be opened.
    """

    def __init__(self, path: Path) -> None:
        self._store = ControllerStore(path, readonly=True)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> SavedState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def jobs(self) -> list[JobRecord]:
        return self._store.jobs()

    def job(self, job_id: str) -> JobRecord:
        return self._store.job(job_id)

    def decision(self, job_id: str) -> DecisionRecord | None:
        self._store.job(job_id)
        records = self._store.decisions(job_id)
        return records[-1] if records else None

    def timeline(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        self._store.job(job_id)
        return self._store.decisions(job_id, all_runs=all_runs)


#: The columns of a job's row that :func:`_job` reads, in its order.
_JOB_COLUMNS = (
    "job_id, min_workers, max_workers, workers, target, elastic, state, submitted_at, source, run, app_id,"
    " observed_at, policy, last_resize_at, queue, requested"
)
_STATES = {state.value: state for state in JobState}
_SOURCES = {source.value: source for source in JobSource}


def _job(row: tuple[Any, ...]) -> JobRecord:
    """The job of a row of :data:`_JOB_COLUMNS`.

    Raises:
        ValueError: a state or source that is none of :class:`JobState`'s or :class:`JobSource`'s."""
    (job_id, low, high, workers, target, elastic, state, submitted_at, source, run, app_id, observed_at, policy,
     last_resize_at, queue, requested) = row  # fmt: skip
    return JobRecord(
        job_id=job_id,
        min_workers=low,
        max_workers=high,
        workers=workers,
        target=target,
        elastic=bool(elastic),
        state=_STATES.get(state) or JobState(state),
        submitted_at=submitted_at,
        source=_SOURCES.get(source) or JobSource(source),
        run=run,
        app_id=app_id,
        observed_at=observed_at,
        policy=policy,
        last_resize_at=last_resize_at,
        queue=queue,
        requested=requested,
    )


def _decision(row: sqlite3.Row) -> DecisionRecord:
    state = (
        DecisionState.APPLIED
        if row["applied"]
        else DecisionState.FAILED
        if row["error"] is not None
        else DecisionState.STALLED
        if row["stalled"]
        else DecisionState.PENDING
    )
    return DecisionRecord(
        job_id=row["job_id"],
        time=row["time"],
        from_workers=row["from_workers"],
        to_workers=row["to_workers"],
        reason=row["reason"],
        state=state,
        error=row["error"] if state is DecisionState.FAILED else None,
        run=row["run"],
        progress=row["progress"] if state.converging else None,
    )


def _update_job(db: sqlite3.Connection, job_id: str, fields: dict[str, Any]) -> None:
    sets = ", ".join(f"{name}=?" for name in fields)
    cur = db.execute(f"UPDATE jobs SET {sets} WHERE job_id=?", (*fields.values(), job_id))  # noqa: S608
    if cur.rowcount == 0:
        raise UnknownJobError(f"no job named {job_id!r}")


def _insert_decision(db: sqlite3.Connection, record: DecisionRecord) -> int:
    cur = db.execute(
        "INSERT INTO decisions (job_id, time, from_workers, to_workers, reason, applied, error, stalled,"
        " progress, run) VALUES (?,?,?,?,?,?,?,?,?, COALESCE((SELECT run FROM jobs WHERE job_id=?), 1))",
        (
            record.job_id,
            record.time,
            record.from_workers,
            record.to_workers,
            record.reason,
            int(record.applied),
            record.error,
            int(record.state is DecisionState.STALLED),
            record.progress,
            record.job_id,
        ),
    )
    return int(cur.lastrowid or 0)
