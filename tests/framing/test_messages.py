"""Message kinds: frames, stream-json objects and wire display events, both ways."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.cli.shell_lib import library_path
from tether.framing import messages as m
from tether.framing.resp import FrameRejection, PureReader

SAMPLES: list[m.Message] = [
    m.Text(chunk="héllo\r\nworld"),
    m.Text(chunk=""),
    m.Thinking(chunk="let me think\n"),
    m.ToolCall.from_input("bash", "toolu_01", {"command": "ls -la", "timeout": 30}),
    m.ToolCall(name="noop", id="", input="{}"),
    m.ToolResult(tool_use_id="toolu_01", tool_name="bash", output="a\r\nb\n"),
    m.Usage(
        input_tokens=1200,
        output_tokens=34,
        cache_read_input_tokens=5,
        cache_creation_input_tokens=0,
    ),
    m.SubAgentResult(
        session_id="s-1", status="ok", input_tokens=10, output_tokens=2, thinking="", text="done"
    ),
    m.Stop(reason="end_turn"),
    m.ContextUpdate(kind="compact", trigger="auto"),
    m.Error(message="rate limited"),
    m.Retry(),
    m.ToolResult(
        tool_use_id="t2",
        tool_name="TodoWrite",
        output="- [x] a",
        extra=("checklist", "- [x] a", "summary", "1/1 done"),
    ),
    m.ToolCall(name="n", id="i", input='{"a":1}', members=(("a", "1"),), extra=("orphan",)),
    m.UserInputFrame(text="fix the bug\nplease"),
    m.UserInputFrame(id="", text="no id"),
    m.UserMessage(text="what did we discuss?"),
    m.SessionEnd(),
    m.ImageDescribe(images="[Image #1] [Image #2]", description="a terminal\n$ ls"),
    m.AgentResult(
        session_id="sub_20261201-101500-3f2a",
        status="ok",
        thinking="checked\r\nit",
        text="2 files",
        input_tokens=300,
        output_tokens=40,
        cache_read_input_tokens=7,
        cache_creation_input_tokens=1,
        requests=2,
    ),
]
IDS = [f"{i}-{s.KIND}" for i, s in enumerate(SAMPLES)]


@pytest.mark.parametrize("message", SAMPLES, ids=IDS)
def test_fields_round_trip(message: m.Message) -> None:
    fields = m.to_fields(message)
    assert fields[0] == message.KIND.encode()
    assert m.from_fields(fields) == message
    reader = PureReader()
    reader.feed(m.to_frame(message))
    frame = reader.next()
    assert isinstance(frame, tuple)
    assert m.from_fields(frame) == message


def test_tool_call_layout_flattens_members() -> None:
    call = m.ToolCall.from_input("edit", "t1", {"path": "a.txt", "lines": [1, 2], "dry": False})
    assert m.to_fields(call) == [
        b"TOOL_CALL",
        b"edit",
        b"t1",
        b'{"path":"a.txt","lines":[1,2],"dry":false}',
        b"path",
        b"a.txt",
        b"lines",
        b"[1,2]",
        b"dry",
        b"false",
    ]
    assert call.arguments() == {"path": "a.txt", "lines": [1, 2], "dry": False}


def test_usage_layout_and_lenient_counts() -> None:
    usage = m.from_fields([b"USAGE", b"10", b"", b"null", b"7"])
    assert usage == m.Usage(
        input_tokens=10, output_tokens=0, cache_read_input_tokens=0, cache_creation_input_tokens=7
    )


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ([], "empty-frame", "type"),
        ([b"NOPE", b"x"], "unknown-type", "NOPE"),
        ([b"text", b"x"], "unknown-type", "text"),
        ([b"TOOL_RESULT", b"id", b"bash"], "invalid-payload", "tool_use_id, tool_name, output"),
        ([b"TOOL_CALL", b"n", b"i"], "invalid-payload", "name, id, input"),
        ([b"USER_MESSAGE"], "invalid-payload", "needs 1 field"),
        ([b"IMAGE_DESCRIBE"], "invalid-payload", "images"),
        ([b"AGENT_RESULT", b"s", b"ok", b"thinking"], "invalid-payload", "thinking, text"),
        ([b"AGENT_RESULT", b"s", b"ok", b"", b"", b"1x"], "invalid-payload", "input_tokens"),
        ([b"USAGE", b"1", b"-2", b"0", b"0"], "invalid-payload", "output_tokens"),
        ([b"USAGE", b"1", b"2x", b"0", b"0"], "invalid-payload", "output_tokens"),
        ([b"\xff\xfe", b"x"], "unknown-type", ""),
    ],
)
def test_rejections(fields: list[bytes], code: str, words: str) -> None:
    result = m.from_fields(fields)
    assert isinstance(result, FrameRejection)
    assert result.code == code
    assert words in result.reason
    assert result.offset is None


def test_lenient_frames_bash_agents_reader_tolerates() -> None:
    # REFERENCE-FACTS §2: STOP or TEXT with no field, an odd TOOL_CALL, a 3-field USAGE.
    assert m.from_fields([b"STOP"]) == m.Stop(reason="")
    assert m.from_fields([b"TEXT"]) == m.Text(chunk="")
    assert m.from_fields([b"THINKING"]) == m.Thinking(chunk="")
    call = m.from_fields(
        [b"TOOL_CALL", b"Bash", b"t", b'{"command":"ls"}', b"command", b"ls", b"x"]
    )
    assert isinstance(call, m.ToolCall)
    assert call.members == (("command", "ls"),)
    assert m.to_fields(call)[-1] == b"x"  # written back as it came
    assert m.from_fields([b"USAGE", b"10", b"20", b"5"]) == m.Usage(
        input_tokens=10, output_tokens=20, cache_read_input_tokens=5
    )
    # USER_INPUT: bash-agent reads the text from field 2, else field 1
    assert m.from_fields([b"USER_INPUT", b"0", b"hi"]) == m.UserInputFrame(text="hi")
    assert m.from_fields([b"USER_INPUT", b"hi"]) == m.UserInputFrame(id="", text="hi")
    assert m.from_fields([b"SESSION_END"]) == m.SessionEnd(code="")
    assert m.from_fields([b"IMAGE_DESCRIBE", b"[Image #1]"]) == m.ImageDescribe(images="[Image #1]")


def test_tool_result_extra_pairs_are_kept_and_written_back() -> None:
    fields = [
        b"TOOL_RESULT",
        b"t",
        b"TodoWrite",
        b"out",
        b"checklist",
        b"- [ ] a",
        b"summary",
        b"0/1",
    ]
    result = m.from_fields(fields)
    assert isinstance(result, m.ToolResult)
    assert result.pairs() == {"checklist": "- [ ] a", "summary": "0/1"}
    assert m.to_fields(result) == fields


def test_tool_call_from_json_text_keeps_the_models_text() -> None:
    call = m.ToolCall.from_json_text("Bash", "t", '{"command": "ls", "timeout": 1.50, "x": [1]}')
    assert call.input == '{"command": "ls", "timeout": 1.50, "x": [1]}'
    assert call.members == (("command", "ls"), ("timeout", "1.50"), ("x", "[1]"))
    assert m.ToolCall.from_json_text("n", "i", "not json").members == ()


def test_extra_fields_are_ignored_and_bad_utf8_is_replaced() -> None:
    assert m.from_fields([b"STOP", b"end_turn", b"future"]) == m.Stop(reason="end_turn")
    assert m.from_fields([b"TEXT", b"ok \xff"]) == m.Text(chunk="ok \ufffd")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=30), max_size=9))
def test_from_fields_is_total(fields: list[bytes]) -> None:
    assert isinstance(m.from_fields(fields), m.Message | FrameRejection)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(m._LAYOUT)),
    fields=st.lists(st.binary(max_size=30), max_size=9),
)
def test_from_fields_is_total_for_every_kind(kind: str, fields: list[bytes]) -> None:
    result = m.from_fields([kind.encode(), *fields])
    if not isinstance(result, FrameRejection):
        assert m.from_fields(m.to_fields(result)) == result


json_st = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


WIRE: list[tuple[m.Message, list[dict[str, Any]]]] = [
    (m.Text(chunk="hi"), [{"type": "assistant-text-delta", "delta": "hi"}]),
    (m.Thinking(chunk="hm"), [{"type": "assistant-thinking-delta", "delta": "hm"}]),
    (
        m.ToolCall.from_input("bash", "t1", {"command": "ls"}),
        [{"type": "tool-call", "name": "bash", "arguments": {"command": "ls"}, "id": "t1"}],
    ),
    (
        m.ToolResult(tool_use_id="t1", tool_name="bash", output="x"),
        [
            {
                "type": "tool-result",
                "name": "bash",
                "is-error?": False,
                "id": "t1",
                "tool-call-id": "t1",
                "result": "x",
            }
        ],
    ),
    (
        m.Usage(input_tokens=3, output_tokens=4, cache_read_input_tokens=1),
        [
            {
                "type": "llm-end",
                "usage": {"input": 3, "output": 4, "cache-read": 1, "cache-write": 0},
            }
        ],
    ),
    (m.Stop(reason="end_turn"), [{"type": "llm-end", "stop-reason": "end_turn"}]),
    (m.Error(message="oops"), [{"type": "error", "error": "oops", "source": "agent"}]),
]


@pytest.mark.parametrize(
    ("message", "events"),
    [
        (m.UserMessage(text="hello"), [{"type": "user", "text": "hello"}]),
        (m.UserInputFrame(text="go"), [{"type": "user", "text": "go"}]),
        (m.SessionEnd(), []),
        (
            m.ImageDescribe(images="[Image #1]", description="a cat"),
            [{"type": "info", "summary": "[Image #1]: a cat"}],
        ),
    ],
)
def test_session_frames_as_wire_events(message: m.Message, events: list[dict[str, Any]]) -> None:
    assert m.to_wire_events(message) == events


@pytest.mark.parametrize(("message", "events"), WIRE, ids=[s.KIND for s, _ in WIRE])
def test_wire_events_both_ways(message: m.Message, events: list[dict[str, Any]]) -> None:
    assert m.to_wire_events(message) == events
    assert [msg for e in events for msg in m.from_wire_event(e)] == [message]


@pytest.mark.parametrize(
    "message",
    [
        m.ContextUpdate(kind="compact", trigger="auto"),
        m.Retry(),
        m.SubAgentResult(session_id="s", status="ok", text="first line\nsecond " + "é" * 200),
    ],
)
def test_info_events_have_a_bounded_one_line_summary(message: m.Message) -> None:
    (event,) = m.to_wire_events(message)
    assert event["type"] == "info"
    assert "\n" not in event["summary"]
    assert 0 < len(event["summary"].encode()) <= m.SUMMARY_BYTES
    assert m.from_wire_event(event) == []


def test_llm_end_with_both_halves() -> None:
    event = {"type": "llm-end", "stop-reason": "tool_use", "usage": {"input": 5, "output": 6}}
    assert m.from_wire_event(event) == [
        m.Usage(input_tokens=5, output_tokens=6),
        m.Stop(reason="tool_use"),
    ]


def test_whole_assistant_text_only_when_not_streamed() -> None:
    event = {"type": "assistant-text", "final?": True, "text": "all of it"}
    assert m.from_wire_event(event) == []
    assert m.from_wire_event(event, streamed=False) == [m.Text(chunk="all of it")]


def test_tool_result_with_structured_result() -> None:
    event = {"type": "tool-result", "name": "read", "is-error?": True, "result": {"lines": 2}}
    assert m.from_wire_event(event) == [
        m.ToolResult(tool_use_id="", tool_name="read", output='{"lines":2}')
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "delta", "text", "name", "id", "arguments", "usage", "result"]),
        json_st
        | st.sampled_from(["assistant-text-delta", "tool-call", "tool-result", "llm-end", "error"]),
    )
)
def test_from_wire_event_is_total(event: dict[str, Any]) -> None:
    for msg in m.from_wire_event(event, streamed=False):
        assert isinstance(msg, m.Message)
        assert m.to_wire_events(msg)


def test_bash_written_messages_decode() -> None:
    script = (
        f'source "{library_path()}"\n'
        "tether_write_msg TEXT $'héllo\\r\\n'\n"
        'tether_write_msg TOOL_CALL bash toolu_9 \'{"command":"ls"}\' command ls\n'
        "tether_write_msg USAGE 10 20 '' 0\n"
        "tether_write_msg SUB_AGENT_RESULT s-2 ok 1 2 '' 'the answer'\n"
        "tether_write_msg RETRY\n"
    )
    out = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        check=True,
        timeout=60,
        env=dict(os.environ, LC_ALL="C.UTF-8"),
    ).stdout
    reader = PureReader()
    reader.feed(out)
    decoded = [m.from_fields(frame) for frame in reader if isinstance(frame, tuple)]
    assert decoded == [
        m.Text(chunk="héllo\r\n"),
        m.ToolCall.from_input("bash", "toolu_9", {"command": "ls"}),
        m.Usage(input_tokens=10, output_tokens=20),
        m.SubAgentResult(
            session_id="s-2", status="ok", input_tokens=1, output_tokens=2, text="the answer"
        ),
        m.Retry(),
    ]


def test_agent_result_as_bash_agents_sub_agent_writes_it() -> None:
    # send_sub_result.awk: AGENT_RESULT session_id status thinking text in out cr cc reqs
    written = [b"AGENT_RESULT", b"sub_1", b"ok", b"", b"The answer.", b"300", b"40"]
    written += [b"0", b"0", b"2"]
    frame = b"*10\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(f), f) for f in written)
    reader = PureReader()
    reader.feed(frame)
    (fields,) = [f for f in reader if isinstance(f, tuple)]
    result = m.from_fields(fields)
    assert result == m.AgentResult(
        session_id="sub_1",
        status="ok",
        text="The answer.",
        input_tokens=300,
        output_tokens=40,
        requests=2,
    )
    assert m.to_frame(result) == frame  # written back as it came
    (event,) = m.to_wire_events(result)  # shown as the SUB_AGENT_RESULT it becomes
    assert event == m.to_wire_events(result.sub_agent_result())[0]
    assert event["summary"] == "sub-agent sub_1 ok: The answer."
    # a lenient frame: the counts left out read as 0 (its reader: ${REPLY_MESSAGE[5]:-0})
    short = m.from_fields([b"AGENT_RESULT", b"sub_2", b"failed", b"", b""])
    assert short == m.AgentResult(session_id="sub_2", status="failed")


_text = st.text(max_size=40)
_count = st.integers(min_value=0, max_value=2**63)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        m.AgentResult,
        session_id=_text,
        status=_text,
        thinking=_text,
        text=_text,
        input_tokens=_count,
        output_tokens=_count,
        cache_read_input_tokens=_count,
        cache_creation_input_tokens=_count,
        requests=_count,
    )
)
def test_agent_results_round_trip_and_show_bounded(result: m.AgentResult) -> None:
    reader = PureReader()
    reader.feed(m.to_frame(result))
    frame = reader.next()
    assert isinstance(frame, tuple)
    assert m.from_fields(frame) == result
    (event,) = m.to_wire_events(result)
    assert event["type"] == "info"
    assert "\n" not in event["summary"]
    assert len(event["summary"].encode()) <= m.SUMMARY_BYTES


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=24), max_size=12))
def test_agent_result_decoding_is_total(fields: list[bytes]) -> None:
    result = m.from_fields([b"AGENT_RESULT", *fields])
    assert isinstance(result, m.AgentResult | FrameRejection)
    if isinstance(result, m.AgentResult):
        assert len(fields) >= 4
        assert m.from_fields(m.to_fields(result)) == result
