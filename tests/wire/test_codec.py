"""Decode/encode/validate on hostile and boundary input: a value or a rejection, never a raise."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import UNSET

from tether.wire import (
    MAX_LINE_BYTES,
    Code,
    ControlAck,
    Prompt,
    Rejection,
    Result,
    Sender,
    ToolResult,
    decode,
    encode,
    extra_fields,
    rejection_ack,
    validate,
)


def _prompt_line(text: str) -> str:
    return msgspec.json.encode(
        {"v": 1, "seq": 1, "type": "prompt", "run": "r", "text": text}
    ).decode()


def test_size_boundary_is_exact() -> None:
    base = len(_prompt_line(""))
    fits = _prompt_line("x" * (MAX_LINE_BYTES - 1 - base))
    assert len(fits) == MAX_LINE_BYTES - 1
    assert isinstance(decode(fits, "control"), Prompt)
    over = _prompt_line("x" * (MAX_LINE_BYTES - base))
    rejection = decode(over, "control")
    assert isinstance(rejection, Rejection)
    assert rejection.code == Code.TOO_LARGE
    assert rejection.reason == "line exceeds 65536 bytes"


def test_size_counts_utf8_bytes_of_str_input() -> None:
    base = len(_prompt_line("").encode())
    # 3-byte characters: fewer characters than bytes
    text = "€" * ((MAX_LINE_BYTES - base) // 3 + 1)
    line = _prompt_line(text)
    assert len(line) < MAX_LINE_BYTES <= len(line.encode())
    result = decode(line, "control")
    assert isinstance(result, Rejection)
    assert result.code == Code.TOO_LARGE


@pytest.mark.parametrize(
    "line",
    [
        b"\xff\xfe{}",
        b'{"v":1,"seq":1,"type":"prompt","run":"r","text":"\xc3"}',
        '{"v":1,"seq":1,"type":"prompt","run":"r","text":"\ud800"}',
        b'{"v":1,"seq":1,"type":"prompt","run":"r","text":"\\ud800"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b'{"v":NaN}',
        b'{"v":Infinity}',
        b"\x00",
        b"",
        b"x" * (10 * 1024 * 1024),
    ],
)
def test_hostile_lines_are_rejected_not_raised(line: bytes | str) -> None:
    result = decode(line, "control")
    assert isinstance(result, Rejection)
    assert result.code in (Code.MALFORMED, Code.TOO_LARGE, Code.INVALID_PAYLOAD)


def test_overflowing_numbers_reach_the_envelope_stage() -> None:
    result = decode('{"v":1,"seq":1e400,"type":"cancel","run":"r"}', "control")
    assert isinstance(result, Rejection)
    assert result.code == Code.INVALID
    assert result.seq is None


def test_rejection_carries_seq_type_run_when_readable() -> None:
    result = decode('{"v":1,"seq":7,"type":"prompt","run":"r9"}', "control")
    assert isinstance(result, Rejection)
    assert (result.code, result.seq, result.type, result.run) == (
        Code.INVALID_PAYLOAD,
        7,
        "prompt",
        "r9",
    )
    assert result.errors[0].field == "text"
    assert rejection_ack(result) == {"status": "rejected", "reason": "text is required", "ref": 7}


def test_rejection_ack_without_seq_has_no_ref() -> None:
    result = decode("{", "control")
    assert isinstance(result, Rejection)
    assert "ref" not in rejection_ack(result)


def test_every_payload_error_is_reported() -> None:
    line = '{"v":1,"seq":1,"type":"tool-result","run":"r","duration-seconds":"x"}'
    result = decode(line, "event")
    assert isinstance(result, Rejection)
    fields = {e.field for e in result.errors}
    assert fields == {"name", "is-error?", "duration-seconds"}
    assert result.reason.count(";") == 2


def test_version_mismatch_is_fatal_and_named() -> None:
    result = decode('{"v":2,"seq":1,"type":"prompt","run":"r","text":"x"}', "control")
    assert isinstance(result, Rejection)
    assert result.fatal
    assert result.reason == "wire version 2 is not supported; expected 1"


def test_unknown_direction_is_a_rejection() -> None:
    assert isinstance(decode(b"{}", "sideways"), Rejection)
    assert isinstance(validate({}, "sideways"), Rejection)


def test_non_line_input_is_a_rejection() -> None:
    assert isinstance(decode(12, "event"), Rejection)  # type: ignore[arg-type]


def test_encode_refuses_a_line_that_is_too_large() -> None:
    message = Prompt(v=1, seq=3, run="r", text="y" * MAX_LINE_BYTES)
    result = encode(message)
    assert isinstance(result, Rejection)
    assert result.code == Code.TOO_LARGE
    assert result.reason == "encoded line exceeds 65536 bytes"
    assert result.seq == 3


def test_encode_refuses_a_badly_typed_struct() -> None:
    message = Prompt(v=1, seq=1, run="r", text=5)  # type: ignore[arg-type]
    result = encode(message)
    assert isinstance(result, Rejection)
    assert result.code == Code.INVALID_PAYLOAD


def test_encode_omits_unset_fields_never_null() -> None:
    line = encode(ToolResult(v=1, seq=1, run="r", name="bash", is_error=False))
    assert line == b'{"type":"tool-result","v":1,"seq":1,"run":"r","name":"bash","is-error?":false}'
    assert b"null" not in line


def test_validate_dicts_and_structs() -> None:
    ok = validate(
        {"v": 1, "seq": 2, "type": "control-ack", "run": "r", "ref": 1, "status": "applied"},
        "event",
    )
    assert isinstance(ok, ControlAck)
    assert validate(ok, "event") == ok
    bad = validate(
        {"v": 1, "seq": 2, "type": "control-ack", "run": "r", "status": "applied"}, "event"
    )
    assert isinstance(bad, Rejection)
    assert bad.code == Code.INVALID_PAYLOAD
    assert validate([1, 2], "event") == Rejection(
        code=Code.INVALID, reason="message must be a JSON object"
    )


def test_extra_fields_are_accepted_and_recoverable() -> None:
    line = '{"v":1,"seq":1,"type":"result","run":"r","stop-reason":"s","next":[1]}'
    assert not isinstance(decode(line, "event"), Rejection)
    assert extra_fields(line, "event") == {"next": [1]}
    assert extra_fields("{", "event") == {}


@pytest.mark.parametrize("context", [None, "complete", "partial", "later-value"])
def test_result_decodes_with_and_without_context(context: str | None) -> None:
    extra = "" if context is None else f',"context":"{context}"'
    line = '{"v":1,"seq":1,"type":"result","run":"r","stop-reason":"s"' + extra + "}"
    message = decode(line, "event")
    assert isinstance(message, Result)
    assert message.context == (UNSET if context is None else context)
    assert isinstance(Sender("r").next(Result, stop_reason="s", context="partial"), bytes)
