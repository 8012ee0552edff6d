"""The bounded JSONL line splitter (sans-IO), for every line stream tether reads.

Theory of operation: :meth:`LineSplitter.feed` takes bytes of any size and cuts them
into complete lines at once; :meth:`LineSplitter.read` hands them out at most
``budget_lines`` lines and ``budget_bytes`` bytes per call, so a bounded drain always
makes progress and never starves its caller (:meth:`LineSplitter.read_all` hands out
everything, for a caller that bounds what it feeds instead, like the inbox drain). A
partial last line is kept until its newline arrives.

A line whose length without its newline is ``>= max_line_bytes`` is too large (the wire's
MAX-LINE-BYTES is the first illegal length: the largest legal line is 65535 bytes; a
stream whose largest legal line is N passes ``N + 1``). It is reported once, as
:class:`TooLarge` with its first :data:`HEAD_BYTES` bytes, as soon as its length is known
to be over the limit, and the rest of it is skipped up to its newline: the splitter never
holds more than ``max_line_bytes`` of one line.

Every item carries its stream offset (the byte position of its first byte).
:meth:`LineSplitter.read` hands out complete lines as :class:`Line`;
:meth:`LineSplitter.read_all` as plain ``(offset, data)`` pairs (:data:`Pair`): the inbox
drain takes them by the ten thousand, and an exact tuple costs one allocation where a
``Line`` (a tuple subclass) costs two and stays tracked by the garbage collector for good
(CPython untracks only exact tuples of atoms), which was ~7% of a drain's CPU.
:attr:`LineSplitter.offset` is where a reader that stops now must start again so that
nothing is lost or repeated; if :attr:`LineSplitter.skipping` is true then, pass it back
in with the offset and the skip continues.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from itertools import accumulate
from typing import Final, NamedTuple

from tether.wire.limits import MAX_LINE_BYTES, READ_BUDGET_BYTES, READ_BUDGET_LINES

__all__ = ["HEAD_BYTES", "Line", "LineItem", "LineSplitter", "Pair", "PairItem", "TooLarge"]

HEAD_BYTES: Final = 4096
"""How much of a too-large line is kept in its :class:`TooLarge` (for a rejection record)."""


class Line(NamedTuple):
    """One complete line, without its newline, and the offset of its first byte."""

    offset: int
    data: bytes


class TooLarge(NamedTuple):
    """A line of at least ``max_line_bytes`` bytes starting at ``offset``; it was skipped.

    ``head`` is its first bytes (up to :data:`HEAD_BYTES`; fewer when it was found too
    large before they all arrived).
    """

    offset: int
    head: bytes = b""


LineItem = Line | TooLarge

Pair = tuple[int, bytes]
"""A complete line as :meth:`LineSplitter.read_all` hands it out: ``(offset, data)``."""

PairItem = Pair | TooLarge
"""What :meth:`LineSplitter.read_all` returns: a pair, or a :class:`TooLarge` (tell them
apart with ``type(item) is TooLarge``; a ``TooLarge`` is a pair too)."""

_plus_one = (1).__add__
# Line from an (offset, data) pair without a Python frame (Line._make is Python code).
_make_line = partial(tuple.__new__, Line)


class LineSplitter:
    """Cuts a byte stream into bounded lines; see the module docstring."""

    __slots__ = (
        "_consumed",
        "_fed",
        "_partial",
        "_ready",
        "_skipping",
        "budget_bytes",
        "budget_lines",
        "max_line_bytes",
    )

    def __init__(
        self,
        *,
        offset: int = 0,
        max_line_bytes: int = MAX_LINE_BYTES,
        budget_bytes: int = READ_BUDGET_BYTES,
        budget_lines: int = READ_BUDGET_LINES,
        skipping: bool = False,
    ) -> None:
        if offset < 0 or max_line_bytes < 1:
            raise ValueError("offset must be >= 0 and max_line_bytes >= 1")
        self.max_line_bytes = max_line_bytes
        self.budget_bytes = budget_bytes
        self.budget_lines = budget_lines
        self._fed = offset  # stream offset just past the last byte fed
        self._consumed = offset  # stream offset just past the last item handed out
        self._ready: deque[PairItem] = deque()  # complete lines as exact (offset, data)
        self._partial = bytearray()
        self._skipping = skipping

    @property
    def offset(self) -> int:
        """Where to start reading again after a stop: past everything handed out by
        :meth:`read` (or skipped); an incomplete last line is not past it."""
        return self._consumed

    @property
    def fed(self) -> int:
        """Stream offset just past the last byte given to :meth:`feed`."""
        return self._fed

    @property
    def pending(self) -> int:
        """How many complete lines (or too-large reports) wait for :meth:`read`."""
        return len(self._ready)

    @property
    def held(self) -> int:
        """Bytes of an incomplete trailing line held for the next feed."""
        return len(self._partial)

    @property
    def skipping(self) -> bool:
        """True while inside a too-large line (discarding up to its newline)."""
        return self._skipping

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes of any size."""
        data = bytes(data)
        start = self._fed
        self._fed += len(data)
        if (
            0 < len(data) <= self.max_line_bytes
            and data.find(b"\n") == len(data) - 1
            and not (self._partial or self._skipping)
        ):  # exactly one whole line (a tail woken per appended line): no split
            self._ready.append((start, data[:-1]))
            return
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

    def read(self) -> list[LineItem]:
        """Up to ``budget_lines`` items totalling at most ``budget_bytes`` (at least one)."""
        ready = self._ready
        if len(ready) == 1 and type(ready[0]) is not TooLarge:  # one line: always handed out
            item = ready.pop()
            self._consumed = item[0] + len(item[1]) + 1
            self._settle()
            return [_make_line(item)]
        out: list[LineItem] = []
        budget = self.budget_bytes
        while ready and len(out) < self.budget_lines:
            item = ready[0]
            size = 0 if type(item) is TooLarge else len(item[1]) + 1
            if out and size > budget:
                break
            budget -= size
            ready.popleft()
            out.append(item if type(item) is TooLarge else _make_line(item))
            self._consumed = self._end_of(item)
        self._settle()
        return out

    def read_all(self) -> list[PairItem]:
        """Every item ready now, whatever the budgets; complete lines as plain pairs."""
        out = list(self._ready)
        if out:
            self._ready.clear()
            self._consumed = self._end_of(out[-1])
        self._settle()
        return out

    # --- internals ---------------------------------------------------------------------

    def _settle(self) -> None:
        if not self._ready and not self._partial and not self._skipping:
            self._consumed = self._fed

    def _finish_partial(self, data: bytes, start: int) -> int:
        """Complete the buffered partial line; returns where the rest of ``data`` starts."""
        line_start = start - len(self._partial)
        newline = data.find(b"\n")
        end = len(data) if newline < 0 else newline
        if len(self._partial) + end >= self.max_line_bytes:
            head = bytes(self._partial[:HEAD_BYTES])
            self._too_large(line_start, head + data[: min(end, max(0, HEAD_BYTES - len(head)))])
            if newline < 0:
                return -1
            self._skipping = False
            return newline + 1
        if newline < 0:
            self._partial += data
            return -1
        line = bytes(self._partial) + data[:newline]
        self._partial.clear()
        self._ready.append((line_start, line))
        return newline + 1

    def _cut_lines(self, data: bytes, pos: int, start: int) -> None:
        last = data.rfind(b"\n")
        if last >= pos:
            lines = data[pos:last].split(b"\n")
            if max(map(len, lines)) >= self.max_line_bytes:
                self._cut_slowly(lines, start + pos)
            else:  # offsets by a running sum of (length + 1), all in C
                offsets = accumulate(map(_plus_one, map(len, lines)), initial=start + pos)
                self._ready.extend(zip(offsets, lines, strict=False))
            pos = last + 1
        if pos == len(data):
            return
        if len(data) - pos >= self.max_line_bytes:
            self._too_large(start + pos, data[pos : pos + HEAD_BYTES])
        else:
            self._partial += data[pos:]

    def _cut_slowly(self, lines: list[bytes], offset: int) -> None:
        limit, ready = self.max_line_bytes, self._ready
        for line in lines:
            too_large = len(line) >= limit
            ready.append(TooLarge(offset, line[:HEAD_BYTES]) if too_large else (offset, line))
            offset += len(line) + 1

    def _too_large(self, offset: int, head: bytes) -> None:
        self._partial.clear()
        self._skipping = True
        self._ready.append(TooLarge(offset, head))

    def _skipped_through(self, offset: int) -> None:
        if not self._ready:
            self._consumed = offset

    def _end_of(self, item: PairItem) -> int:
        if type(item) is not TooLarge:
            return item[0] + len(item[1]) + 1
        # A too-large line ends where the next item starts, or where the stream stands.
        if self._ready:
            return self._ready[0][0]
        return self._fed - len(self._partial)
