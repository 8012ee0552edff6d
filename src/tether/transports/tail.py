"""Tail a JSONL file by byte offset, in bounded reads.

Each :meth:`FileTail.read` reads at most one budget (64 KiB) from the file at the
current offset and hands out at most 64 complete lines; a partial last line waits for
its newline; a line too long for one read is reported once and skipped. The file may
not exist yet (``missing``); a symlink, FIFO or other unsafe file in its place is never
followed nor blocked on (see :mod:`tether.fsafe`) and reads as ``missing`` too, with the
reason in :attr:`FileTail.refused`. A file that shrinks below what was read is ``truncated``:
the stream cannot continue, and callers treat it as fatal. A file deleted while open is
read to its end, then reported ``removed`` (its writer can no longer reach the reader).
"""

from __future__ import annotations

import enum
import os
from functools import partial
from pathlib import Path
from typing import Final, NamedTuple

from tether import fsafe
from tether.wire.limits import MAX_LINE_BYTES, READ_BUDGET_BYTES, READ_BUDGET_LINES
from tether.wire.lines import LineItem, LineSplitter


class TailStatus(enum.StrEnum):
    OK = "ok"
    MISSING = "missing"
    TRUNCATED = "truncated"
    REMOVED = "removed"  # read to its end after it was deleted: nobody can append any more


class TailRead(NamedTuple):
    status: TailStatus
    items: list[LineItem]
    # More is waiting right now (buffered lines, or bytes not read yet): read again before
    # waiting. A read inside a line too long to keep hands out no items but says more.
    more: bool = False


# A read is built without TailRead's Python-level __new__ and with its status looked up
# once (an enum member read through its class costs ~900 instructions on Python 3.11):
# a woken child's control read, a parent's event read, runs through here every time.
_read = partial(tuple.__new__, TailRead)
_OK: Final = TailStatus.OK


class FileTail:
    """Reads complete lines appended to ``path``; see the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        offset: int = 0,
        max_line_bytes: int = MAX_LINE_BYTES,
        budget_bytes: int = READ_BUDGET_BYTES,
        budget_lines: int = READ_BUDGET_LINES,
    ) -> None:
        self.path = Path(path)
        self._budget = budget_bytes
        self._splitter = LineSplitter(
            offset=offset,
            max_line_bytes=max_line_bytes,
            budget_bytes=budget_bytes,
            budget_lines=budget_lines,
        )
        self._fd: int | None = None
        self.refused: str | None = None  # why the file in its place was not opened

    @property
    def offset(self) -> int:
        """Offset just past the last line handed out (resume a tail from here)."""
        return self._splitter.offset

    @property
    def fed(self) -> int:
        """Offset just past the last byte read from the file (complete lines or not)."""
        return self._splitter.fed

    def open(self) -> bool:
        """Open the file now, not at the first read: a writer that swaps the path later
        (a hostile child planting a FIFO) cannot take it from us. False when refused."""
        return self._open() is not None

    def size(self) -> int | None:
        """The file's size now; None when it cannot be opened."""
        fd = self._open()
        return None if fd is None else os.fstat(fd).st_size

    def has_pending(self) -> bool:
        """True when complete lines are buffered and the next read needs no file access."""
        return self._splitter.pending > 0

    def read(self) -> TailRead:
        """The next bounded run of complete lines (maybe none)."""
        if self._splitter.pending:
            return _read((_OK, self._splitter.read(), True))
        fd = self._open()
        if fd is None:
            return TailRead(TailStatus.MISSING, [])
        # One pread of a whole budget, no fstat first: what it returns is what was there.
        # Only an empty read asks why (nothing new, truncated below us, or deleted), so a
        # wake-up that finds a line costs one system call.
        data = os.pread(fd, self._budget, self._splitter.fed)
        if not data:
            return self._nothing_read(fd)
        splitter = self._splitter
        splitter.feed(data)
        items = splitter.read()
        # A short read reached the end of the file: a writer that appends later says so
        # (its wake-up, its inotify event); a full one may have left more behind.
        more = splitter.pending > 0 or len(data) == self._budget
        return _read((_OK, items, more))

    def _nothing_read(self, fd: int) -> TailRead:
        """An empty read: the file ends where we stand, or below (truncated), or is gone."""
        info = os.fstat(fd)
        if info.st_size < self._splitter.fed:
            return TailRead(TailStatus.TRUNCATED, [])
        if info.st_size == self._splitter.fed and info.st_nlink == 0:
            return TailRead(TailStatus.REMOVED, [])
        return TailRead(TailStatus.OK, self._splitter.read())

    def size_changed(self) -> bool:
        """Cheap check: is there anything new to read (or has the file shrunk)?"""
        if self._splitter.pending:
            return True
        fd = self._open()
        return fd is not None and os.fstat(fd).st_size != self._splitter.fed

    def _open(self) -> int | None:
        if self._fd is None:
            try:
                self._fd = fsafe.open_path(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if not fsafe.is_refusal(exc):
                    raise
                self.refused = f"{self.path}: {exc.strerror}"
                return None
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
