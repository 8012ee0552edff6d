"""The daemon's channels on disk, so a channel outlives a daemon restart.

Theory of operation: the reference daemon (fno-agents) keeps a channel in its registry,
not in memory (an agent's registry entry carries its ``mcp_channel_id`` and
``cc_session_id``; REFERENCE-FACTS §3: "the channel is stored in the registry"), so a
channel registered before a restart is still routed after it. tether keeps its channels
in the registry's database too, in two tables beside ``daemon_agents``:

- ``daemon_channels``: one row per channel (id, session, name, when it was made);
- ``daemon_channel_held``: the envelopes pushed while no receiver was connected, in push
  order, until they are handed to one.

Receivers are connections, so they are not stored: after a restart every channel starts
without one; the channel server (``tether mcp-channel``) registers its session again when
its connection to the daemon drops, gets the same channel back and is handed what was held.
Storage only: :class:`tether.daemon.channels.hub.ChannelHub` decides what to keep.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from tether.daemon.fleet.registry import open_db, transaction

__all__ = ["ChannelStore", "StoredChannel"]

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS daemon_channels (
        channel_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        name TEXT,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS daemon_channel_held (
        channel_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        envelope TEXT NOT NULL,
        PRIMARY KEY (channel_id, seq)
    )""",
)
_ENCODE: Final = msgspec.json.Encoder()
_DECODE: Final = msgspec.json.Decoder()


class StoredChannel(NamedTuple):
    channel_id: str
    session_id: str
    name: str | None
    created_at: float
    held: list[Any]  # the envelopes waiting for a receiver, oldest first


class ChannelStore:
    """``daemon_channels`` and ``daemon_channel_held``. One per thread (the event loop)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection

    @classmethod
    def open(cls, path: Path | None = None) -> ChannelStore:
        db = open_db(path)
        with transaction(db):
            for statement in _SCHEMA:
                db.execute(statement)
        return cls(db)

    def close(self) -> None:
        self._db.close()

    def load(self) -> list[StoredChannel]:
        """Every stored channel with what it holds, oldest channel first."""
        held: dict[str, list[Any]] = {}
        for row in self._db.execute(
            "SELECT channel_id, envelope FROM daemon_channel_held ORDER BY channel_id, seq"
        ):
            held.setdefault(row["channel_id"], []).append(_DECODE.decode(row["envelope"]))
        rows = self._db.execute("SELECT * FROM daemon_channels ORDER BY created_at, channel_id")
        return [
            StoredChannel(
                row["channel_id"],
                row["session_id"],
                row["name"],
                row["created_at"],
                held.get(row["channel_id"], []),
            )
            for row in rows
        ]

    def save(self, channel_id: str, session_id: str, name: str | None) -> None:
        """Add the channel, or rename it when it is stored already."""
        with transaction(self._db):
            self._db.execute(
                "INSERT INTO daemon_channels (channel_id, session_id, name, created_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (channel_id) DO UPDATE SET name = excluded.name",
                (channel_id, session_id, name, time.time()),
            )

    def delete(self, channel_id: str) -> None:
        with transaction(self._db):
            self._db.execute("DELETE FROM daemon_channel_held WHERE channel_id = ?", (channel_id,))
            self._db.execute("DELETE FROM daemon_channels WHERE channel_id = ?", (channel_id,))

    def hold(self, channel_id: str, envelope: Any) -> None:
        """Keep ``envelope`` after those the channel already holds."""
        with transaction(self._db):
            self._db.execute(
                "INSERT INTO daemon_channel_held (channel_id, seq, envelope) VALUES (?, "
                "(SELECT COALESCE(MAX(seq), 0) + 1 FROM daemon_channel_held WHERE channel_id = ?),"
                " ?)",
                (channel_id, channel_id, _ENCODE.encode(envelope).decode()),
            )

    def release_oldest(self, channel_id: str) -> None:
        """The oldest held envelope was handed over: forget it."""
        with transaction(self._db):
            self._db.execute(
                "DELETE FROM daemon_channel_held WHERE channel_id = ? AND seq = "
                "(SELECT MIN(seq) FROM daemon_channel_held WHERE channel_id = ?)",
                (channel_id, channel_id),
            )
