"""Crash test with real processes: drainers SIGKILLed at random moments, many times.

Writers append to two inboxes while drainers (the one-shot CLI, the CLI's
follow mode, and an InboxDrain tailing both files) are started and killed with
SIGKILL at random instants, again and again. At the end one clean drain runs,
and the table must hold exactly the lines of each file: every one, in order,
none twice, each kept as a message or as a rejected row with its raw text.

Nothing here is paced by the clock: a writer writes its next stretch when the test
feeds its stdin a byte (a random number of stretches each round), a round's drainers are
killed after a random number of commits, and the
writers run to their end once their stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waits import HANG_S, wait_until
from tether.inbox.writer import create_inbox

ECHO_WRITER = r"""
k=$1; n=$2; f=$3
for ((i = 0; i < n; i++)); do
  if (( i % 97 == 13 )); then
    echo "oops e$k-$i is not json" >> "$f"
  else
    echo "{\"type\":\"progress\",\"text\":\"e$k-$i\"}" >> "$f"
  fi
  if (( i % 25 == 0 )); then read -r -n 1 _ || true; fi  # the next stretch, when fed
done
"""

SPLIT_WRITER = r"""
import json, os, random, sys
path, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(7)
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
for i in range(n):
    r = rnd.random()
    if r < 0.05:
        line = b"[not an object %d]" % i
    elif r < 0.07:
        note = "x" * rnd.randint(50_000, 300_000)
        line = json.dumps({"type": "result_partial", "note": note, "i": i}).encode()
    else:
        kind = rnd.choice(["progress", "tool_call"])
        line = json.dumps({"type": kind, "text": f"s-{i}"}).encode()
    line += b"\n"
    cuts = sorted(rnd.sample(range(1, len(line)), k=min(3, len(line) - 1))) + [len(line)]
    start = 0
    for cut in cuts:
        os.write(fd, line[start:cut])
        start = cut
        if rnd.random() < 0.01:
            sys.stdin.buffer.read(1)  # the next stretch, when fed (EOF: to the end)
"""

BOTH_DRAINER = r"""
import asyncio, sys
from tether.inbox.live import InboxDrain

async def main():
    async with InboxDrain(sys.argv[1]) as drain:
        drain.add(sys.argv[2], "run-echo")
        drain.add(sys.argv[4], "run-split")
        await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""

# Small chunks mean many transactions per second, so a random kill often lands
# inside one, or between a chunk's read and its commit.
LOOP_DRAINER = r"""
import sys
from tether.inbox.drain import drain_file
from tether.inbox.store import InboxStore

store = InboxStore(sys.argv[1])
chunk = int(sys.argv[2])
while True:
    drain_file(store, sys.argv[3], "run-echo", chunk_bytes=chunk)
    drain_file(store, sys.argv[4], "run-split", chunk_bytes=chunk)
"""

TETHER = [sys.executable, "-m", "tether", "inbox"]


def start_drainers(
    round_no: int, db: Path, echo: Path, split: Path
) -> list[subprocess.Popen[bytes]]:
    def cli(path: Path, run: str, *extra: str) -> subprocess.Popen[bytes]:
        command = [*TETHER, "drain", str(path), "--run", run, "--db", str(db), *extra]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL)

    kind = round_no % 4
    if kind == 0:
        return [cli(echo, "run-echo"), cli(split, "run-split")]
    if kind == 1:
        return [cli(echo, "run-echo", "--follow"), cli(split, "run-split", "--follow")]
    if kind == 2:
        command = [sys.executable, "-c", BOTH_DRAINER, str(db), str(echo), "x", str(split)]
        return [subprocess.Popen(command)]
    chunk = str(512 << (round_no % 6))
    return [
        subprocess.Popen(
            [sys.executable, "-c", LOOP_DRAINER, str(db), chunk, str(echo), str(split)]
        )
    ]


def expected_rows(path: Path) -> list[tuple[int, str | None, str | None]]:
    """(offset, body, raw) for every complete line, judged independently of tether."""
    rows = []
    offset = 0
    data = path.read_bytes()
    for line in data.split(b"\n")[:-1]:
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, dict):
            rows.append((offset, line.decode().strip(), None))
        else:
            rows.append((offset, None, line.decode()))
        offset += len(line) + 1
    assert offset == len(data), "every writer finished its last line"
    return rows


def stored_rows(db: Path, run_id: str) -> list[tuple[int, str | None, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT offset, body, raw FROM inbox_messages WHERE run_id = ? ORDER BY offset",
            (run_id,),
        ).fetchall()


KILL_ROUNDS = 16


def committed(db: Path) -> int:
    """Bytes of every inbox stored so far (the drainers' committed offsets)."""
    try:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            return int(
                conn.execute("SELECT coalesce(sum(offset), 0) FROM inbox_offsets").fetchone()[0]
            )
    except sqlite3.OperationalError:  # not created yet
        return 0


def wait_for_progress(
    db: Path, before: int, drainers: list[subprocess.Popen[bytes]], inboxes: tuple[Path, Path]
) -> int:
    """Until the drainers commit past ``before`` (a database: polled), or have nothing left
    to drain, or have all ended (a one-shot drain); what is committed then."""

    def moved() -> bool:
        now = committed(db)
        if now > before or now >= sum(map(complete_bytes, inboxes)):
            return True
        return all(proc.poll() is not None for proc in drainers)

    wait_until(moved, f"progress past {before} bytes", pids=drainers, polled=True)
    return committed(db)


def complete_bytes(path: Path) -> int:
    """Bytes of ``path`` up to its last newline (a writer may pause inside a line)."""
    with path.open("rb") as file:
        end = file.seek(0, 2)
        while end > 0:
            start = max(0, end - 65536)
            file.seek(start)
            newline = file.read(end - start).rfind(b"\n")
            if newline >= 0:
                return start + newline + 1
            end = start
    return 0


def feed(writers: list[subprocess.Popen[bytes]], stretches: int) -> None:
    """Let each writer still writing write ``stretches`` more stretches."""
    for writer in writers:
        assert writer.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it has written everything
            writer.stdin.write(b"x" * stretches)
            writer.stdin.flush()


@pytest.mark.slow
def test_sigkilled_drainers_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    db = tmp_path / "state" / "tether.db"
    echo, split = tmp_path / "run-echo" / "inbox.jsonl", tmp_path / "run-split" / "inbox.jsonl"
    for path in (echo, split):
        path.parent.mkdir()
        create_inbox(path)
    per_echo_writer = 2500
    fed = {"stdin": subprocess.PIPE}
    writers = [
        subprocess.Popen(
            ["bash", "-c", ECHO_WRITER, "bash", str(k), str(per_echo_writer), str(echo)], **fed
        )
        for k in range(3)
    ]
    writers.append(
        subprocess.Popen([sys.executable, "-c", SPLIT_WRITER, str(split), "3000"], **fed)
    )

    rnd = random.Random(20260706)
    kills = mid_work = 0
    # A fixed number of rounds, each decided by events: the writers write a few stretches,
    # the drainers are killed after a random number of commits; no round depends on how
    # fast this machine is.
    drainers: list[subprocess.Popen[bytes]] = []
    try:
        while kills < KILL_ROUNDS:
            feed(writers, rnd.randint(1, 6))
            before = committed(db)
            drainers = start_drainers(kills, db, echo, split)
            for _ in range(rnd.randint(1, 3)):  # where the kill lands
                before = wait_for_progress(db, before, drainers, (echo, split))
            mid_work += committed(db) < echo.stat().st_size + split.stat().st_size
            _kill(drainers)
            kills += 1
        for writer in writers:
            assert writer.stdin is not None
            writer.stdin.close()  # EOF: each writes the rest at once
            assert writer.wait(timeout=HANG_S) == 0
    finally:  # a failed round leaves no drainer nor writer running
        _kill([*drainers, *writers])
    assert mid_work >= 1, "no drainer was killed with work left"

    for path, run in ((echo, "run-echo"), (split, "run-split")):
        final = subprocess.run(
            [*TETHER, "drain", str(path), "--run", run, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "0 duplicates skipped" in final.stdout
        assert stored_rows(db, run) == expected_rows(path)

    echo_texts = [json.loads(body)["text"] for _, body, _ in stored_rows(db, "run-echo") if body]
    for k in range(3):
        mine = [t for t in echo_texts if t.startswith(f"e{k}-")]
        wanted = [f"e{k}-{i}" for i in range(per_echo_writer) if i % 97 != 13]
        assert mine == wanted
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        total, keys = conn.execute(
            "SELECT count(*), count(DISTINCT msg_key) FROM inbox_messages"
        ).fetchone()
        assert total == keys == len(expected_rows(echo)) + len(expected_rows(split))
        assert conn.execute("SELECT count(*) FROM inbox_incidents").fetchone() == (0,)
        offsets = dict(conn.execute("SELECT run_id, offset FROM inbox_offsets").fetchall())
    assert offsets == {"run-echo": echo.stat().st_size, "run-split": split.stat().st_size}


def _kill(processes: list[subprocess.Popen[bytes]]) -> None:
    for proc in processes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    for proc in processes:
        proc.wait(timeout=HANG_S)
        if proc.stdin is not None:
            proc.stdin.close()
