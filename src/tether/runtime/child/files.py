"""The child's two files: the event log it appends to and the control file it tails.

:class:`EventLog` stamps every event with the run's increasing seq and appends it to
the event file with ONE ``write`` of whole lines (the file is open ``O_APPEND``, so a
reader never sees a torn or interleaved line). Display events pass through
:func:`tether.wire.normalize` first; once the presenter's loop runs
(:meth:`EventLog.hold_displays`) they are held until the end of the loop pass and go out
together, in one write, so the dozen events of a short turn wake the parent a few times
instead of a dozen; a lifecycle line (``control-ack``, ``turn-*``, ``result``, ``exit``...)
is written at once, after whatever is held, so an ack still reaches the parent before any
event its control causes. After the ``exit`` line nothing more is written.
:func:`result_fields` fits a long final text into one ``result`` line, writing
the whole text to a private temp file named by ``final-text-path``.

:class:`ControlFeed` turns the control file into decoded controls in bounded reads:
each read hands out at most 64 KiB / 64 lines (:class:`tether.transports.tail.FileTail`),
and every item becomes a :class:`ControlLine` (``message`` or ``rejection``; a line too long
for one read is one rejection, and the rest of it is skipped to its newline).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from tether import fsafe
from tether.transports.tail import FileTail, TailStatus
from tether.wire import (
    DISPLAY_EVENT_TYPES,
    MAX_LINE_BYTES,
    AnyControl,
    Code,
    Info,
    Message,
    Receiver,
    Rejection,
    Result,
    Sender,
    TooLarge,
    normalize,
)
from tether.wire import Control as WireControl
from tether.wire.limits import MAX_SAFE_INTEGER, RESULT_TEXT_BYTES
from tether.wire.text import cut_text, first_line_summary

if TYPE_CHECKING:
    import asyncio  # not at run time: a child imports this module before `ready`

__all__ = ["ControlFeed", "ControlLine", "EventLog", "FeedRead", "result_fields", "utc_now"]

FILE_MODE: Final = 0o600
ERROR_LINE_BYTES: Final = 4096


def utc_now() -> str:
    """The wire's timestamp: UTC, second precision (``2026-09-25T00:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def first_line(error: str) -> str:
    """``exit.error`` is the first line of the error, bounded."""
    return first_line_summary(error, ERROR_LINE_BYTES) or error[:1]


class EventLog:
    """Appends this run's events to the event file; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str], run: str) -> None:
        self.path = Path(path)
        self.sender = Sender(run)
        self.closed = False
        self.on_error: Callable[[OSError], None] | None = None  # a write failed (disk full)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, FILE_MODE)
        self._loop: asyncio.AbstractEventLoop | None = None  # set: display lines are held
        self._held: list[bytes] = []  # encoded display lines, each with its newline

    @property
    def run(self) -> str:
        return self.sender.run

    def hold_displays(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on hold display lines until the end of ``loop``'s pass (see the module
        docstring); call on the loop's thread, the only one that writes events."""
        self._loop = loop

    def emit(self, cls: type[Message], /, **fields: Any) -> None:
        """Write a lifecycle event (at once); a refusal here is a bug, so it raises."""
        line = self.sender.next(cls, **fields)
        if isinstance(line, Rejection):
            raise ValueError(f"cannot encode {cls.__name__}: {line.reason}")
        self._write(line)

    def emit_display(self, raw: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> None:
        """Normalize and write one display event from the agent (others become ``info``)."""
        if self.closed:
            return
        kind = raw.get("type")
        if kind not in DISPLAY_EVENT_TYPES:
            raw = {"type": "info", "summary": f"{kind} is not a display event; not forwarded"}
        line = self.sender.next_payload(normalize(raw, now=utc_now(), meta=meta))
        if isinstance(line, Rejection):
            summary = f"{kind} event dropped: {line.reason}"
            line = self.sender.next(Info, timestamp=utc_now(), summary=summary[:160])
            if isinstance(line, Rejection):
                return
        if self._loop is None:
            self._write(line)
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(line + b"\n")

    def flush(self) -> None:
        """Write the held display lines now (one write)."""
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._append(data)

    def _write(self, line: bytes) -> None:
        """Append the held lines and ``line`` in one write."""
        data = line + b"\n"
        if self._held:
            self._held.append(data)
            data = b"".join(self._held)
            self._held.clear()
        self._append(data)

    def _append(self, data: bytes) -> None:
        """Append whole lines, or nothing: a full disk never leaves a torn last line.

        A write that fails (``ENOSPC``, ``EFBIG``...) after part of it went out cuts the
        file back to where it began; the log then closes (no later line could follow a
        hole) and ``on_error`` is told, so the run ends instead of waiting.
        """
        if self.closed:
            return
        try:
            fsafe.append_whole(self._fd, data)
        except OSError as exc:
            self.close()
            if self.on_error is not None:
                self.on_error(exc)

    def close(self) -> None:
        """No further lines (called after ``exit``); what is held is written first."""
        self.flush()
        self.closed = True
        with contextlib.suppress(OSError):
            os.close(self._fd)


# --- the result ---------------------------------------------------------------------------


def result_fields(
    text: str,
    stop_reason: str,
    usage: Mapping[str, Any],
    *,
    run: str,
    spill_dirs: list[Path],
    context: str = "complete",
) -> dict[str, Any]:
    """The ``result`` fields for ``text``: whole when it fits one line, else cut and spilled.

    A text too long for one line is written whole to a new private temp file in the first
    of ``spill_dirs`` that works, named by ``final_text_path``; the line carries a UTF-8
    prefix of at most RESULT_TEXT_BYTES, halved until the line fits, with ``truncated``.
    """
    fields: dict[str, Any] = {
        "final_text": text,
        "stop_reason": stop_reason,
        "usage": dict(usage),
        "context": context,
    }
    if _fits(fields, run):
        return fields
    path = spill_text(text, spill_dirs)
    if path is not None:
        fields["final_text_path"] = str(path)
    fields["truncated"] = True
    limit = RESULT_TEXT_BYTES
    while limit > 0:
        fields["final_text"] = cut_text(text, limit)[0]
        if _fits(fields, run):
            return fields
        limit //= 2
    fields["final_text"] = ""
    return fields


def _fits(fields: Mapping[str, Any], run: str) -> bool:
    # Encoded with the largest seq the run could reach, so the real line fits too.
    line = Sender(run, last_seq=MAX_SAFE_INTEGER - 1).next(Result, **fields)
    return not isinstance(line, Rejection)


def spill_text(text: str, dirs: list[Path]) -> Path | None:
    """Write ``text`` to a new 0600 temp file in the first usable dir; None if none works."""
    import tempfile

    data = text.encode("utf-8", "replace")
    for directory in dirs:
        try:
            fd, name = tempfile.mkstemp(prefix="final-text-", suffix=".txt", dir=directory)
        except OSError:
            continue
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name)
            continue
        return Path(name)
    return None


# --- controls -----------------------------------------------------------------------------


class ControlLine(NamedTuple):
    """One control line: its message, or why it was rejected."""

    message: AnyControl | None = None
    rejection: Rejection | None = None


class FeedRead(NamedTuple):
    """One bounded read: the controls, and whether the file was truncated (fatal).

    ``more``: something may be left for another read right now (the tail's hint: lines
    buffered, or a read that filled its budget); False when the read reached the end.
    """

    controls: list[ControlLine]
    truncated: bool = False
    missing: bool = False
    removed: bool = False
    more: bool = False


# Built without the NamedTuples' Python-level __new__ (the ack path runs cold: each
# frame it enters costs a few microseconds after an idle gap).
_control_line = partial(tuple.__new__, ControlLine)
_TOO_LARGE: Final = Rejection(code=Code.TOO_LARGE, reason=f"line exceeds {MAX_LINE_BYTES} bytes")
_OK: Final = TailStatus.OK  # (an enum member read through its class is slow on 3.11)


class ControlFeed:
    """Decoded controls from the control file, with increasing seqs enforced."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.tail = FileTail(path)
        self.receiver = Receiver("control")

    @property
    def offset(self) -> int:
        return self.tail.offset

    def read(self) -> FeedRead:
        """The next bounded read (possibly empty)."""
        got = self.tail.read()
        status = got.status
        if status is not _OK:
            return FeedRead(
                [],
                truncated=status is TailStatus.TRUNCATED,
                missing=status is TailStatus.MISSING,
                removed=status is TailStatus.REMOVED,
            )
        receive = self.receiver.receive
        controls = []
        for item in got.items:
            if type(item) is TooLarge:
                controls.append(_control_line((None, _TOO_LARGE)))
                continue
            result = receive(item[1])  # a Line's data
            if type(result) is Rejection:
                controls.append(_control_line((None, result)))
            elif isinstance(result, WireControl):
                controls.append(_control_line((result, None)))
            else:  # the control decoder yields only controls
                reason = f"{result.seq}: not a control"
                rejection = Rejection(code=Code.UNKNOWN_TYPE, reason=reason)
                controls.append(_control_line((None, rejection)))
        return FeedRead(controls, False, False, False, got.more)

    def size(self) -> int:
        """The control file's size now (0 when it cannot be opened)."""
        try:
            return self.tail.size() or 0
        except OSError:
            return 0

    def position(self) -> tuple[int, int]:
        """How far the reads got: (bytes read from the file, lines handed out)."""
        return self.tail.fed, self.tail.offset

    def behind(self, end: int) -> bool:
        """True while lines written before offset ``end`` are still unread or buffered."""
        return self.tail.has_pending() or self.tail.fed < end

    def more(self) -> bool:
        """True when another read may find something (buffered lines, or unread bytes)."""
        try:
            return self.tail.size_changed()
        except OSError:
            return False

    def close(self) -> None:
        self.tail.close()
