"""Depth-checked JSON decoding: one helper for every decoder that reads untrusted input.

msgspec and the stdlib parser recurse once per nesting level and raise ``RecursionError``
somewhere between a few hundred and a thousand levels, depending on how deep the caller's
own stack already is. So the depth is checked first, without recursion, and a value
nested deeper than :data:`MAX_JSON_DEPTH` is refused with :class:`TooDeep`, a
``msgspec.DecodeError`` (hence a ``ValueError``): every caller's existing "not JSON"
branch answers it with its normal code.

Theory of the scan (every pass runs in C, none per byte in Python):

1. At most ``limit`` opening brackets in all: nothing to do (the common case). They are
   counted by jumping from one to the next in C (memchr), giving up past ``limit``, so a
   line with few brackets costs a memchr pass or two whatever its size.
2. Remove the strings (a bracket inside a string is text), then every byte but brackets,
   writing ``(`` for ``[``/``{`` and ``)`` for ``]``/``}``: the depth of a prefix does not
   depend on the bracket kinds. Escapes go first: ``\\\\`` pairs, then ``\\"`` (two
   ``replace`` calls pair a run of backslashes from its left, as a parser does), after which
   every quote opens or closes a string. The rest is done one ``SCAN_SLICE`` at a time
   (split at the quotes, keep what lies outside strings, keep only its brackets), so the
   scan holds a few copies of the data whatever it holds (one split of a whole line of
   many short strings, ``[{"a":1},...]``, made a piece per string: ~30x the line).
3. Delete the adjacent ``()`` pairs, once per level (``bytes.replace`` does not match the
   pairs its own deletions create): after ``k`` passes every subtree at most ``k`` deep
   is gone, so a value still standing after ``limit`` passes is deeper than ``limit``.
4. A remainder that stops shrinking first reads ``)...)(...(`` and is not valid JSON.
   A leading ``)`` is where a parser stops, at a depth of at most the passes made;
   otherwise it is that many unclosed brackets, on top of what the passes removed.

Invalid JSON may be over-counted (then it is refused as too deep rather than as
malformed), never under-counted: a parser stops at its first error, and up to there
its strings and ours agree.
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeVar

import msgspec

from tether.errors import TetherError

__all__ = [
    "MAX_JSON_DEPTH",
    "SCAN_SLICE",
    "SHALLOW_BELOW",
    "TooDeep",
    "TooMany",
    "check_depth",
    "decode",
    "decode_any",
    "few_openers",
    "loads",
]

MAX_JSON_DEPTH: Final = 128
"""The deepest nesting of arrays and objects any tether decoder accepts."""

SHALLOW_BELOW: Final = 2 * (MAX_JSON_DEPTH + 1)
"""Valid JSON shorter than this (bytes or characters) nests at most MAX_JSON_DEPTH deep.

Each level costs an opening and a closing bracket, so a decoder that refuses invalid
JSON may skip the depth check for such input: whatever it accepts is shallow enough,
and what it refuses it has recursed into at most this many levels.
"""

T = TypeVar("T")

SCAN_SLICE: Final = 65536
"""Bytes split at their quotes at a time by the depth scan (bounds its pieces)."""
_ANY: Final = msgspec.json.Decoder()
_OPEN: Final = ord("(")
_AS_PARENS: Final = bytes.maketrans(b"[{]}", b"(())")
_OPENERS_B: Final = (b"[", b"{")
_OPEN_ARRAY: Final = ord("[")
_OPEN_OBJECT: Final = ord("{")
_OPENERS_S: Final = ("[", "{")
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")


class TooDeep(TetherError, msgspec.DecodeError):
    """JSON nested deeper than the limit; raised before any recursive decoding."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


class TooMany(TetherError, msgspec.DecodeError):
    """JSON holding more arrays and objects than the limit; raised before decoding (each
    decoded container costs ~250 bytes: a 16 MiB line of ``{}`` would be ~500 MB)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON holds more than {limit} arrays and objects")
        self.limit = limit


def check_depth(
    data: bytes | bytearray | memoryview | str,
    limit: int = MAX_JSON_DEPTH,
    *,
    max_containers: int | None = None,
) -> None:
    """Raise :class:`TooDeep` when ``data`` nests arrays/objects deeper than ``limit``, and
    :class:`TooMany` when it holds more than ``max_containers`` (at least ``limit``) of
    them outside strings (None: any number)."""
    if len(data) <= limit:  # each level takes an opening bracket: it cannot be deeper
        return
    if isinstance(data, str):
        if _few_openers(data, _OPENERS_S, limit):
            return
        raw = data.encode("utf-8", "surrogatepass")  # multi-byte UTF-8 holds no ASCII
    else:
        raw = data if type(data) is bytes else bytes(data)
        if few_openers(raw, limit):
            return
    brackets = _brackets_outside_strings(raw)
    if max_containers is not None and brackets.count(_OPEN) > max_containers:
        raise TooMany(max_containers)
    if _deeper_than(brackets, limit):
        raise TooDeep(limit)


def _brackets_outside_strings(raw: bytes) -> bytes:
    """The brackets of ``raw`` that lie outside strings, as ``(`` and ``)`` (step 2)."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    out = []
    inside = False  # whether the slice starts inside a string
    for start in range(0, len(raw), SCAN_SLICE):
        pieces = raw[start : start + SCAN_SLICE].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[::2])
        out.append(outside.translate(_AS_PARENS, _NOT_BRACKETS))
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes flips it
    return b"".join(out)


def few_openers(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """At most ``limit`` opening brackets in ``data``, so it cannot nest deeper than that."""
    # Most lines hold one object and nothing nested. `int in bytes` is a bare memchr;
    # bytes.find parses its arguments the slow, legacy way (~700 instructions a call).
    if limit >= 1 and _OPEN_ARRAY not in data and _OPEN_OBJECT not in data[1:]:
        return True
    return _few_openers(data, _OPENERS_B, limit)


def _few_openers(data: Any, openers: tuple[Any, Any], limit: int) -> bool:
    """At most ``limit`` of ``openers`` in ``data``: ``find`` jumps to each in C."""
    left = limit
    for opener in openers:
        at = data.find(opener)
        while at >= 0:
            left -= 1
            if left < 0:
                return False
            at = data.find(opener, at + 1)
    return True


def _deeper_than(brackets: bytes, limit: int) -> bool:
    done = 0
    while brackets:
        if done == limit:
            return True
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):
            return shorter[0] == _OPEN and len(shorter) + done > limit
        brackets, done = shorter, done + 1
    return False


def decode(
    decoder: msgspec.json.Decoder[T],
    data: bytes | bytearray | memoryview | str,
    limit: int = MAX_JSON_DEPTH,
) -> T:
    """``decoder.decode(data)`` after the depth check (raises ``msgspec.DecodeError``)."""
    check_depth(data, limit)
    return decoder.decode(data)


def decode_any(
    data: bytes | bytearray | memoryview | str,
    limit: int = MAX_JSON_DEPTH,
    *,
    max_containers: int | None = None,
) -> Any:
    """``msgspec.json.decode(data)`` after the depth check (raises ``msgspec.DecodeError``)."""
    check_depth(data, limit, max_containers=max_containers)
    return _ANY.decode(data)


def loads(data: bytes | bytearray | str, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(data)`` after the depth check (raises ``ValueError``)."""
    check_depth(data, limit)
    return json.loads(data)
