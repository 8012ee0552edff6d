"""stream-json and wire output: one object (or raw line) per line, REFERENCE-FACTS §2 shapes."""

from __future__ import annotations

import io
import json

from display_helpers import SAMPLE_RUN, check_golden, replay

from tether.display import open_display
from tether.wire import decode

# §2's stream-json objects, plus user_input (recorded by bash-agent's events.jsonl).
SHAPES = {
    "text": {"content"},
    "thinking": {"content"},
    "tool_call": {"name", "id", "input"},
    "tool_result": {"tool_use_id", "name", "content"},
    "usage": {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "kind",
    },
    "stop": {"reason"},
    "context_update": {"kind", "trigger"},
    "error": {"message"},
    "retry": set(),
    "user_input": {"content"},
}


def test_sample_run_golden() -> None:
    out, err = replay(SAMPLE_RUN, "stream-json")
    check_golden("sample_run.stream.jsonl", out)
    assert err == ("tether: info: tool-call payload omitted: transport record limit\n")


def test_every_line_is_a_known_shape() -> None:
    out, _ = replay(SAMPLE_RUN, "stream-json")
    seen = set()
    for line in out.splitlines():
        obj = json.loads(line)
        kind = obj["type"]
        seen.add(kind)
        if kind in SHAPES:
            assert SHAPES[kind] <= set(obj), line
        else:
            assert kind.startswith("sub_agent"), line
    assert {
        "text",
        "thinking",
        "tool_call",
        "tool_result",
        "usage",
        "stop",
        "error",
        "retry",
        "user_input",
    } <= seen


def test_nested_runs_only_show_their_result() -> None:
    out, _ = replay(SAMPLE_RUN, "stream-json")
    assert "docs/ has two guides" in out
    nested = [json.loads(line) for line in out.splitlines() if "sub-1" in line]
    assert len(nested) == 1
    assert nested[0]["type"].startswith("sub_agent")


def test_final_adds_nothing_and_lines_are_terminal_safe() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = open_display("stream-json", stdout=out, stderr=err)
    line = b'{"v":1,"seq":1,"run":"r","type":"assistant-text-delta","delta":"a\xc2\x9b2Jb"}'
    display.event(decode(line, "event"), run="r")  # type: ignore[arg-type]
    display.final(status="done", final_text="ab", usage=None, truncated=False, elapsed_s=1)
    display.inbox({"type": "progress", "text": "quiet"}, run="r")
    display.inbox({"type": "clarification", "q": "which?"}, run="r")
    display.close()
    text = out.getvalue()
    assert "\x9b" not in text
    assert "\\u009b" in text
    assert json.loads(text) == {"type": "text", "content": "a\x9b2Jb"}
    assert err.getvalue() == "tether: warning: r asks: which?\n"


def test_wire_output_is_the_raw_lines() -> None:
    out, err = replay(SAMPLE_RUN, "wire")
    assert out.encode() == SAMPLE_RUN.read_bytes()
    assert err == ""


def test_wire_output_encodes_events_without_raw() -> None:
    out = io.StringIO()
    display = open_display("wire", stdout=out, stderr=io.StringIO())
    raw = b'{"v":1,"seq":3,"type":"ready","run":"r"}'
    display.event(decode(raw, "event"), run="r")  # type: ignore[arg-type]
    display.close()
    assert json.loads(out.getvalue()) == json.loads(raw)
