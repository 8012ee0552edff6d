"""Inbox messages: golden lines, the typed kinds, and a total parse_line."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.inbox.messages import (
    MAX_MESSAGE_BYTES,
    ApprovalRequest,
    Clarification,
    Done,
    InboxRejection,
    OtherMessage,
    Progress,
    RejectCode,
    ResultPartial,
    classify,
    decode_body,
    parse_line,
)

GOLDEN = Path(__file__).with_name("golden-lines.txt")


def golden_cases() -> list[tuple[str, bytes]]:
    cases = []
    for raw in GOLDEN.read_bytes().split(b"\n"):
        if not raw or raw.startswith(b"#"):
            continue
        expected, _, line = raw.partition(b"\t")
        cases.append((expected.decode(), line))
    return cases


def kind_of(result: object) -> str:
    if isinstance(result, InboxRejection):
        return result.code.value
    if isinstance(result, OtherMessage):
        return f"other:{result.type}"
    assert isinstance(result, msgspec.Struct)
    tag = type(result).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


@pytest.mark.parametrize(("expected", "line"), golden_cases(), ids=lambda v: str(v)[:40])
def test_golden_line(expected: str, line: bytes) -> None:
    result = parse_line(line)
    assert kind_of(result) == expected
    assert kind_of(parse_line(line + b"\n")) == expected  # one trailing newline is ignored


def test_golden_file_covers_every_kind_and_code() -> None:
    seen = {expected.split(":")[0] for expected, _ in golden_cases()}
    kinds = {"progress", "clarification", "result_partial", "done", "approval_request", "other"}
    assert seen == kinds | {code.value for code in RejectCode} - {"too_long", "not_utf8"}


def test_typed_values() -> None:
    assert parse_line(b'{"type":"progress","text":"step 3"}') == Progress(text="step 3")
    assert parse_line(b'{"type":"clarification","q":"which?"}') == Clarification(q="which?")
    assert parse_line(b'{"type":"result_partial","note":"n"}') == ResultPartial(note="n")
    assert parse_line(b'{"type":"done","summary":"s"}') == Done(summary="s")
    assert parse_line(b'{"type":"approval_request","reason":"r"}') == ApprovalRequest(reason="r")


def test_other_objects_are_kept_whole() -> None:
    result = parse_line(b'{"type":"tool_call","args":{"a":[1,2,{"b":null}]},"n":1.5}')
    assert result == OtherMessage(
        type="tool_call", body={"type": "tool_call", "args": {"a": [1, 2, {"b": None}]}, "n": 1.5}
    )


def test_typed_messages_encode_back_to_their_wire_form() -> None:
    encoded = msgspec.json.encode(Clarification(q="which model?"))
    assert encoded == b'{"type":"clarification","q":"which model?"}'
    assert parse_line(encoded) == Clarification(q="which model?")


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"progress","text":"\xff"}',
        b'{"\xff":1,"type":"x"}',  # in a key msgspec skips
        b'{"type":"x","skipped":"\xc3"}',
    ],
)
def test_invalid_utf8_is_rejected_with_its_raw_text(line: bytes) -> None:
    result = parse_line(line)
    assert isinstance(result, InboxRejection)
    assert result.code in (RejectCode.NOT_UTF8, RejectCode.NOT_JSON)
    assert "\\x" in result.raw  # the bad bytes are shown, not dropped


def test_a_byte_order_mark_is_not_json() -> None:
    result = parse_line(b"\xef\xbb\xbf{}")
    assert isinstance(result, InboxRejection)
    assert result.code is RejectCode.NOT_JSON
    assert result.raw == "\ufeff{}"


def test_over_long_line_is_rejected_with_its_head() -> None:
    line = b'{"type":"progress","text":"' + b"x" * MAX_MESSAGE_BYTES + b'"}'
    result = parse_line(line)
    assert isinstance(result, InboxRejection)
    assert result.code is RejectCode.TOO_LONG
    assert len(result.raw) == 4096
    exactly = b'{"type":"progress","text":"' + b"x" * (MAX_MESSAGE_BYTES - 29) + b'"}'
    assert len(exactly) == MAX_MESSAGE_BYTES
    assert isinstance(parse_line(exactly), Progress)


def test_classify_agrees_with_parse_line() -> None:
    for _, line in golden_cases():
        body, kind, code, reason = classify(line)
        result = parse_line(line)
        if code is None:
            assert body is not None
            assert reason is None
            assert not isinstance(result, InboxRejection)
            assert decode_body(body, kind) == result
            assert body == body.strip()
        else:
            assert isinstance(result, InboxRejection)
            assert result.code is code
            assert reason


def test_decode_body_never_raises_on_a_corrupted_row() -> None:
    assert decode_body("not json", "progress") == OtherMessage(type="progress", body={})
    assert decode_body("[1]", None) == OtherMessage(type=None, body={})
    assert decode_body('{"n":1e999}', "x") == OtherMessage(type="x", body={"n": float("inf")})


@given(st.binary(max_size=300))
def test_parse_line_is_total_on_bytes(data: bytes) -> None:
    result = parse_line(data)
    kinds = (InboxRejection, OtherMessage, Progress, Clarification, ResultPartial, Done)
    assert isinstance(result, (*kinds, ApprovalRequest))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(["type", "text", "q", "note", "summary", "reason", "x"]),
        json_values | st.sampled_from(["progress", "done", "clarification"]),
        max_size=5,
    )
)
def test_any_object_is_accepted_or_a_bad_payload(obj: dict[str, object]) -> None:
    line = msgspec.json.encode(obj)
    result = parse_line(line)
    if isinstance(result, InboxRejection):
        assert result.code is RejectCode.BAD_PAYLOAD
        assert obj.get("type") in ("progress", "clarification", "result_partial", "done")
    elif isinstance(result, OtherMessage):
        assert result.body == msgspec.json.decode(line)
    else:
        assert msgspec.json.decode(msgspec.json.encode(result)).items() <= obj.items()


# --- classify's first try (no full depth scan) agrees with the always-checked path ---------


def _classify_checked(line: bytes) -> object:
    from tether.inbox import messages

    saved = messages._SHALLOW_BELOW, messages._few_openers
    messages._SHALLOW_BELOW, messages._few_openers = 0, lambda data: False  # type: ignore[misc]
    try:
        return messages.classify(line)
    finally:
        messages._SHALLOW_BELOW, messages._few_openers = saved  # type: ignore[misc]


def _nested(depth: int) -> bytes:
    return b'{"type":"progress","text":"t","x":' + b"[" * depth + b"1" + b"]" * depth + b"}"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_classify_first_try_agrees_on_arbitrary_bytes(line: bytes) -> None:
    from tether.inbox.messages import classify

    assert classify(line) == _classify_checked(line)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 140), st.integers(0, 6), st.text(alphabet='aé"\\[{', max_size=8))
def test_classify_first_try_agrees_on_deep_and_escaped_lines(
    depth: int, cut: int, text: str
) -> None:
    from tether.inbox.messages import RejectCode, classify

    for line in (
        _nested(depth),
        _nested(depth)[: -cut or None],
        json.dumps({"type": "progress", "text": text}).encode(),
        json.dumps({"type": "done", "summary": text}, ensure_ascii=False).encode(),
    ):
        got = classify(line)
        assert got == _classify_checked(line), line
    if depth + 1 > 128:
        assert classify(_nested(depth))[2] == RejectCode.NOT_JSON
