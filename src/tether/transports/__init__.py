"""Transports move lines and frames between processes and nothing else.

:mod:`tether.transports.watch` holds the one file watcher a process shares for every file
it tails (control files, event files, inboxes); :mod:`tether.transports.tail` reads a
JSONL file by byte offset in bounded reads. Nothing is imported here eagerly: a child
reads this package before it writes ``ready``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.transports.watch import FileWatcher

__all__ = ["FileWatcher"]


def __getattr__(name: str) -> Any:
    if name == "FileWatcher":
        from tether.transports.watch import FileWatcher

        return FileWatcher
    raise AttributeError(f"module 'tether.transports' has no attribute {name!r}")
