"""The daemon's agent registry: one row per named agent in SQLite (WAL).

Theory of operation: the registry shares tether's database file (``tether.paths.db_path()``)
with the run index and the inbox, so it touches only tables prefixed ``daemon_``. Every
connection sets WAL and a busy timeout; the file is created 0600 in a 0700 directory
before SQLite opens it (SQLite gives its ``-wal``/``-shm`` files the same mode).

A row records how to find the agent's child again after a daemon restart: ``pid`` and
``pid_start_time`` (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot). A pid
is only "the same process" when both match, so reconcile never adopts a reused pid
(see :func:`process_matches`). ``last_seq`` / ``event_offset`` let a recovered agent's
event log be tailed from where the previous daemon stopped.

The ``agent.*`` handlers on top of this are built elsewhere; this module is storage only.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import jsondepth, paths
from tether.errors import DaemonError
from tether.procs import proc_start_time
from tether.store.sqlite import connect, typed_row

SCHEMA_VERSION: Final = 1
log = logging.getLogger("tether.daemon.fleet")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS daemon_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS daemon_agents (
    name TEXT PRIMARY KEY,
    run_dir TEXT NOT NULL,
    pid INTEGER,
    pid_start_time INTEGER,
    state TEXT NOT NULL,
    task TEXT,
    provider TEXT,
    model TEXT,
    cwd TEXT,
    argv TEXT,
    channel_id TEXT,
    deadline_at REAL,
    exit_code INTEGER,
    detail TEXT,
    last_seq INTEGER NOT NULL DEFAULT 0,
    event_offset INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    turn INTEGER NOT NULL DEFAULT 0,
    usage TEXT,
    started_at REAL,
    snapshot TEXT
);
CREATE INDEX IF NOT EXISTS daemon_agents_state ON daemon_agents (state);
"""


class AgentRecord(msgspec.Struct, kw_only=True):
    """One registry row. ``argv``, ``usage`` and ``snapshot`` are stored as JSON text.

    ``snapshot`` is the supervisor's state of the run's channel at ``event_offset``
    (opaque here), so a restarted daemon resumes tailing from that offset.
    """

    name: str
    run_dir: str
    state: str
    pid: int | None = None
    pid_start_time: int | None = None
    task: str | None = None
    provider: str | None = None
    model: str | None = None
    cwd: str | None = None
    argv: list[str] | None = None
    channel_id: str | None = None
    deadline_at: float | None = None
    exit_code: int | None = None
    detail: str | None = None
    last_seq: int = 0
    event_offset: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    turn: int = 0
    usage: dict[str, Any] | None = None
    started_at: float | None = None
    snapshot: dict[str, Any] | None = None
    pty: dict[str, Any] | None = None  # PTY agents: holder pid/start time, socket, size
    spawn: dict[str, Any] | None = None  # a queued agent: its agent.spawn parameters
    worktree: dict[str, Any] | None = None  # its git worktree: {path, branch, base}


COLUMNS: Final = tuple(AgentRecord.__struct_fields__)
_JSON_COLUMNS: Final = frozenset({"argv", "usage", "snapshot", "pty", "spawn", "worktree"})
# Columns added after the first schema: (name, type), added to older databases on open.
_ADDED_COLUMNS: Final = (
    ("turn", "INTEGER NOT NULL DEFAULT 0"),
    ("usage", "TEXT"),
    ("started_at", "REAL"),
    ("snapshot", "TEXT"),
    ("pty", "TEXT"),
    ("spawn", "TEXT"),
    ("worktree", "TEXT"),
)
_UPDATABLE: Final = frozenset(COLUMNS) - {"name", "created_at"}
# Column names come from AgentRecord, never from callers.
_INSERT: Final = (
    f"INSERT INTO daemon_agents ({', '.join(COLUMNS)}) "  # noqa: S608
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)


class AgentExists(DaemonError):
    def __init__(self, name: str) -> None:
        super().__init__(f"an agent named {name!r} already exists")
        self.name = name


class AgentNotFound(DaemonError, KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no agent named {self.name!r}"


class AgentRegistry:
    """CRUD over ``daemon_agents``. Not thread-safe: one per thread (or the event loop)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection

    @classmethod
    def open(cls, path: Path | None = None) -> AgentRegistry:
        db = open_db(path)
        with transaction(db):
            _create_schema(db)
        return cls(db)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> AgentRegistry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def insert(self, record: AgentRecord) -> AgentRecord:
        """Add ``record``; raises :class:`AgentExists` on a name collision."""
        now = time.time()
        record = msgspec.structs.replace(
            record, created_at=record.created_at or now, updated_at=now
        )
        row = _to_row(record)
        try:
            with transaction(self._db):
                self._db.execute(_INSERT, [row[c] for c in COLUMNS])
        except sqlite3.IntegrityError:
            raise AgentExists(record.name) from None
        return record

    def get(self, name: str) -> AgentRecord | None:
        cursor = self._db.execute("SELECT * FROM daemon_agents WHERE name = ?", (name,))
        row = cursor.fetchone()
        return None if row is None else _from_row(row)

    def require(self, name: str) -> AgentRecord:
        record = self.get(name)
        if record is None:
            raise AgentNotFound(name)
        return record

    def list(self, states: Sequence[str] | None = None) -> list[AgentRecord]:
        if states:
            marks = ", ".join("?" for _ in states)
            # Only placeholders are interpolated; the states are bound parameters.
            sql = f"SELECT * FROM daemon_agents WHERE state IN ({marks}) ORDER BY created_at"  # noqa: S608
            cursor = self._db.execute(sql, list(states))
        else:
            cursor = self._db.execute("SELECT * FROM daemon_agents ORDER BY created_at, name")
        return [_from_row(row) for row in cursor]

    def update(self, name: str, /, **fields: Any) -> AgentRecord:
        """Set ``fields`` on the row and read it back; raises :class:`AgentNotFound` or
        ``ValueError``."""
        self.save(name, **fields)
        return self.require(name)

    def save(self, name: str, /, **fields: Any) -> None:
        """:meth:`update` without reading the row back (an agent persisting its progress
        has no use for it)."""
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}")
        fields["updated_at"] = time.time()
        for column in _JSON_COLUMNS & set(fields):
            fields[column] = _json_text(fields[column])
        # Column names were checked against _UPDATABLE above; values are bound parameters.
        assignments = ", ".join(f"{column} = ?" for column in fields)
        with transaction(self._db):
            cursor = self._db.execute(
                f"UPDATE daemon_agents SET {assignments} WHERE name = ?",  # noqa: S608
                [*fields.values(), name],
            )
        if cursor.rowcount == 0:
            raise AgentNotFound(name)

    def set_state(self, name: str, state: str, *, detail: str | None = None) -> AgentRecord:
        return self.update(name, state=state, detail=detail)

    def delete(self, name: str) -> None:
        with transaction(self._db):
            cursor = self._db.execute("DELETE FROM daemon_agents WHERE name = ?", (name,))
        if cursor.rowcount == 0:
            raise AgentNotFound(name)


def _create_schema(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    present = {row[1] for row in db.execute("PRAGMA table_info(daemon_agents)")}
    for name, kind in _ADDED_COLUMNS:
        if name not in present:
            db.execute(f"ALTER TABLE daemon_agents ADD COLUMN {name} {kind}")
    db.execute(
        "INSERT OR IGNORE INTO daemon_meta (key, value) VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )


def open_db(path: Path | None = None) -> sqlite3.Connection:
    """A connection to the registry's database (default ``paths.db_path()``), the file
    created 0600 in a 0700 directory first; rows by name."""
    path = paths.db_path() if path is None else path
    paths.ensure_private_dir(path.parent)
    if not path.exists():
        paths.create_private_file(path, exclusive=False)
    return connect(path, named_rows=True)


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _json_text(value: Any) -> str | None:
    return None if value is None else _ENCODE(value).decode()


_ENCODE: Final = msgspec.json.Encoder().encode


def _to_row(record: AgentRecord) -> dict[str, Any]:
    row = msgspec.structs.asdict(record)
    for column in _JSON_COLUMNS:
        row[column] = _json_text(row[column])
    return row


def _from_row(row: sqlite3.Row) -> AgentRecord:
    """A row as a record; a JSON column that is not JSON of its field's type (a damaged or
    foreign database) reads as None, never an error of every later list."""
    values = {key: row[key] for key in row.keys() if key in _COLUMN_SET}  # noqa: SIM118
    for column in _JSON_COLUMNS:
        if values.get(column) is not None:
            try:
                values[column] = msgspec.convert(
                    jsondepth.loads(values[column]), _JSON_TYPES[column]
                )
            except (ValueError, msgspec.ValidationError):
                values[column] = None
    record, wrong = typed_row(AgentRecord, values)
    if wrong:
        log.warning("agent %s: its registry row had %s of the wrong type", record.name, wrong)
    return record


_JSON_TYPES: Final[dict[str, Any]] = {
    "argv": list[str],
    "usage": dict[str, Any],
    "snapshot": dict[str, Any],
    "pty": dict[str, Any],
    "spawn": dict[str, Any],
    "worktree": dict[str, str],
}


_COLUMN_SET: Final = frozenset(COLUMNS)


# -- processes ---------------------------------------------------------------------------------


def own_start_time() -> int | None:
    return proc_start_time(os.getpid())
