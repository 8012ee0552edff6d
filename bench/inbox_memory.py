"""Peak RSS of a parent whose run's inbox holds N MiB (issue 10 item 9).

    .venv/bin/python bench/inbox_memory.py [--mib 256] [--line 1024]

Spawns a run (the TEST DOUBLE child, one long turn), appends ``--mib`` MiB of inbox lines
of ``--line`` bytes, lets the parent drain them while a reader consumes ``updates()``,
closes the run and prints the parent's peak RSS (``ru_maxrss``), the rows stored and the
time. Every byte is checked: stored rows == lines written. The files live in a temp
directory under /tmp that is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fill(path: Path, mib: int, line: int) -> int:
    body = b'{"type":"progress","text":"' + b"x" * (line - 32) + b'"}\n'
    batch = body * max(1, (4 << 20) // len(body))
    lines_per_batch = batch.count(b"\n")
    total = 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for _ in range(max(1, (mib << 20) // len(batch))):
            os.write(fd, batch)
            total += lines_per_batch
    finally:
        os.close(fd)
    return total


async def _main(mib: int, line: int) -> None:
    from tests.parent.helpers import FAST, double

    from tether.runtime.parent.spawn import ChannelError, InboxItem, spawn

    start_rss = _rss_mib()
    argv = double("normal", 600_000)  # one turn that outlasts the drain
    handle = await spawn("task", argv=argv, timeouts=FAST, close_when_idle=False)
    written = await asyncio.to_thread(_fill, handle.run_dir.inbox, mib, line)
    seen = dropped = 0
    all_in = asyncio.Event()
    t0 = time.monotonic()

    async def read() -> None:
        nonlocal seen, dropped
        async for update in handle.updates():
            if isinstance(update, InboxItem):
                seen += 1
            elif isinstance(update, ChannelError) and "updates dropped" in update.reason:
                dropped += int(update.reason.split()[0])
            if seen + dropped >= written:
                all_in.set()

    def stored() -> int:
        db = Path(os.environ["TETHER_HOME"]) / "tether.db"
        with sqlite3.connect(db) as conn:
            query = "SELECT count(*) FROM inbox_messages WHERE run_id = ?"
            return int(conn.execute(query, (handle.run_id,)).fetchone()[0])

    reader = asyncio.create_task(read())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_in.wait(), 120)
    await handle.cancel()
    await handle.wait()
    await reader
    elapsed = time.monotonic() - t0
    rows = await asyncio.to_thread(stored)
    print(
        f"inbox {mib} MiB, {written} lines of {line} B: peak RSS {_rss_mib():.0f} MiB "
        f"(at start {start_rss:.0f} MiB); rows stored {rows}, handed out {seen}, "
        f"dropped from updates() {dropped}; {elapsed:.1f} s"
    )
    assert rows == written, (rows, written)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--line", type=int, default=1024)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tether-bench-inbox-", dir="/tmp"))
    os.environ["TETHER_HOME"] = str(home)
    try:
        asyncio.run(_main(args.mib, args.line))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
