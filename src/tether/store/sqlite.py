"""The one way tether opens its SQLite database (the run index, the inbox, the registry).

Every connection is in autocommit mode (callers open their own ``BEGIN IMMEDIATE``
transactions), waits up to :data:`BUSY_TIMEOUT_S` for a lock held by another process (a
drain, the daemon, a CLI command), and uses WAL with ``synchronous = NORMAL``: readers
never block the writer, and a crash loses no committed transaction.

A database created here has :data:`PAGE_SIZE` pages (an existing one keeps its own: SQLite
ignores the pragma once the file has pages). Bulk inserts (an inbox drain: ~200 B rows, two
B-trees) cost 1.2-1.3x less CPU with 16 KiB pages than with the default 4 KiB (fewer page
splits, and a quarter of the WAL writes and checkpoint copies, each a system call); a small
commit writes a few 16 KiB pages instead of 4 KiB ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import time
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec

T = TypeVar("T")

__all__ = ["BUSY_TIMEOUT_S", "PAGE_SIZE", "connect", "typed_row"]

BUSY_TIMEOUT_S: Final = 30.0
PAGE_SIZE: Final = 16384


def connect(
    path: str | os.PathLike[str], *, named_rows: bool = False, any_thread: bool = False
) -> sqlite3.Connection:
    """An open connection to ``path`` (which must exist); close it when done.

    ``named_rows`` gives :class:`sqlite3.Row` rows; ``any_thread`` lets one thread at a
    time other than the opening one use it (the inbox drain's worker).
    """
    db = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=not any_thread
    )
    try:
        if named_rows:
            db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        db.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # before WAL writes the first page
        _journal_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        db.close()
        raise
    return db


def _journal_wal(db: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, retried while SQLITE_BUSY, up to ``BUSY_TIMEOUT_S``.

    Turning a new database to WAL takes an exclusive lock that SQLite does not wait for
    through the busy handler when waiting could deadlock (connections making the same
    new file WAL at once: one of four writer threads got "database is locked" at once in
    ``tests/store/test_run_index.py``), so the wait is here.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def typed_row(cls: type[T], values: dict[str, Any]) -> tuple[T, list[str]]:
    """A row's ``values`` as a ``cls`` (a msgspec Struct or a dataclass), and the fields
    whose value was of the wrong type (SQLite keeps any type in any column: a damaged
    database, another version's, a hand edit): each of those its default, a required one
    as text or zero, so one bad row never breaks every reader of the table."""
    try:
        return msgspec.convert(values, cls), []
    except msgspec.ValidationError:
        pass
    hints = typing.get_type_hints(cls)
    fixed: dict[str, Any] = {}
    wrong: list[str] = []
    for name, default in _defaults(cls).items():
        try:
            fixed[name] = msgspec.convert(values.get(name), hints[name])
        except msgspec.ValidationError:
            wrong.append(name)
            fixed[name] = _zero(hints[name], values.get(name)) if default is None else default()
    return cls(**fixed), wrong


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _zero(kind: Any, value: Any) -> Any:
    """A required field's stand-in for a value of the wrong type: its text, or zero."""
    for stand_in in (str(value), 0):
        with contextlib.suppress(msgspec.ValidationError):
            return msgspec.convert(stand_in, kind)
    return None


def _defaults(cls: type[Any]) -> dict[str, Callable[[], Any] | None]:
    """Each field's name and a maker of its default (None: it has none)."""
    found: dict[str, Callable[[], Any] | None] = {}
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                found[field.name] = _constant(field.default)
            elif field.default_factory is not dataclasses.MISSING:
                found[field.name] = field.default_factory
            else:
                found[field.name] = None
        return found
    for info in msgspec.structs.fields(cls):
        if info.required:
            found[info.name] = None
        elif info.default_factory is not msgspec.NODEFAULT:
            found[info.name] = info.default_factory
        else:
            found[info.name] = _constant(info.default)
    return found
