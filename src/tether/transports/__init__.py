"""Transports move lines and frames between processes and nothing else.

:mod:`tether.transports.watch` holds the one file watcher a process shares for
every file it tails (control files, event files, inboxes).
"""

from __future__ import annotations

from tether.transports.watch import FileWatcher

__all__ = ["FileWatcher"]
