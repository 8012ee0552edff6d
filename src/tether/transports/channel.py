"""The channel interface: append a line, tail from an offset, commit a consumer's offset.

Theory of operation: every stream tether moves (a run's controls, its events, its inbox) is
an append-only sequence of lines. A :class:`Channel` names such streams with dotted tokens
(``run.<id>.events``) and offers three operations:

- ``append(name, line, msg_id=...)`` stores one line and returns its **offset**, an opaque,
  strictly increasing integer (the byte position of the line for files, the stream sequence
  for NATS JetStream). A retried append with the same ``msg_id`` stores nothing new and
  returns the first offset, so a writer that crashed without knowing whether its append
  went through can simply try again.
- ``append_many(name, [(line, msg_id), ...])`` appends several lines in order and returns
  their offsets; a transport with a network between may send them all before waiting for
  any acknowledgement. When one fails it raises :class:`PartialAppend` carrying the
  offsets of the leading lines that were stored: the caller sends the rest again (with
  message ids, a line that went through after all is stored once).
- ``tail(name, after=...)`` yields the entries after the entry at ``after`` (or from the
  start), in order, then waits for new ones: the blocking tail.
- ``commit(name, consumer, offset)`` records that ``consumer`` has processed everything up
  to and including ``offset``; ``committed()`` reads it back, so a reader that crashed
  resumes with ``tail(name, after=committed)`` and sees every later entry exactly once.
  Commits never move backwards.

Offsets are compared only for order and equality, never computed with: a caller never
adds to one. Lines are bytes without a newline, at most ``max_line_bytes`` long; the bound is
enforced before anything is sent or written. Entries that a foreign writer put in a
channel beyond the bound (a shell ``echo >>`` into a file) are reported as :class:`Skipped`,
never buffered whole.

:class:`FileChannel` (here) keeps each channel in one 0600 file in a 0700 directory it
owns; :mod:`tether.transports.jetstream` keeps them in a JetStream stream. Both pass the
one conformance suite in ``tests/transports/test_channel_conformance.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tether import fsafe
from tether.errors import TetherError
from tether.wire.limits import MAX_LINE_BYTES
from tether.wire.lines import Line, TooLarge

if TYPE_CHECKING:
    import asyncio

    from tether.transports.watch import FileWatcher

__all__ = [
    "Channel",
    "Entry",
    "FileChannel",
    "PartialAppend",
    "Skipped",
    "TransportError",
    "check_line",
    "check_name",
]

# A channel name: 1 to 16 dot-separated tokens of letters, digits, '_' and '-'.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}(?:\.[A-Za-z0-9_-]{1,128}){0,15}")
_CONSUMER = re.compile(r"[A-Za-z0-9_-]{1,128}")
MSG_ID_MAX_BYTES = 256
# The file transport remembers this many recent message ids per channel (JetStream keeps
# a time window instead); a retry older than that is appended again.
FILE_DEDUPE_WINDOW_BYTES = 256 * 1024


class TransportError(TetherError):
    """A channel operation was refused (bad name, line out of bounds) or its store failed."""


class PartialAppend(TransportError):
    """``append_many`` stored only its first ``len(offsets)`` lines (in order)."""

    def __init__(self, message: str, offsets: list[int]) -> None:
        super().__init__(message)
        self.offsets = offsets


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a channel and its offset."""

    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line at ``offset`` that was over the channel's bound; it was not read."""

    offset: int


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise TransportError(f"bad channel name {name!r}: dot-separated [A-Za-z0-9_-] tokens")
    return name


def check_consumer(consumer: str) -> str:
    if not _CONSUMER.fullmatch(consumer):
        raise TransportError(f"bad consumer name {consumer!r}: [A-Za-z0-9_-], 1-128 characters")
    return consumer


def check_line(line: bytes, max_line_bytes: int) -> bytes:
    """The line itself, or :class:`TransportError` when it cannot be stored as one line."""
    if len(line) >= max_line_bytes:
        raise TransportError(f"line of {len(line)} bytes; the bound is {max_line_bytes - 1}")
    if b"\n" in line:
        raise TransportError("a line cannot contain a newline")
    return line


def check_msg_id(msg_id: str | None) -> str | None:
    if msg_id is not None and (
        not msg_id or len(msg_id.encode()) > MSG_ID_MAX_BYTES or not msg_id.isprintable()
    ):
        raise TransportError("a msg_id is 1-256 bytes of printable text")
    return msg_id


class Channel(Protocol):
    """What every transport offers; see the module docstring."""

    max_line_bytes: int

    async def append(self, name: str, line: bytes, *, msg_id: str | None = None) -> int: ...

    async def append_many(
        self, name: str, lines: Sequence[tuple[bytes, str | None]]
    ) -> list[int]: ...

    def tail(self, name: str, *, after: int | None = None) -> AsyncIterator[Entry | Skipped]: ...

    async def commit(self, name: str, consumer: str, offset: int) -> None: ...

    async def committed(self, name: str, consumer: str) -> int | None: ...

    async def aclose(self) -> None: ...


class FileChannel:
    """Channels as append-only files under one private directory.

    ``root`` is created 0700 if missing; an existing one must be a directory (not a
    symlink) owned by this user and writable by nobody else. Each channel is
    ``root/<name>.jsonl``; message ids live beside it in ``<name>.ids`` and commits in
    ``root/.offsets/``. Appends take an exclusive ``flock`` on the channel file, so several
    processes may append to one channel; lines never interleave.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        watcher: FileWatcher | None = None,
    ) -> None:
        self.root = Path(os.path.abspath(root))
        self.max_line_bytes = max_line_bytes
        _ensure_private_dir(self.root)
        _ensure_private_dir(self.root / ".offsets")
        self._watcher = watcher
        self._own_watcher = watcher is None
        self._wakers: dict[Path, set[asyncio.Event]] = {}
        self._dispatch: asyncio.Task[None] | None = None

    # -- append ---------------------------------------------------------------

    async def append(self, name: str, line: bytes, *, msg_id: str | None = None) -> int:
        return self.append_nowait(name, line, msg_id=msg_id)

    async def append_many(self, name: str, lines: Sequence[tuple[bytes, str | None]]) -> list[int]:
        for line, msg_id in lines:  # all refused before any is written, as over NATS
            check_line(line, self.max_line_bytes)
            check_msg_id(msg_id)
        offsets: list[int] = []
        for line, msg_id in lines:
            try:
                offsets.append(await self.append(name, line, msg_id=msg_id))
            except (TransportError, OSError) as error:
                raise PartialAppend(str(error), offsets) from error
        return offsets

    def append_nowait(self, name: str, line: bytes, *, msg_id: str | None = None) -> int:
        """:meth:`append` without the event loop (a file append never waits on a peer)."""
        check_line(line, self.max_line_bytes)
        check_msg_id(msg_id)
        fd = _open_private(self._path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            offset = os.fstat(fd).st_size
            if msg_id is not None:
                seen = self._seen(name, msg_id, offset)
                if seen is not None:
                    return seen
                self._remember(name, msg_id, offset)
            fsafe.write_all(fd, line + b"\n")
            return offset
        finally:
            os.close(fd)

    def _seen(self, name: str, msg_id: str, size: int) -> int | None:
        """The offset an earlier append with ``msg_id`` got, if its line was written."""
        try:
            fd = _open_private(self._ids_path(name), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            length = os.fstat(fd).st_size
            start = max(0, length - FILE_DEDUPE_WINDOW_BYTES)
            window = os.pread(fd, length - start, start)
        finally:
            os.close(fd)
        wanted = b" " + msg_id.encode()
        for record in reversed(window.split(b"\n")):
            offset, sep, rest = record.partition(b" ")
            if sep and b" " + rest == wanted and offset.isdigit():
                # The id was recorded before its line; a crash in between left no line.
                return int(offset) if int(offset) < size else None
        return None

    def _remember(self, name: str, msg_id: str, offset: int) -> None:
        fd = _open_private(self._ids_path(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            fsafe.write_all(fd, b"%d %s\n" % (offset, msg_id.encode()))
        finally:
            os.close(fd)

    # -- tail -----------------------------------------------------------------

    async def tail(self, name: str, *, after: int | None = None) -> AsyncIterator[Entry | Skipped]:
        from tether.transports.tail import FileTail, TailStatus

        path = self._path(name)
        waker = self._waker(path)
        try:
            with FileTail(path, offset=after or 0, max_line_bytes=self.max_line_bytes) as tail:
                skip_first = after is not None
                while True:
                    waker.clear()
                    read = tail.read()
                    if read.status is TailStatus.TRUNCATED:
                        raise TransportError(f"channel {name!r} shrank: its file was replaced")
                    for item in read.items:
                        if skip_first:
                            _check_cursor(name, item, after)
                            skip_first = False
                            continue
                        yield _entry(item)
                    if not read.items and not tail.has_pending():
                        await self._wait(waker)
        finally:
            self._drop_waker(path, waker)

    def _waker(self, path: Path) -> asyncio.Event:
        import asyncio

        if self._watcher is None:
            from tether.transports.watch import FileWatcher

            self._watcher = FileWatcher(poll_interval=0.03)
        self._watcher.watch(path)
        event = asyncio.Event()
        self._wakers.setdefault(path, set()).add(event)
        if self._dispatch is None or self._dispatch.done():
            self._dispatch = asyncio.get_running_loop().create_task(self._dispatch_wakeups())
        return event

    def _drop_waker(self, path: Path, event: asyncio.Event) -> None:
        waiting = self._wakers.get(path)
        if waiting is not None:
            waiting.discard(event)

    async def _wait(self, event: asyncio.Event) -> None:
        import asyncio

        # The watcher reports "maybe changed"; a bounded wait also covers a lost wake-up.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=0.3)

    async def _dispatch_wakeups(self) -> None:
        """One loop waits on the one watcher and wakes every tail of a changed file."""
        assert self._watcher is not None
        while any(self._wakers.values()):
            for changed in await self._watcher.wait(timeout=0.3):
                for event in self._wakers.get(changed, ()):
                    event.set()

    # -- commit ---------------------------------------------------------------

    async def commit(self, name: str, consumer: str, offset: int) -> None:
        self.commit_nowait(name, consumer, offset)

    def commit_nowait(self, name: str, consumer: str, offset: int) -> None:
        current = self._read_commit(name, consumer)
        if current is not None and offset <= current:
            return
        fsafe.replace_file(self._commit_path(name, consumer), b"%d\n" % offset)

    async def committed(self, name: str, consumer: str) -> int | None:
        return self._read_commit(name, consumer)

    def _read_commit(self, name: str, consumer: str) -> int | None:
        try:
            fd = _open_private(self._commit_path(name, consumer), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            text = os.read(fd, 64).strip()
        finally:
            os.close(fd)
        if not text.isdigit():
            raise TransportError(f"commit file of {consumer!r} on {name!r} is damaged")
        return int(text)

    # -- paths and closing ----------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.root / f"{check_name(name)}.jsonl"

    def _ids_path(self, name: str) -> Path:
        return self.root / f"{check_name(name)}.ids"

    def _commit_path(self, name: str, consumer: str) -> Path:
        return self.root / ".offsets" / f"{check_consumer(consumer)}@{check_name(name)}"

    async def aclose(self) -> None:
        if self._dispatch is not None:
            self._dispatch.cancel()
            with contextlib.suppress(BaseException):
                await self._dispatch
        if self._own_watcher and self._watcher is not None:
            self._watcher.close()
            self._watcher = None


def _entry(item: Line | TooLarge) -> Entry | Skipped:
    return Entry(item.offset, item.data) if isinstance(item, Line) else Skipped(item.offset)


def _check_cursor(name: str, item: Line | TooLarge, after: int | None) -> None:
    if item.offset != after:
        raise TransportError(f"offset {after} is not an entry of channel {name!r}")


def _ensure_private_dir(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise TransportError(f"{path} is not a directory (a symlink or file is refused)")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise TransportError(f"{path} is not private to this user (owner or mode)")


def _open_private(path: Path, flags: int) -> int:
    """Open a file of ours through :mod:`tether.fsafe` (never through a symlink, never
    blocking on a FIFO); with ``O_CREAT`` a missing one is made 0600, exclusively."""
    create = bool(flags & os.O_CREAT)
    access = flags & ~(os.O_CREAT | os.O_EXCL)
    try:
        try:
            return fsafe.open_path(path, access)
        except FileNotFoundError:
            if not create:
                raise
        try:
            return fsafe.open_path(path, access, create=True)
        except FileExistsError:  # another appender made it just now
            return fsafe.open_path(path, access)
    except OSError as error:
        if fsafe.is_refusal(error):
            raise TransportError(f"{path} is not a private regular file of this user") from error
        raise
