"""Parent and child over real processes: every row of the state table.

Each (state, control) cell: drive a child (the TEST DOUBLE) into the state, send the
control, and check the ack against ``decide`` and the mirrored state against the
child's own (it rides on every event as ``child-state``) after every event.
The terminal row needs a child that has exited; it is covered in memory
(test_mirror_memory.py) and by ``RunEnded`` below.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.controls import control_fields
from tether.runtime.parent.spawn import RunEnded, RunHandle, spawn
from tether.wire.session import EXTENSIONS, ControlKind, State, acks_of, decide

from .helpers import ENDLESS, FAST, Collector, Gate, child_state, double


async def _into(state: State) -> tuple[RunHandle, Collector]:
    """A run in ``state``; but for READY, its turns end only by a control."""
    mode = "slow-start" if state is State.STARTING else "normal"
    argv = double(mode, 100 if state is State.READY else ENDLESS)
    handle = await spawn("task", argv=argv, timeouts=FAST, close_when_idle=False)
    seen = Collector(handle)
    if state is State.STARTING:
        return handle, seen
    await seen.until_type("turn-started")
    if state is State.READY:
        await seen.until_type("turn-complete")
    elif state is State.CLOSING:
        assert (await handle.close()).status == "accepted"
    elif state is State.FINALIZING:
        assert (await handle.finalize()).status == "accepted"
    assert handle.state is state
    return handle, seen


async def _cell(state: State, control: ControlKind) -> None:
    handle, seen = await _into(state)
    fields = control_fields(control)
    ack = await handle.send(control, **fields)
    expected = decide(state, control)
    assert ack.status in acks_of(expected), (state, control, ack)
    if control in EXTENSIONS:  # the double knows wire v1 only, as Fen's child
        assert ack.reason == f"unknown control type: {control}"
    elif expected.reason:
        assert ack.reason == expected.reason
    result = await handle.aclose()
    await seen.done()
    for item in seen.events():
        assert child_state(item) == item.state, (state, control, item)
    if state is State.READY and control is ControlKind.CLOSE:
        assert result.status == "done"
    if control is ControlKind.CANCEL:
        assert result.status == "cancelled"


@pytest.mark.slow
@pytest.mark.parametrize(
    "state", [State.STARTING, State.READY, State.RUNNING, State.CLOSING, State.FINALIZING]
)
def test_state_table_row(state: State) -> None:
    async def row() -> None:
        await asyncio.gather(*(_cell(state, control) for control in ControlKind))

    asyncio.run(row())


def test_a_whole_run_agrees_with_the_child_after_every_event(tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")

    async def go() -> None:
        handle = await spawn("hello", argv=double(gate=gate), timeouts=FAST)
        seen = Collector(handle)
        await seen.until_type("turn-started")
        assert (await handle.steer("steered")).status == "accepted"
        assert (await handle.follow_up("followed")).status == "accepted"
        await seen.until_type("steering-injected")
        gate.open()  # the turn's work is done: the follow-up comes in
        await seen.until_type("follow-up-injected")
        gate.open()
        result = await handle.wait()
        await seen.done()
        assert result.status == "done"
        assert result.final_text == "answer: hello + steered + followed"
        assert result.usage == {"input": 10, "output": 5}
        types = seen.types()
        assert types[0] == "ready"
        assert types[-2:] == ["result", "exit"]
        assert "steering-injected" in types
        assert "follow-up-injected" in types
        for item in seen.events():
            assert child_state(item) == item.state
        with pytest.raises(RunEnded):
            await handle.steer("too late")

    asyncio.run(go())


def test_finalize_while_running_answers_from_a_tool_free_turn() -> None:
    async def go() -> None:
        handle = await spawn("long job", argv=double("normal", ENDLESS), timeouts=FAST)
        seen = Collector(handle)
        await seen.until_type("turn-started")
        ack = await handle.finalize("wrap up")
        assert ack.status == "accepted"
        assert handle.state is State.FINALIZING
        assert (await handle.finalize()).status == "applied"
        await handle.aclose()
        await seen.done()
        stops = [i.event.stop_reason for i in seen.events() if hasattr(i.event, "stop_reason")]
        assert stops[0] == "aborted"

    asyncio.run(go())


def test_runs_started_by_a_run_are_followed_with_their_depth(tmp_path: Path) -> None:
    from tether.runtime.parent.spawn import RunEvent

    gate = Gate(tmp_path / "gate")

    async def go() -> tuple[list[tuple[str, int, str]], str, str]:
        top = await spawn("top", argv=double(gate=gate), timeouts=FAST, follow_nested=True)
        seen = Collector(top)
        await seen.until_type("turn-started")
        # what the subagent tool does inside the child: a run whose parent is `top`
        sub = await spawn("sub", argv=double("normal", 100), timeouts=FAST, parent_run=top.run_id)
        await sub.wait()
        await seen.until(
            lambda u: (
                isinstance(u, RunEvent) and u.run == sub.run_id and type(u.event).__name__ == "Exit"
            )
        )
        gate.open()  # top's turn ends once it has seen the sub-run's end
        await top.wait()
        await seen.done()
        items = [
            (i.run, i.depth, type(i.event).__name__) for i in seen.items if isinstance(i, RunEvent)
        ]
        return items, top.run_id, sub.run_id

    items, top_id, sub_id = asyncio.run(go())
    nested = [(depth, name) for run, depth, name in items if run == sub_id]
    assert nested[0] == (1, "Ready")
    assert nested[-1] == (1, "Exit")
    assert all(depth == 0 for run, depth, _ in items if run == top_id)


def _exit(item: object) -> bool:
    from tether.runtime.parent.spawn import RunEvent

    return isinstance(item, RunEvent) and type(item.event).__name__ == "Exit"
