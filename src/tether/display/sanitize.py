"""Make agent text safe to put on a terminal.

Theory of operation: an agent must not be able to drive the user's terminal (move the
cursor, change the title, redefine keys, switch character sets, hide text). Everything a
terminal interprets is stripped: escape sequences introduced by ESC (CSI, OSC, DCS, SOS,
PM, APC and the short two- and three-byte forms) or by their 8-bit C1 forms, and every
other C0/C1 control character and DEL. ``\\n`` and ``\\t`` stay; ``\\r\\n`` becomes ``\\n``
and a lone ``\\r`` is dropped (it would let text overwrite the line it sits on).

A string sequence (OSC, DCS, ...) ends at BEL or ST; an unterminated one is removed up to
the next ESC or the end of the text. Clean text (the common case) is returned unchanged
after one regex scan.

:class:`StreamSanitizer` does the same for text that arrives in chunks: a sequence split
across two chunks is held back (at most :data:`MAX_CARRY` characters) until it is complete,
so the second half never shows up as literal text. Either way nothing that reaches the
terminal can contain a control character other than ``\\n`` and ``\\t``.

:func:`escape_c1_json` is for JSON lines shown on a terminal: JSON allows raw C1 controls
and DEL inside strings, so they are rewritten as ``\\uXXXX`` escapes (the same JSON value).
"""

from __future__ import annotations

import re
from typing import Final

# Any character this module removes or rewrites. ESC is \x1b; C1 is \x80-\x9f.
_UNSAFE: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_SEQUENCE: Final = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\)?"  # strings
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # other ESC sequences (charset, keypad, reset, ...)
    r"|\r\n"
)
# A sequence that is still incomplete at the end of a chunk.
_INCOMPLETE_TAIL: Final = re.compile(
    r"(?:(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*\x1b?"
    r"|\x1b[\x20-\x2f]*"
    r"|\r)\Z"
)
_C1_OR_DEL: Final = re.compile(r"[\x7f-\x9f]")

MAX_CARRY: Final = 256
"""Longest incomplete sequence a :class:`StreamSanitizer` holds back between chunks."""


def _replace_sequence(match: re.Match[str]) -> str:
    return "\n" if match.group() == "\r\n" else ""


def sanitize(text: str) -> str:
    """``text`` without escape sequences or control characters other than newline and tab."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub("", _SEQUENCE.sub(_replace_sequence, text))


class StreamSanitizer:
    """:func:`sanitize` for one stream of chunks (one per run and block being streamed)."""

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = ""

    def feed(self, chunk: str) -> str:
        """The safe text of ``chunk``, holding back an incomplete sequence at its end."""
        text = self._carry + chunk
        self._carry = ""
        if _UNSAFE.search(text) is None:
            return text
        tail = _INCOMPLETE_TAIL.search(text)
        if tail is not None and len(text) - tail.start() <= MAX_CARRY:
            self._carry = text[tail.start() :]
            text = text[: tail.start()]
        return sanitize(text)

    def flush(self) -> str:
        """End of the stream: whatever was held back, made safe (usually nothing)."""
        text, self._carry = self._carry, ""
        return sanitize(text)


def escape_c1_json(line: str) -> str:
    """A JSON line with raw DEL and C1 characters written as ``\\u`` escapes.

    Only valid for JSON text (such characters can only occur inside strings there, where
    the escape denotes the same character).
    """
    if _C1_OR_DEL.search(line) is None:
        return line
    return _C1_OR_DEL.sub(lambda m: f"\\u{ord(m.group()):04x}", line)
