"""bash-agent's stream-json objects both ways, and lines as the real program writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.framing import messages as m
from tether.framing import stream_json as sj
from tether.framing.resp import FrameRejection
from tether.framing.stream_json import Entry

from .test_messages import json_st

LS = msgspec.Raw(b'{"command":"ls"}')
SESSION = Path(__file__).parent / "fixtures" / "bash_agent_session.stream.jsonl"


STREAM_JSON: list[tuple[Entry, dict[str, Any]]] = [
    (m.Text(chunk="hi"), {"type": "text", "content": "hi"}),
    (m.Thinking(chunk="hmm"), {"type": "thinking", "content": "hmm"}),
    (
        m.ToolCall.from_input("bash", "t1", {"command": "ls"}),
        {
            "type": "tool_call",
            "name": "bash",
            "id": "t1",
            "input": msgspec.Raw(b'{"command":"ls"}'),
        },
    ),
    (
        m.ToolResult(tool_use_id="t1", tool_name="bash", output="x"),
        {"type": "tool_result", "tool_use_id": "t1", "name": "bash", "content": "x"},
    ),
    (
        m.Usage(input_tokens=1, output_tokens=2, kind="turn"),
        {
            "type": "usage",
            "input_tokens": 1,
            "output_tokens": 2,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "kind": "turn",
        },
    ),
    (
        m.SubAgentResult(session_id="s", status="failed", text="boom"),
        {
            "type": "sub_agent_result",
            "session_id": "s",
            "status": "failed",
            "input_tokens": 0,
            "output_tokens": 0,
            "thinking": "",
            "text": "boom",
        },
    ),
    (m.Stop(reason="max_tokens"), {"type": "stop", "reason": "max_tokens"}),
    (
        m.ContextUpdate(kind="compact", trigger="auto"),
        {"type": "context_update", "kind": "compact", "trigger": "auto"},
    ),
    (m.Error(message="bad"), {"type": "error", "message": "bad"}),
    (m.Retry(), {"type": "retry"}),
    (m.UserInputFrame(text="go"), {"type": "user_input", "content": "go"}),
    (m.UserMessage(text="old"), {"type": "user_message", "content": "old"}),
    (
        m.ImageDescribe(images="[Image #1]", description="text"),
        {"type": "image_describe", "images": "[Image #1]", "content": "text"},
    ),
    (
        m.Usage(input_tokens=3, kind="sub_agent", sub_session_id="sub_1"),
        {
            "type": "usage",
            "input_tokens": 3,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "kind": "sub_agent",
            "sub_session_id": "sub_1",
        },
    ),
    (sj.SessionStart(session_id="s1"), {"type": "session_start", "session_id": "s1"}),
    (
        sj.SessionFork(session_id="s2", source_session_id="s1"),
        {"type": "session_fork", "session_id": "s2", "source_session_id": "s1"},
    ),
    (
        sj.SubAgentStart(session_id="sub_1", prompt="p", description="d", fork=False),
        {
            "type": "sub_agent_start",
            "session_id": "sub_1",
            "timestamp": "",
            "prompt": "p",
            "description": "d",
            "fork": False,
        },
    ),
    (
        sj.SubAgentEnd(session_id="sub_1", timestamp="t", status="ok"),
        {"type": "sub_agent_end", "session_id": "sub_1", "timestamp": "t", "status": "ok"},
    ),
]


@pytest.mark.parametrize(
    ("message", "obj"), STREAM_JSON, ids=[str(obj["type"]) for _, obj in STREAM_JSON]
)
def test_stream_json_both_ways(message: Entry, obj: dict[str, Any]) -> None:
    assert sj.to_stream_json(message) == obj
    assert sj.from_stream_json(obj) == message
    line = msgspec.json.encode(obj)
    assert sj.from_stream_json(sj.decode_line(line)) == message


def test_stream_json_tool_result_content_blocks_become_text() -> None:
    obj = {"type": "tool_result", "tool_use_id": "t", "name": "n", "content": [{"type": "text"}]}
    result = sj.from_stream_json(obj)
    assert result == m.ToolResult(tool_use_id="t", tool_name="n", output='[{"type":"text"}]')


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        ([], "malformed"),
        ({"content": "x"}, "malformed"),
        ({"type": 3}, "malformed"),
        ({"type": "session_begin"}, "unknown-type"),
        ({"type": "text"}, "invalid-payload"),
        ({"type": "text", "content": 5}, "invalid-payload"),
        ({"type": "usage", "input_tokens": -1}, "invalid-payload"),
        ({"type": "usage", "input_tokens": True}, "invalid-payload"),
        ({"type": "stop"}, "invalid-payload"),
    ],
)
def test_stream_json_rejections(obj: Any, code: str) -> None:
    result = sj.from_stream_json(obj)
    assert isinstance(result, FrameRejection)
    assert result.code == code


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "content", "name", "id", "input", "reason", "input_tokens"]),
        json_st | st.sampled_from(["text", "tool_call", "usage", "stop", "retry"]),
    )
)
def test_stream_json_decoding_is_total(obj: dict[str, Any]) -> None:
    result = sj.from_stream_json(obj)
    if not isinstance(result, FrameRejection):
        assert sj.from_stream_json(sj.to_stream_json(result)) == result


def test_tool_call_input_is_kept_as_received() -> None:
    line = b'{"type":"tool_call","name":"Bash","id":"t","input":{"command":"ls", "timeout":1.50}}'
    call = sj.from_stream_json(sj.decode_line(line))
    assert isinstance(call, m.ToolCall)
    assert call.input == '{"command":"ls", "timeout":1.50}'
    obj = sj.to_stream_json(call)
    assert obj is not None
    assert msgspec.json.encode(obj) == line
    # input that does not fit a line (a raw newline) is written re-encoded instead
    spread = m.ToolCall(name="n", id="i", input='{\n"a": 1.50}')
    assert msgspec.json.encode(sj.to_stream_json(spread)) == (
        b'{"type":"tool_call","name":"n","id":"i","input":{"a":1.5}}'
    )


def test_empty_printf_values_are_read_as_null() -> None:
    line = b'{"type":"sub_agent_start","session_id":"sub_1","prompt":"p","fork":}'
    start = sj.from_stream_json(sj.decode_line(line))
    assert start == sj.SubAgentStart(session_id="sub_1", prompt="p", fork=None)
    assert isinstance(sj.decode_line(b'{"a":}x'), FrameRejection)
    assert isinstance(sj.decode_line(b"[1]"), FrameRejection)
    assert isinstance(sj.decode_line(b"[" * 100_000), FrameRejection)


def test_tool_result_extra_pairs_travel_as_members() -> None:
    result = m.ToolResult(
        tool_use_id="t",
        tool_name="T",
        output="x",
        extra=("checklist", "c", "content", "no"),
    )
    obj = sj.to_stream_json(result)
    assert obj == {
        "type": "tool_result",
        "tool_use_id": "t",
        "name": "T",
        "content": "x",
        "checklist": "c",
    }
    assert sj.from_stream_json(obj) == m.ToolResult(
        tool_use_id="t", tool_name="T", output="x", extra=("checklist", "c")
    )


def test_session_end_has_no_stream_json_object() -> None:
    assert sj.to_stream_json(m.SessionEnd()) is None


def test_a_whole_bash_agent_session_decodes_and_writes_back() -> None:
    lines = SESSION.read_bytes().splitlines()
    assert lines[0].startswith(b'{"type":"session_start"')
    for line in lines:
        entry = sj.from_stream_json(sj.decode_line(line))
        assert not isinstance(entry, FrameRejection), (line, entry)
        obj = sj.to_stream_json(entry)
        assert obj is not None
        again = msgspec.json.encode(obj)
        # byte for byte, but for bash's unquoted empty value, which comes back as null
        assert again == line.replace(b'"fork":}', b'"fork":null}')
