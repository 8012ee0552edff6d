"""What a parent hands out while a run goes: validated events, inbox messages, channel errors."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from tether.runtime.parent.mirror import ChannelError
from tether.wire import AnyEvent
from tether.wire.session import State


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


Update = RunEvent | InboxItem | ChannelError


MAX_UNREAD: Final = 10_000  # updates kept for a reader that does not keep up
MAX_UNREAD_BYTES: Final = 16 * 1024 * 1024  # ...and the raw event/inbox bytes they may hold


class UpdateQueue:
    """A run's updates for its one reader, in order and bounded.

    Past :data:`MAX_UNREAD` items (or :data:`MAX_UNREAD_BYTES` of raw events) the oldest
    are dropped, and the reader's next item is one :class:`ChannelError` saying how many:
    a flooding child cannot grow the parent's memory (``events.jsonl`` keeps every event).
    """

    def __init__(
        self, run: str, *, limit: int = MAX_UNREAD, limit_bytes: int = MAX_UNREAD_BYTES
    ) -> None:
        self._run = run
        self._limit, self._limit_bytes = limit, limit_bytes
        self._items: deque[Update] = deque()
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        self._ready = asyncio.Event()

    def put(self, item: Update) -> None:
        self._items.append(item)
        self._bytes += _size(item)
        while len(self._items) > self._limit or self._bytes > self._limit_bytes:
            self._bytes -= _size(self._items.popleft())
            self._dropped += 1
        self._ready.set()

    def close(self) -> None:
        """No more items: :meth:`get` returns None once the queue is empty (and ever after)."""
        self._closed = True
        self._ready.set()

    async def get(self) -> Update | None:
        while True:
            if self._dropped:
                count, self._dropped = self._dropped, 0
                reason = f"{count} updates dropped: the reader fell behind (events.jsonl has all)"
                return ChannelError(reason, run=self._run)
            if self._items:
                item = self._items.popleft()
                self._bytes -= _size(item)
                return item
            if self._closed:
                return None
            self._ready.clear()
            await self._ready.wait()


def _size(item: Update) -> int:
    if isinstance(item, RunEvent):
        return len(item.raw)
    return item.size if isinstance(item, InboxItem) else 0
