"""The run index: one row per run in the shared SQLite database (WAL).

Theory of operation: a run's permanent log is its ``events.jsonl``; the index only makes
runs findable. The parent inserts a row when it starts a child and updates it when the
run ends; ``tether runs`` / ``show`` / ``replay`` read it. The database file is shared
with the inbox (``inbox_*``) and the daemon (``daemon_*``), so this module creates and
touches only ``runs_*`` tables and never sets ``user_version``. Every call opens its own
short connection (cheap, and safe from any thread); a busy timeout absorbs writers from
other processes.

Tables: ``runs_index`` (the rows) and ``runs_schema`` (this module's schema version).

Stale rows: the process that inserts a row owns it, and the row records that owner's pid
and start time (``owner_pid``, ``owner_start``), and the child's (``pid``, ``pid_start``)
once it is known. A parent killed by a signal cannot write its row's end, so every read
settles a ``starting``/``running`` row whose owner and child are both gone (a pid counts
only while its start time matches): it is rewritten as ``failed`` with a ``lost: ...``
error, once, and never reads as running again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

from tether import jsondepth
from tether.paths import FILE_MODE, db_path, ensure_private_dir
from tether.procs import proc_start_time, process_matches
from tether.store.sqlite import connect, typed_row
from tether.wire.session import State

SCHEMA_VERSION: Final = 1
log = logging.getLogger("tether.store")
TASK_LIMIT: Final = 65536  # characters of the task kept in the index

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runs_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs_index (
    id          TEXT PRIMARY KEY,
    task        TEXT NOT NULL,
    provider    TEXT,
    model       TEXT,
    status      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    ended_at    REAL,
    usage       TEXT,
    cwd         TEXT,
    parent_run  TEXT,
    run_dir     TEXT NOT NULL,
    argv        TEXT,
    pid         INTEGER,
    deadline    REAL,
    stop_reason TEXT,
    error       TEXT,
    truncated   INTEGER NOT NULL DEFAULT 0,
    pid_start   INTEGER,
    owner_pid   INTEGER,
    owner_start INTEGER,
    options     TEXT
);
CREATE INDEX IF NOT EXISTS runs_index_parent ON runs_index (parent_run);
CREATE INDEX IF NOT EXISTS runs_index_created ON runs_index (created_at);
"""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One row of the index."""

    id: str
    task: str
    status: str
    created_at: float
    run_dir: str
    provider: str | None = None
    model: str | None = None
    ended_at: float | None = None
    usage: dict[str, Any] | None = None
    cwd: str | None = None
    parent_run: str | None = None
    argv: list[str] | None = None
    pid: int | None = None
    deadline: float | None = None
    stop_reason: str | None = None
    error: str | None = None
    truncated: bool = False
    pid_start: int | None = None
    owner_pid: int | None = None
    owner_start: int | None = None
    # the options it ran with (tether.runtime.parent.options.SpawnOptions, resolved: its
    # worktree's path, its agent's home), what a later run needs to resume it
    options: dict[str, Any] | None = None

    @property
    def elapsed_s(self) -> float | None:
        return None if self.ended_at is None else max(0.0, self.ended_at - self.created_at)


_COLUMNS: Final = tuple(f.name for f in fields(RunRecord))
_JSON_COLUMNS: Final = frozenset({"usage", "argv", "options"})


def _to_row(record: RunRecord) -> tuple[Any, ...]:
    values = []
    for name in _COLUMNS:
        value = getattr(record, name)
        if name in _JSON_COLUMNS and value is not None:
            value = json.dumps(value, ensure_ascii=False)
        elif name == "task":
            value = value[:TASK_LIMIT]
        values.append(value)
    return tuple(values)


def _from_row(row: sqlite3.Row) -> RunRecord:
    values: dict[str, Any] = {}
    for name in _COLUMNS:
        value = row[name]
        if name in _JSON_COLUMNS and value is not None:
            try:
                value = jsondepth.loads(value)
            except ValueError:
                value = None
        if name == "truncated":
            value = bool(value)
        values[name] = value
    record, wrong = typed_row(RunRecord, values)
    if wrong:
        log.warning("run %s: its index row had %s of the wrong type", record.id, wrong)
    return record


_COLUMN_TYPES: Final = {
    "truncated": "INTEGER NOT NULL DEFAULT 0",
    "pid_start": "INTEGER",
    "owner_pid": "INTEGER",
    "owner_start": "INTEGER",
}
LIVE_STATUSES: Final = (State.STARTING.value, State.RUNNING.value)


def is_lost(record: RunRecord) -> bool:
    """A live-looking row whose owner and child are both gone (rows without an owner: no)."""
    if record.status not in LIVE_STATUSES or record.owner_pid is None:
        return False
    if process_matches(record.owner_pid, record.owner_start):
        return False
    return not process_matches(record.pid, record.pid_start)


def _lost_reason(record: RunRecord) -> str:
    return (
        f"lost: its parent process (pid {record.owner_pid}) ended without finishing the run; "
        f"the log so far is in {record.run_dir}"
    )


def _owned(record: RunRecord) -> RunRecord:
    """``record`` with its owner (this process) and its child's start time filled in."""
    changes: dict[str, Any] = {}
    if record.owner_pid is None:
        changes.update(owner_pid=os.getpid(), owner_start=proc_start_time(os.getpid()))
    if record.pid is not None and record.pid_start is None:
        changes["pid_start"] = proc_start_time(record.pid)
    return replace(record, **changes) if changes else record


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Columns added after a database was made (nullable or defaulted, so old rows fit)."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(runs_index)")}
    for name in _COLUMNS:
        if name not in present:
            kind = _COLUMN_TYPES.get(name, "TEXT")
            try:
                conn.execute(f"ALTER TABLE runs_index ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:  # another process added it meanwhile
                if "duplicate column" not in str(exc):
                    raise


class RunIndex:
    """The ``runs_*`` tables of one database file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(db_path() if path is None else path)
        self._ready = False

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if not self._ready:
            self._prepare()
        conn = connect(self.path, named_rows=True)
        try:
            yield conn
        finally:
            conn.close()

    def _prepare(self) -> None:
        ensure_private_dir(self.path.parent)
        # Create it only when missing: closing any descriptor of the database file drops
        # every POSIX lock this process's SQLite connections hold on it (fcntl semantics),
        # after which another process may take itself for the last user and delete the
        # -shm file under live connections (their writes then vanish for other readers).
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(
                    os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
                )
        conn = connect(self.path)
        try:
            conn.executescript(_SCHEMA)
            _add_missing_columns(conn)
            if conn.execute("SELECT count(*) FROM runs_schema").fetchone()[0] == 0:
                conn.execute("INSERT INTO runs_schema (version) VALUES (?)", (SCHEMA_VERSION,))
        finally:
            conn.close()
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(OSError):
                Path(f"{self.path}{suffix}").chmod(FILE_MODE)
        self._ready = True

    # -- writes --------------------------------------------------------------------

    def insert(self, record: RunRecord) -> None:
        """Add a run (its id must be new), owned by this process unless it names an owner."""
        record = _owned(record)
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._connect() as conn:
            conn.execute(
                f"INSERT INTO runs_index ({', '.join(_COLUMNS)}) VALUES ({marks})",  # noqa: S608
                _to_row(record),
            )

    def update(self, run_id: str, **values: Any) -> bool:
        """Set some columns of a run; False when there is no such run."""
        unknown = set(values) - set(_COLUMNS) - {"id"}
        if unknown or "id" in values:
            raise ValueError(f"cannot update columns {sorted(unknown | ({'id'} & set(values)))}")
        if not values:
            return self.get(run_id) is not None
        if values.get("pid") is not None and "pid_start" not in values:
            values["pid_start"] = proc_start_time(values["pid"])
        names = list(values)
        params = [
            json.dumps(values[n], ensure_ascii=False)
            if n in _JSON_COLUMNS and values[n] is not None
            else values[n]
            for n in names
        ]
        assignments = ", ".join(f"{n} = ?" for n in names)
        with self._connect() as conn:
            cursor = conn.execute(
                f"UPDATE runs_index SET {assignments} WHERE id = ?",  # noqa: S608
                (*params, run_id),
            )
            return cursor.rowcount > 0

    # -- reads ---------------------------------------------------------------------

    def get(self, run_id: str) -> RunRecord | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM runs_index WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else self._settled(_from_row(row))

    def _settled(self, record: RunRecord) -> RunRecord:
        """``record``, or, when it is lost, the ``failed`` row it is rewritten as."""
        if not is_lost(record):
            return record
        ended = {"status": "failed", "ended_at": time.time(), "error": _lost_reason(record)}
        with self._connect() as conn:
            conn.execute(
                "UPDATE runs_index SET status = ?, ended_at = ?, error = ? "
                "WHERE id = ? AND status IN (?, ?)",
                (*ended.values(), record.id, *LIVE_STATUSES),
            )
            row = conn.execute("SELECT * FROM runs_index WHERE id = ?", (record.id,)).fetchone()
        return record if row is None else _from_row(row)

    def resolve(self, ref: str) -> list[RunRecord]:
        """Runs matching ``ref``: an exact id, else an id prefix or suffix (``latest`` = newest)."""
        if ref in ("latest", "last"):
            return self.recent(limit=1)
        exact = self.get(ref)
        if exact is not None:
            return [exact]
        pattern = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT * FROM runs_index WHERE id LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\' "
                "ORDER BY id DESC LIMIT 20",
                (pattern + "%", "%" + pattern),
            ).fetchall()
        return [self._settled(_from_row(r)) for r in rows]

    def recent(
        self, *, limit: int = 50, status: str | None = None, parent: str | None = None
    ) -> list[RunRecord]:
        """The newest runs first."""
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if parent is not None:
            where.append("parent_run = ?")
            params.append(parent)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT * FROM runs_index {clause} ORDER BY created_at DESC, id DESC LIMIT ?",  # noqa: S608
                (*params, max(0, limit)),
            ).fetchall()
        settled = [self._settled(_from_row(r)) for r in rows]
        return [r for r in settled if status is None or r.status == status]

    def children(self, run_id: str) -> list[RunRecord]:
        """Runs started by ``run_id`` (its subagents), oldest first."""
        return list(reversed(self.recent(parent=run_id, limit=10_000)))

    def depth(self, run_id: str, *, limit: int = 32) -> int:
        """How many parents ``run_id`` has in the index (0 for a top-level run)."""
        depth, current = 0, self.get(run_id)
        while current is not None and current.parent_run and depth < limit:
            depth += 1
            current = self.get(current.parent_run)
        return depth


def open_index(path: str | os.PathLike[str] | None = None) -> RunIndex:
    """The run index in ``path`` (default :func:`tether.paths.db_path`)."""
    return RunIndex(path)
