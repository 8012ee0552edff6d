"""Runs whose row in the index could not be written are recovered from their directories.

The index here is a database that cannot be written (its path is a directory), as on a
full disk; the recovery then writes into a working one. Real runs, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.procs import proc_start_time
from tether.runtime.parent.recovery import LOST, NO_EXIT, recover_runs
from tether.runtime.parent.rundir import PENDING_ROW_FILE, create_run_dir
from tether.runtime.parent.spawn import spawn
from tether.store.index import RunIndex, RunRecord

from .helpers import FAST


def _script(tmp_path: Path, replies: list[dict[str, object]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies))
    return str(path)


def test_a_run_whose_row_was_never_written_is_recovered_once(
    tmp_path: Path, tether_home: Path
) -> None:
    runs = tether_home / "runs"
    db = tether_home / "tether.db"
    db.mkdir(parents=True)  # SQLite cannot open it: every write of the row fails
    script = _script(tmp_path, [{"text": "three"}])
    argv = ["run", "--no-stdin", "--provider", "scripted", "--script", script, "count the files"]
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "TETHER_HOME": str(tether_home)},
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "three\n"), done.stderr
    (run_id,) = [p.name for p in runs.iterdir()]
    assert (runs / run_id / PENDING_ROW_FILE).is_symlink()  # the row never made it
    db.rmdir()  # room again
    index = RunIndex(db)
    assert recover_runs(index, runs) == [run_id]
    row = index.get(run_id)
    assert row is not None
    assert (row.task, row.status, row.stop_reason, row.provider) == (
        "count the files",
        "done",
        "stop",
        "scripted",
    )
    assert row.usage is not None
    assert row.ended_at is not None
    assert row.ended_at >= row.created_at
    assert not (runs / run_id / PENDING_ROW_FILE).is_symlink()
    assert recover_runs(index, runs) == []  # once


def test_a_live_run_is_left_alone_and_an_unfinished_row_gets_its_end(
    tmp_path: Path, tether_home: Path
) -> None:
    runs = tether_home / "runs"
    db = tmp_path / "index.db"
    replies = [{"text": "slow", "delay_ms": 60_000}]

    async def go() -> None:
        handle = await spawn(
            "wait",
            provider="scripted",
            child_args=["--script", _script(tmp_path, replies)],
            db=db,
            runs_root=runs,
            timeouts=FAST,
        )
        index = RunIndex(db)
        assert recover_runs(index, runs) == []  # its parent (this process) holds the mark
        assert index.get(handle.run_id).status == "running"  # type: ignore[union-attr]
        handle.kill("test")
        await handle.wait()

    asyncio.run(go())
    # a run that ended but whose end could not be written: a `running` row, a free mark
    run = create_run_dir(runs)
    run.events.write_text("")
    index = RunIndex(db)
    index.insert(RunRecord(run.run_id, "t", "running", 1.0, str(run.path), owner_pid=1))
    os.symlink("owner:999999999:1", run.path / PENDING_ROW_FILE)  # an owner long gone
    assert recover_runs(index, runs) == [run.run_id]
    row = index.get(run.run_id)
    assert row is not None
    assert (row.status, row.error) == ("failed", LOST.format(NO_EXIT))


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory", "live-owner"])
def test_a_planted_mark_is_never_followed_nor_blocked_on(
    tmp_path: Path, tether_home: Path, plant: str
) -> None:
    runs = tether_home / "runs"
    run = create_run_dir(runs)
    victim = tmp_path / "victim"
    victim.write_text("hers")
    mark = run.path / PENDING_ROW_FILE
    if plant == "symlink":
        mark.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(mark)
    elif plant == "directory":
        mark.mkdir()
    else:  # a mark whose owner lives (here: this process)
        os.symlink(f"owner:{os.getpid()}:{proc_start_time(os.getpid())}", mark)
    index = RunIndex(tmp_path / "index.db")
    assert recover_runs(index, runs) == []
    assert index.get(run.run_id) is None
    assert victim.read_text() == "hers"
    assert os.path.lexists(mark)  # not a mark of ours: left as it is
