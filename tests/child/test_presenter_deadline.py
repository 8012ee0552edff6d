"""The child's deadline on a virtual clock (tests/support/clock.py): the real presenter,
its control and event files real, its wall clock the loop's virtual one; the runner is a
TEST DOUBLE whose turn runs until the test releases it or the turn is aborted. No test
waits for the deadline: the clock jumps to it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.support.clock import run

from tether.agent.runner import EmitFn, TurnControl, TurnOutcome, TurnRequest
from tether.runtime.child.files import EventLog
from tether.runtime.child.presenter import ChildOptions, Presenter
from tether.runtime.parent.rundir import append_line
from tether.wire import Sender
from tether.wire import messages as m

RUN = "deadline-run"
EPOCH = 2_000_000_000.0  # the wall clock at the loop's time 0


class HeldTurn:
    """TEST DOUBLE runner: a turn ends when ``release`` is set, or when aborted."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def prepare(self) -> None:
        return None

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        await self.release.wait()  # an abort cancels this
        return TurnOutcome("end_turn")

    def final_text(self) -> str:
        return "answered"

    async def aclose(self) -> None:
        return None


def _play(root: Path, *, deadline_in: float, release_at: float | None) -> tuple[str, float]:
    """A run prompted at time 0 with its deadline ``deadline_in`` s of the clock away, its
    turn released at ``release_at`` (then closed); its end state and the clock then."""
    control, events = root / "control.jsonl", root / "events.jsonl"
    control.touch(0o600)
    controls = Sender(RUN)
    runner = HeldTurn()

    async def build(emit: EmitFn) -> HeldTurn:
        return runner

    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        options = ChildOptions(
            control,
            events,
            build,
            RUN,
            deadline=EPOCH + deadline_in,
            wall_clock=lambda: EPOCH + loop.time(),
        )
        presenter = Presenter(options, EventLog(events, RUN))
        append_line(control, _line(controls, m.Prompt, text="go"))
        if release_at is not None:

            def release() -> None:
                runner.release.set()
                append_line(control, _line(controls, m.Close))

            loop.call_later(release_at, release)
        state = await presenter.run()
        return str(state), loop.time()

    return run(main())


def _line(sender: Sender, cls: type[m.Message], **fields: Any) -> bytes:
    line = sender.next(cls, **fields)
    assert isinstance(line, bytes), line
    return line


def _events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]


def test_the_deadline_aborts_the_running_turn_when_it_comes(tmp_path: Path) -> None:
    state, at = _play(tmp_path, deadline_in=300.0, release_at=None)
    assert state == "timed-out"
    assert at == 300.0  # at its time: not a moment sooner, and nothing else waited after
    events = _events(tmp_path)
    complete = [e for e in events if e["type"] == "turn-complete"]
    assert [e["stop-reason"] for e in complete] == ["aborted"]
    assert events[-1] == {**events[-1], "status": "timed-out", "error": "run deadline exceeded"}


def test_a_run_that_ends_before_its_deadline_is_done(tmp_path: Path) -> None:
    state, at = _play(tmp_path, deadline_in=300.0, release_at=299.0)
    assert state == "done"
    assert at == 299.0  # the close ended it then: the deadline never fired
    assert _events(tmp_path)[-1]["status"] == "done"


def test_a_deadline_already_passed_ends_the_run_at_once(tmp_path: Path) -> None:
    state, at = _play(tmp_path, deadline_in=-1.0, release_at=None)
    assert state == "timed-out"
    assert at == 0.0
    assert "turn-started" not in [e["type"] for e in _events(tmp_path)]
