"""The blocking layer (tether.run, open_run) and inbox messages alongside events."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

from tether.runtime.parent.spawn import InboxItem, RunEvent, spawn
from tether.runtime.parent.sync import open_run, run

from .helpers import ENDLESS, FAST, Collector, Gate, double


def test_run_blocks_and_returns_the_result() -> None:
    result = run("hello", argv=double(), timeouts=FAST)
    assert result.status == "done"
    assert result.final_text == "answer: hello"
    assert result.run_id


def test_open_run_steers_and_iterates_updates(tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    with open_run("hello", argv=double(gate=gate), timeouts=FAST) as handle:
        updates = handle.updates()
        first = next(updates)
        assert isinstance(first, RunEvent)
        assert type(first.event).__name__ == "Ready"
        assert handle.steer("more").status == "accepted"  # taken in the turn: still held
        gate.open()
        rest = list(updates)
        result = handle.wait(timeout=30)
    assert result.final_text == "answer: hello + more"
    assert isinstance(rest[-1], RunEvent)
    assert type(rest[-1].event).__name__ == "Exit"


def test_leaving_open_run_early_cancels() -> None:
    with open_run("hello", argv=double("normal", ENDLESS), timeouts=FAST) as handle:
        run_id = handle.run_id
    assert run_id
    assert handle.wait().status == "cancelled"


def test_inbox_messages_arrive_alongside_events(tmp_path: Path) -> None:
    command = (
        'echo \'{"type":"progress","text":"step 1"}\' >> "$TETHER_INBOX_PATH"; '
        'echo \'{"type":"done","summary":"ok"}\' >> "$RUNEX_INBOX_PATH"; '
        'echo not-json >> "$TETHER_INBOX_PATH"'
    )
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {
                    "text": "Reporting.",
                    "tool_calls": [{"name": "bash", "arguments": {"command": command}}],
                },
                {"text": "Reported."},
            ]
        )
    )

    async def go() -> tuple[list[object], Path]:
        handle = await spawn(
            "report", provider="scripted", child_args=["--script", str(script)], cwd=tmp_path
        )
        seen = Collector(handle)
        result = await handle.wait()
        await seen.done()
        assert result.status == "done"
        return seen.items, handle.run_dir.inbox

    items, inbox = asyncio.run(go())
    messages = [i.message for i in items if isinstance(i, InboxItem)]
    assert messages[:2] == [
        {"type": "progress", "text": "step 1"},
        {"type": "done", "summary": "ok"},
    ]
    assert messages[2]["type"] == "rejected"
    assert stat.S_IMODE(os.stat(inbox).st_mode) == 0o600


def test_an_inbox_line_nested_100000_deep_is_rejected_and_draining_goes_on(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b'{"type":"progress","text":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    command = (
        f'cat {deep} >> "$TETHER_INBOX_PATH"; '
        'echo \'{"type":"progress","text":"after"}\' >> "$TETHER_INBOX_PATH"'
    )
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {
                    "text": "Go.",
                    "tool_calls": [{"name": "bash", "arguments": {"command": command}}],
                },
                {"text": "Gone."},
            ]
        )
    )

    async def go() -> list[object]:
        handle = await spawn(
            "deep", provider="scripted", child_args=["--script", str(script)], cwd=tmp_path
        )
        seen = Collector(handle)
        result = await handle.wait()
        await seen.done()
        assert result.status == "done"
        return seen.items

    messages = [i.message for i in asyncio.run(go()) if isinstance(i, InboxItem)]
    assert [m["type"] for m in messages] == ["rejected", "progress"]
    assert "nested deeper than" in messages[0]["reason"]
    assert messages[1]["text"] == "after"
