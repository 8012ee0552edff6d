"""Run history: the SQLite run index (:mod:`tether.store.index`) and run logs.

A run's permanent log is ``events.jsonl`` in its run directory; the index
(``runs_*`` tables in :func:`tether.paths.db_path`) records what it was and how it ended.
"""

from __future__ import annotations

from tether.store.index import RunIndex, RunRecord, open_index

__all__ = ["RunIndex", "RunRecord", "open_index"]
