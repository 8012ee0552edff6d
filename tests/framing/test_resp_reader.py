"""The RESP frame reader: one suite, run against the pure and the hiredis-backed reader."""

from __future__ import annotations

import random

import pytest

from tether.framing.resp import FrameCode, FrameRejection, PureReader, encode_frame
from tether.framing.resp_hiredis import HiredisReader, hiredis_available, open_reader
from tether.wire.needdata import NEED_DATA

READERS = [PureReader, HiredisReader]

Result = tuple[bytes, ...] | FrameRejection


@pytest.fixture(params=READERS, ids=["pure", "hiredis"])
def reader_cls(request: pytest.FixtureRequest) -> type[PureReader]:
    cls: type[PureReader] = request.param
    return cls


def drain(reader: PureReader) -> list[Result]:
    return list(reader)


def read_chunks(cls: type[PureReader], chunks: list[bytes], **limits: int) -> list[Result]:
    reader = cls(**limits)
    out: list[Result] = []
    for chunk in chunks:
        reader.feed(chunk)
        out += drain(reader)
    return out


def feedings(data: bytes) -> dict[str, list[bytes]]:
    """The same bytes whole, one byte at a time, and in random chunks."""
    rng = random.Random(len(data))
    chunks, i = [], 0
    while i < len(data):
        step = rng.randint(1, 9)
        chunks.append(data[i : i + step])
        i += step
    return {
        "whole": [data],
        "bytewise": [data[i : i + 1] for i in range(len(data))],
        "random": chunks,
    }


def shape(results: list[Result]) -> list[object]:
    """Frames as-is, rejections as (code, offset)."""
    return [(r.code, r.offset) if isinstance(r, FrameRejection) else r for r in results]


GOOD_FRAMES: list[tuple[bytes, ...]] = [
    (b"TEXT", b"hello"),
    (b"TEXT", "héllo wörld – ☃ 𝄞".encode()),
    (b"TOOL_RESULT", b"toolu_1", b"bash", b"line 1\r\nline 2\nline 3\r"),
    (b"EMPTY", b"", b"", b""),
    (b"BIN", bytes(range(256))),
    (b"STARS", b"*1\r\n$1\r\na\r\n", b"\n*3\r\n"),
    (),
    (b"x" * 999, b"y" * 1000, b"z" * 10),
    (b"BIG", b"q" * 100_000),
    tuple(b"%d" % i for i in range(300)),
]


@pytest.mark.parametrize("frame", GOOD_FRAMES, ids=range(len(GOOD_FRAMES)))
def test_every_frame_every_feeding(reader_cls: type[PureReader], frame: tuple[bytes, ...]) -> None:
    data = encode_frame(frame)
    for name, chunks in feedings(data).items():
        assert read_chunks(reader_cls, chunks) == [frame], name


def test_many_frames_in_one_stream(reader_cls: type[PureReader]) -> None:
    data = b"".join(encode_frame(f) for f in GOOD_FRAMES * 3)
    for name, chunks in feedings(data).items():
        assert read_chunks(reader_cls, chunks) == GOOD_FRAMES * 3, name


def test_large_stream_in_pipe_sized_chunks(reader_cls: type[PureReader]) -> None:
    frames = [(b"TEXT", b"chunk %d" % i, b"") for i in range(5000)]
    frames += [(b"TOOL_RESULT", b"id", b"o" * 70_000)] * 3
    data = b"".join(encode_frame(f) for f in frames)
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    assert read_chunks(reader_cls, chunks) == frames
    assert read_chunks(reader_cls, [data]) == frames


def test_trailing_garbage_is_rejected_after_the_frames(reader_cls: type[PureReader]) -> None:
    frames = GOOD_FRAMES[:4]
    good = b"".join(encode_frame(f) for f in frames)
    data = good + b"garbage without a frame"
    for name, chunks in feedings(data).items():
        results = read_chunks(reader_cls, chunks)
        assert results[:-1] == frames, name
        assert shape(results[-1:]) == [("malformed", len(good))], name


# (input, expected results as frames or (code, offset)), each also fed byte by byte.
CASES: list[tuple[str, bytes, list[object]]] = [
    ("simple string", b"+OK\r\n*1\r\n$1\r\na\r\n", [("malformed", 0), (b"a",)]),
    ("error reply", b"-ERR no\r\n", [("malformed", 0)]),
    ("integer reply", b":5\r\n", [("malformed", 0)]),
    ("null array", b"*-1\r\n", [("malformed", 0)]),
    ("null bulk", b"*1\r\n$-1\r\n", [("malformed", 0)]),
    ("count with zero", b"*01\r\n$1\r\na\r\n", [("malformed", 0)]),
    ("length with zero", b"*1\r\n$01\r\na\r\n", [("malformed", 0)]),
    ("count with plus", b"*+1\r\n$1\r\na\r\n", [("malformed", 0)]),
    ("length with space", b"*1\r\n$ 1\r\na\r\n", [("malformed", 0)]),
    ("count with space", b"*1 \r\n$1\r\na\r\n", [("malformed", 0)]),
    ("bare LF header", b"*1\n$1\r\na\r\n", [("malformed", 0)]),
    ("bare LF terminator", b"*1\r\n$1\r\na\n\n", [("malformed", 0)]),
    ("data too long", b"*1\r\n$1\r\nab\r\n", [("malformed", 0)]),
    ("integer element", b"*1\r\n:5\r\n", [("malformed", 0)]),
    ("simple element", b"*1\r\n+foo\r\n", [("malformed", 0)]),
    ("verbatim element", b"*1\r\n=15\r\ntxt:Some string\r\n", [("malformed", 0)]),
    ("bignum element", b"*1\r\n(123\r\n", [("malformed", 0)]),
    ("resp3 set", b"~1\r\n$1\r\na\r\n", [("malformed", 0)]),
    ("resp3 push", b">1\r\n$1\r\na\r\n", [("malformed", 0)]),
    ("nested array", b"*2\r\n*1\r\n$1\r\na\r\n", [("malformed", 0), (b"a",)]),
    (
        "resp3 map with an array key",
        b"%1\r\n*1\r\n$1\r\na\r\n$1\r\nb\r\n",
        [("malformed", 0), (b"a",), ("malformed", 15)],
    ),
    ("resp3 attribute", b"|1\r\n*0\r\n*0\r\n:1\r\n", [("malformed", 0), (), (), ("malformed", 12)]),
    ("resp3 double", b"*1\r\n,1.5\r\n", [("malformed", 0)]),
    ("21-digit count", b"*" + b"9" * 21 + b"\r\n", [("malformed", 0)]),
    ("21-digit length", b"*1\r\n$" + b"1" * 21 + b"\r\n", [("malformed", 0)]),
    (
        "garbage then frame",
        b"hello\nworld\n*1\r\n$2\r\nok\r\n",
        [("malformed", 0), (b"ok",)],
    ),
    ("blank line between frames", b"*0\r\n\r\n*0\r\n", [(), ("malformed", 4), ()]),
    (
        "resync inside a bad frame",
        b"*1\r\n$3\r\nab\n*1\r\n$1\r\nc\r\n",
        [("malformed", 0), (b"c",)],
    ),
    ("empty frame", b"*0\r\n", [()]),
    ("star not at line start", b"x*1\r\n$1\r\na\r\n", [("malformed", 0)]),
]


@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_frames(
    reader_cls: type[PureReader], name: str, data: bytes, expected: list[object]
) -> None:
    for how, chunks in feedings(data).items():
        assert shape(read_chunks(reader_cls, chunks)) == expected, how


def test_rejection_codes_and_reasons(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(b"*1\r\n$1\r\nab\r\n")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == FrameCode.MALFORMED == "malformed"
    assert "field 0" in result.reason
    assert "CRLF" in result.reason


def test_too_many_fields_rejected_from_the_header_alone(reader_cls: type[PureReader]) -> None:
    reader = reader_cls(max_fields=4)
    reader.feed(b"*5\r\n")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == "too-many-fields"
    assert "5 fields" in result.reason
    assert "limit is 4" in result.reason


def test_field_too_large_rejected_before_its_bytes_arrive(reader_cls: type[PureReader]) -> None:
    reader = reader_cls(max_field_bytes=1000)
    reader.feed(b"*2\r\n$4\r\nTEXT\r\n$1001\r\n")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == "field-too-large"
    assert "field 1" in result.reason
    # the reader now skips without holding the refused field's bytes
    for _ in range(100):
        reader.feed(b"x" * 1000)
        assert reader.next() is NEED_DATA
    assert reader.statistics().buffered <= 1
    assert reader.statistics().bytes_skipped >= 100_000


def test_hostile_length_never_waits_for_data(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(b"*1\r\n$99999999999999999999\r\n")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == "field-too-large"


def test_frame_too_large(reader_cls: type[PureReader]) -> None:
    frame = encode_frame([b"a" * 60, b"b" * 60])
    for how, chunks in feedings(frame + encode_frame([b"ok"])).items():
        results = read_chunks(reader_cls, chunks, max_frame_bytes=100)
        assert shape(results) == [("frame-too-large", 0), (b"ok",)], how
    assert read_chunks(reader_cls, [frame], max_frame_bytes=len(frame)) == [(b"a" * 60, b"b" * 60)]


def test_limits_are_inclusive(reader_cls: type[PureReader]) -> None:
    frame = (b"f",) * 3
    data = encode_frame([b"12345"]) + encode_frame(frame)
    assert read_chunks(reader_cls, [data], max_fields=3, max_field_bytes=5) == [(b"12345",), frame]


def test_bad_header_detected_without_waiting_for_crlf(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(b"*1\r\n$x")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == "malformed"


def test_partial_header_waits(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(b"*1\r")
    assert reader.next() is NEED_DATA
    reader.feed(b"\n$12\r")
    assert reader.next() is NEED_DATA
    reader.feed(b"\nhello world!\r")
    assert reader.next() is NEED_DATA
    reader.feed(b"\n")
    assert reader.next() == (b"hello world!",)
    assert reader.next() is NEED_DATA


def test_offsets_count_from_the_stream_start(reader_cls: type[PureReader]) -> None:
    good = encode_frame([b"TEXT", b"a"])
    # the frame after '?' is not at a line start, so resync passes over it
    data = good * 3 + b"?" + good + b"\n" + good + b"\n"
    results = read_chunks(reader_cls, [data[i : i + 7] for i in range(0, len(data), 7)])
    assert shape(results) == [
        (b"TEXT", b"a"),
        (b"TEXT", b"a"),
        (b"TEXT", b"a"),
        ("malformed", 3 * len(good)),
        (b"TEXT", b"a"),
        ("malformed", 5 * len(good) + 2),
    ]


def test_statistics_count_rejections_and_skipped_bytes(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(b"junk\n*1\r\n$1\r\na\r\n")
    assert shape(drain(reader)) == [("malformed", 0), (b"a",)]
    stats = reader.statistics()
    assert stats.rejections == 1
    assert stats.bytes_skipped == 5
    assert stats.buffered == 0


def test_eof_reports_a_truncated_frame(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(encode_frame([b"TEXT", b"done"]) + b"*2\r\n$4\r\nTEXT\r\n$9\r\nhal")
    assert drain(reader) == [(b"TEXT", b"done")]
    verdict = reader.eof()
    assert verdict is not None
    assert verdict.code == "truncated"
    assert verdict.offset == len(encode_frame([b"TEXT", b"done"]))
    assert reader.eof() is None
    reader.feed(encode_frame([b"again"]))
    assert drain(reader) == [(b"again",)]


def test_eof_after_clean_end_or_garbage_is_quiet(reader_cls: type[PureReader]) -> None:
    reader = reader_cls()
    reader.feed(encode_frame([b"x"]))
    assert drain(reader) == [(b"x",)]
    assert reader.eof() is None
    reader.feed(b"junk")
    assert shape(drain(reader)) == [("malformed", len(encode_frame([b"x"])))]
    assert reader.eof() is None


def test_feed_accepts_bytearray_and_memoryview(reader_cls: type[PureReader]) -> None:
    data = encode_frame([b"TEXT", b"hi"])
    reader = reader_cls()
    reader.feed(bytearray(data[:5]))
    reader.feed(memoryview(data)[5:])
    reader.feed(b"")
    assert drain(reader) == [(b"TEXT", b"hi")]


def test_fields_are_immutable_bytes(reader_cls: type[PureReader]) -> None:
    big = encode_frame([b"TOOL_RESULT", b"z" * 20_000])
    reader = reader_cls()
    for i in range(0, len(big), 100):  # slow feeding moves the buffer to a bytearray
        reader.feed(big[i : i + 100])
    (frame,) = drain(reader)
    assert isinstance(frame, tuple)
    assert all(type(f) is bytes for f in frame)


def test_negative_limits_are_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="max_fields"):
        PureReader(max_fields=-1)


def test_open_reader_prefers_hiredis() -> None:
    assert hiredis_available()
    assert type(open_reader()) is HiredisReader
    assert type(open_reader(use_hiredis=False)) is PureReader
    reader = open_reader(max_fields=2, use_hiredis=True)
    reader.feed(b"*3\r\n")
    result = reader.next()
    assert isinstance(result, FrameRejection)
    assert result.code == "too-many-fields"


def test_encode_frame_shapes() -> None:
    assert encode_frame([]) == b"*0\r\n"
    assert encode_frame([b""]) == b"*1\r\n$0\r\n\r\n"
    assert encode_frame(["é", bytearray(b"\r\n")]) == b"*2\r\n$2\r\n\xc3\xa9\r\n$2\r\n\r\n\r\n"


def test_encode_frame_refuses_what_a_reader_would_reject() -> None:
    with pytest.raises(ValueError, match="field 1 is 11 bytes"):
        encode_frame([b"ok", b"x" * 11], max_field_bytes=10)
    with pytest.raises(ValueError, match="3 fields"):
        encode_frame([b"a", b"b", b"c"], max_fields=2)
    with pytest.raises(ValueError, match="frame is"):
        encode_frame([b"a" * 10], max_frame_bytes=10)
