"""The event log holds a loop pass's display lines and writes them together; a lifecycle
line (an ack, turn-*, exit) goes out at once, after what is held, so an ack still comes
before any event its control causes and the order of seqs in the file never changes."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.support.waits import loop_pass

from tether.runtime.child.files import EventLog
from tether.wire import ControlAck, Exit, TurnStarted


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_display_lines_of_one_pass_go_out_in_one_write_after_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, "r1")
    calls: list[bytes] = []
    real = os.write

    def write(fd: int, data: bytes) -> int:
        if fd == log._fd:
            calls.append(bytes(data))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)

    async def main() -> None:
        log.hold_displays(asyncio.get_running_loop())
        for text in ("a", "b", "c"):
            log.emit_display({"type": "assistant-text-delta", "content-index": 0, "delta": text})
        assert path.read_bytes() == b""  # held until the pass ends
        await loop_pass()
        assert [e["delta"] for e in lines(path)] == ["a", "b", "c"]

    asyncio.run(main())
    assert len(calls) == 1
    assert calls[0].count(b"\n") == 3


def test_a_lifecycle_line_goes_out_at_once_after_what_is_held(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, "r1")

    async def main() -> None:
        log.hold_displays(asyncio.get_running_loop())
        log.emit_display({"type": "llm-start", "provider": "p", "model": "m"})
        log.emit(ControlAck, status="accepted", ref=1)  # written now, the display before it
        assert [e["type"] for e in lines(path)] == ["llm-start", "control-ack"]
        log.emit(TurnStarted, turn=1)
        log.emit_display({"type": "user", "text": "hi"})
        log.emit(Exit, status="done")
        log.close()

    asyncio.run(main())
    events = lines(path)
    assert [e["type"] for e in events] == [
        "llm-start",
        "control-ack",
        "turn-started",
        "user",
        "exit",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]


def test_close_writes_what_is_held(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path, "r1")

    async def main() -> None:
        log.hold_displays(asyncio.get_running_loop())
        log.emit_display({"type": "user", "text": "last words"})
        log.close()
        log.emit_display({"type": "user", "text": "after close"})  # dropped: closed
        await loop_pass()  # a flush held for the pass would run now

    asyncio.run(main())
    assert [e["text"] for e in lines(path)] == ["last words"]
