"""The sans-IO daemon protocol: framing limits, flat responses, error codes, namespaces."""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.daemon.rpc.protocol import (
    MAX_FRAME_BYTES,
    ErrorCode,
    FrameDecoder,
    FrameTooLarge,
    Namespace,
    ProtocolError,
    ProtocolErrorKind,
    Request,
    Response,
    RpcError,
    decode_message,
    decode_request,
    decode_response,
    encode_frame,
    encode_request,
    encode_response,
    recover_id,
)
from tether.wire.needdata import NEED_DATA


def prefix(size: int) -> bytes:
    return struct.pack("<I", size)


def drain(decoder: FrameDecoder) -> list[bytes | ProtocolError]:
    out: list[bytes | ProtocolError] = []
    while True:
        item = decoder.next_frame()
        if item is NEED_DATA:
            return out
        assert isinstance(item, bytes | ProtocolError)
        out.append(item)
        if isinstance(item, ProtocolError):
            return out


# -- error codes and namespaces -------------------------------------------------------------------

# REFERENCE-FACTS §3 gives the reference client's exit codes (13 agent_not_found, ... 19
# shutting_down, 1 internal); the spec leaves the mapping to each client ("clients map
# these to exit codes"), and tether's commands exit only with 0/2/3/4/5 (issue 10), so the
# code itself is printed (and is `error.code` in --json).
EXIT_CODES = {
    "malformed_frame": 2,
    "unknown_method": 2,
    "invalid_params": 2,
    "agent_not_found": 2,
    "agent_exists": 2,
    "invalid_status": 2,
    "channel_unknown": 2,
    "spawn_failed": 4,
    "lock_timeout": 5,
    "busy": 4,
    "internal": 4,
    "shutting_down": 3,
}


def test_error_codes_map_into_the_exit_contract() -> None:
    assert {code.value: code.exit_code for code in ErrorCode} == EXIT_CODES


@pytest.mark.parametrize(
    ("method", "namespace"),
    [
        ("agent.spawn", Namespace.AGENT),
        ("agent.", Namespace.AGENT),
        ("channel.push_to_channel", Namespace.CHANNEL),
        ("channel.a.b", Namespace.CHANNEL),
        ("daemon.status", Namespace.UNKNOWN),
        ("agent", Namespace.UNKNOWN),
        ("", Namespace.UNKNOWN),
        (".agent", Namespace.UNKNOWN),
        ("Agent.spawn", Namespace.UNKNOWN),
    ],
)
def test_namespace_splits_at_the_first_dot(method: str, namespace: Namespace) -> None:
    assert Namespace.of(method) is namespace


# -- framing --------------------------------------------------------------------------------------


def test_exactly_max_frame_is_accepted() -> None:
    body = b"x" * MAX_FRAME_BYTES
    decoder = FrameDecoder()
    decoder.feed(encode_frame(body))
    assert decoder.next_frame() == body
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == 0


def test_one_past_max_is_rejected_from_the_prefix_alone() -> None:
    decoder = FrameDecoder()
    decoder.feed(prefix(MAX_FRAME_BYTES + 1))
    error = decoder.next_frame()
    assert isinstance(error, ProtocolError)
    assert error.kind is ProtocolErrorKind.FRAME_TOO_LARGE
    assert error.message == "frame exceeds max size: 16777217 > 16777216"
    assert error.code is ErrorCode.MALFORMED_FRAME
    assert decoder.buffered == 0


def test_hostile_prefix_keeps_nothing_of_the_body() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\xff\xff\xff\xff" + b"A" * 1000)
    assert decoder.buffered == 0
    decoder.feed(b"B" * 1000)
    assert decoder.buffered == 0
    error = decoder.next_frame()
    assert isinstance(error, ProtocolError)
    assert error.size == 0xFFFFFFFF
    assert decoder.next_frame() is error  # the decoder stays dead
    assert decoder.eof() is error


def test_hostile_prefix_after_a_good_frame() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"{}") + b"\xff\xff\xff\xff")
    assert decoder.next_frame() == b"{}"
    assert isinstance(decoder.next_frame(), ProtocolError)


def read_like_the_server(decoder: FrameDecoder, chunk: bytes) -> list[bytes | ProtocolError]:
    """``single`` first (the server's fast path), else ``feed`` and drain."""
    body = decoder.single(chunk)
    if body is not None:
        return [body]
    decoder.feed(chunk)
    return drain(decoder)


@pytest.mark.parametrize(
    "chunk",
    [
        encode_frame(b'{"id":1}'),
        encode_frame(b""),
        encode_frame(b"{}") + encode_frame(b"[]"),  # two frames: not the fast path
        encode_frame(b'{"id":1}')[:-1],  # short by one byte
        encode_frame(b'{"id":1}') + b"\x00",  # trailing garbage
        b"\x01\x00",  # part of a prefix
        b"\xff\xff\xff\xff",  # hostile prefix, no body
        prefix(3) + b"abcd",  # the prefix is not the chunk's length
    ],
)
def test_single_agrees_with_feed_whole_and_byte_by_byte(chunk: bytes) -> None:
    fast = read_like_the_server(FrameDecoder(), chunk)
    whole = FrameDecoder()
    whole.feed(chunk)
    slow_whole = drain(whole)
    byte_by_byte = FrameDecoder()
    slow_bytes: list[bytes | ProtocolError] = []
    for index in range(len(chunk)):
        byte_by_byte.feed(chunk[index : index + 1])
        slow_bytes += drain(byte_by_byte)
    assert fast == slow_whole == slow_bytes


def test_single_only_takes_a_whole_frame_with_nothing_buffered() -> None:
    decoder = FrameDecoder()
    decoder.feed(prefix(2) + b"a")
    assert decoder.single(encode_frame(b"zz")) is None  # a partial frame is waiting
    decoder.feed(b"b")
    assert drain(decoder) == [b"ab"]
    assert decoder.single(encode_frame(b"zz")) == b"zz"
    assert decoder.buffered == 0
    small = FrameDecoder(max_frame_bytes=4)
    assert small.single(encode_frame(b"12345")) is None  # over the limit: feed refuses it
    small.feed(encode_frame(b"12345"))
    assert isinstance(small.next_frame(), ProtocolError)
    assert small.single(encode_frame(b"1")) is None  # a dead decoder stays dead


def test_encode_refuses_an_oversized_body() -> None:
    with pytest.raises(FrameTooLarge, match="16777217 > 16777216"):
        encode_frame(b"x" * (MAX_FRAME_BYTES + 1))
    assert len(encode_frame(b"")) == 4


FRAMES = [b"{}", b'{"id":1,"method":"agent.list"}', b"", "é✓".encode()]
STREAM = b"".join(encode_frame(body) for body in FRAMES)


def test_feed_whole() -> None:
    decoder = FrameDecoder()
    decoder.feed(STREAM)
    assert drain(decoder) == FRAMES
    assert decoder.eof() is None


def test_feed_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    out: list[bytes | ProtocolError] = []
    for index in range(len(STREAM)):
        decoder.feed(STREAM[index : index + 1])
        out.extend(drain(decoder))
    assert out == FRAMES
    assert decoder.eof() is None


def test_feed_with_trailing_garbage() -> None:
    decoder = FrameDecoder()
    decoder.feed(STREAM + b"\x10\x00\x00\x00abc")
    assert drain(decoder) == FRAMES
    assert decoder.buffered == 7
    error = decoder.eof()
    assert isinstance(error, ProtocolError)
    assert error.kind is ProtocolErrorKind.UNEXPECTED_EOF
    assert error.message == "connection closed before a full frame was read"


def test_truncated_prefix_at_eof() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\x01\x00")
    assert decoder.next_frame() is NEED_DATA
    assert isinstance(decoder.eof(), ProtocolError)


def test_a_smaller_limit_is_honoured() -> None:
    decoder = FrameDecoder(max_frame_bytes=8)
    decoder.feed(encode_frame(b"12345678") + prefix(9))
    assert decoder.next_frame() == b"12345678"
    error = decoder.next_frame()
    assert isinstance(error, ProtocolError)
    assert error.size == 9


# -- messages -------------------------------------------------------------------------------------


def test_spec_examples_decode() -> None:
    ok = decode_response(b'{"id":7,"result":{"status":"live"}}')
    assert ok == Response.ok(7, {"status": "live"})
    failed = decode_response(
        b'{"id":8,"error":{"code":"agent_not_found","message":"no such agent"}}'
    )
    assert isinstance(failed, Response)
    assert failed.is_error
    assert failed.error == RpcError(ErrorCode.AGENT_NOT_FOUND, "no such agent")


def test_result_null_is_a_valid_success() -> None:
    response = decode_response(b'{"id":1,"result":null}')
    assert isinstance(response, Response)
    assert response.result is None
    assert not response.is_error
    assert encode_response(response)[4:] == b'{"id":1,"result":null}'


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"id":1}', "neither result nor error"),
        (b'{"id":1,"result":1,"error":{"code":"busy","message":"m"}}', "both result and error"),
        (b'{"id":1,"result":null,"error":{"code":"busy","message":"m"}}', "both result and error"),
        (b'{"id":1,"error":{"code":"nope","message":"m"}}', "nope"),
        (b'{"id":1,"error":{"code":"busy"}}', "message"),
        (b'{"result":1}', "id"),
        (b"[1,2]", "Expected `object`"),
        (b"not json", "malformed"),
        (b"\xff\xfe", "malformed"),
    ],
)
def test_bad_responses_are_rejected(body: bytes, detail: str) -> None:
    for decode in (decode_response, decode_message):
        error = decode(body)
        assert isinstance(error, ProtocolError)
        assert error.kind is ProtocolErrorKind.JSON
        assert error.message.startswith("malformed json frame: ")
        assert detail in error.message


def test_response_constructor_enforces_exactly_one() -> None:
    with pytest.raises(ValueError, match="neither"):
        Response(id=1)
    with pytest.raises(ValueError, match="both"):
        Response(id=1, result=1, error=RpcError(ErrorCode.BUSY, "m"))


def test_request_params_default_to_null() -> None:
    assert decode_request(b'{"id":3,"method":"agent.list"}') == Request(3, "agent.list", None)
    assert encode_request(Request(3, "agent.list"))[4:] == (
        b'{"id":3,"method":"agent.list","params":null}'
    )
    assert decode_message(b'{"id":3,"method":"agent.list"}') == Request(3, "agent.list", None)


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":-1,"method":"agent.list"}',
        b'{"id":18446744073709551616,"method":"agent.list"}',
        b'{"id":1.5,"method":"agent.list"}',
        b'{"id":"1","method":"agent.list"}',
        b'{"method":"agent.list"}',
        b'{"id":1}',
        b'{"id":1,"method":7}',
    ],
)
def test_bad_requests_are_rejected(body: bytes) -> None:
    assert isinstance(decode_request(body), ProtocolError)


def test_u64_ids_round_trip() -> None:
    top = 2**64 - 1
    assert decode_request(encode_request(Request(top, "agent.list"))[4:]) == Request(
        top, "agent.list"
    )


def test_recover_id() -> None:
    assert recover_id(b'{"id":5,"method":3}') == 5
    assert recover_id(b"garbage") == 0
    assert recover_id(b'{"id":-4}') == 0


def test_protocol_import_is_cheap() -> None:
    code = "import sys, tether.daemon.rpc.protocol; print('asyncio' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


# -- properties -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
ids = st.integers(0, 2**64 - 1)


@given(ids, st.text(), json_values)
def test_request_round_trip(id: int, method: str, params: object) -> None:
    request = Request(id, method, params)
    decoder = FrameDecoder()
    decoder.feed(encode_request(request))
    body = decoder.next_frame()
    assert isinstance(body, bytes)
    assert decode_request(body) == request
    assert decode_message(body) == request


@given(ids, json_values, st.sampled_from(list(ErrorCode)), st.text(), st.booleans())
def test_response_round_trip(
    id: int, result: object, code: ErrorCode, message: str, failed: bool
) -> None:
    response = Response.fail(id, code, message) if failed else Response.ok(id, result)
    body = encode_response(response)[4:]
    assert decode_response(body) == response
    assert decode_message(body) == response


@given(st.binary(max_size=512), st.lists(st.integers(1, 64), max_size=16))
def test_arbitrary_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(max_frame_bytes=256)
    position = 0
    for cut in [*cuts, len(data)]:
        decoder.feed(data[position : position + cut])
        position += cut
        for item in drain(decoder):
            if isinstance(item, bytes):
                for decode in (decode_request, decode_response, decode_message):
                    assert isinstance(decode(item), Request | Response | ProtocolError)
    assert decoder.eof() is None or isinstance(decoder.eof(), ProtocolError)


@given(st.binary(max_size=256))
def test_arbitrary_bodies_never_raise(body: bytes) -> None:
    for decode in (decode_request, decode_response, decode_message):
        assert isinstance(decode(body), Request | Response | ProtocolError)
    assert isinstance(recover_id(body), int)


@given(json_values)
def test_arbitrary_json_never_raises(value: object) -> None:
    body = msgspec.json.encode(value)
    for decode in (decode_request, decode_response, decode_message):
        assert isinstance(decode(body), Request | Response | ProtocolError)


@pytest.mark.parametrize("decode", [decode_request, decode_message])
def test_an_id_over_u64_is_refused_where_frames_are_read(decode: Any) -> None:
    assert decode(b'{"id":18446744073709551615,"method":"agent.list"}') == Request(
        2**64 - 1, "agent.list"
    )
    refused = decode(b'{"id":18446744073709551616,"method":"agent.list"}')
    assert isinstance(refused, ProtocolError)
    assert "does not fit in a u64" in refused.message
