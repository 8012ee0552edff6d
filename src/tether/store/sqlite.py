"""The one way tether opens its SQLite database (the run index, the inbox, the registry).

Every connection is in autocommit mode (callers open their own ``BEGIN IMMEDIATE``
transactions), waits up to :data:`BUSY_TIMEOUT_S` for a lock held by another process (a
drain, the daemon, a CLI command), and uses WAL with ``synchronous = NORMAL``: readers
never block the writer, and a crash loses no committed transaction.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Final

__all__ = ["BUSY_TIMEOUT_S", "connect"]

BUSY_TIMEOUT_S: Final = 30.0


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
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        db.close()
        raise
    return db
