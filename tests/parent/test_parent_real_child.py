"""The parent against the real ``tether child --provider scripted`` (no test double)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.controls import control_fields
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.spawn import RunHandle, RunResult, spawn
from tether.wire.session import ControlKind, State, acks_of, decide

from .helpers import FAST, Collector


def _script(tmp_path: Path, name: str, replies: list[dict[str, Any]]) -> list[str]:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(replies))
    return ["--script", str(path)]


async def _scripted(
    tmp_path: Path, name: str, replies: list[dict[str, Any]], **kw: Any
) -> RunHandle:
    args = _script(tmp_path, name, replies)
    return await spawn(
        "the task", provider="scripted", child_args=args, cwd=tmp_path, timeouts=FAST, **kw
    )


def _no_channel_errors(seen: Collector) -> None:
    errors = [i for i in seen.items if isinstance(i, ChannelError)]
    assert errors == []


def test_a_run_with_a_real_tool_call(tmp_path: Path) -> None:
    replies = [
        {
            "text": "Writing.",
            "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > f.txt"}}],
        },
        {"text": "Wrote f.txt."},
    ]

    async def go() -> tuple[RunResult, Collector]:
        handle = await _scripted(tmp_path, "tool", replies)
        seen = Collector(handle)
        result = await handle.wait()
        await seen.done()
        return result, seen

    result, seen = asyncio.run(go())
    assert result.status == "done"
    assert result.final_text == "Wrote f.txt."
    assert (tmp_path / "f.txt").read_text() == "hi\n"
    assert {"tool-call", "tool-result", "turn-complete", "result", "exit"} <= set(seen.types())
    _no_channel_errors(seen)


def test_steer_mid_turn_is_injected(tmp_path: Path) -> None:
    replies = [
        {
            "text": "Looking.",
            "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 0.5"}}],
        },
        {"text": "Steered answer."},
    ]

    async def go() -> tuple[RunResult, Collector]:
        handle = await _scripted(tmp_path, "steer", replies)
        seen = Collector(handle)
        await seen.until_type("tool-call")
        ack = await handle.steer("focus on X")
        assert ack.status == "accepted"
        result = await handle.wait()
        await seen.done()
        return result, seen

    result, seen = asyncio.run(go())
    assert result.status == "done"
    assert result.final_text == "Steered answer."
    injected = [e for e in seen.events() if e.event.__class__.__name__ == "SteeringInjected"]
    assert len(injected) == 1
    _no_channel_errors(seen)


def test_finalize_interrupts_a_long_tool_and_answers(tmp_path: Path) -> None:
    replies = [
        {
            "text": "Building.",
            "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30"}}],
        },
        {"text": "Partial answer."},
    ]

    async def go() -> RunResult:
        handle = await _scripted(tmp_path, "finalize", replies, deadline_s=20)
        seen = Collector(handle)
        await seen.until_type("tool-call")  # the tool runs: finalize must interrupt it
        assert (await handle.finalize()).status == "accepted"
        result = await handle.wait()
        await seen.done()
        _no_channel_errors(seen)
        return result

    result = asyncio.run(go())
    assert result.status == "done"
    assert result.final_text == "Partial answer."


def test_the_automatic_finalize_answers_before_the_deadline(tmp_path: Path) -> None:
    """``finalize_after_s``: the parent sends finalize by itself; without it the 30 s tool
    would outlast the 20 s deadline (timed-out). Whether the finalize lands before the
    first model call or during the tool (it depends on how fast the child starts), the run
    ends done with a tool-free answer: both replies say the same, so neither order flakes
    (with 1 s and a first reply that differed, a slow start-up answered 'Building.')."""
    tool = {"name": "bash", "arguments": {"command": "sleep 30"}}
    replies = [{"text": "Answer.", "tool_calls": [tool]}, {"text": "Answer."}]

    async def go() -> tuple[RunResult, Collector]:
        handle = await _scripted(tmp_path, "auto", replies, finalize_after_s=1.0, deadline_s=20)
        seen = Collector(handle)
        result = await handle.wait()
        await seen.done()
        _no_channel_errors(seen)
        return result, seen

    result, seen = asyncio.run(go())
    assert (result.status, result.final_text) == ("done", "Answer.")
    finalizing = [u for u in seen.items if "Your time is nearly up" in str(u)]
    assert finalizing, "no finalize turn was run"


def test_cancel_and_deadline(tmp_path: Path) -> None:
    replies = [
        {"text": "Waiting.", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 30"}}]}
    ]

    async def go() -> tuple[RunResult, RunResult]:
        first = await _scripted(tmp_path, "cancel", replies)
        second = await _scripted(tmp_path, "deadline", replies, deadline_s=1)
        seen = Collector(first)
        await seen.until_type("tool-call")
        assert await first.cancel() is not None
        return await first.wait(), await second.wait()

    cancelled, timed_out = asyncio.run(go())
    assert cancelled.status == "cancelled"
    assert timed_out.status == "timed-out"


# -- every reachable row of the state table, against the real child ----------------------


async def _into(tmp_path: Path, state: State, control: ControlKind) -> tuple[RunHandle, Collector]:
    slow = {"text": "slow", "delay_ms": 5000}
    first = {"text": "quick"} if state is State.READY else slow
    name = f"{state}-{control}"
    handle = await _scripted(tmp_path, name, [first, slow, slow, slow], close_when_idle=False)
    seen = Collector(handle)
    await seen.until_type("turn-started")
    if state is State.READY:
        await seen.until_type("turn-complete")
    elif state is State.CLOSING:
        assert (await handle.close()).status == "accepted"
    elif state is State.FINALIZING:
        assert (await handle.finalize()).status == "accepted"
    assert handle.state is state
    return handle, seen


async def _cell(tmp_path: Path, state: State, control: ControlKind) -> None:
    handle, seen = await _into(tmp_path, state, control)
    ack = await handle.send(control, **control_fields(control))
    expected = decide(state, control)
    assert ack.status in acks_of(expected), (state, control, ack)
    result = await handle.aclose()
    await seen.done()
    _no_channel_errors(seen)
    if control is ControlKind.CANCEL:
        assert result.status == "cancelled"
    if state is State.READY and control is ControlKind.CLOSE:
        assert result.status == "done"


@pytest.mark.slow
@pytest.mark.parametrize("state", [State.READY, State.RUNNING, State.CLOSING, State.FINALIZING])
def test_state_table_row_with_the_real_child(tmp_path: Path, state: State) -> None:
    async def row() -> None:
        await asyncio.gather(*(_cell(tmp_path, state, control) for control in ControlKind))

    asyncio.run(row())
