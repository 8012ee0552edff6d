"""Replay wire event lines through a display, the way the live parent draws them.

Theory of operation: :class:`WireReplay` takes the lines of a run's ``events.jsonl`` (or
any stream of wire events) one at a time. Each line is validated with
``tether.wire.decode(line, "event")``; a rejected line becomes a warning naming its line
number, never an exception. The first run seen is the top run (depth 0); events of any
other run are drawn nested (depth 1). When the stream ends, the top run's ``result`` and
``exit`` give the final answer, status and usage, and :meth:`finish` hands them to
``display.final`` just as the live parent does. The elapsed time is the span of the
events' timestamps (second precision), so a replay is deterministic.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tether.display import Display
    from tether.wire import Exit, Result

_TIMESTAMP: Final = "%Y-%m-%dT%H:%M:%SZ"


def _parse_time(stamp: str | None) -> datetime | None:
    if stamp is None:
        return None
    try:
        return datetime.strptime(stamp, _TIMESTAMP)
    except ValueError:
        return None


class WireReplay:
    """Feeds wire lines to a display; see the module docstring."""

    def __init__(self, display: Display) -> None:
        self._display = display
        self._top: str | None = None
        self._result: Result | None = None
        self._exit: Exit | None = None
        self._first_stamp: str | None = None
        self._last_stamp: str | None = None
        self.lines = 0
        self.rejected = 0

    def line(self, data: bytes) -> None:
        """One line without its newline. Blank lines are skipped."""
        from tether.wire import Exit, Rejection, Result, decode

        self.lines += 1
        if not data.strip():
            return
        event = decode(data, "event")
        if isinstance(event, Rejection):
            self.reject(f"line {self.lines}: {event.code}: {event.reason}")
            return
        run = event.run
        if self._top is None:
            self._top = run
        depth = 0 if run == self._top else 1
        stamp = getattr(event, "timestamp", None)
        if isinstance(stamp, str):
            self._first_stamp = self._first_stamp or stamp
            self._last_stamp = stamp
        if depth == 0 and isinstance(event, Result):
            self._result = event
        elif depth == 0 and isinstance(event, Exit):
            self._exit = event
        self._display.event(event, run=run, depth=depth, raw=data)  # type: ignore[arg-type]

    def too_large(self, limit: int) -> None:
        """The next line was at least ``limit`` bytes long and was skipped."""
        self.lines += 1
        self.reject(f"line {self.lines}: too-large: line exceeds {limit} bytes")

    def reject(self, text: str) -> None:
        self.rejected += 1
        self._display.notice(text, level="warning")

    def elapsed(self) -> float:
        first, last = _parse_time(self._first_stamp), _parse_time(self._last_stamp)
        if first is None or last is None:
            return 0.0
        return max((last - first).total_seconds(), 0.0)

    def finish(self) -> bool:
        """Draw the final answer if the top run ended; True when it did."""
        from msgspec import UNSET

        from tether.display import ended_label

        result, exit_ = self._result, self._exit
        if result is None and exit_ is None:
            return False
        status = exit_.status if exit_ is not None else "done"
        error = None if exit_ is None or exit_.error is UNSET else exit_.error
        if status != "done" and error:
            self._display.notice(f"run {status}: {error}", level="error")
        text = usage = None
        truncated = False
        stop_reason = None
        if result is not None:
            stop_reason = result.stop_reason
            text = None if result.final_text is UNSET else result.final_text
            usage = None if result.usage is UNSET else result.usage
            truncated = result.truncated is True
        self._display.final(
            status=ended_label(status, stop_reason),
            final_text=text or "",
            usage=usage,
            truncated=truncated,
            elapsed_s=self.elapsed(),
        )
        return True
