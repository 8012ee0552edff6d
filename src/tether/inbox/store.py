"""The inbox tables in tether's shared SQLite database (WAL).

Schema (only ``inbox_*`` names; the file also holds the run index and the
daemon registry)::

    inbox_messages   one row per inbox line, in file order by (run_id, offset)
      id               INTEGER PRIMARY KEY (rowid)
      run_id           TEXT NOT NULL
      offset           INTEGER NOT NULL      byte offset of the line's first byte
      type             TEXT NULL             the object's "type" (NULL: none, or rejected)
      body             TEXT NULL             the JSON object as written (NULL: rejected)
      raw              TEXT NULL             a rejected line's text (over-long: its head)
      rejected_reason  TEXT NULL             "<code>: <what happened>" (NULL: accepted)
      received_at      REAL NOT NULL         unix time the drain stored it
      msg_key          TEXT GENERATED "<run_id>:<offset>", unique through
                       UNIQUE (run_id, offset), which INSERT OR IGNORE relies on

    inbox_offsets    one row per run: how far its inbox file is stored
      run_id PRIMARY KEY, path, inode, dev, offset, skipping, status, updated_at
      status: ok | truncated | replaced (sticky: such a file is never re-imported)

    inbox_incidents  what the drain found wrong with a file (truncation, replacement)
      id, run_id, path, kind, detail, at

    inbox_answers    the answer to a clarification / approval_request, beside it
      msg_key PRIMARY KEY (the question's), run_id, answer, decision (approve | deny
      | NULL), seq (the steer / follow-up that carried it), answered_at

    inbox_closing    a partial index of the lines that close a question (the child's
      ``approval_decision`` and ``question_closed``), by run: what still waits is
      found without reading a run's other lines

``msg_key`` is a generated column rather than a stored primary key: the
(run_id, offset) index is needed anyway to list a run in order, so uniqueness
rides on it and each row costs one table and one index insert.

Rows and the offset that covers them are written in ONE transaction
(``BEGIN IMMEDIATE``), so a drain killed at any instant and restarted loses
nothing and duplicates nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from itertools import chain
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple

import msgspec

from tether import jsondepth
from tether.inbox.messages import (
    InboxMessage,
    InboxRejection,
    RejectCode,
    decode_body,
)
from tether.paths import DIR_MODE, FILE_MODE
from tether.store.sqlite import connect, typed_row

__all__ = [
    "ROWS_PER_INSERT",
    "AcceptedRow",
    "InboxStore",
    "OffsetState",
    "RejectedRow",
    "StoredMessage",
    "open_store",
]


_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS inbox_messages (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    offset INTEGER NOT NULL,
    type TEXT,
    body TEXT,
    raw TEXT,
    rejected_reason TEXT,
    received_at REAL NOT NULL,
    msg_key TEXT GENERATED ALWAYS AS (run_id || ':' || offset) VIRTUAL,
    UNIQUE (run_id, offset)
);
CREATE TABLE IF NOT EXISTS inbox_offsets (
    run_id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    inode INTEGER NOT NULL,
    dev INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    skipping INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL DEFAULT 'ok',
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS inbox_incidents (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS inbox_answers (
    msg_key TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    answer TEXT NOT NULL,
    decision TEXT,
    seq INTEGER,
    answered_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_closing ON inbox_messages (run_id)
    WHERE type IN ('approval_decision', 'question_closed');
"""

# Accepted and rejected rows go through two statements (NULLs need no binding), each
# inserting ROWS_PER_INSERT rows per step: one sqlite3 step and one parameter list per
# group instead of per row, and the run id and the time bound once per group (?1, ?2).
# A chunk's last rows (fewer than a group) go through the same statement of one row.
_ACCEPTED_INTO: Final = (
    "INSERT OR IGNORE INTO inbox_messages (run_id, offset, type, body, received_at) VALUES "
)
_REJECTED_INTO: Final = (
    "INSERT OR IGNORE INTO inbox_messages (run_id, offset, raw, rejected_reason, received_at)"
    " VALUES "
)
ROWS_PER_INSERT: Final = 64


def _values(rows: int) -> str:
    """``rows`` value rows sharing ?1 (run_id) and ?2 (received_at), three parameters each."""
    return ", ".join(f"(?1, ?{3 * i + 3}, ?{3 * i + 4}, ?{3 * i + 5}, ?2)" for i in range(rows))


_ONE: Final = _values(1)
_GROUP: Final = _values(ROWS_PER_INSERT)
_ROW_FIELDS: Final = ("run_id", "offset", "type", "body", "raw", "rejected_reason", "received_at")
MAX_OPEN_PER_RUN: Final = 1000  # open questions read back per run (the oldest)
_SELECT: Final = (
    "SELECT run_id, offset, type, body, raw, rejected_reason, received_at FROM inbox_messages"
)


AcceptedRow = tuple[int, str | None, str]
"""An accepted line: offset, type, body (the run id and the time are the chunk's; plain
tuples: the drain builds millions)."""

RejectedRow = tuple[int, str, str]
"""A rejected line: offset, raw, rejected_reason."""


class OffsetState(NamedTuple):
    """A run's row in ``inbox_offsets``."""

    run_id: str
    path: str
    inode: int
    dev: int
    offset: int
    skipping: bool
    status: str


class _JsonView(msgspec.Struct, kw_only=True):
    msg_key: str
    run_id: str
    offset: int
    type: str | None
    body: msgspec.Raw | None
    raw: str | None
    rejected_reason: str | None
    received_at: float


_json_encoder: Final = msgspec.json.Encoder()


class StoredMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One stored inbox line, as a reader of the table sees it."""

    run_id: str
    offset: int
    type: str | None
    body: str | None
    raw: str | None
    rejected_reason: str | None
    received_at: float

    @classmethod
    def accepted(cls, run_id: str, now: float, row: AcceptedRow) -> StoredMessage:
        offset, kind, body = row
        return cls(
            run_id=run_id,
            offset=offset,
            type=kind,
            body=body,
            raw=None,
            rejected_reason=None,
            received_at=now,
        )

    @classmethod
    def rejected_row(cls, run_id: str, now: float, row: RejectedRow) -> StoredMessage:
        offset, raw, reason = row
        return cls(
            run_id=run_id,
            offset=offset,
            type=None,
            body=None,
            raw=raw,
            rejected_reason=reason,
            received_at=now,
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> StoredMessage:
        """From a ``SELECT`` in the column order of ``_SELECT``; values of the wrong type
        (a damaged database) read as their defaults (:func:`~tether.store.sqlite.typed_row`)."""
        if not (
            type(row[0]) is str
            and type(row[1]) is int
            and type(row[6]) is float
            and (row[2] is None or type(row[2]) is str)
            and (row[3] is None or type(row[3]) is str)
            and (row[4] is None or type(row[4]) is str)
            and (row[5] is None or type(row[5]) is str)
        ):
            read, wrong = typed_row(cls, dict(zip(_ROW_FIELDS, row, strict=False)))
            # a body is embedded as JSON: one of the wrong type is none ("no body")
            return msgspec.structs.replace(read, body=None) if "body" in wrong else read
        return cls(
            run_id=row[0],
            offset=row[1],
            type=row[2],
            body=row[3],
            raw=row[4],
            rejected_reason=row[5],
            received_at=row[6],
        )

    @property
    def msg_key(self) -> str:
        return f"{self.run_id}:{self.offset}"

    @property
    def rejected(self) -> bool:
        return self.rejected_reason is not None

    def message(self) -> InboxMessage | InboxRejection:
        """The typed message (or the rejection) this row records. Never raises."""
        if self.rejected_reason is not None or self.body is None:
            reason = self.rejected_reason or "no body"
            code_text, _, detail = reason.partition(": ")
            try:
                code = RejectCode(code_text)
            except ValueError:
                code, detail = RejectCode.NOT_JSON, reason
            return InboxRejection(code=code, reason=detail or reason, raw=self.raw or "")
        return decode_body(self.body, self.type)

    def to_json(self) -> bytes:
        """One JSON object (no newline); ``body`` is embedded as the object itself."""
        view = _JsonView(
            msg_key=self.msg_key,
            run_id=self.run_id,
            offset=self.offset,
            type=self.type,
            body=_embedded(self.body),
            raw=self.raw,
            rejected_reason=self.rejected_reason,
            received_at=self.received_at,
        )
        return _json_encoder.encode(view)


def _embedded(body: str | None) -> msgspec.Raw | None:
    """A stored body as the JSON it is (a damaged row's text that is not JSON: none)."""
    if body is None:
        return None
    raw = body.encode()
    try:
        jsondepth.decode_any(raw)  # the depth check first: a damaged body may be a bomb
    except msgspec.DecodeError:
        return None
    return msgspec.Raw(raw)


def _prepare_file(path: Path) -> None:
    """Create the database's directories (0700) and file (0600) if missing.

    Directories that already exist keep their mode: ``--db /tmp/x.db`` must not
    chmod ``/tmp``.
    """
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):  # each new directory 0700, existing ones untouched
        directory.mkdir(mode=DIR_MODE, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        os.close(fd)


class InboxStore:
    """A connection to the database with the inbox tables; close it when done.

    One store is used by one thread at a time (the drain keeps it on one worker).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        _prepare_file(self.path)
        self._db = connect(self.path, any_thread=True)
        try:
            self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    # -- reading -------------------------------------------------------------

    def offset_state(self, run_id: str) -> OffsetState | None:
        row = self._db.execute(
            "SELECT run_id, path, inode, dev, offset, skipping, status"
            " FROM inbox_offsets WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        return OffsetState(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6])

    def count_offsets(self, run_id: str, low: int, high: int) -> int:
        """How many rows ``run_id`` has at offsets in ``[low, high)`` (an index range count)."""
        row = self._db.execute(
            "SELECT count(*) FROM inbox_messages WHERE run_id = ? AND offset >= ? AND offset < ?",
            (run_id, low, high),
        ).fetchone()
        return int(row[0])

    def existing_offsets(self, run_id: str, low: int, high: int) -> set[int]:
        """Offsets already stored for ``run_id`` in ``[low, high)``."""
        rows = self._db.execute(
            "SELECT offset FROM inbox_messages WHERE run_id = ? AND offset >= ? AND offset < ?",
            (run_id, low, high),
        )
        return {row[0] for row in rows}

    def messages(
        self, run_id: str, *, after: int = -1, limit: int | None = None
    ) -> list[StoredMessage]:
        """A run's stored messages with offset > ``after``, in file order."""
        rows = self._db.execute(
            _SELECT + " WHERE run_id = ? AND offset > ? ORDER BY offset LIMIT ?",
            (run_id, after, -1 if limit is None else limit),
        )
        return [StoredMessage.from_row(row) for row in rows]

    def recent(self, run_id: str, *, limit: int, max_chars: int) -> list[StoredMessage]:
        """A run's last ``limit`` messages, in file order, each bounded for a view: a body
        longer than ``max_chars`` comes as ``{type, text, cut}`` (its text field cut,
        ``cut`` the body's length), ``raw`` and ``rejected_reason`` cut. Done in SQL: an
        agent's 16 MiB lines are never read whole into this process."""
        rows = self._db.execute(
            "SELECT run_id, offset, type, CASE WHEN length(body) <= :n THEN body"
            " WHEN json_valid(body) THEN json_object('type', type, 'text', substr(coalesce("
            " json_extract(body, '$.q'), json_extract(body, '$.reason'),"
            " json_extract(body, '$.text'), json_extract(body, '$.summary'),"
            " json_extract(body, '$.note'), ''), 1, :n), 'cut', length(body)) END,"
            " substr(raw, 1, :n), substr(rejected_reason, 1, :n), received_at"
            " FROM inbox_messages WHERE run_id = :run ORDER BY offset DESC LIMIT :limit",
            {"run": run_id, "n": max_chars, "limit": limit},
        ).fetchall()
        return [StoredMessage.from_row(row) for row in reversed(rows)]

    def of_type(self, run_id: str, kind: str, *, limit: int = 10_000) -> list[StoredMessage]:
        """A run's accepted messages of type ``kind``, in file order (at most ``limit``)."""
        rows = self._db.execute(
            _SELECT + " WHERE run_id = ? AND type = ? ORDER BY offset LIMIT ?",
            (run_id, kind, limit),
        )
        return [StoredMessage.from_row(row) for row in rows]

    def iter_messages(self, run_id: str, *, batch: int = 1000) -> Iterator[StoredMessage]:
        """All of a run's messages in order, fetched in batches (memory stays flat)."""
        after = -1
        while True:
            page = self.messages(run_id, after=after, limit=batch)
            yield from page
            if len(page) < batch:
                return
            after = page[-1].offset

    def count(self, run_id: str | None = None) -> int:
        if run_id is None:
            row = self._db.execute("SELECT count(*) FROM inbox_messages").fetchone()
        else:
            row = self._db.execute(
                "SELECT count(*) FROM inbox_messages WHERE run_id = ?", (run_id,)
            ).fetchone()
        return int(row[0])

    def incidents(self, run_id: str | None = None) -> list[tuple[str, str, str, str, float]]:
        """``(run_id, path, kind, detail, at)`` rows, oldest first."""
        query = "SELECT run_id, path, kind, detail, at FROM inbox_incidents"
        params: tuple[str, ...] = ()
        if run_id is not None:
            query, params = query + " WHERE run_id = ?", (run_id,)
        return [tuple(row) for row in self._db.execute(query + " ORDER BY id", params)]

    def message(self, msg_key: str) -> StoredMessage | None:
        """The stored message ``<run_id>:<offset>``, or None."""
        run_id, _, offset = msg_key.rpartition(":")
        # the key exactly as the store makes it: ASCII digits, no leading zero, in range
        # (before: "RUN:03" or "RUN:٣" named offset 3 under another key, so a question
        # could be answered twice, and 20 digits were an OverflowError)
        if not run_id or not (offset.isascii() and offset.isdigit()) or len(offset) > 18:
            return None
        if str(int(offset)) != offset:
            return None
        row = self._db.execute(
            _SELECT + " WHERE run_id = ? AND offset = ?", (run_id, int(offset))
        ).fetchone()
        return None if row is None else StoredMessage.from_row(row)

    def answers(self, run_id: str) -> dict[str, dict[str, Any]]:
        """msg_key -> ``{answer, decision, seq, answered_at}`` for a run's answered questions."""
        rows = self._db.execute(
            "SELECT msg_key, answer, decision, seq, answered_at FROM inbox_answers"
            " WHERE run_id = ?",
            (run_id,),
        )
        keys = ("answer", "decision", "seq", "answered_at")
        return {row[0]: dict(zip(keys, row[1:], strict=True)) for row in rows}

    def open_questions(
        self, run_ids: Sequence[str], *, per_run: int = MAX_OPEN_PER_RUN
    ) -> list[StoredMessage]:
        """The clarifications and approval requests of ``run_ids`` that still wait, in
        order, the oldest ``per_run`` of each run: not answered, and not closed by the
        child (an ``approval_decision`` or a ``question_closed`` line of the same run
        naming the key: a rule, a timeout, the turn's end).

        The closing lines' keys are read once into a set, each only when it names a key
        of its own run (a run's agent may write thousands of questions and decisions:
        looking each question's up among them was quadratic, minutes of CPU for 10,000
        of each)."""
        if not run_ids:
            return []
        marks = ", ".join("?" for _ in run_ids)
        # Only placeholders are interpolated; the run ids are bound parameters.
        rows = self._db.execute(
            "SELECT run_id, offset, type, body, raw, rejected_reason, received_at FROM ("  # noqa: S608
            " SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY offset) AS n"
            f" FROM inbox_messages WHERE run_id IN ({marks})"
            " AND type IN ('clarification', 'approval_request')"
            " AND msg_key NOT IN (SELECT msg_key FROM inbox_answers)"
            " AND msg_key NOT IN (SELECT json_extract(body, '$.key') AS k"
            f" FROM inbox_messages WHERE run_id IN ({marks})"
            " AND type IN ('approval_decision', 'question_closed') AND json_valid(body)"
            " AND json_type(body, '$.key') = 'text'"
            " AND substr(k, 1, length(run_id) + 1) = run_id || ':')"  # its own run's keys
            ") WHERE n <= ? ORDER BY run_id, offset",
            [*run_ids, *run_ids, per_run],
        )
        return [StoredMessage.from_row(row) for row in rows]

    def closing(self, msg_key: str, run_id: str) -> dict[str, Any] | None:
        """The child's line that closed question ``msg_key`` (an ``approval_decision`` or a
        ``question_closed`` naming it, same run), or None while it is open."""
        row = self._db.execute(
            "SELECT body FROM inbox_messages WHERE run_id = ?"
            " AND type IN ('approval_decision', 'question_closed') AND json_valid(body)"
            " AND json_extract(body, '$.key') = ? ORDER BY offset LIMIT 1",
            (run_id, msg_key),
        ).fetchone()
        if row is None:
            return None
        try:
            body = jsondepth.decode_any(row[0])
        except msgspec.DecodeError:  # too deep, or not JSON: the line says nothing usable
            return {}
        return body if isinstance(body, dict) else {}

    def record_answer(
        self, msg_key: str, run_id: str, answer: str, decision: str | None, now: float
    ) -> bool:
        """Record the answer to ``msg_key``; False when it was answered already."""
        with self.transaction():
            before = self._db.total_changes
            self._db.execute(
                "INSERT OR IGNORE INTO inbox_answers (msg_key, run_id, answer, decision,"
                " answered_at) VALUES (?, ?, ?, ?, ?)",
                (msg_key, run_id, answer, decision, now),
            )
            return self._db.total_changes > before

    def set_answer_seq(self, msg_key: str, seq: int) -> None:
        with self.transaction():
            self._db.execute("UPDATE inbox_answers SET seq = ? WHERE msg_key = ?", (seq, msg_key))

    def forget_answer(self, msg_key: str) -> None:
        with self.transaction():
            self._db.execute("DELETE FROM inbox_answers WHERE msg_key = ?", (msg_key,))

    # -- writing (inside transaction()) ---------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on any exception)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def insert_rows(
        self,
        run_id: str,
        now: float,
        accepted: Sequence[AcceptedRow],
        rejected: Sequence[RejectedRow] = (),
    ) -> int:
        """INSERT OR IGNORE the rows of ``run_id``, received at ``now``; how many were new."""
        before = self._db.total_changes
        if accepted:
            self._insert(_ACCEPTED_INTO, run_id, now, accepted)
        if rejected:
            self._insert(_REJECTED_INTO, run_id, now, rejected)
        return self._db.total_changes - before

    def _insert(
        self, into: str, run_id: str, now: float, rows: Sequence[tuple[int, Any, Any]]
    ) -> None:
        group = ROWS_PER_INSERT
        full = len(rows) - len(rows) % group
        if full:
            flat = list(chain.from_iterable(rows[:full]))  # one pass, in C
            width, shared = 3 * group, [run_id, now]
            steps = (shared + flat[i : i + width] for i in range(0, len(flat), width))
            self._db.executemany(into + _GROUP, steps)
        if full < len(rows):
            self._db.executemany(into + _ONE, [(run_id, now, *row) for row in rows[full:]])

    def save_offset(
        self,
        *,
        run_id: str,
        path: str,
        inode: int,
        dev: int,
        offset: int,
        skipping: bool,
        status: str,
        now: float,
    ) -> None:
        self._db.execute(
            "INSERT INTO inbox_offsets"
            " (run_id, path, inode, dev, offset, skipping, status, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (run_id) DO UPDATE SET path = excluded.path,"
            " inode = excluded.inode, dev = excluded.dev, offset = excluded.offset,"
            " skipping = excluded.skipping, status = excluded.status,"
            " updated_at = excluded.updated_at",
            (run_id, path, inode, dev, offset, int(skipping), status, now),
        )

    def record_incident(
        self, *, run_id: str, path: str, kind: str, detail: str, now: float
    ) -> None:
        self._db.execute(
            "INSERT INTO inbox_incidents (run_id, path, kind, detail, at) VALUES (?, ?, ?, ?, ?)",
            (run_id, path, kind, detail, now),
        )

    def forget_offsets(self, run_id: str | None = None) -> None:
        """Drop stored offsets (all, or one run's): the next drain re-reads from 0."""
        if run_id is None:
            self._db.execute("DELETE FROM inbox_offsets")
        else:
            self._db.execute("DELETE FROM inbox_offsets WHERE run_id = ?", (run_id,))

    # -- closing -------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> InboxStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(path: str | os.PathLike[str] | None = None) -> InboxStore:
    """Open the inbox tables in ``path`` or, by default, tether's database.

    The default state directory is created (or tightened) to 0700.
    """
    if path is None:
        from tether.paths import db_path, ensure_private_dir

        default = db_path()
        ensure_private_dir(default.parent)
        return InboxStore(default)
    return InboxStore(path)
