"""The wire renderer: each event's line exactly as received, one per line, on stdout.

An event given without its original line is encoded again (``tether.wire.encode``). On a
terminal, raw DEL and C1 characters inside JSON strings are written as ``\\u`` escapes (the
same JSON value); elsewhere lines are verbatim. Display messages that did not come from a
wire event (RESP frames, stream-json) have no wire form and are skipped; notices and
prominent inbox messages go to stderr, as for stream-json.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from tether.display.boundary import Item, Notice
from tether.display.sanitize import escape_c1_json
from tether.display.stream_json import SideLines

if TYPE_CHECKING:
    from tether.wire import AnyEvent


class WireRenderer(SideLines):
    """Raw wire lines; see the module docstring."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        super().__init__(stdout, stderr)
        try:
            self._tty = stdout.isatty()
        except (AttributeError, OSError, ValueError):
            self._tty = False

    def raw(self, event: AnyEvent, raw: bytes | None, *, run: str, depth: int) -> bool:
        if raw is None:
            from tether.wire import Rejection, encode

            encoded = encode(event)
            if isinstance(encoded, Rejection):
                self.notice(f"{run}: event not shown: {encoded.reason}", level="warning")
                return True
            raw = encoded
        line = raw.rstrip(b"\n").decode("utf-8", "replace")
        self._emit((escape_c1_json(line) if self._tty else line) + "\n")
        return True

    def item(self, item: Item, *, run: str, depth: int) -> None:
        if isinstance(item, Notice):
            self.notice(item.text, level=item.level)
