"""A wire agent's checkpoint timers on a virtual clock (tests/support/clock.py): a state
change is saved at once, the offset alone at most every PERSIST_EVERY_S, a turn that has
just started once it has run RUNNING_SAVE_S, and a turn that ends sooner once, at its end.

The mirror is the real one, fed event lines as a child writes them; the registry is a
TEST DOUBLE that records each save with the clock's time (what is saved is tested with the
real registry in test_agents_recovery.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tests.support.clock import run

from tether.daemon.fleet.checkpoint import PERSIST_EVERY_S, RUNNING_SAVE_S, Checkpoint
from tether.runtime.parent.mirror import RunMirror
from tether.wire import Sender
from tether.wire import messages as m
from tether.wire.session import ControlKind

RUN = "cp-run"


class RecordingRegistry:
    """TEST DOUBLE of the registry: each save's (clock time, state, turn, offset)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.saves: list[tuple[float, str, int, int]] = []

    def save(self, name: str, /, **fields: Any) -> None:
        saved = (self.clock(), fields["state"], fields["turn"], fields["event_offset"])
        self.saves.append(saved)


class Run:
    """A mirror fed event lines at the clock's times, observed by a checkpoint."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.mirror = RunMirror(RUN)
        self.sender = Sender(RUN)
        self.handle = SimpleNamespace(
            mirror=self.mirror, event_offset=0, watch=SimpleNamespace(exit_code=None)
        )
        self.registry = RecordingRegistry(loop.time)
        self.checkpoint = Checkpoint(
            "a",
            self.registry,  # type: ignore[arg-type]
            self.handle,  # type: ignore[arg-type]
            usage=dict,
            note=print,
            state=lambda: str(self.mirror.state),
            clock=loop.time,
        )

    def at(self, when: float, cls: type[m.Message], **fields: Any) -> None:
        """The child writes this event at ``when`` on the clock."""
        self.loop.call_later(when - self.loop.time(), self._says, cls, fields)

    def _says(self, cls: type[m.Message], fields: dict[str, Any]) -> None:
        if cls is m.ControlAck and fields.get("ref") is None:
            sent = self.mirror.control(ControlKind.PROMPT, text="go")
            assert isinstance(sent, tuple), sent
            fields = {**fields, "ref": sent[0]}
        line = self.sender.next(cls, **fields)
        assert isinstance(line, bytes), line
        event, problem = self.mirror.receive(line)
        assert event is not None, problem
        assert problem is None, problem
        self.handle.event_offset += len(line) + 1
        self.checkpoint.on_event(event, line)

    async def until(self, when: float) -> list[tuple[float, str, int, int]]:
        """The saves made by ``when`` on the clock."""
        done = self.loop.create_future()
        self.loop.call_later(when - self.loop.time(), done.set_result, None)
        await done
        return self.registry.saves


def _saves(script: Any, until: float) -> list[tuple[float, str, int, int]]:
    async def main() -> list[tuple[float, str, int, int]]:
        played = Run()
        script(played)
        return await played.until(until)

    return run(main())


def test_a_state_change_is_saved_at_once_and_the_offset_alone_at_most_every_second() -> None:
    def script(r: Run) -> None:
        r.at(0.0, m.Ready)
        for when in (0.1, 0.2, 0.3):  # lines that move the offset only
            r.at(when, m.Info, summary="x")

    saves = _saves(script, until=5.0)
    assert [(t, state) for t, state, _, _ in saves] == [(0.0, "ready"), (PERSIST_EVERY_S, "ready")]
    assert saves[-1][3] > saves[0][3]  # the second save took the offset the lines moved


def test_a_started_turn_is_saved_once_it_has_run_a_moment() -> None:
    def script(r: Run) -> None:
        r.at(0.0, m.Ready)
        r.at(1.0, m.ControlAck, status="accepted")
        r.at(1.0, m.TurnStarted, turn=1)

    saves = _saves(script, until=5.0)
    assert [(t, state, turn) for t, state, turn, _ in saves] == [
        (0.0, "ready", 0),
        (1.0 + RUNNING_SAVE_S, "running", 1),
    ]


def test_a_turn_that_ends_sooner_is_saved_once_at_its_end() -> None:
    def script(r: Run) -> None:
        r.at(0.0, m.Ready)
        r.at(1.0, m.ControlAck, status="accepted")
        r.at(1.0, m.TurnStarted, turn=1)
        r.at(1.0 + RUNNING_SAVE_S / 2, m.TurnComplete, turn=1, stop_reason="end_turn")

    saves = _saves(script, until=5.0)
    assert [(t, state, turn) for t, state, turn, _ in saves] == [
        (0.0, "ready", 0),
        (1.0 + RUNNING_SAVE_S / 2, "ready", 1),  # one write for the short turn
    ]
