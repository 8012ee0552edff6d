"""Carrying a local run's files over a channel, both ways, idempotently.

Theory of operation: a child always talks to files on its own host (``control.jsonl``
down, ``events.jsonl`` and ``inbox.jsonl`` up), so children, shell agents and
``echo >> "$TETHER_INBOX_PATH"`` work the same everywhere. When its host joins a cluster,
the host daemon bridges those files to channels (``run.<id>.control``, ``.events``,
``.inbox``) on a :class:`~tether.transports.channel.Channel`:

- :class:`Outbound` forwards a local file into a channel. Every line goes with
  ``msg_id = "<channel>:<local byte offset>"`` (the channel name holds the run id, and
  message ids are unique across a whole stream), so forwarding a line twice (a bridge killed
  between publish and commit) stores it once; the bridge's progress (the local offset just
  past the last forwarded line) is committed on the channel under the ``bridge`` consumer,
  so a restarted bridge resumes there. The new lines go in one ``append_many`` (over NATS
  one atomic batch: one write, one acknowledgement, stored whole or not at all, so they
  keep their order across a stream leader change); the owner commits when it likes (a
  commit is a round trip and a stored message of its own: the host link commits about once
  a second, and a restart then sends again what came after, stored once by its ids).
- :class:`Inbound` appends a channel's control lines to the local control file. A line is
  written only if its ``seq`` is above the highest already in the file (read at start), so
  a redelivery after a crash never doubles a control; progress is committed as the
  channel offset.

Lines are moved as they are: the bridge never re-encodes or judges them (the child and the
parent validate); a local line over the channel's bound is skipped and counted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from tether import jsondepth
from tether.transports.channel import Channel, Entry, PartialAppend
from tether.transports.tail import FileTail, TailStatus
from tether.wire.lines import Line, LineItem

__all__ = ["BRIDGE_CONSUMER", "Inbound", "Outbound", "last_seq"]

BRIDGE_CONSUMER = "bridge"
PUMP_LINES = 512  # lines an Outbound sends in one burst, then waits for their acks
PUMP_BYTES = 512 * 1024


class _Seq(msgspec.Struct):
    seq: int = -1


_decode_seq = msgspec.json.Decoder(_Seq)


def seq_of(line: bytes) -> int:
    """The line's ``seq`` (-1 when it has none or is not a JSON object)."""
    try:
        return jsondepth.decode(_decode_seq, line).seq
    except (msgspec.DecodeError, msgspec.ValidationError):
        return -1


def last_seq(path: Path) -> int:
    """The highest ``seq`` among the complete lines of a local file we own (-1 if none)."""
    highest = -1
    with FileTail(path) as tail:
        while True:
            read = tail.read()
            if read.status is not TailStatus.OK or not read.items:
                return highest
            for item in read.items:
                if isinstance(item, Line):
                    highest = max(highest, seq_of(item.data))


class Outbound:
    """Forwards the complete lines of a local file into ``channel_name``."""

    def __init__(self, channel: Channel, channel_name: str, path: Path) -> None:
        self.channel = channel
        self.name = channel_name
        self.path = path
        self.forwarded = 0
        self.skipped = 0
        self._tail: FileTail | None = None
        self._committed = 0

    @property
    def started(self) -> bool:
        return self._tail is not None

    async def start(self) -> None:
        """Resume just past the last line a previous bridge committed."""
        offset = await self.channel.committed(self.name, BRIDGE_CONSUMER)
        self._committed = offset or 0
        self._tail = FileTail(self.path, offset=self._committed)

    @property
    def uncommitted(self) -> bool:
        """Lines were forwarded (or skipped) since the last :meth:`commit`."""
        return self._tail is not None and self._tail.offset > self._committed

    async def commit(self) -> None:
        """Record the progress (the local offset past the last line forwarded), so a
        restarted bridge resumes there; never while a :meth:`pump` is in progress."""
        if self._tail is not None and self._tail.offset > self._committed:
            offset = self._tail.offset
            await self.channel.commit(self.name, BRIDGE_CONSUMER, offset)
            self._committed = offset

    async def pump(self, limit: int | None = None) -> int:
        """Forward the new lines (at most ``PUMP_LINES``, about ``PUMP_BYTES``) in one
        :meth:`~tether.transports.channel.Channel.append_many`; how many lines it took (0:
        none new). ``limit``: only the lines that end within the file's first ``limit``
        bytes (the rest wait for a later pump). It does not commit: :meth:`commit` does,
        as often as the caller likes."""
        assert self._tail is not None, "call start() first"
        batch: list[tuple[bytes, str | None]] = []
        offsets: list[int] = []  # the local offset of each line in ``batch``
        read_count = size = 0
        beyond: int | None = None  # the offset of the first line past ``limit``
        while read_count < PUMP_LINES and size < PUMP_BYTES and beyond is None:
            read = self._tail.read()
            if read.status is TailStatus.TRUNCATED:
                raise OSError(f"{self.path} shrank: the bridge cannot continue")
            if not read.items:
                break
            for item in read.items:
                if limit is not None and _end(item) > limit:
                    beyond = item.offset
                    break
                read_count += 1
                if not isinstance(item, Line) or len(item.data) >= self.channel.max_line_bytes:
                    self.skipped += 1
                    continue
                batch.append((item.data, f"{self.name}:{item.offset}"))
                offsets.append(item.offset)
                size += len(item.data)
        if beyond is not None:  # read again from there next time
            self._rewind(beyond)
        if batch:
            try:
                await self.channel.append_many(self.name, batch)
            except PartialAppend as error:
                # Read again from the first line not stored; the lines before it (and any
                # that went through after all) carry ids, so a resend stores nothing twice.
                self.forwarded += len(error.offsets)
                self._rewind(offsets[len(error.offsets)])
                raise
            except BaseException:  # cancelled, or the channel failed otherwise
                self._rewind(offsets[0])
                raise
        self.forwarded += len(batch)
        return read_count

    def _rewind(self, offset: int) -> None:
        if self._tail is not None:
            self._tail.close()
        self._tail = FileTail(self.path, offset=offset)

    def close(self) -> None:
        if self._tail is not None:
            self._tail.close()


def _end(item: LineItem) -> int:
    """The offset just past a line (a line too long to keep: its start, unknown end)."""
    return item.offset + len(item.data) + 1 if isinstance(item, Line) else item.offset + 1


class Inbound:
    """Appends the control lines of ``channel_name`` to a local control file, once each."""

    def __init__(self, channel: Channel, channel_name: str, path: Path) -> None:
        self.channel = channel
        self.name = channel_name
        self.path = path
        self.appended = 0
        self.duplicates = 0
        self.moved = asyncio.Event()  # set after each line is handled (for watchers)

    async def run(self) -> None:
        """Forward until cancelled."""
        from tether.runtime.parent.rundir import append_line

        highest = last_seq(self.path)
        after = await self.channel.committed(self.name, BRIDGE_CONSUMER)
        async for item in self.channel.tail(self.name, after=after):
            if not isinstance(item, Entry):
                continue
            seq = seq_of(item.data)
            if seq > highest:
                append_line(self.path, item.data)
                highest = seq
                self.appended += 1
            else:
                self.duplicates += 1
            await self.channel.commit(self.name, BRIDGE_CONSUMER, item.offset)
            self.moved.set()

    async def wait_handled(self, count: int) -> None:
        """Until ``count`` lines (appended or duplicate) have been handled."""
        while self.appended + self.duplicates < count:
            self.moved.clear()
            await self.moved.wait()
