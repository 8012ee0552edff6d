"""The line splitter as the inbox drain uses it: fed in chunks, read whole, restarted.

The inbox allows a line of exactly its limit, so it passes ``max_line_bytes = limit + 1``;
here ``limit`` is that largest legal length.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.wire.lines import HEAD_BYTES, LineSplitter, TooLarge

Item = tuple[str, int, bytes]


def feed_all(splitter: LineSplitter, chunks: list[bytes]) -> list[Item]:
    out: list[Item] = []
    for chunk in chunks:
        splitter.feed(chunk)
        for item in splitter.read_all():
            kind = "long" if type(item) is TooLarge else "line"
            out.append((kind, item[0], item[1]))
    return out


def splitter_for(limit: int, **kw: int | bool) -> LineSplitter:
    return LineSplitter(max_line_bytes=limit + 1, **kw)  # type: ignore[arg-type]


def reference(data: bytes, max_line: int, start: int = 0) -> list[Item]:
    """What the splitter must produce, computed the obvious way."""
    out: list[Item] = []
    offset = start
    *lines, tail = data.split(b"\n")
    for piece in lines:
        if len(piece) > max_line:
            out.append(("long", offset, piece[:HEAD_BYTES]))
        else:
            out.append(("line", offset, piece))
        offset += len(piece) + 1
    if len(tail) > max_line:  # reported as soon as it is known to be too long
        out.append(("long", offset, tail[:HEAD_BYTES]))
    return out


DATA = b'{"type":"progress","text":"a"}\n\n{"x":1}\nnot json\n{"tail":'


@pytest.mark.parametrize("mode", ["whole", "bytewise", "pairs"])
def test_lines_and_offsets(mode: str) -> None:
    chunks = {
        "whole": [DATA],
        "bytewise": [DATA[i : i + 1] for i in range(len(DATA))],
        "pairs": [DATA[i : i + 2] for i in range(0, len(DATA), 2)],
    }[mode]
    splitter = LineSplitter()
    assert feed_all(splitter, chunks) == reference(DATA, 1 << 20)
    assert splitter.held == len(b'{"tail":')
    assert splitter.offset == DATA.rindex(b"\n") + 1
    assert splitter.fed == len(DATA)
    # the partial trailing line is completed later
    assert feed_all(splitter, [b"1}\n"]) == [("line", DATA.rindex(b"\n") + 1, b'{"tail":1}')]
    assert splitter.offset == splitter.fed == len(DATA) + 3


def test_trailing_garbage_without_newline_is_held_not_reported() -> None:
    splitter = LineSplitter()
    assert feed_all(splitter, [b"\x00\xff garbage"]) == []
    assert splitter.offset == 0
    assert splitter.held == 10


def test_starting_offset_is_reported() -> None:
    splitter = LineSplitter(offset=1000)
    assert feed_all(splitter, [b"a\nbb\n"]) == [("line", 1000, b"a"), ("line", 1002, b"bb")]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_over_long_lines_are_reported_once_and_skipped(chunk: int) -> None:
    data = b"ok\n" + b"L" * 50 + b"\nfine\n" + b"M" * 11 + b"\n" + b"N" * 10 + b"\n"
    splitter = splitter_for(10)
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    got = feed_all(splitter, pieces)
    assert [(k, o) for k, o, _ in got] == [(k, o) for k, o, _ in reference(data, 10)]
    assert splitter.held <= 10
    assert not splitter.skipping
    assert splitter.offset == len(data)


def test_an_over_long_line_is_never_held_whole() -> None:
    splitter = splitter_for(100)
    got = feed_all(splitter, [b"x" * 60, b"x" * 60])  # over the limit, no newline yet
    assert got == [("long", 0, b"x" * 120)]
    assert splitter.skipping
    assert splitter.held == 0
    assert splitter.offset == 120  # a restart need not rescan the skipped bytes
    for _ in range(100):
        assert feed_all(splitter, [b"y" * 1000]) == []
        assert splitter.held == 0
    assert feed_all(splitter, [b"zz\nnext\n"]) == [("line", 100_123, b"next")]


def test_a_skip_survives_a_restart() -> None:
    first = splitter_for(8)
    assert feed_all(first, [b"abcdefghijk"]) == [("long", 0, b"abcdefghijk")]
    resumed = splitter_for(8, offset=first.offset, skipping=first.skipping)
    assert feed_all(resumed, [b"lmn\nok\n"]) == [("line", 15, b"ok")]


def test_a_line_of_exactly_the_limit_is_accepted() -> None:
    splitter = splitter_for(5)
    got = feed_all(splitter, [b"12345\n123456\n"])
    assert got == [("line", 0, b"12345"), ("long", 6, b"123456")]


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="offset"):
        LineSplitter(offset=-1)
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineSplitter(max_line_bytes=0)


@given(
    st.lists(st.sampled_from([b"a", b"bb", b"\n", b"ccccccc", b"{}", b"\n\n"]), max_size=40),
    st.integers(min_value=1, max_value=9),
    st.integers(min_value=1, max_value=12),
)
def test_any_chunking_gives_the_reference_split(
    parts: list[bytes], chunk: int, max_line: int
) -> None:
    data = b"".join(parts)
    splitter = splitter_for(max_line)
    got = feed_all(splitter, [data[i : i + chunk] for i in range(0, len(data), chunk)])
    expected = reference(data, max_line)
    # a line found too long before its end was seen has a shorter head
    assert [(k, o) for k, o, _ in got] == [(k, o) for k, o, _ in expected]
    for (_, _, head), (_, _, full) in zip(got, expected, strict=True):
        assert full.startswith(head)
        assert len(head) >= min(len(full), max_line + 1)
    last_newline = data.rfind(b"\n") + 1
    if not splitter.skipping:
        assert splitter.offset == last_newline
        assert splitter.held == len(data) - last_newline
