"""A hostile child cannot make its parent read, destroy, write through or block on files.

Every case runs the hostile TEST DOUBLE (tests/doubles/hostile_child.py) as a real
process with real symlinks, hard links and FIFOs. The double keeps its own channel open
from the start, so a parent that is not fooled ends the run normally.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.doubles import hostile
from tests.support.waits import wait_until
from tether.runtime.parent.spawn import RunResult, spawn

from .helpers import FAST

SECRET = "the victim's secret, never to be read by tether"
pytestmark = pytest.mark.timeout(60)  # a parent blocked in open() would hang for ever


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(SECRET)
    return path


def _run(mode: str, victim: Path) -> RunResult:
    async def go() -> RunResult:
        handle = await spawn("task", argv=hostile(mode, arg=victim), timeouts=FAST)
        return await asyncio.wait_for(handle.wait(), 30)

    return asyncio.run(go())


def _intact(victim: Path) -> None:
    assert victim.read_text() == SECRET  # neither unlinked, nor truncated, nor written


@pytest.mark.parametrize(
    "mode",
    [
        "final-path-victim",
        "final-path-symlink",
        "final-path-hardlink",
        "final-path-dotdot",
        "final-path-events",
        "final-path-fifo",
        "final-path-tmp-symlink",
        "final-path-tmp-hardlink",
        "final-path-tmp-fifo",
        "final-path-tmp-nested",
        "final-path-tmp-swapped",
    ],
)
def test_final_text_path_only_reads_and_removes_the_childs_own_file(
    mode: str, victim: Path
) -> None:
    result = _run(mode, victim)
    _intact(victim)
    assert result.status == "done"
    assert SECRET not in (result.final_text or "")
    assert result.truncated is True
    assert "the full text could not be read" in (result.final_text or "")
    run_dir = Path(os.environ["TETHER_HOME"]) / "runs" / str(result.run_id)
    assert (run_dir / "events.jsonl").stat().st_size > 0  # the run's own log survives


def test_a_final_text_file_made_with_mkstemp_is_read_whole_and_removed(victim: Path) -> None:
    """As the wire spec's own child: ``mkstemp`` in its ``TMPDIR`` (the run's private
    ``tmp/``, 0700); the parent reads the whole text and removes the file."""
    result = _run("final-path-mkstemp", victim)
    assert result.status == "done", result.error
    assert (result.final_text, result.truncated) == ("the whole answer, " * 8000, False)
    run_dir = Path(os.environ["TETHER_HOME"]) / "runs" / str(result.run_id)
    assert (run_dir / "tmp").stat().st_mode & 0o777 == 0o700
    assert list((run_dir / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    "mode",
    [
        "control-symlink",
        "control-fifo",
        "final-tmp-symlink",
        "final-tmp-fifo",
        "final-symlink",
        "inbox-fifo",
        "inbox-symlink",
        "events-fifo",
    ],
)
def test_files_replaced_under_the_parent_are_never_followed_nor_blocked_on(
    mode: str, victim: Path
) -> None:
    result = _run(mode, victim)
    _intact(victim)
    assert result.status == "done", result.error
    assert result.final_text == "answer: task"


def test_stderr_replaced_by_a_fifo_still_fails_the_run_promptly(victim: Path) -> None:
    result = _run("stderr-fifo", victim)
    assert result.status == "failed"
    assert "without an exit event" in (result.error or "")


def test_tether_show_does_not_block_on_a_fifo_left_in_the_run_dir(victim: Path) -> None:
    import subprocess
    import sys

    result = _run("control-fifo", victim)  # the run leaves control.jsonl as a FIFO
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "show", str(result.run_id)],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert shown.returncode == 0, shown
    assert str(result.run_id) in shown.stdout


def test_events_replaced_before_the_parent_first_reads_them_are_still_read(
    victim: Path,
) -> None:
    """Regression (a flaky [events-fifo] under load): the parent opened its event file
    lazily, at its first read, so a child quick to plant a FIFO there (while the parent
    was still busy, e.g. writing its index row) blinded it. The parent now holds the
    file from before the child exists."""

    async def go() -> RunResult:
        handle = await spawn("task", argv=hostile("events-fifo", arg=victim), timeouts=FAST)
        events = Path(os.environ["TETHER_HOME"]) / "runs" / str(handle.run_id) / "events.jsonl"
        _wait_planted(events)  # blocking, no await: the parent's reader cannot run yet
        return await asyncio.wait_for(handle.wait(), 30)

    result = asyncio.run(go())
    _intact(victim)
    assert result.status == "done", result.error
    assert result.final_text == "answer: task"


def _wait_planted(events: Path) -> None:
    """Until the child has put its FIFO in place of ``events`` (renamed there: inotify)."""
    import stat

    wait_until(lambda: stat.S_ISFIFO(os.lstat(events).st_mode), "the child's FIFO", files=[events])
