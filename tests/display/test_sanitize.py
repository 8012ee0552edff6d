"""Agent text never reaches the terminal with control sequences in it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.display.sanitize import MAX_CARRY, StreamSanitizer, escape_c1_json, sanitize

UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text\twith tab\nand newline", "plain text\twith tab\nand newline"),
        ("a\x1b[31mred\x1b[0m", "ared"),
        ("\x1b[?1049h\x1b[2J\x1b[Hwiped", "wiped"),  # alternate screen, clear, home
        ("t\x1b]0;pwned\x07x", "tx"),  # OSC title, BEL-terminated
        ("t\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\x", "tlinkx"),  # OSC 8, ST-terminated
        ("a\x1bP+q544e\x1b\\b", "ab"),  # DCS (XTGETTCAP)
        ("a\x1b_hidden\x1b\\b", "ab"),  # APC
        ("a\x1b]52;c;c2VjcmV0", "a"),  # unterminated OSC 52 clipboard write
        ("a\x9b2Jb", "ab"),  # 8-bit CSI
        ("a\x9d0;t\x9cb", "ab"),  # 8-bit OSC and ST
        ("a\x1b(0b\x1b(B", "ab"),  # charset switch (line drawing)
        ("a\x1bcb", "ab"),  # RIS: full reset
        ("a\x1b7b\x1b8", "ab"),  # save / restore cursor
        ("line\r\nnext", "line\nnext"),
        ("progress 10%\rprogress 20%", "progress 10%progress 20%"),
        ("bell\x07 nul\x00 bs\x08 del\x7f vt\x0b ff\x0c", "bell nul bs del vt ff"),
        ("trailing escape\x1b", "trailing escape"),
        ("é ✓ 日本 \u200b", "é ✓ 日本 \u200b"),
    ],
)
def test_sanitize(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_clean_text_is_returned_as_is() -> None:
    text = "nothing to strip here\n" * 10
    assert sanitize(text) is text


def test_stream_holds_back_a_split_sequence() -> None:
    s = StreamSanitizer()
    out = [s.feed(c) for c in ("ab\x1b", "[3", "1mc\x1b]0;t", "itle\x1b", "\\ok\r", "\nend")]
    assert out == ["ab", "", "c", "", "ok", "\nend"]
    assert s.flush() == ""


def test_stream_carry_is_bounded() -> None:
    s = StreamSanitizer()
    out = s.feed("a\x1b]0;" + "x" * (2 * MAX_CARRY))
    assert out == "a"
    assert s.feed("visible") == "visible"


_ALPHABET = st.sampled_from(list("ab \n\t\r\x1b[]()0;m?P_\\\x07\x9b\x9c\x9d\x00\x7féあ"))


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=80).map("".join), st.lists(st.integers(0, 80), max_size=6))
def test_stream_equals_whole(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    s = StreamSanitizer()
    streamed = "".join(s.feed(p) for p in pieces) + s.flush()
    assert streamed == sanitize(text)
    assert UNSAFE.search(streamed) is None


@given(st.text())
def test_sanitize_output_is_safe(text: str) -> None:
    assert UNSAFE.search(sanitize(text)) is None


def test_escape_c1_json_keeps_the_value() -> None:
    import json

    line = json.dumps({"t": "a\x9b2J\x7fb"}, ensure_ascii=False)
    escaped = escape_c1_json(line)
    assert UNSAFE.search(escaped) is None
    assert json.loads(escaped) == json.loads(line)
