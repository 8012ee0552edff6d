"""Rows for the runs whose row in the index could not be written, from their directories.

Theory of operation. A recording parent marks its run's directory with ``.row-pending``,
a symlink naming its owner (pid and start time; never followed), and removes the mark once
the run's end is in its row (:class:`~tether.runtime.parent.sidecars.Recorder`). A disk
that fills as the run starts (or ends) leaves the row missing (or unfinished) and the mark
in place. :func:`recover_runs`, called by the readers of the index (``tether runs``,
``show``, ``replay``), looks for marks whose owner is gone. The run's row is written from
what the directory holds, read as ``tether show`` reads an unindexed run (the task from
the first prompt, the end from the event log; a log with no ``exit`` event reads
``failed``), and the mark is removed. A mark whose owner lives is a run that is starting
or running, and a row whose child still runs (a daemon's agent outlives a daemon that
died, and the next daemon adopts it) is left alone too. The directory is the child's to
write, so everything in it is read through :mod:`tether.fsafe`, bounded.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Final

from tether import exits, fsafe, jsondepth
from tether.paths import runs_dir
from tether.procs import process_matches
from tether.runtime.parent.rundir import (
    RunDir,
    clear_pending_row,
    is_run_id,
    pending_row_owner,
)
from tether.store.index import LIVE_STATUSES, RunIndex, RunRecord
from tether.wire.limits import MAX_LINE_BYTES

__all__ = ["recover_runs"]

_END_COLUMNS: Final = ("status", "ended_at", "usage", "stop_reason", "error", "truncated")
LOST: Final = "lost: its parent process ended without finishing the run; its log ends: {}"
NO_EXIT: Final = (
    "lost: its row in the run index could not be written (a full disk?) and the run ended "
    "without an exit event; recovered from its run directory"
)


def recover_runs(index: RunIndex, runs_root: Path | None = None) -> list[str]:
    """Write the rows of the finished runs under ``runs_root`` (default: the state
    directory's) whose pending mark's owner is gone; their ids."""
    root = runs_dir() if runs_root is None else runs_root
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [
        name for name in names if is_run_id(name) and _recover(index, RunDir(name, root / name))
    ]


def _recover(index: RunIndex, run: RunDir) -> bool:
    """The row of ``run`` written from its directory and its mark removed; False when it
    has no mark, its owner lives, its child still runs, or the row cannot be written."""
    owner = pending_row_owner(run.path)
    if owner is None or process_matches(*owner):
        return False
    try:
        if not _write_row(index, run):
            return False
    except (OSError, sqlite3.Error):
        return False
    clear_pending_row(run.path, owner)
    return True


def _write_row(index: RunIndex, run: RunDir) -> bool:
    row = index.get(run.run_id)
    if row is not None and row.status in LIVE_STATUSES and process_matches(row.pid, row.pid_start):
        return False  # its child runs on (a daemon's agent, adopted by the next daemon)
    end = _end(run)
    if row is None:
        index.insert(_new_row(run, end))
    elif row.status in LIVE_STATUSES or (row.error or "").startswith("lost:"):
        values = {k: v for k, v in end.items() if k in _END_COLUMNS}
        if values["status"] != "done":  # its parent died (a SIGKILL) before the end
            values["error"] = LOST.format(values["error"])
        index.update(run.run_id, **values)
    return True


def _end(run: RunDir) -> dict[str, Any]:
    """The run's end as its event log tells it (see :func:`replay.end_from_log`)."""
    from tether.runtime.parent.mirror import RunMirror
    from tether.runtime.parent.replay import end_from_log, read_log
    from tether.runtime.parent.updates import RunEvent
    from tether.wire.messages import AgentStarted

    mirror = RunMirror(run.run_id)
    named: dict[str, str | None] = {"provider": None, "model": None}
    for update in read_log(run.events, run.run_id, mirror, controls=run.control):
        if isinstance(update, RunEvent) and isinstance(update.event, AgentStarted):
            for key in named:
                value = getattr(update.event, key)
                named[key] = value if isinstance(value, str) else None
    end = end_from_log(run, mirror)
    try:
        ended_at = os.stat(run.events, follow_symlinks=False).st_mtime
    except OSError:
        ended_at = time.time()
    return {
        "status": exits.recorded_status(end.status, end.stop_reason),
        "ended_at": ended_at,
        "usage": end.usage,
        "stop_reason": end.stop_reason,
        "error": end.error if mirror.exit is not None else NO_EXIT,
        "truncated": end.truncated,
        **named,  # what its agent-started event said
    }


def _new_row(run: RunDir, end: dict[str, Any]) -> RunRecord:
    stamp = run.run_id.partition("-")[0]
    created = float(calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%S")))
    return RunRecord(
        id=run.run_id, task=_task(run), created_at=created, run_dir=str(run.path), **end
    )


def _task(run: RunDir) -> str:
    """The text of the run's first control, its task (the parent writes it first)."""
    with contextlib.suppress(OSError, ValueError):
        with fsafe.opened_dir(run.path) as dir_fd:
            fd = fsafe.open_in(dir_fd, run.control.name, os.O_RDONLY)
            try:
                head = os.read(fd, MAX_LINE_BYTES + 1)
            finally:
                os.close(fd)
        first = jsondepth.loads(head.split(b"\n", 1)[0])
        if isinstance(first, dict) and first.get("type") == "prompt":
            text = first.get("text")
            if isinstance(text, str):
                return text
    return "(the task could not be read)"
