"""An incremental, total Server-Sent Events parser (sans-IO).

Theory of operation: :meth:`SSEDecoder.feed` takes whatever bytes arrived and returns
the events they completed, following the WHATWG "event stream interpretation" rules:

- lines end with CRLF, LF or CR (a CR at the end of one chunk and an LF at the start of
  the next are one line end, so split points never change the result);
- ``field: value`` lines, one optional space after the colon stripped; a line without a
  colon is a field with an empty value; lines starting with ``:`` are comments;
- ``data`` lines accumulate, joined with ``\\n``; a blank line dispatches the event (no
  event when no data arrived); ``event`` sets the type (default ``message``); ``id``
  sets the last event id (kept across events, ignored if it contains NUL); ``retry``
  with only digits sets :attr:`SSEDecoder.retry`; other fields are ignored;
- a UTF-8 byte order mark at the very start is skipped; invalid UTF-8 is replaced.

An event larger than ``max_event_bytes`` (counting its field lines and the pending
partial line) is never buffered: the decoder returns one :class:`SSERejection`, drops
the event's bytes as they arrive, and resumes after the blank line that ends it.
Nothing here raises on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
_BOM: Final = b"\xef\xbb\xbf"
_LINE_END: Final = re.compile(rb"\r\n|\r|\n")
_CR: Final = 0x0D
_LF: Final = 0x0A


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    data: str
    id: str


@dataclass(frozen=True, slots=True)
class SSERejection:
    code: str  # "event-too-large"
    reason: str


class SSEDecoder:
    """Feed bytes, get :class:`SSEEvent` values (or an :class:`SSERejection`) back."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id = ""
        self.retry: int | None = None
        self._partial = bytearray()  # the current line, not yet terminated
        self._line_has_bytes = False  # the current line is non-empty (also when discarding)
        self._event_bytes = 0  # bytes of completed lines in the current event
        self._event_type = ""
        self._data: list[str] = []
        self._discarding = False  # inside an over-long event
        self._skip_lf = False  # the last chunk ended with CR
        self._head = b""  # the first bytes, held until a BOM is ruled out
        self._started = False

    def feed(self, data: bytes) -> list[SSEEvent | SSERejection]:
        out: list[SSEEvent | SSERejection] = []
        if not self._started:
            data = self._head + data
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self._head = data
                return out
            self._started, self._head = True, b""
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
        pos = 0
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == _LF:
                pos = 1
        for match in _LINE_END.finditer(data, pos):
            end = match.start()
            size = self._event_bytes + end - pos
            if self._partial or self._discarding or size > self.max_event_bytes:
                self._extend(data, pos, end, out)
                self._end_line(out)
            elif end == pos:  # fast path: a blank line
                self._dispatch(out)
            else:  # fast path: a whole line inside this chunk
                self._event_bytes = size + 1
                self._field(data[pos:end].decode("utf-8", "replace"))
            pos = match.end()
        self._extend(data, pos, len(data), out)
        if data and data[-1] == _CR:
            self._skip_lf = True
        return out

    def has_pending(self) -> bool:
        """True when bytes of an undispatched event are buffered (a stream cut mid-event)."""
        return bool(self._partial or self._data or self._event_bytes or self._discarding)

    def _extend(
        self, data: bytes, start: int, end: int, out: list[SSEEvent | SSERejection]
    ) -> None:
        if start >= end:
            return
        self._line_has_bytes = True
        if self._discarding:
            return
        size = self._event_bytes + len(self._partial) + (end - start)
        if size > self.max_event_bytes:
            out.append(
                SSERejection(
                    "event-too-large",
                    f"an event exceeded {self.max_event_bytes} bytes and was dropped",
                )
            )
            self._discarding = True
            self._reset_event()
            return
        self._partial += data[start:end]

    def _end_line(self, out: list[SSEEvent | SSERejection]) -> None:
        blank = not self._line_has_bytes
        self._line_has_bytes = False
        if self._discarding:
            if blank:
                self._discarding = False
            return
        if blank:
            self._dispatch(out)
            return
        self._event_bytes += len(self._partial) + 1
        line = self._partial.decode("utf-8", "replace")
        self._partial.clear()
        self._field(line)

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry" and 0 < len(value) <= 18 and value.isascii() and value.isdigit():
            self.retry = int(value)

    def _dispatch(self, out: list[SSEEvent | SSERejection]) -> None:
        if self._data:
            out.append(
                SSEEvent(self._event_type or "message", "\n".join(self._data), self.last_event_id)
            )
        self._reset_event()

    def _reset_event(self) -> None:
        self._partial.clear()
        self._event_bytes = 0
        self._event_type = ""
        self._data = []
