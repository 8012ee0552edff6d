"""Hypothesis: decoders are total, and every Struct round-trips."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tether.wire import (
    CONTROL_TYPES,
    EVENT_TYPES,
    Code,
    Message,
    Rejection,
    decode,
    encode,
    validate,
)
from tether.wire.limits import MAX_SAFE_INTEGER

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)
field_names = st.sampled_from(
    [
        "v",
        "seq",
        "type",
        "run",
        "text",
        "ref",
        "status",
        "turn",
        "stop-reason",
        "name",
        "is-error?",
        "final?",
        "usage",
        "note",
        "refs",
        "content-index",
        "delta",
        "final-text",
        "truncated?",
    ]
)
types = st.sampled_from(sorted(EVENT_TYPES) + sorted(CONTROL_TYPES) + ["nope", ""])


def _check_decoded(result: object, direction: str) -> None:
    """A decode result is a message of that direction or a rejection with a known code."""
    if isinstance(result, Rejection):
        assert result.code in set(Code)
        assert result.reason
        return
    assert isinstance(result, Message)
    assert result.direction == direction
    assert type(result) in (EVENT_TYPES if direction == "event" else CONTROL_TYPES).values()
    assert decode(encode(result), direction) == result  # a decoded message re-encodes


@given(st.binary(max_size=300), st.sampled_from(["event", "control"]))
def test_arbitrary_bytes(line: bytes, direction: str) -> None:
    _check_decoded(decode(line, direction), direction)


@given(st.text(max_size=200), st.sampled_from(["event", "control"]))
def test_arbitrary_text(line: str, direction: str) -> None:
    result = decode(line, direction)
    _check_decoded(result, direction)
    assert result == decode(line.encode("utf-8", "surrogatepass"), direction)


@given(st.sampled_from(["event", "control"]))
def test_the_decode_check_can_fail(direction: str) -> None:
    # a line that is valid for the other direction is rejected, not mistaken for a message
    line = b'{"v":1,"seq":1,"type":"ready","run":"r"}'
    result = decode(line, direction)
    assert isinstance(result, Rejection) == (direction == "control")


@given(
    st.dictionaries(field_names, json_values, max_size=8),
    types,
    st.sampled_from(["event", "control"]),
)
def test_arbitrary_objects(obj: dict[str, Any], kind: str, direction: str) -> None:
    obj.setdefault("type", kind)
    line = msgspec.json.encode(obj)
    result = decode(line, direction)
    if not isinstance(result, Rejection):
        again = encode(result)
        assert isinstance(again, bytes)
        assert decode(again, direction) == result
        assert validate(obj, direction) == result


positive = st.integers(1, MAX_SAFE_INTEGER)
usage = st.dictionaries(st.text(max_size=5), st.integers(0, 10**6), max_size=3)
small_text = st.text(max_size=30)


def _messages() -> st.SearchStrategy[Any]:
    from tether import wire as w

    env = {"v": st.just(1), "seq": positive, "run": small_text}
    return st.one_of(
        st.builds(w.Prompt, text=small_text, **env),
        st.builds(w.Steer, text=small_text, **env),
        st.builds(w.FollowUp, text=small_text, **env),
        st.builds(w.Finalize, note=small_text, **env),
        st.builds(w.Cancel, **env),
        st.builds(w.Close, **env),
        st.builds(w.Ready, **env),
        st.builds(w.TurnStarted, turn=positive, **env),
        st.builds(w.TurnComplete, turn=positive, stop_reason=small_text, usage=usage, **env),
        st.builds(
            w.ControlAck, status=st.sampled_from(["accepted", "applied"]), ref=positive, **env
        ),
        st.builds(w.ControlAck, status=st.just("rejected"), reason=small_text, **env),
        st.builds(
            w.Result,
            stop_reason=small_text,
            final_text=small_text,
            usage=usage,
            truncated=st.booleans(),
            **env,
        ),
        st.builds(
            w.Exit, status=st.sampled_from(["done", "cancelled", "failed", "timed-out"]), **env
        ),
        st.builds(w.ToolCall, name=small_text, id=small_text, arguments=json_values, **env),
        st.builds(
            w.ToolResult,
            name=small_text,
            is_error=st.booleans(),
            result=json_values,
            duration_seconds=st.floats(0, 1e6),
            **env,
        ),
        st.builds(
            w.AssistantText,
            final=st.booleans(),
            text=small_text,
            content_index=st.integers(0, 9),
            **env,
        ),
        st.builds(w.AssistantTextDelta, delta=small_text, **env),
        st.builds(w.Info, refs=st.lists(positive, max_size=4), summary=small_text, **env),
        st.builds(w.SteeringInjected, text=small_text, ref=positive, **env),
        st.builds(w.LlmEnd, stop_reason=small_text, usage=usage, **env),
    )


@given(_messages())
def test_structs_round_trip(message: Any) -> None:
    line = encode(message)
    assert isinstance(line, bytes), line
    assert decode(line, message.direction) == message
