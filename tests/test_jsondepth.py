"""tether.jsondepth: the depth check every untrusted JSON decoder goes through."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import jsondepth
from tether.jsondepth import MAX_JSON_DEPTH, TooDeep, check_depth


def depth_of(value: Any) -> int:
    """The nesting depth of a decoded value, without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, list | dict):
            level += 1
            deepest = max(deepest, level)
            stack.extend((v, level) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


# Strings full of brackets, quotes and backslashes: they must never count as nesting.
tricky_text = st.text(alphabet='[]{}"\\ax\n', max_size=6)
json_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=12))
def test_the_check_agrees_with_the_real_depth(value: Any, limit: int) -> None:
    text = json.dumps(value)
    deep = depth_of(value) > limit
    for data in (text, text.encode()):
        if deep:
            with pytest.raises(TooDeep):
                check_depth(data, limit)
        else:
            check_depth(data, limit)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_to_a_value_or_a_decode_error(data: bytes) -> None:
    with contextlib.suppress(msgspec.DecodeError):
        jsondepth.decode_any(data, limit=4)
    with contextlib.suppress(ValueError):
        jsondepth.loads(data, limit=4)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b"[" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"id":1,"params":' + b"[" * 100_000,
        b'[{"x": [' * 40_000,
    ],
    ids=["balanced", "unclosed", "objects", "frame", "mixed"],
)
def test_100000_deep_is_refused_before_any_recursion(data: bytes) -> None:
    with pytest.raises(TooDeep, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        jsondepth.decode_any(data)
    with pytest.raises(ValueError, match="deeper than"):
        jsondepth.loads(data.decode())


def test_the_limit_itself_is_accepted() -> None:
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert depth_of(jsondepth.loads(at_limit)) == MAX_JSON_DEPTH
    with pytest.raises(TooDeep):
        jsondepth.loads("[" + at_limit + "]")


def test_brackets_inside_strings_are_text() -> None:
    text = json.dumps(["[" * 10_000, "{" * 10_000, '\\"[[['])
    assert len(jsondepth.loads(text)) == 3
    plain = json.dumps(["[" * 10_000, {"k": "{" * 10_000}] * 100)  # no escapes: the split path
    assert "\\" not in plain
    assert len(jsondepth.loads(plain)) == 200
    assert len(jsondepth.decode_any(plain.encode())) == 200


def test_malformed_but_shallow_is_left_to_the_parser() -> None:
    for data in (b"]" * 100_000, b"[}" * 50_000, b"[1,2" + b"]]" * 1000):
        check_depth(data)  # no TooDeep: the parser rejects these at once
        with pytest.raises(msgspec.DecodeError):
            jsondepth.decode_any(data)


def test_no_module_parses_json_around_the_depth_check() -> None:
    """Every ``json.loads`` / ``msgspec.json.decode`` in src goes through tether.jsondepth."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "tether"
    bare = re.compile(r"(?<![\w.])json\.loads\(|msgspec\.json\.decode\(")
    offenders = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "jsondepth.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert offenders == []
