"""UTF-8-safe cutting, shared by every part of tether that bounds text."""

from __future__ import annotations

ELLIPSIS = "…"


def cut_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of ``data`` of at most ``limit`` bytes that ends on a character boundary.

    If the byte at the cut is a continuation byte (0b10xxxxxx), the cut walks back to the
    character's lead byte (at most three steps). Invalid input is cut at the byte limit.
    """
    if len(data) <= limit:
        return data
    end = max(limit, 0)
    cut = end
    while cut > 0 and end - cut < 3 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    if (data[cut] & 0xC0) == 0x80:
        cut = end
    return data[:cut]


def to_utf8(text: str) -> tuple[bytes, bool]:
    """Encode ``text``; lone surrogates (not encodable) become U+FFFD. Returns (bytes, changed)."""
    try:
        return text.encode("utf-8"), False
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return raw.encode("utf-8"), True


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes; return it and whether it was changed.

    The result is always encodable: lone surrogates are replaced by U+FFFD.
    """
    raw, changed = to_utf8(text)
    if len(raw) <= limit:
        return (raw.decode("utf-8") if changed else text), changed
    return cut_utf8(raw, limit).decode("utf-8", "replace"), True


def first_line_summary(text: str, limit: int) -> str:
    """The first line of ``text``, cut to ``limit`` bytes with an ellipsis when it was cut."""
    line = text.split("\n", 1)[0].rstrip("\r")
    if not cut_text(line, limit)[1]:
        return line
    room = limit - len(ELLIPSIS.encode())
    return cut_text(line, max(room, 0))[0] + ELLIPSIS
