"""A bounded JSONL line splitter (sans-IO).

Theory of operation: :meth:`LineSplitter.feed` takes bytes of any size and cuts them
into complete lines at once; :meth:`LineSplitter.read` hands them out at most
``budget_lines`` lines and ``budget_bytes`` bytes per call, so a bounded drain always
makes progress and never starves its caller. A partial last line is kept until its
newline arrives. A line that reaches ``max_line_bytes`` without a newline is reported
once as :class:`TooLarge` and the rest of it is skipped up to its newline: the splitter
never holds more than ``max_line_bytes`` of one line.

Every item carries its stream offset (the byte position of its first byte), which is
what tailing by byte offset and idempotent keys are built on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tether.wire.limits import MAX_LINE_BYTES, READ_BUDGET_BYTES, READ_BUDGET_LINES


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line, without its newline, and the offset of its first byte."""

    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class TooLarge:
    """A line of at least ``max_line_bytes`` bytes starting at ``offset``; it was skipped."""

    offset: int


Item = Line | TooLarge


class LineSplitter:
    """Cuts a byte stream into bounded lines; see the module docstring."""

    def __init__(
        self,
        *,
        offset: int = 0,
        max_line_bytes: int = MAX_LINE_BYTES,
        budget_bytes: int = READ_BUDGET_BYTES,
        budget_lines: int = READ_BUDGET_LINES,
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.budget_bytes = budget_bytes
        self.budget_lines = budget_lines
        self._fed = offset  # stream offset just past the last byte fed
        self._consumed = offset  # stream offset just past the last item handed out
        self._ready: deque[Item] = deque()
        self._partial = bytearray()
        self._skipping = False

    @property
    def offset(self) -> int:
        """Stream offset just past everything handed out by :meth:`read` (or skipped)."""
        return self._consumed

    @property
    def fed(self) -> int:
        """Stream offset just past the last byte given to :meth:`feed`."""
        return self._fed

    @property
    def pending(self) -> int:
        """How many complete lines (or too-large reports) wait for :meth:`read`."""
        return len(self._ready)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes of any size."""
        data = bytes(data)
        start = self._fed
        self._fed += len(data)
        pos = 0
        if self._skipping:
            newline = data.find(b"\n")
            if newline < 0:
                self._skipped_through(self._fed)
                return
            self._skipping = False
            pos = newline + 1
            self._skipped_through(start + pos)
        if self._partial:
            pos = self._finish_partial(data, start)
            if pos < 0:
                return
        self._cut_lines(data, pos, start)

    def read(self) -> list[Item]:
        """Up to ``budget_lines`` items totalling at most ``budget_bytes`` (at least one)."""
        out: list[Item] = []
        budget = self.budget_bytes
        ready = self._ready
        while ready and len(out) < self.budget_lines:
            item = ready[0]
            size = len(item.data) + 1 if isinstance(item, Line) else 0
            if out and size > budget:
                break
            budget -= size
            out.append(ready.popleft())
            self._consumed = _end_of(item, self)
        if not ready and not self._partial and not self._skipping:
            self._consumed = self._fed
        return out

    # --- internals ---------------------------------------------------------------------

    def _finish_partial(self, data: bytes, start: int) -> int:
        """Complete the buffered partial line; returns where the rest of ``data`` starts."""
        line_start = start - len(self._partial)
        newline = data.find(b"\n")
        if newline < 0:
            self._partial += data
            if len(self._partial) >= self.max_line_bytes:
                self._too_large(line_start)
            return -1
        self._partial += data[:newline]
        line = bytes(self._partial)
        self._partial.clear()
        self._emit(line_start, line)
        return newline + 1

    def _cut_lines(self, data: bytes, pos: int, start: int) -> None:
        find, size = data.find, len(data)
        while pos < size:
            newline = find(b"\n", pos)
            if newline < 0:
                rest = data[pos:]
                if len(rest) >= self.max_line_bytes:
                    self._too_large(start + pos)
                else:
                    self._partial += rest
                return
            self._emit(start + pos, data[pos:newline])
            pos = newline + 1

    def _emit(self, offset: int, line: bytes) -> None:
        if len(line) >= self.max_line_bytes:
            self._ready.append(TooLarge(offset))
        else:
            self._ready.append(Line(offset, line))

    def _too_large(self, offset: int) -> None:
        self._partial.clear()
        self._skipping = True
        self._ready.append(TooLarge(offset))

    def _skipped_through(self, offset: int) -> None:
        if not self._ready:
            self._consumed = offset


def _end_of(item: Item, splitter: LineSplitter) -> int:
    if isinstance(item, Line):
        return item.offset + len(item.data) + 1
    # A too-large line ends where the next item starts, or where the stream stands.
    nxt = splitter._ready[0] if splitter._ready else None
    if nxt is not None:
        return nxt.offset
    return splitter.fed - len(splitter._partial)
