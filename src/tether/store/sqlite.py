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

import os
import sqlite3
import time
from typing import Final

__all__ = ["BUSY_TIMEOUT_S", "PAGE_SIZE", "connect"]

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
