from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tether.wire import Rejection, Sender, normalize
from tether.wire.limits import RECORD_BUDGET_BYTES, STRING_BUDGET_BYTES, SUMMARY_BYTES

NOW = "2026-11-30T00:00:00Z"


def _sendable(event: dict[str, Any]) -> None:
    line = Sender("r").next_payload(event)
    assert not isinstance(line, Rejection), (line, event)


def test_strings_are_cut_on_a_utf8_boundary_and_marked() -> None:
    out = normalize({"type": "assistant-text", "final?": True, "text": "é" * 5000}, now=NOW)
    assert len(out["text"].encode()) <= STRING_BUDGET_BYTES
    assert out["text"] == "é" * (STRING_BUDGET_BYTES // 2)
    assert out["transport-truncated?"] is True
    assert out["timestamp"] == NOW
    _sendable(out)


def test_summary_is_the_first_line_cut_to_160_bytes() -> None:
    out = normalize({"type": "user", "text": "a" * 300 + "\nsecond"})
    assert len(out["summary"].encode()) <= SUMMARY_BYTES
    assert out["summary"].endswith("…")
    assert "transport-truncated?" not in out


def test_depth_and_entry_limits() -> None:
    deep: Any = "leaf"
    for _ in range(20):
        deep = {"d": deep}
    out = normalize({"type": "tool-call", "name": "x", "arguments": deep})
    assert "[transport depth limit]" in msgspec.json.encode(out).decode()
    wide = normalize(
        {"type": "tool-call", "name": "x", "arguments": {str(i): i for i in range(500)}}
    )
    assert len(wide["arguments"]) == 64
    assert wide["transport-truncated?"] is True


def test_payload_budget_and_record_limit() -> None:
    big = {"type": "tool-call", "name": "x", "arguments": {str(i): "y" * 4000 for i in range(10)}}
    out = normalize(big)
    assert len(msgspec.json.encode(out)) <= RECORD_BUDGET_BYTES
    assert out["transport-truncated?"] is True
    # a record whose keys alone blow the budget is replaced by the info record
    keys = {"k" * 300 + str(i): 1 for i in range(64)}
    replaced = normalize({"type": "tool-call", "name": "x", "arguments": keys}, now=NOW)
    assert replaced == {
        "type": "info",
        "timestamp": NOW,
        "summary": "tool-call payload omitted: transport record limit",
        "transport-truncated?": True,
    }


def test_fields_are_coerced_to_their_schema_types() -> None:
    out = normalize(
        {
            "type": "tool-result",
            "name": 5,
            "is-error?": None,
            "result": {"content": "fine", "is-error?": True},
            "duration-seconds": float("nan"),
            "tool-call-id": ["x"],
        }
    )
    assert out["name"] == "5"
    assert out["is-error?"] is True
    assert "duration-seconds" not in out
    assert out["tool-call-id"] == '["x"]'
    _sendable(out)


def test_injected_refs_and_info_refs() -> None:
    assert normalize({"type": "steering-injected", "text": "t", "ref": 4})["ref"] == 4
    out = normalize({"type": "info", "summary": "dropped", "refs": [3, "x", 0, 9]})
    assert out["refs"] == [3, 9]
    _sendable(out)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=40,
)
display_types = st.sampled_from(
    [
        "tool-call",
        "tool-result",
        "assistant-text",
        "assistant-thinking",
        "assistant-text-delta",
        "assistant-thinking-delta",
        "assistant-stream-end",
        "user",
        "steering-injected",
        "follow-up-injected",
        "llm-start",
        "llm-end",
        "agent-started",
        "agent-turn-complete",
        "error",
        "info",
    ]
)


@given(display_types, st.dictionaries(st.text(max_size=15), json_values, max_size=8))
def test_normalize_always_produces_a_sendable_event(kind: str, fields: dict[str, Any]) -> None:
    out = normalize({**fields, "type": kind}, now=NOW, meta={"cwd": "/w", "agent": 3})
    assert len(msgspec.json.encode(out)) <= RECORD_BUDGET_BYTES
    _sendable(out)
