"""A big inbox never sits in the parent's memory: it is drained in bounded slices (item 9).

The data stays exact: every line is stored, in order, whatever the slicing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tether.inbox import create_inbox
from tether.runtime.parent.sidecars import INBOX_SLICE_BYTES, InboxTail

LINE = b'{"type":"progress","text":"' + b"x" * 990 + b'"}\n'


def _fill(path: Path, lines: int) -> None:
    with path.open("ab") as handle:
        handle.write(LINE * lines)


def test_each_drain_hands_out_one_bounded_slice_and_loses_nothing(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    create_inbox(inbox)
    total = (8 * INBOX_SLICE_BYTES) // len(LINE)
    _fill(inbox, total)

    async def go() -> list[list[tuple[dict[str, object], int]]]:
        tail = InboxTail(inbox, "r", tmp_path / "db.sqlite")
        slices = []
        while True:
            slices.append(await tail.drain())
            if not tail.more:
                break
        await tail.close()
        return slices

    slices = asyncio.run(go())
    assert len(slices) >= 8
    for batch in slices:
        assert sum(size for _, size, _ in batch) <= INBOX_SLICE_BYTES
    messages = [message for batch in slices for message, _, _ in batch]
    assert len(messages) == total
    assert all(m == {"type": "progress", "text": "x" * 990} for m in messages)


def test_close_stores_the_rest_without_holding_it(tmp_path: Path) -> None:
    import sqlite3

    inbox = tmp_path / "inbox.jsonl"
    create_inbox(inbox)
    total = (3 * INBOX_SLICE_BYTES) // len(LINE)
    _fill(inbox, total)
    db = tmp_path / "db.sqlite"

    async def go() -> None:
        tail = InboxTail(inbox, "r", db)
        await tail.drain()
        await tail.close()

    asyncio.run(go())
    with sqlite3.connect(db) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM inbox_messages").fetchone()
    assert rows == total


@pytest.mark.timeout(120)
def test_a_64_mib_inbox_keeps_the_parents_peak_rss_low(tmp_path: Path) -> None:
    """The whole run as a real process (bench/inbox_memory.py); it was +170 MiB before."""
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "inbox_memory.py"), "--mib", "64"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=110,
    ).stdout
    words = out.split()
    peak = float(words[words.index("RSS") + 1])
    start = float(words[words.index("start") + 1])
    assert peak - start < 100, out
    assert "rows stored 65664," in out, out


def _db_descriptors(db: Path) -> int:
    """This process's descriptors open on ``db`` or its ``-wal``/``-shm`` files."""
    names = {str(db), f"{db}-wal", f"{db}-shm"}
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            found += os.readlink(f"/proc/self/fd/{fd}") in names
    return found


def test_the_tails_of_one_database_share_one_connection(tmp_path: Path) -> None:
    """Many runs (a daemon's 1,000 agents) drain through one connection, not one each
    (~190 KiB and two descriptors a connection); the last tail's close closes it, and
    every run's rows are stored under its own run id."""
    import sqlite3

    db = tmp_path / "db.sqlite"
    inboxes = []
    for n in range(20):
        inbox = tmp_path / f"inbox{n}.jsonl"
        create_inbox(inbox)
        _fill(inbox, n + 1)
        inboxes.append(inbox)

    async def go() -> tuple[int, int, int]:
        tails = [InboxTail(inbox, f"r{n}", db) for n, inbox in enumerate(inboxes)]
        await asyncio.gather(*(tail.drain() for tail in tails))
        shared = _db_descriptors(db)
        for tail in tails[:-1]:
            await tail.close()
        still = _db_descriptors(db)
        await tails[-1].close()
        return shared, still, _db_descriptors(db)

    shared, still, after = asyncio.run(go())
    assert 0 < shared <= 3  # the database, its WAL and its shared memory, once
    assert still == shared
    assert after == 0
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT run_id, count(*) FROM inbox_messages GROUP BY run_id"))
    assert rows == {f"r{n}": n + 1 for n in range(20)}
