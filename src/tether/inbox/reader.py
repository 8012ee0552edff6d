"""A sans-IO, bounded line splitter for inbox files.

Theory of operation: the caller reads a file from some byte offset and feeds
the bytes in; the splitter hands back each complete line with the byte offset
of its first byte. It owns no file: the caller decides what to read and when.

- A trailing line without its newline is held (at most ``max_line`` bytes)
  until it is completed; :attr:`LineSplitter.resume_offset` is where a reader
  that stops now must start again so that nothing is lost or repeated.
- A line longer than ``max_line`` is reported once, as :class:`Overlong`, as
  soon as its length is known to be over the limit, and its bytes are skipped
  up to its newline without being held. ``skipping`` survives a restart: pass
  it back in (with ``resume_offset``) and the skip continues.

Memory stays bounded by ``max_line`` plus one fed chunk, whatever the file size.
"""

from __future__ import annotations

from itertools import accumulate
from typing import NamedTuple

from tether.inbox.messages import MAX_LINE_BYTES

__all__ = ["HEAD_BYTES", "Line", "LineSplitter", "Overlong"]

HEAD_BYTES = 4096
"""How much of an over-long line is kept for its rejection record."""


Line = tuple[int, bytes]
"""One complete line: ``(offset of its first byte, its bytes without the newline)``."""

_plus_one = (1).__add__


class Overlong(NamedTuple):
    """A line over the limit: its offset and its first :data:`HEAD_BYTES` bytes.

    Tell it from a :data:`Line` (a plain tuple) with ``type(item) is Overlong``.
    """

    offset: int
    head: bytes


class LineSplitter:
    """Split fed bytes into :class:`Line` and :class:`Overlong` items, in file order."""

    __slots__ = ("_held", "_held_offset", "_max", "_position", "_skipping")

    def __init__(
        self, *, offset: int = 0, max_line: int = MAX_LINE_BYTES, skipping: bool = False
    ) -> None:
        if offset < 0 or max_line < 1:
            raise ValueError("offset must be >= 0 and max_line >= 1")
        self._position = offset
        self._max = max_line
        self._skipping = skipping
        self._held = bytearray()
        self._held_offset = offset

    @property
    def position(self) -> int:
        """The file offset of the next byte to feed."""
        return self._position

    @property
    def resume_offset(self) -> int:
        """Where to start reading again after a stop: nothing before it is pending."""
        return self._held_offset if self._held else self._position

    @property
    def skipping(self) -> bool:
        """True while inside an over-long line (discarding up to its newline)."""
        return self._skipping

    @property
    def held(self) -> int:
        """Bytes of an incomplete trailing line held for the next feed."""
        return len(self._held)

    def feed(self, data: bytes) -> list[Line | Overlong]:
        """Take the next bytes of the file; return the lines they complete."""
        out: list[Line | Overlong] = []
        base = self._position
        self._position += len(data)
        start = 0
        if self._skipping or self._held:
            start = self._continue(data, base, out)
            if start < 0:
                return out
        self._split(data, base, start, out)
        return out

    def _continue(self, data: bytes, base: int, out: list[Line | Overlong]) -> int:
        """Finish a skipped or held line; return where whole lines start, or -1."""
        newline = data.find(b"\n")
        if self._skipping:
            if newline < 0:
                return -1
            self._skipping = False
            return newline + 1
        held_offset = self._held_offset
        if newline < 0:
            if len(self._held) + len(data) > self._max:
                head = bytes(self._held[:HEAD_BYTES]) + data[: max(0, HEAD_BYTES - len(self._held))]
                out.append(Overlong(held_offset, head))
                self._held.clear()
                self._skipping = True
            else:
                self._held += data
            return -1
        if len(self._held) + newline > self._max:
            head = bytes(self._held[:HEAD_BYTES]) + data[: max(0, HEAD_BYTES - len(self._held))]
            out.append(Overlong(held_offset, head[: len(self._held) + newline]))
        else:
            out.append((held_offset, bytes(self._held) + data[:newline]))
        self._held.clear()
        return newline + 1

    def _split(self, data: bytes, base: int, start: int, out: list[Line | Overlong]) -> None:
        last = data.rfind(b"\n")
        if last >= start:
            lines = data[start:last].split(b"\n")
            if max(map(len, lines)) > self._max:
                self._split_slowly(lines, base + start, out)
            else:  # offsets by a running sum of (length + 1), all in C
                offsets = accumulate(map(_plus_one, map(len, lines)), initial=base + start)
                out.extend(zip(offsets, lines, strict=False))
            start = last + 1
        rest = len(data) - start
        if rest == 0:
            return
        if rest > self._max:
            out.append(Overlong(base + start, data[start : start + HEAD_BYTES]))
            self._skipping = True
        else:
            self._held += data[start:]
            self._held_offset = base + start

    def _split_slowly(self, lines: list[bytes], offset: int, out: list[Line | Overlong]) -> None:
        limit = self._max
        for line in lines:
            if len(line) > limit:
                out.append(Overlong(offset, line[:HEAD_BYTES]))
            else:
                out.append((offset, line))
            offset += len(line) + 1
