"""The parent never hangs: a child that dies, stays silent, ignores cancel or lies is ended.

Every case runs the TEST DOUBLE child (doubles/wire_child.py) in a misbehaving mode.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.waits import wait_group_gone
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.spawn import RunHandle, RunResult, Timeouts, spawn
from tether.store.index import RunIndex

from .helpers import ENDLESS, FAST, Collector, double


def _run(mode: str, *, turn_ms: int = 150, timeouts: Timeouts = FAST, **kw: object) -> RunResult:
    async def go() -> RunResult:
        handle = await spawn("task", argv=double(mode, turn_ms), timeouts=timeouts, **kw)  # type: ignore[arg-type]
        return await handle.wait()

    return asyncio.run(go())


def test_child_killed_mid_turn_fails_with_its_stderr() -> None:
    result = _run("die-mid-turn")
    assert result.status == "failed"
    assert result.error is not None
    assert "without an exit event" in result.error
    assert "boom: simulated crash" in result.error


def test_child_that_never_writes_ready_is_killed() -> None:
    result = _run("no-ready", timeouts=replace(FAST, start_s=0.5))
    assert result.status == "failed"
    assert result.error is not None
    assert "did not send ready within 0.5 s" in result.error


def test_child_that_stops_answering_is_killed() -> None:
    result = _run("silent", timeouts=replace(FAST, ack_s=0.5))
    assert result.status == "failed"
    assert result.error is not None
    assert "prompt (seq 1) was not acknowledged within 0.5 s" in result.error


def test_child_that_ignores_cancel_and_sigterm_has_its_group_killed() -> None:
    async def go() -> tuple[RunHandle, RunResult, object]:
        handle = await spawn("task", argv=double("ignore-cancel", ENDLESS), timeouts=FAST)
        seen = Collector(handle)
        await seen.until_type("turn-started")
        ack = await handle.cancel()
        return handle, await handle.wait(), ack

    handle, result, ack = asyncio.run(go())
    assert ack is None
    assert result.status == "failed"
    assert result.error is not None
    assert "did not exit within 0.5 s of cancel" in result.error
    # the child and its grandchild (a `sleep` in the same group) are gone
    wait_group_gone(handle.pid)


def test_child_exiting_without_exit_event_fails() -> None:
    result = _run("exit-code")
    assert result.status == "failed"
    assert result.error is not None
    assert "child exited (code 3) without an exit event" in result.error


def test_child_lingering_after_exit_is_ended_and_the_run_is_done() -> None:
    async def go() -> tuple[RunHandle, RunResult]:
        handle = await spawn("task", argv=double("linger"), timeouts=FAST)
        return handle, await handle.wait()

    handle, result = asyncio.run(go())
    assert result.status == "done"
    wait_group_gone(handle.pid)


def test_deadline_the_child_honours() -> None:
    result = _run("normal", turn_ms=ENDLESS, deadline_s=1)
    assert result.status == "timed-out"
    assert result.error == "run deadline exceeded"


@pytest.mark.parametrize("deadline", [float("nan"), float("inf"), 1e308, 0.0, -1.0])
def test_a_deadline_that_is_not_a_duration_is_refused_before_the_run(
    deadline: float, tether_home: Path
) -> None:
    with pytest.raises(ValueError, match=r"deadline_s: .* is not a number of seconds"):
        _run("normal", deadline_s=deadline)
    assert not (tether_home / "runs").exists() or not any((tether_home / "runs").iterdir())


def test_deadline_the_child_ignores_is_enforced_by_the_parent() -> None:
    result = _run("silent", deadline_s=1, timeouts=replace(FAST, ack_s=60))
    assert result.status == "timed-out"
    assert result.error is not None
    assert "did not exit by its deadline" in result.error


def test_truncated_event_file_is_a_channel_error() -> None:
    async def go() -> tuple[RunResult, list[object]]:
        handle = await spawn("task", argv=double("truncate-events", ENDLESS), timeouts=FAST)
        seen = Collector(handle)
        await seen.until_type("turn-started")
        handle.send_nowait("steer", text="now truncate")
        result = await handle.wait()
        await seen.done()
        return result, seen.items

    result, items = asyncio.run(go())
    assert result.status == "failed"
    assert result.error is not None
    assert "channel error: event file truncated" in result.error
    errors = [i for i in items if isinstance(i, ChannelError)]
    assert errors[-1].fatal


def test_version_mismatch_is_fatal() -> None:
    result = _run("version-mismatch")
    assert result.status == "failed"
    assert result.error is not None
    assert "version-mismatch" in result.error


def test_foreign_run_and_bad_lines_surface_as_errors_and_the_run_goes_on() -> None:
    for mode, reason in (
        ("foreign-run", "event for foreign run someone-else"),
        ("bad-line", "invalid event line (malformed)"),
    ):

        async def go(mode: str = mode) -> tuple[RunResult, list[object]]:
            handle = await spawn("task", argv=double(mode), timeouts=FAST)
            seen = Collector(handle)
            result = await handle.wait()
            await seen.done()
            return result, seen.items

        result, items = asyncio.run(go())
        assert result.status == "done"
        errors = [i for i in items if isinstance(i, ChannelError)]
        assert len(errors) == 1
        assert errors[0].reason.startswith(reason)
        assert not errors[0].fatal


def test_long_result_is_read_whole_from_final_text_path_and_removed() -> None:
    async def go() -> tuple[RunResult, str]:
        handle = await spawn("task", argv=double("long-result"), timeouts=FAST)
        seen = Collector(handle)
        result = await handle.wait()
        await seen.done()
        event = next(i.event for i in seen.events() if i.event.__class__.__name__ == "Result")
        return result, str(getattr(event, "final_text_path", ""))

    result, path = asyncio.run(go())
    assert result.status == "done"
    assert not result.truncated
    assert result.final_text == "x" * 100_000 + " END"
    assert path
    assert not os.path.exists(path)


def test_truncated_result_without_file_carries_a_note() -> None:
    result = _run("long-result-nofile")
    assert result.status == "done"
    assert result.truncated
    assert result.final_text.startswith("x" * 60_000)
    assert "[tether: this answer was cut to 60000 bytes" in result.final_text


def test_spawn_failure_is_an_error_and_recorded(tether_home: Path) -> None:
    from tether.runtime.parent.spawn import SpawnError

    async def go() -> None:
        await spawn("task", argv=["/nonexistent/child"], timeouts=FAST)

    with pytest.raises(SpawnError, match="/nonexistent/child"):
        asyncio.run(go())
    (record,) = RunIndex().recent()
    assert record.status == "failed"


def test_a_parent_inside_a_child_does_not_pass_its_own_deadline_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FEN_WIRE_DEADLINE", "1")  # already passed
    monkeypatch.setenv("TETHER_WIRE_DEADLINE", "1")
    result = _run("normal")
    assert result.status == "done"
