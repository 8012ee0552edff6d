"""Token usage as the wire carries it: counter name -> non-negative integer.

A child reports each turn's usage on ``turn-complete`` and the run's on ``result``;
whoever totals them (the child, the daemon's agent) adds with :func:`add_usage`, which
keeps only well-formed counts, so a hostile or buggy peer cannot poison a total.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["add_usage", "clean_usage"]


def clean_usage(usage: Mapping[str, object]) -> dict[str, int]:
    """The well-formed counts of ``usage``: string keys with non-negative int values."""
    return {
        key: count
        for key, count in usage.items()
        if isinstance(key, str) and type(count) is int and count >= 0
    }


def add_usage(total: dict[str, int], usage: Mapping[str, object]) -> dict[str, int]:
    """Add ``usage``'s well-formed counts into ``total`` (in place) and return it."""
    for key, count in clean_usage(usage).items():
        total[key] = total.get(key, 0) + count
    return total
