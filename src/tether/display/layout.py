"""Small text helpers for the human renderer: cell widths, fitting, durations, usage."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from typing import Final

ELLIPSIS: Final = "…"


def char_cells(char: str) -> int:
    """Terminal cells one character takes: 2 for wide East Asian, 0 for combining marks."""
    if char < "\u0300":
        return 1
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """Terminal cells ``text`` takes on one line."""
    if text.isascii():
        return len(text)
    return sum(char_cells(c) for c in text)


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, ending in an ellipsis when it was cut."""
    if width <= 0:
        return ""
    if text.isascii() and len(text) <= width:
        return text
    if cells(text) <= width:
        return text
    room = width - 1
    used = 0
    for index, char in enumerate(text):
        used += char_cells(char)
        if used > room:
            return text[:index] + ELLIPSIS
    return text


def duration(seconds: float) -> str:
    """``4.2s``, ``2m05s``, ``1h02m``."""
    if not seconds >= 0:  # also catches NaN
        seconds = 0.0
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


# (label, the keys it may have: bash-agent's, the wire's, tether's Usage.to_wire()).
_USAGE_KEYS: Final = (
    ("in", ("input_tokens", "input")),
    ("out", ("output_tokens", "output")),
    ("cache read", ("cache_read_input_tokens", "cache-read", "cache_read")),
    ("cache write", ("cache_creation_input_tokens", "cache-write", "cache_write")),
)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if math.isfinite(value) and abs(value) < 2**63 else None


def usage_counts(usage: Mapping[str, object] | None) -> list[tuple[str, int]]:
    """(label, count) pairs of a usage object: bash-agent's or the wire's key names.

    Input and output are always listed (0 when absent) once anything is known; the cache
    counts only when they are non-zero.
    """
    if not usage:
        return []
    pairs: list[tuple[str, int]] = []
    for label, keys in _USAGE_KEYS:
        value = next((v for k in keys if (v := _count(usage.get(k))) is not None), None)
        if label in ("in", "out"):
            pairs.append((label, value or 0))
        elif value:
            pairs.append((label, value))
    return pairs


def usage_text(usage: Mapping[str, object] | None) -> str:
    """``240 in · 60 out · 10 cache read``; empty when nothing is known."""
    return " · ".join(f"{count} {label}" for label, count in usage_counts(usage))
