"""Turns and the result through a real child: streaming, errors, long answers, follow-ups."""

from __future__ import annotations

import re
from collections.abc import Callable

from child_helpers import Child, index_of, types

MakeChild = Callable[..., Child]


def _run_one_turn(child: Child, text: str = "Go.") -> tuple[int, list[dict[str, object]]]:
    child.start()
    child.send("prompt", text=text)
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    return child.finish()


def test_streaming_deltas_then_whole_blocks(make_child: MakeChild) -> None:
    code, events = _run_one_turn(make_child(script="streaming.json"))
    assert code == 0
    thinking = [e["delta"] for e in events if e["type"] == "assistant-thinking-delta"]
    text = [e["delta"] for e in events if e["type"] == "assistant-text-delta"]
    assert thinking == ["Let ", "me ", "think."]
    assert text == ["Str", "eam", "ed."]
    whole = next(e for e in events if e["type"] == "assistant-text")
    assert whole["text"] == "Streamed."
    assert whole["final?"] is True
    assert whole["content-index"] == 1
    assert events[-2]["type"] == "result"
    assert events[-2]["context"] == "complete"
    lifecycle = {"ready", "turn-started", "turn-complete", "control-ack", "result", "exit"}
    for event in events:
        if event["type"] not in lifecycle:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(event["timestamp"]))


def test_provider_error_ends_the_turn_with_error_and_the_run_goes_on(
    make_child: MakeChild,
) -> None:
    child = make_child(script="provider_error.json").start()
    child.send("prompt", text="Try.")
    first = child.wait_for(lambda e: e["type"] == "turn-complete")
    assert first["stop-reason"] == "error"
    child.send("prompt", text="Again.")
    child.wait_for(lambda e: e["type"] == "turn-complete", count=2)
    child.send("close")
    code, events = child.finish()
    assert code == 0
    error = next(e for e in events if e["type"] == "error")
    assert error["error"] == "rate limited"
    assert error["source"] == "provider"
    done = next(e for e in events if e["type"] == "agent-turn-complete")
    assert done["status"] == "error"
    assert events[-2]["final-text"] == "recovered"
    assert events[-2]["stop-reason"] == "stop"
    assert events[-2]["context"] == "complete"  # the last turn decides


def test_exhausted_script_is_a_clear_provider_error(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.send("prompt", text="One.")
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("prompt", text="Two.")
    second = child.wait_for(lambda e: e["type"] == "turn-complete", count=2)
    assert second["stop-reason"] == "error"
    child.send("close")
    code, events = child.finish()
    assert code == 0
    error = next(e for e in events if e["type"] == "error")
    assert "used up" in error["error"]
    assert error["source"] == "provider"
    # the result comes from the run's last assistant message, with the run's usage
    assert events[-2]["final-text"] == "Hello from the scripted agent."
    assert events[-2]["stop-reason"] == "error"
    assert events[-2]["context"] == "partial"  # the last turn failed


def test_long_final_text_spills_to_a_private_file(make_child: MakeChild) -> None:
    text = "".join(f"line {i:06d} é€😀\n" for i in range(12_000))  # about 290 KB
    child = make_child(script=[{"text": text}])
    code, events = _run_one_turn(child)
    assert code == 0
    result = events[-2]
    assert result["truncated?"] is True
    path = result["final-text-path"]
    assert isinstance(path, str)
    from pathlib import Path

    spilled = Path(path)
    assert spilled.read_text(encoding="utf-8") == text
    assert spilled.stat().st_mode & 0o777 == 0o600
    assert spilled.parent == child.root
    cut = result["final-text"]
    assert isinstance(cut, str)
    assert text.startswith(cut)
    assert 0 < len(cut.encode()) <= 65536 - 1024
    raw = child.events_path.read_bytes().split(b"\n")[-3]
    assert len(raw) < 65536


def test_idle_follow_up_starts_a_turn_and_leftovers_start_the_next(
    make_child: MakeChild,
) -> None:
    script = [{"error": "boom", "delay_ms": 300}, {"text": "from the leftover"}]
    child = make_child(script=script).start()
    child.send("prompt", text="Start.")
    child.wait_for(lambda e: e["type"] == "llm-start")
    f = child.send("follow-up", text="Then this.")
    child.ack(f)
    # the turn errors before it can inject the follow-up: it starts the next turn
    child.wait_for(lambda e: e["type"] == "turn-complete", count=2)
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert [e["turn"] for e in events if e["type"] == "turn-started"] == [1, 2]
    injected = events[index_of(events, lambda e: e["type"] == "follow-up-injected")]
    assert injected["ref"] == f
    assert index_of(events, lambda e: e["type"] == "turn-started" and e["turn"] == 2) < index_of(
        events, lambda e: e["type"] == "follow-up-injected"
    )
    assert events[-2]["final-text"] == "from the leftover"


def test_close_while_running_drops_nothing_it_can_still_inject(make_child: MakeChild) -> None:
    child = make_child(script="gated_tool.json")
    gate = child.gate()
    child.start()
    child.send("prompt", text="Start.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    f = child.send("follow-up", text="One more thing.")
    child.send("close")
    gate.open()
    code, events = child.finish()
    assert code == 0
    assert events[index_of(events, lambda e: e["type"] == "follow-up-injected")]["ref"] == f
    assert "info" not in types(events)
    assert events[-2]["final-text"] == "reply three"


def test_tools_can_be_disabled(make_child: MakeChild) -> None:
    child = make_child(script="tool_answer.json", args=["--no-tools"])
    code, events = _run_one_turn(child)
    assert code == 0
    # no tools offered means tool choice none: the scripted tool call is dropped
    assert "tool-call" not in types(events)
    assert events[-2]["final-text"] == "Checking."


def test_allow_list_keeps_only_named_tools(make_child: MakeChild) -> None:
    script = [
        {"tool_calls": [{"name": "read", "arguments": {"path": "note.txt"}, "id": "r"}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo no"}, "id": "b"}]},
        {"text": "ok"},
    ]
    child = make_child(script=script, args=["--tools", "read"])
    (child.root / "note.txt").write_text("the note\n")
    code, events = _run_one_turn(child)
    assert code == 0
    results = {e["id"]: e for e in events if e["type"] == "tool-result"}
    assert results["r"]["result"]["content"] == "the note\n"
    assert results["r"]["is-error?"] is False
    assert results["b"]["is-error?"] is True
