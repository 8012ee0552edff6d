"""A wire agent's registry row kept current: where its event log was read to, and the
mirror's state exactly there, so a restarted daemon resumes from it.

Theory of operation. :class:`Checkpoint` observes the agent's run (an
:class:`~tether.runtime.parent.observer.Observer`) and saves ``(event_offset, last_seq,
state, turn, usage, snapshot)`` in one registry update:

- at once (on the loop's next pass, after the calls this read answered) when the state
  or the turn changed, except that a turn that has just started is saved once it has
  run :data:`RUNNING_SAVE_S`: most turns a follow-up starts end sooner, and their end is
  then the one update (one write per short turn instead of two);
- at most every :data:`PERSIST_EVERY_S` when only the offset moved;
- for good when the run ends or the daemon stops supervising it.

A save runs between the driver's bounded reads, never inside one, so the snapshot is the
mirror at exactly the saved offset. Nothing is lost meanwhile: a restarted daemon replays
the events after the saved offset.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from tether.runtime.parent.observer import Observer
from tether.wire.session import State

if TYPE_CHECKING:
    from tether.daemon.fleet.registry import AgentRegistry
    from tether.runtime.parent.driver import LocalRunHandle
    from tether.runtime.parent.outcome import RunResult
    from tether.wire import AnyEvent

__all__ = ["PERSIST_EVERY_S", "RUNNING_SAVE_S", "Checkpoint"]

PERSIST_EVERY_S: Final = 1.0  # the offset alone is saved at most this often
RUNNING_SAVE_S: Final = 0.05  # a turn that just started is saved once it has run this long


class Checkpoint(Observer):
    """Keeps one agent's row current; see the module docstring."""

    def __init__(
        self,
        name: str,
        registry: AgentRegistry,
        handle: LocalRunHandle,
        *,
        usage: Callable[[], dict[str, int]],
        note: Callable[[str], None],
        state: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._clock = clock  # the timers' clock (a test's virtual one: tests/support/clock.py)
        self._registry = registry
        self._handle = handle
        self._usage = usage
        self._note = note
        self._state = state
        mirror = handle.mirror
        self._saved = (handle.event_offset, mirror.state, mirror.turn)
        self._saved_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._due = float("inf")

    def on_event(self, event: AnyEvent, raw: bytes) -> None:
        mirror = self._handle.mirror
        if (mirror.state, mirror.turn) != self._saved[1:]:
            delay = RUNNING_SAVE_S if mirror.state is State.RUNNING else 0.0
        else:
            delay = max(0.0, self._saved_at + PERSIST_EVERY_S - self._clock())
        self._arm(delay)

    async def on_end(self, result: RunResult) -> str | None:
        self.save(exit_code=self._handle.watch.exit_code, detail=result.error)
        return None

    def stop(self) -> None:
        """Save for good (the daemon stops supervising; the child goes on)."""
        self.save()

    def _arm(self, delay: float) -> None:
        due = self._clock() + delay
        if due >= self._due:
            return  # an earlier save is already due
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer, self._due = None, float("inf")
        self.save()

    def save(self, **extra: Any) -> None:
        """Save now (``extra``: more columns, e.g. the exit code)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._due = None, float("inf")
        handle = self._handle
        offset, mirror = handle.event_offset, handle.mirror
        try:
            self._registry.save(
                self._name,
                state=self._state(),
                turn=mirror.turn,
                usage=self._usage(),
                last_seq=mirror.receiver.seq,
                event_offset=offset,
                snapshot=mirror.snapshot(),
                **extra,
            )
        except KeyError:
            return  # removed meanwhile (rm --force)
        except sqlite3.Error as exc:
            self._note(f"registry not updated: {exc}")
            return
        self._saved_at = self._clock()
        self._saved = (offset, mirror.state, mirror.turn)
