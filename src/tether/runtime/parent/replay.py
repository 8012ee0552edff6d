"""Read a run's permanent log back as the updates the live parent produced.

``events.jsonl`` holds every line the child wrote. Reading it through a fresh
:class:`~tether.runtime.parent.mirror.RunMirror` yields the same validated events, the same
mirrored states and the same channel errors, in the same order, as the live run; so a
display fed from here renders exactly what it rendered live (inbox messages aside: they
live in the inbox file and its SQLite rows, interleaved by time).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tether.runtime.parent.finaltext import truncation_note
from tether.runtime.parent.mirror import ChannelError, RunMirror, too_large
from tether.runtime.parent.rundir import RunDir
from tether.runtime.parent.updates import RunEvent, Update
from tether.transports.tail import FileTail, TailStatus
from tether.wire import TooLarge


def read_log(
    path: Path, run_id: str, mirror: RunMirror | None = None, *, controls: Path | None = None
) -> Iterator[Update]:
    """Every update of the log at ``path`` for run ``run_id``, in order.

    ``controls`` is the run's control file: its lines are what the acks in the log answer.
    """
    mirror = mirror if mirror is not None else RunMirror(run_id)
    if controls is not None:
        with contextlib.suppress(OSError), FileTail(controls) as tail:
            while (read := tail.read()).items:
                for item in read.items:
                    if not isinstance(item, TooLarge):
                        mirror.expect(item.data)
    with FileTail(path) as tail:
        while True:
            read = tail.read()
            if read.status is TailStatus.MISSING:
                yield ChannelError(f"no event log at {path}", True, run_id)
                return
            if read.status is TailStatus.TRUNCATED or not read.items:
                return
            for item in read.items:
                if isinstance(item, TooLarge):
                    yield too_large(run_id, item.offset)
                    continue
                event, problem = mirror.receive(item.data)
                if event is not None:
                    yield RunEvent(run_id, event, item.data, mirror.state)
                if problem is not None:
                    yield problem


@dataclass(frozen=True, slots=True)
class LoggedEnd:
    """How a logged run ended, from the log alone (for runs the index does not know)."""

    status: str
    final_text: str
    stop_reason: str | None
    usage: dict[str, object] | None
    truncated: bool
    error: str | None


def end_from_log(run: RunDir, mirror: RunMirror) -> LoggedEnd:
    """The end of a run as its log (and its saved ``final.txt``) tell it."""
    exit_event, result = mirror.exit, mirror.result
    status = exit_event.status if exit_event is not None else "failed"
    error = None
    if exit_event is None:
        error = "the log has no exit event (the parent stopped the child, or it died)"
    elif isinstance(exit_event.error, str):
        error = exit_event.error
    text, truncated = "", False
    if result is not None:
        text = result.final_text if isinstance(result.final_text, str) else ""
        truncated = result.truncated is True and not isinstance(result.final_text_path, str)
        if truncated:
            text += truncation_note(len(text.encode()), None, "no file was named")
    with contextlib.suppress(OSError):
        text = run.final.read_text(encoding="utf-8")
    return LoggedEnd(
        status=status,
        final_text=text,
        stop_reason=result.stop_reason if result is not None else None,
        usage=result.usage if result is not None and isinstance(result.usage, dict) else None,
        truncated=truncated,
        error=error,
    )
