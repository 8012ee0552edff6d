"""Best-effort companions of a run: its row in the run index and its inbox drain.

Neither may ever break a run: index trouble becomes a note on the handle, and an inbox
that cannot be drained is given up on (the file stays in the run directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from tether import exits, jsondepth
from tether.inbox.answers import QUESTION_TYPES
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.outcome import RunResult
from tether.runtime.parent.rundir import clear_pending_row, mark_pending_row
from tether.store.index import RunIndex, RunRecord
from tether.wire.session import State


class Recorder(Observer):
    """Writes the run's row in the index; failures become notes, never errors.

    The run directory carries a pending-row mark naming this process
    (:func:`~tether.runtime.parent.rundir.mark_pending_row`). A row the start could not
    write (a full disk) is written whole at the end; only once the end is in the index
    does the mark go. A run whose row still cannot be written keeps its mark, and the next
    reader of the index recovers the row from the directory
    (:mod:`tether.runtime.parent.recovery`).
    """

    def __init__(self, index: RunIndex, run_id: str) -> None:
        self._index = index
        self._run_id = run_id
        self._created_at = time.time()
        self._record: RunRecord | None = None

    async def start(self, record: RunRecord) -> str | None:
        self._created_at = record.created_at
        self._record = record
        await asyncio.to_thread(mark_pending_row, Path(record.run_dir))
        return await self._call(self._index.insert, record)

    async def started(self, pid: int) -> str | None:
        if self._record is not None:
            self._record = replace(self._record, pid=pid)
        return await self._call(
            self._index.update, self._run_id, pid=pid, status=State.RUNNING.value
        )

    async def finish(self, result: Any) -> str | None:
        end = {
            "status": exits.recorded_status(result.status, result.stop_reason),
            "ended_at": self._created_at + result.elapsed_s,
            "usage": result.usage,
            "stop_reason": result.stop_reason,
            "error": result.error,
            "truncated": result.truncated,
        }
        return await self._call(self._write_end, end)

    def _write_end(self, end: dict[str, Any]) -> None:
        """The run's end in its row, the whole row when the start could not write it;
        then the pending mark goes (kept when this raises: the row is recovered later)."""
        if not self._index.update(self._run_id, **end) and self._record is not None:
            self._index.insert(replace(self._record, **end))
        if self._record is not None:
            clear_pending_row(Path(self._record.run_dir))

    async def on_end(self, result: RunResult) -> str | None:
        return await self.finish(result)

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> str | None:
        try:
            await asyncio.to_thread(fn, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            return f"run index not updated: {exc}"
        return None


INBOX_SLICE_BYTES = 1 << 20  # inbox bytes read (and handed out) per drain: bounded memory


class _SharedStore:
    """One inbox connection per database for every tail of this process (each one would
    cost ~190 KiB and two descriptors: 1,000 agents under one daemon), used by one
    worker at a time under its lock; closed when its last tail closes."""

    _lock: ClassVar = threading.Lock()
    _open: ClassVar[dict[str, _SharedStore]] = {}  # the process's one registry

    def __init__(self, key: str, db: Path | None) -> None:
        from tether.inbox import open_store

        self.key, self.users = key, 1
        self.store: Any = open_store(db)
        self.lock = threading.Lock()

    @classmethod
    def acquire(cls, db: Path | None) -> _SharedStore:
        key = "" if db is None else str(db)
        with cls._lock:
            shared = cls._open.get(key)
            if shared is not None:
                shared.users += 1
                return shared
            shared = cls._open[key] = _SharedStore(key, db)
            return shared

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return
            del self._open[self.key]
        with self.lock:
            self.store.close()


class InboxTail:
    """The run's inbox, drained into SQLite by the inbox package, one bounded slice a call.

    :meth:`drain` reads at most :data:`INBOX_SLICE_BYTES` of the file and returns the
    messages of that slice with their sizes; :attr:`more` says whether more is waiting
    (the caller comes back after yielding), so a 1 GiB inbox never sits in memory.
    :meth:`close` stores whatever is left without handing it out. The tails of one
    database share its connection (:class:`_SharedStore`).
    """

    def __init__(self, path: Path, run_id: str, db: Path | None) -> None:
        self.path, self.run_id, self.db = path, run_id, db
        self.more = False
        self._shared: _SharedStore | None = None
        self._broken = False
        self._unfinished: Any = None  # the inbox's drain.Unfinished, made at the first drain
        self._stored_unread = 0  # lines close() stored without handing them out

    async def drain(self) -> list[tuple[dict[str, Any], int, int]]:
        """The next slice's messages, each with its size in bytes and its offset in the
        inbox file (``[]`` once broken)."""
        if self._broken:
            return []
        try:
            return await asyncio.to_thread(self._drain_sync, True)
        except Exception:  # noqa: BLE001 (the inbox must never break a run)
            self._broken, self.more = True, False
            return []

    def _drain_sync(self, collect: bool) -> list[tuple[dict[str, Any], int, int]]:
        from tether.inbox.drain import Unfinished, drain_file

        if self._shared is None:
            self._shared = _SharedStore.acquire(self.db)
            self._unfinished = Unfinished()
        with self._shared.lock:
            result = drain_file(
                self._shared.store,
                self.path,
                self.run_id,
                collect=collect,
                max_bytes=INBOX_SLICE_BYTES,
                unfinished=self._unfinished,
            )
        self.more = result.more
        self._stored_unread += 0 if collect else result.new + result.rejected
        return [(*inbox_message(m), m.offset) for m in result.messages]

    async def close(self) -> int:
        """Store the rest of the inbox (slice by slice, nothing handed out), then close.
        Returns how many lines it stored that were not handed out."""
        with contextlib.suppress(Exception):
            while not self._broken:
                await asyncio.to_thread(self._drain_sync, False)
                if not self.more:
                    break
        if self._shared is not None:
            shared, self._shared = self._shared, None
            with contextlib.suppress(Exception):
                await asyncio.to_thread(shared.release)
        return self._stored_unread


def inbox_message(stored: Any) -> tuple[dict[str, Any], int]:
    """A stored inbox row as the message object (a rejected line says why), and its size.
    A question (``clarification``, ``approval_request``) carries its key as ``msg_key``
    (what ``RunHandle.answer`` names it by; the agent's own ``msg_key``, if any, is
    replaced)."""
    if stored.body is not None:
        with contextlib.suppress(ValueError):
            obj = jsondepth.loads(stored.body)
            if isinstance(obj, dict):
                if obj.get("type") in QUESTION_TYPES:
                    obj["msg_key"] = stored.msg_key
                return obj, len(stored.body)
    reason = stored.rejected_reason or "unreadable message"
    raw = stored.raw or ""
    return {"type": "rejected", "reason": reason, "raw": raw}, len(raw) + len(reason)
