"""What a supervised agent keeps besides its process: the mirror snapshot, followers.

- :func:`restore_mirror`: the parent-side channel state back from its snapshot
  (:meth:`~tether.runtime.parent.mirror.RunMirror.snapshot`, stored in the registry next to the
  event-file offset it belongs to). A restarted daemon resumes reading the event file
  at that offset with the mirror as it was there; controls written after the snapshot
  are read back from the control file, so no seq is ever reused.
- :class:`Follower`: one live reader of an agent's events (``agent.events`` with
  ``follow``), bounded so a slow client cannot make the daemon hold unbounded memory.

No sockets and no clock here; the files read are the run's own.
"""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any, Final

from tether.runtime.parent.mirror import RunMirror
from tether.transports.tail import FileTail
from tether.wire import Rejection, TooLarge
from tether.wire.session import State, is_terminal

MAX_FOLLOWER_BACKLOG: Final = 100_000  # events queued for one slow follower


def restore_mirror(
    run_id: str, snap: dict[str, Any] | None, last_seq: int, control: Path
) -> RunMirror:
    """A mirror in the state ``snap`` recorded at receiver seq ``last_seq``
    (:meth:`RunMirror.restore`), with the controls appended after the snapshot was taken
    (the daemon died between writing a control and persisting) read back from the
    control file and expected again. Raises ``ValueError`` for a snapshot that does not
    parse.
    """
    mirror = RunMirror.restore(run_id, snap, last_seq)
    known = mirror.sender.seq
    with FileTail(control) as tail:
        while (read := tail.read()).items:
            for item in read.items:
                if not isinstance(item, TooLarge):
                    _expect_after(mirror, item.data, known)
    return mirror


def _expect_after(mirror: RunMirror, line: bytes, known: int) -> None:
    from tether.wire import decode

    message = decode(line, "control")
    if not isinstance(message, Rejection) and message.seq > known:
        mirror.expect(line)


# -- followers ----------------------------------------------------------------------------


class Follower:
    """A live reader of one agent's events: everything after ``last_seq``, in order."""

    def __init__(self, after_seq: int) -> None:
        self.last_seq = after_seq  # the last seq handed out (or skipped as already sent)
        self._queue: deque[tuple[int, bytes]] = deque()
        self._event = asyncio.Event()
        self.ended = False
        self.overflowed = False

    def push(self, seq: int, raw: bytes) -> None:
        if self.ended:
            return
        if len(self._queue) >= MAX_FOLLOWER_BACKLOG:
            self.overflowed = True
            self.end()
            return
        self._queue.append((seq, raw))
        self._event.set()

    def end(self) -> None:
        self.ended = True
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()

    def take(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` queued events newer than :attr:`last_seq`."""
        out: list[tuple[int, bytes]] = []
        while self._queue and len(out) < limit:
            seq, raw = self._queue.popleft()
            if seq > self.last_seq:
                out.append((seq, raw))
                self.last_seq = seq
        if not self._queue and not self.ended:
            self._event.clear()
        return out

    @property
    def drained(self) -> bool:
        return not self._queue


def is_live_state(state: str) -> bool:
    """True for states of a run that has not ended."""
    try:
        return not is_terminal(State(state))
    except ValueError:
        return False


__all__ = ["Follower", "is_live_state", "restore_mirror"]
