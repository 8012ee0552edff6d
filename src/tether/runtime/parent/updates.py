"""What a parent hands out while a run goes: validated events, inbox messages, channel errors;
and the queue that serves a reader of them, bounded and losing nothing.

Theory of operation. :class:`UpdateQueue` holds the updates its one reader has not read
yet, up to :data:`MAX_UNREAD` items and :data:`MAX_UNREAD_BYTES` of raw lines, so a child
that floods cannot grow the parent's memory. A reader that falls that far behind loses
nothing: the run's own logs are durable (``events.jsonl`` by seq, the inbox store by
offset), so the queue drops what it holds of them and, from the reader's *cursor* (the
last event seq and inbox offset it was handed), serves it from a :class:`LogSource` in
bounded batches until it has caught up with what the driver has published; then it is
live again. What the logs cannot give back (channel errors, nested runs' updates) is kept
aside within the same bounds; only past those is the oldest dropped, and the reader is
told how many. Events come back with the state the run was in after each, replayed by a
mirror of its own, exactly as the live reader would have had them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tether.runtime.parent.mirror import ChannelError
from tether.wire import AnyEvent
from tether.wire.session import State

__all__ = [
    "CATCH_UP_BATCH",
    "MAX_UNREAD",
    "MAX_UNREAD_BYTES",
    "EventReplay",
    "InboxItem",
    "LogSource",
    "RunEvent",
    "Update",
    "UpdateQueue",
]


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One validated wire event of run ``run``, its raw line, and the mirrored state after it."""

    run: str
    event: AnyEvent
    raw: bytes
    state: State
    depth: int = 0


@dataclass(frozen=True, slots=True)
class InboxItem:
    """One message an agent appended to the run's inbox (``{"type": ..., ...}``)."""

    run: str
    message: dict[str, Any]
    depth: int = 0
    size: int = 0  # bytes of the stored line (bounds what an unread queue may hold)
    offset: int = -1  # its offset in the inbox file (the store's key); -1: not known


Update = RunEvent | InboxItem | ChannelError


MAX_UNREAD: Final = 10_000  # updates kept for a reader that does not keep up
MAX_UNREAD_BYTES: Final = 16 * 1024 * 1024  # ...and the raw event/inbox bytes they may hold
CATCH_UP_BATCH: Final = 500  # updates read back from the logs at a time


class EventReplay(Protocol):
    """A run's event log read back (blocking: called in a thread)."""

    def take(self, limit: int) -> list[RunEvent]:
        """Up to ``limit`` more events, in order, each with the state after it; fewer
        (none) at the log's current end, and more once it has grown."""
        ...

    def close(self) -> None: ...


class LogSource(Protocol):
    """A run's durable logs, read back from a cursor (blocking: called in a thread)."""

    def events_after(self, seq: int) -> EventReplay:
        """The run's events with seq > ``seq``."""
        ...

    def inbox_after(self, offset: int, limit: int) -> list[InboxItem]:
        """Up to ``limit`` stored inbox messages with offset > ``offset``, in file order."""
        ...


class UpdateQueue:
    """A run's updates for its one reader, in order, bounded, and (with a ``source``)
    lossless; see the module docstring. Without a source (a run whose logs are elsewhere)
    a reader that falls behind is told how many of the oldest were dropped."""

    def __init__(
        self,
        run: str,
        *,
        source: LogSource | None = None,
        limit: int = MAX_UNREAD,
        limit_bytes: int = MAX_UNREAD_BYTES,
    ) -> None:
        self._run = run
        self._source = source
        self._limit, self._limit_bytes = limit, limit_bytes
        self._items: deque[Update] = deque()
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        self._ready = asyncio.Event()
        # the reader's cursor, and the newest the driver has published
        self._seq, self._offset = 0, -1
        self._seen_seq, self._seen_offset = 0, -1
        self._behind = False
        self._events: EventReplay | None = None
        self._swept = True  # nothing to sweep until the driver says so (stored_unread)

    def put(self, item: Update) -> None:
        durable = self._durable(item)
        if durable is not None:
            kind, key = durable
            if kind == "event":
                self._seen_seq = max(self._seen_seq, key)
                if self._behind or key <= self._seq:
                    return  # the logs hold it: served from there
            else:
                self._seen_offset = max(self._seen_offset, key)
                if self._behind or key <= self._offset:
                    return
        self._items.append(item)
        self._bytes += _size(item)
        if len(self._items) > self._limit or self._bytes > self._limit_bytes:
            self._overflow()
        self._ready.set()

    def stored_unread(self) -> None:
        """The run's inbox stored messages it did not hand out (its last lines, stored as
        the run ended): the reader gets them from the store before the end."""
        self._swept = self._source is None

    def close(self) -> None:
        """No more items: :meth:`get` returns None once everything is read (and ever after)."""
        self._closed = True
        self._ready.set()

    async def get(self) -> Update | None:
        while True:
            if self._dropped:
                count, self._dropped = self._dropped, 0
                reason = f"{count} updates dropped: the reader fell behind (events.jsonl has all)"
                return ChannelError(reason, run=self._run)
            if self._items:
                return self._take()
            if self._behind:
                await self._catch_up()
                continue
            if self._closed:
                if await self._sweep():
                    continue
                return None
            self._ready.clear()
            await self._ready.wait()

    # -- internals ------------------------------------------------------------------

    def _durable(self, item: Update) -> tuple[str, int] | None:
        """What the logs key ``item`` by, when a source can give it back."""
        if self._source is None or isinstance(item, ChannelError) or item.depth:
            return None
        if isinstance(item, RunEvent):
            return "event", item.event.seq
        if isinstance(item, InboxItem) and item.offset >= 0:
            return "inbox", item.offset
        return None

    def _take(self) -> Update:
        item = self._items.popleft()
        self._bytes -= _size(item)
        durable = self._durable(item)
        if durable is not None:
            if durable[0] == "event":
                self._seq = max(self._seq, durable[1])
            else:
                self._offset = max(self._offset, durable[1])
        return item

    def _overflow(self) -> None:
        if self._source is not None and not self._behind:
            # fall behind: what the logs hold is read back from there, from the cursor
            kept = [item for item in self._items if self._durable(item) is None]
            self._items = deque(kept)
            self._bytes = sum(_size(item) for item in kept)
            self._behind = True
        while len(self._items) > self._limit or self._bytes > self._limit_bytes:
            self._bytes -= _size(self._items.popleft())
            self._dropped += 1

    async def _catch_up(self) -> None:
        """One batch from the logs; live again once the cursor reached what was published.
        Every call makes progress: a log that no longer holds what was published before
        the read (a child replaced or cut its ``events.jsonl``) is said, and skipped."""
        assert self._source is not None
        published = (self._seen_seq, self._seen_offset)  # all in the logs before the read
        try:
            batch = await asyncio.to_thread(self._read_batch)
        except Exception as exc:  # noqa: BLE001 (the logs must never break the reader)
            self._behind = False  # live again; what could not be read back is said
            reason = f"updates after seq {self._seq} could not be read back from the logs: {exc}"
            self._items.append(ChannelError(reason, run=self._run))
            self._end_replay()
            return
        for item in batch:
            self._items.append(item)
            self._bytes += _size(item)
        if batch:
            return
        if self._seq < published[0] or self._offset < published[1]:
            reason = (
                f"the run's logs no longer hold what it published (events after seq "
                f"{self._seq} up to {published[0]}, inbox after offset {self._offset} up to "
                f"{published[1]}): its events.jsonl was replaced or cut; going on from there"
            )
            self._items.append(ChannelError(reason, run=self._run))
            self._seq = max(self._seq, published[0])
            self._offset = max(self._offset, published[1])
        if self._seq >= self._seen_seq and self._offset >= self._seen_offset:
            self._behind = False  # caught up: live from here (put skips what was read)
            self._end_replay()

    def _end_replay(self) -> None:
        if self._events is not None:
            with contextlib.suppress(Exception):
                self._events.close()
            self._events = None

    def _read_batch(self) -> list[Update]:
        source = self._source
        assert source is not None
        if self._events is None:
            self._events = source.events_after(self._seq)
        events: list[Update] = list(self._events.take(CATCH_UP_BATCH))
        return events or list(source.inbox_after(self._offset, CATCH_UP_BATCH))

    async def _sweep(self) -> bool:
        """Once the run has ended: what its inbox stored after the last live message (the
        rest the driver stored without handing it out). True when there was some."""
        if self._source is None or self._swept:
            return False
        try:
            batch = await asyncio.to_thread(self._source.inbox_after, self._offset, CATCH_UP_BATCH)
        except Exception:  # noqa: BLE001 (an unreadable store: the run's updates are over)
            batch = []
        if not batch:
            self._swept = True
            return False
        for item in batch:
            self._items.append(item)
            self._bytes += _size(item)
        return True


def _size(item: Update) -> int:
    if isinstance(item, RunEvent):
        return len(item.raw)
    return item.size if isinstance(item, InboxItem) else 0
