"""The first try of ``decode`` (byte lines, no full depth scan) agrees with the checked path.

``decode`` skips the depth scan for byte lines shorter than ``jsondepth.SHALLOW_BELOW``
or with at most the limit's count of opening brackets: such valid JSON cannot nest deeper
than the limit. Every input here goes through
both ``decode`` and the path that always scans first (``codec._decode_checked``), and the
two must return equal values: the same message, or the same rejection.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import jsondepth
from tether.wire import Code, Rejection, codec, decode
from tether.wire.messages import EVENT_TYPES

DIRECTIONS = st.sampled_from(["event", "control"])
ENVELOPE = {"v": 1, "seq": 3, "run": "r"}


def agree(line: bytes, direction: str) -> Any:
    fast = decode(line, direction)
    assert fast == codec._decode_checked(line, direction), line
    return fast


def nested(depth: int, leaf: str = "1") -> str:
    """A JSON value ``depth`` levels deep, arrays and objects alternating."""
    text = leaf
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=jsondepth.SHALLOW_BELOW + 20), DIRECTIONS)
def test_arbitrary_bytes(line: bytes, direction: str) -> None:
    agree(line, direction)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.integers(0, 140), st.integers(0, 140), DIRECTIONS)
def test_long_lines_with_brackets_around_the_count(
    tail: bytes, arrays: int, objects: int, direction: str
) -> None:
    padding = "x" * jsondepth.SHALLOW_BELOW
    head = f'{{"v":1,"seq":1,"type":"tool-call","run":"r","name":"{padding}","arguments":'
    value = "[" * arrays + '{"a":' * objects + "1" + "}" * objects + "]" * arrays
    for line in (f"{head}{value}}}".encode(), f"{head}{value}".encode() + tail):
        result = agree(line, direction)
        if arrays + objects + 1 > jsondepth.MAX_JSON_DEPTH:
            assert isinstance(result, Rejection)


escaped_text = st.text(alphabet='aé€\U0001f600"\\\n\x00[]{}', max_size=12)


@settings(max_examples=400, deadline=None)
@given(escaped_text, st.booleans(), st.sampled_from(sorted(EVENT_TYPES)), DIRECTIONS)
def test_escaped_and_utf8_lines(text: str, ascii_only: bool, kind: str, direction: str) -> None:
    obj = {**ENVELOPE, "type": kind, "text": text, "delta": text, "name": text, "final?": True}
    line = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    agree(line, direction)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=1, max_value=140),
    st.sampled_from(["arguments", "usage", "unknown-member", "result"]),
    st.sampled_from(["tool-call", "tool-result", "llm-end", "info", "prompt"]),
    st.integers(min_value=0, max_value=8),
    DIRECTIONS,
)
def test_deep_nesting_on_both_sides_of_the_limit_and_the_length(
    depth: int, member: str, kind: str, cut: int, direction: str
) -> None:
    head = json.dumps({**ENVELOPE, "type": kind, "name": "n", "is-error?": False})[:-1]
    whole = f'{head},"{member}":{nested(depth)}}}'.encode()
    for line in (whole, whole[: len(whole) - cut]):  # also unclosed (invalid) prefixes
        result = agree(line, direction)
        if depth + 1 > jsondepth.MAX_JSON_DEPTH:
            assert isinstance(result, Rejection)
            assert result.code == Code.MALFORMED


def test_the_shortest_line_deeper_than_the_limit_is_refused() -> None:
    limit = jsondepth.MAX_JSON_DEPTH
    line = ("[" * (limit + 1) + "]" * (limit + 1)).encode()
    assert len(line) == jsondepth.SHALLOW_BELOW
    result = agree(line, "event")
    assert isinstance(result, Rejection)
    assert "deeper than 128" in result.reason
    # one byte shorter cannot be valid JSON that deep: refused as malformed anyway
    assert agree(line[:-1], "event").code == Code.MALFORMED


def test_a_valid_message_just_under_the_length_is_accepted_at_its_real_depth() -> None:
    head = '{"v":1,"seq":1,"type":"tool-call","run":"r","name":"n","arguments":'
    depth = (jsondepth.SHALLOW_BELOW - len(head) - 2) // 2
    line = f"{head}{'[' * depth}{']' * depth}}}".encode()
    assert len(line) < jsondepth.SHALLOW_BELOW
    message = agree(line, "event")
    assert not isinstance(message, Rejection)
    value: Any = message.arguments  # type: ignore[union-attr]
    for _ in range(depth - 1):
        value = value[0]
    assert value == []


def test_a_caller_near_its_recursion_limit_gets_a_rejection() -> None:
    line = f'{{"v":1,"seq":1,"type":"tool-call","run":"r","name":"n","arguments":{nested(60)}}}'
    results: list[object] = []

    def descend(levels: int) -> None:
        if levels > 0:
            descend(levels - 1)
            return
        for data in (line.encode(), line.encode() + b" " * 300):  # first try and checked
            results.append(decode(data, "event"))

    depth = 0
    frame = sys._getframe()
    while frame.f_back is not None:
        frame, depth = frame.f_back, depth + 1
    descend(sys.getrecursionlimit() - depth - 40)
    assert len(results) == 2
    for result in results:
        assert isinstance(result, Rejection), result
        assert result.code == Code.MALFORMED


def test_other_line_types_skip_the_first_try_and_agree() -> None:
    line = msgspec.json.encode({**ENVELOPE, "type": "ready"})
    want = decode(line, "event")
    assert not isinstance(want, Rejection)
    for data in (bytearray(line), memoryview(line), line.decode()):
        assert decode(data, "event") == want
    assert decode(line, "sideways") == Rejection(
        code=Code.INVALID, reason="unknown direction: sideways"
    )


# -- validate's first try (a dict converted straight into its message type's Struct) --------

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.5, float("nan"), float("inf"), 2.0**60, 9007199254740992]),
    escaped_text,
    st.lists(st.integers(-2, 3), max_size=3),
    st.dictionaries(st.sampled_from(["input", "output", "x"]), st.integers(0, 3), max_size=2),
)
MEMBERS = st.sampled_from(
    ["text", "delta", "name", "id", "ref", "final?", "content-index", "status", "usage",
     "summary", "arguments", "refs", "turn", "is-error?", "stop-reason", "timestamp", "v",
     "seq", "run", "reason", "other"]
)  # fmt: skip


def agree_validate(obj: dict[str, Any], direction: str) -> Any:
    fast = codec.validate(obj, direction)
    assert fast == codec._validate_object(dict(obj), direction), obj
    return fast


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from([*sorted(EVENT_TYPES), "prompt", "follow-up", "close", "nope"]),
    st.dictionaries(MEMBERS, values, max_size=6),
    DIRECTIONS,
)
def test_validate_first_try_agrees_with_the_staged_checks(
    kind: str, members: dict[str, Any], direction: str
) -> None:
    """The first try only ever accepts what the staged checks accept, as the same message;
    everything else (refusals, integral floats where an integer is due) is theirs."""
    agree_validate({**ENVELOPE, "type": kind, **members}, direction)
    agree_validate({**members, **ENVELOPE, "type": kind}, direction)


def test_validate_first_try_takes_valid_display_events_and_leaves_the_rest() -> None:
    ok = agree_validate({**ENVELOPE, "type": "follow-up-injected", "text": "x", "ref": 2}, "event")
    assert not isinstance(ok, Rejection)
    assert ok.ref == 2  # type: ignore[union-attr]
    # an integral float where an integer is due: the staged checks accept and convert it
    floats = agree_validate({**ENVELOPE, "seq": 3.0, "type": "turn-started", "turn": 2.0}, "event")
    assert not isinstance(floats, Rejection)
    assert (floats.seq, floats.turn) == (3, 2)  # type: ignore[union-attr]
    # an ack without ref that is not a rejection: refused with the staged checks' reason
    ack = agree_validate({**ENVELOPE, "type": "control-ack", "status": "accepted"}, "event")
    assert isinstance(ack, Rejection)
    assert ack.code == Code.INVALID_PAYLOAD
    for odd in ([1], {"a": 1}, None):  # an unhashable or missing type cannot break it
        assert isinstance(agree_validate({**ENVELOPE, "type": odd}, "event"), Rejection)


PRIME_PROBE = """
import builtins, sys
import msgspec
from tether.wire import codec
from tether.wire.messages import EVENT_TYPES
if sys.argv[1] == "prime":
    codec.prime()
compiled = []
real = builtins.compile
builtins.compile = lambda *a, **k: compiled.append(a) or real(*a, **k)
for kind, cls in EVENT_TYPES.items():
    try:
        msgspec.convert({"v": 1, "seq": 1, "run": "r", "type": kind}, cls)
    except (msgspec.ValidationError, ValueError):
        pass
print(len(compiled))
"""


@pytest.mark.parametrize("prime", ["prime", "no"])
def test_after_prime_no_message_type_evaluates_annotations(prime: str) -> None:
    """What the fork server's template does once: afterwards a child's first line of any
    type compiles nothing (msgspec read every class's fields already); a fresh process
    without it evaluates the classes' annotations on first use."""
    done = subprocess.run(
        [sys.executable, "-c", PRIME_PROBE, prime], capture_output=True, text=True, check=True
    )
    compiled = int(done.stdout)
    assert compiled == 0 if prime == "prime" else compiled > 0
