"""The SSE parser: the WHATWG rules, split-point independence, the size bound, totality."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.agent.providers.sse import SSEDecoder, SSEEvent, SSERejection


def feed_all(data: bytes, splits: list[int] | None = None, **kw: int) -> list[object]:
    decoder = SSEDecoder(**kw)
    if splits is None:
        return list(decoder.feed(data))
    out: list[object] = []
    last = 0
    for cut in sorted(set(splits)):
        out += decoder.feed(data[last:cut])
        last = cut
    out += decoder.feed(data[last:])
    return out


def one_byte_at_a_time(data: bytes, **kw: int) -> list[object]:
    decoder = SSEDecoder(**kw)
    out: list[object] = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    return out


def test_basic_event_with_type_and_id() -> None:
    data = b'event: message_start\ndata: {"a": 1}\nid: 7\n\n'
    assert feed_all(data) == [SSEEvent("message_start", '{"a": 1}', "7")]


def test_default_type_is_message_and_multiline_data_joins_with_newline() -> None:
    data = b"data: one\ndata:two\ndata:  three\n\n"
    assert feed_all(data) == [SSEEvent("message", "one\ntwo\n three", "")]


def test_crlf_lf_and_cr_line_ends_are_equivalent() -> None:
    lf = b"event: a\ndata: x\n\ndata: y\n\n"
    crlf = lf.replace(b"\n", b"\r\n")
    cr = lf.replace(b"\n", b"\r")
    expected = [SSEEvent("a", "x", ""), SSEEvent("message", "y", "")]
    assert feed_all(lf) == feed_all(crlf) == feed_all(cr) == expected
    assert one_byte_at_a_time(crlf) == expected


def test_cr_then_lf_across_chunks_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [SSEEvent("message", "a", "")]
    assert decoder.feed(b"\ndata: b\r\r") == [SSEEvent("message", "b", "")]


def test_comments_unknown_fields_and_empty_data() -> None:
    data = b": keep-alive\nfoo: bar\ndata\n\n:only a comment\n\nretry: 1500\ndata:\n\n"
    decoder = SSEDecoder()
    assert decoder.feed(data) == [SSEEvent("message", "", ""), SSEEvent("message", "", "")]
    assert decoder.retry == 1500


def test_event_without_data_is_not_dispatched_and_resets_type() -> None:
    assert feed_all(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", "x", "")]


def test_last_event_id_persists_and_nul_ids_are_ignored() -> None:
    data = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\x003\ndata: c\n\nid\ndata: d\n\n"
    assert [e.id for e in feed_all(data) if isinstance(e, SSEEvent)] == ["1", "1", "1", ""]


def test_bom_is_skipped_even_when_split() -> None:
    data = b"\xef\xbb\xbfdata: x\n\n"
    assert feed_all(data) == one_byte_at_a_time(data) == [SSEEvent("message", "x", "")]
    # A partial BOM is not skipped: it makes the field name unknown, so no event.
    assert feed_all(b"\xef\xbbdata: x\n\n") == one_byte_at_a_time(b"\xef\xbbdata: x\n\n") == []
    # A BOM after the start is part of the line.
    assert feed_all(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEEvent("message", "a", "")]


def test_invalid_utf8_is_replaced() -> None:
    assert feed_all(b"data: \xff\xfe ok\n\n") == [SSEEvent("message", "\ufffd\ufffd ok", "")]


def test_incomplete_event_is_pending_not_dispatched() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n") == []
    assert decoder.has_pending()
    assert decoder.feed(b"\n") == [SSEEvent("message", "x", "")]
    assert not decoder.has_pending()


def test_oversized_event_is_rejected_once_and_parsing_resumes() -> None:
    big = b"data: " + b"x" * 200 + b"\n" + b"data: more\n\n"
    data = b"data: small\n\n" + big + b"data: after\n\n"
    expected = [
        SSEEvent("message", "small", ""),
        SSERejection("event-too-large", "an event exceeded 64 bytes and was dropped"),
        SSEEvent("message", "after", ""),
    ]
    assert feed_all(data, max_event_bytes=64) == expected
    assert one_byte_at_a_time(data, max_event_bytes=64) == expected


def test_oversized_line_without_terminator_is_not_buffered() -> None:
    decoder = SSEDecoder(max_event_bytes=1024)
    out = []
    for _ in range(100):
        out += decoder.feed(b"y" * 1000)
    assert len(out) == 1
    assert isinstance(out[0], SSERejection)
    assert len(decoder._partial) == 0  # nothing retained while discarding
    assert decoder.feed(b"\n\ndata: ok\n\n") == [SSEEvent("message", "ok", "")]


def test_huge_retry_value_is_ignored_not_raised() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry: " + b"9" * 10000 + b"\n\n")
    assert decoder.retry is None


# --- reference model and properties ----------------------------------------------------

_LINE = re.compile(rb"\r\n|\r|\n")


def reference(data: bytes) -> list[SSEEvent]:
    """A direct, non-incremental reading of the WHATWG algorithm (no size limit)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = _LINE.split(data)[:-1]  # the text after the last line end is incomplete
    events: list[SSEEvent] = []
    kind, last_id = "", ""
    buf: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if buf:
                events.append(SSEEvent(kind or "message", "\n".join(buf), last_id))
            kind, buf = "", []
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            buf.append(value)
        elif name == "event":
            kind = value
        elif name == "id" and "\x00" not in value:
            last_id = value
    return events


sse_text = st.lists(
    st.sampled_from(
        [
            b"data: ",
            b"data:",
            b"data",
            b"event: ",
            b"id: ",
            b": c",
            b"retry: 5",
            b"x",
            b"\xc3\xa9",
            b"\xff",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"\x00",
            b":",
            b" ",
        ]
    ),
    max_size=60,
).map(b"".join)


@given(sse_text, st.lists(st.integers(0, 400), max_size=8))
@settings(max_examples=400, deadline=None)
def test_matches_reference_at_any_split(data: bytes, splits: list[int]) -> None:
    expected = reference(data)
    assert feed_all(data) == expected
    assert feed_all(data, [s % (len(data) + 1) for s in splits]) == expected


@given(st.binary(max_size=512), st.lists(st.integers(0, 512), max_size=6), st.integers(1, 64))
@settings(max_examples=400, deadline=None)
def test_arbitrary_bytes_never_raise_and_splits_do_not_matter(
    data: bytes, splits: list[int], limit: int
) -> None:
    whole = feed_all(data, max_event_bytes=limit)
    assert feed_all(data, [s % (len(data) + 1) for s in splits], max_event_bytes=limit) == whole
    assert all(isinstance(item, SSEEvent | SSERejection) for item in whole)


@given(sse_text, st.integers(1, 40))
@settings(max_examples=300, deadline=None)
def test_bytewise_feeding_matches_whole_with_a_limit(data: bytes, limit: int) -> None:
    assert one_byte_at_a_time(data, max_event_bytes=limit) == feed_all(data, max_event_bytes=limit)
