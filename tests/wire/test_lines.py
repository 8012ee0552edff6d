from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.wire.lines import Line, LineSplitter, TooLarge


def _drain(splitter: LineSplitter) -> list[Line | TooLarge]:
    out: list[Line | TooLarge] = []
    while batch := splitter.read():
        out.extend(batch)
    return out


def _feed_in(data: bytes, cuts: list[int], **kw: int) -> list[Line | TooLarge]:
    splitter = LineSplitter(**kw)
    out: list[Line | TooLarge] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        splitter.feed(data[last:cut])
        last = cut
        out.extend(_drain(splitter))
    return out


def test_whole_and_byte_by_byte_agree() -> None:
    data = b'{"a":1}\n\n{"b":"x\\ny"}\npartial'
    whole = _feed_in(data, [])
    bytewise = _feed_in(data, list(range(len(data))))
    assert whole == bytewise
    assert [i.data for i in whole if isinstance(i, Line)] == [b'{"a":1}', b"", b'{"b":"x\\ny"}']
    assert [i.offset for i in whole] == [0, 8, 9]


def test_partial_line_waits_for_its_newline() -> None:
    splitter = LineSplitter()
    splitter.feed(b"abc")
    assert splitter.read() == []
    splitter.feed(b"def\n")
    assert splitter.read() == [Line(0, b"abcdef")]
    assert splitter.offset == 7


def test_read_budgets() -> None:
    splitter = LineSplitter(budget_lines=64, budget_bytes=65536)
    splitter.feed(b"x\n" * 200)
    sizes = []
    while batch := splitter.read():
        sizes.append(len(batch))
    assert sizes == [64, 64, 64, 8]
    splitter.feed((b"y" * 40000 + b"\n") * 3)
    assert [len(b) for b in iter(splitter.read, [])] == [1, 1, 1]


def test_too_large_line_is_reported_once_and_skipped() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    splitter.feed(b"ok\n" + b"z" * 25)
    splitter.feed(b"z" * 1000)
    assert splitter._partial == bytearray()  # never buffered
    splitter.feed(b"zz\nnext\n")
    items = _drain(splitter)
    assert items == [Line(0, b"ok"), TooLarge(3, b"z" * 25), Line(1031, b"next")]


def test_exact_limit_is_too_large() -> None:
    items = _feed_in(b"a" * 10 + b"\n" + b"b" * 9 + b"\n", [], max_line_bytes=10)
    assert items == [TooLarge(0, b"a" * 10), Line(11, b"b" * 9)]


@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b), max_size=20), st.data())
def test_any_split_gives_the_same_lines(lines: list[bytes], data: st.DataObject) -> None:
    blob = b"".join(line + b"\n" for line in lines)
    cuts = data.draw(st.lists(st.integers(0, len(blob)), max_size=10))
    items = _feed_in(blob, cuts, max_line_bytes=30)
    expected = [line for line in lines if len(line) < 30]
    assert [i.data for i in items if isinstance(i, Line)] == expected
    assert sum(isinstance(i, TooLarge) for i in items) == len(lines) - len(expected)


@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b), max_size=20))
def test_a_line_a_feed_agrees_with_one_feed(lines: list[bytes]) -> None:
    # One whole line per feed takes the splitter's short cut; it must hand out the same
    # items, offsets and resume point as one feed of everything (too-large lines too).
    blob = b"".join(line + b"\n" for line in lines)
    whole = _feed_in(blob, [], max_line_bytes=30)
    splitter = LineSplitter(max_line_bytes=30)
    out: list[Line | TooLarge] = []
    end = 0
    for line in lines:
        splitter.feed(line + b"\n")
        end += len(line) + 1
        out.extend(_drain(splitter))
        assert splitter.offset == end
    assert out == whole
