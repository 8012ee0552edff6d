"""A run's own logs as a :class:`~tether.runtime.parent.updates.LogSource`: where a reader
that fell behind catches up from (its event log by seq, its inbox store by offset).

Events are replayed through a mirror of the reader's own, fed the control lines before
the events that answer them, so each comes back with the state the live reader would
have seen after it. Blocking (files and SQLite): the queue calls it in a thread.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.rundir import RunDir
from tether.runtime.parent.updates import InboxItem, RunEvent
from tether.transports.tail import FileTail, TailStatus
from tether.wire import TooLarge

__all__ = ["RunLogs"]


class RunLogs:
    """The logs of one run (see the module docstring)."""

    def __init__(self, run: RunDir, db: Path | None) -> None:
        self.run = run
        self.db = db

    def events_after(self, seq: int) -> _Replay:
        return _Replay(self.run, seq)

    def inbox_after(self, offset: int, limit: int) -> list[InboxItem]:
        from tether.inbox import open_store
        from tether.runtime.parent.sidecars import inbox_message

        run_id = self.run.run_id
        with open_store(self.db) as store:
            rows = store.messages(run_id, after=offset, limit=limit)
        out = []
        for row in rows:
            message, size = inbox_message(row)
            out.append(InboxItem(run_id, message, size=size, offset=row.offset))
        return out


class _Replay:
    """The event log read from its start through a fresh mirror; events with seq > ``after``
    are handed out, :meth:`take` by :meth:`take`, and it reads on as the log grows."""

    def __init__(self, run: RunDir, after: int) -> None:
        self._run_id = run.run_id
        self._after = after
        self._mirror = RunMirror(run.run_id)
        self._controls = FileTail(run.control)
        self._events = FileTail(run.events)

    def take(self, limit: int) -> list[RunEvent]:
        self._read_controls()  # every ack read below answers a control already read
        out: list[RunEvent] = []
        while len(out) < limit:
            read = self._events.read()
            if read.status is not TailStatus.OK or not read.items:
                break
            for item in read.items:
                if isinstance(item, TooLarge):
                    continue
                event, _ = self._mirror.receive(item.data)
                if event is not None and event.seq > self._after:
                    out.append(RunEvent(self._run_id, event, item.data, self._mirror.state))
                    self._after = event.seq
        return out

    def _read_controls(self) -> None:
        with contextlib.suppress(OSError):
            while (read := self._controls.read()).items:
                for item in read.items:
                    if not isinstance(item, TooLarge):
                        self._mirror.expect(item.data)

    def close(self) -> None:
        self._controls.close()
        self._events.close()
