"""``tether inbox`` as users run it: real processes."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.waits import HANG_S, wait_until
from tether.inbox.writer import append_inbox, create_inbox

MESSAGES = [
    {"type": "progress", "text": "step 1"},
    {"type": "clarification", "q": "which model?"},
    {"type": "approval_request", "reason": "delete files"},
    {"type": "tool_call", "name": "bash"},
    {"type": "done", "summary": "finished"},
]


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "inbox", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "run-7" / "inbox.jsonl"
    path.parent.mkdir()
    create_inbox(path)
    for message in MESSAGES:
        append_inbox(path, message)
    with path.open("ab") as f:
        f.write(b'not json\n{"type":"progress","text":"partial')
    return path


def test_drain_prints_a_summary(inbox: Path, tmp_path: Path) -> None:
    db = tmp_path / "db" / "t.db"
    first = tether("drain", str(inbox), "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert "(run run-7): 6 new, 0 duplicates skipped, 1 rejected" in first.stdout
    second = tether("drain", str(inbox), "--run", "run-7", "--db", str(db))
    assert "0 new" in second.stdout
    assert second.returncode == 0


def test_drain_of_a_missing_file_fails_clearly(tmp_path: Path) -> None:
    result = tether("drain", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "t.db"))
    assert result.returncode == 2
    assert "no such file" in result.stderr


def test_read_as_json_and_as_text(inbox: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    tether("drain", str(inbox), "--db", str(db))
    as_json = tether("run-7", "--json", "--db", str(db))
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r["body"] for r in rows[:5]] == MESSAGES
    assert rows[5]["body"] is None
    assert rows[5]["raw"] == "not json"
    assert rows[5]["rejected_reason"].startswith("not_json: ")
    assert [r["msg_key"] for r in rows] == [f"run-7:{r['offset']}" for r in rows]
    text = tether("run-7", "--db", str(db)).stdout.splitlines()
    assert len(text) == 6
    assert text[0].endswith("progress         step 1")
    assert "? which model?" in text[1]
    assert "! delete files" in text[2]
    assert "rejected" in text[5]


def test_unknown_run_is_an_error(tmp_path: Path) -> None:
    result = tether("ghost", "--db", str(tmp_path / "t.db"))
    assert result.returncode == 2
    assert "no inbox messages for run 'ghost'" in result.stderr


def test_reading_a_run_drains_its_inbox_from_the_state_dir(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "run-9"
    run_dir.mkdir(parents=True)
    append_inbox(run_dir / "inbox.jsonl", MESSAGES[0])
    env = {**os.environ, "TETHER_HOME": str(home)}
    result = tether("run-9", "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["body"] == MESSAGES[0]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "tether.db").stat().st_mode) == 0o600
    assert tether("run-9", "--no-drain", "--json", env=env).stdout == result.stdout


def test_a_line_nested_100000_deep_is_a_rejected_row_not_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    inbox = home / "runs" / "run-deep" / "inbox.jsonl"
    inbox.parent.mkdir(parents=True)
    create_inbox(inbox)
    with inbox.open("ab") as f:
        f.write(b'{"type":"progress","text":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n")
    append_inbox(inbox, MESSAGES[0])
    env = {**os.environ, "TETHER_HOME": str(home)}
    drained = tether("drain", str(inbox), "--run", "run-deep", env=env)
    assert drained.returncode == 0, drained.stderr
    assert "2 new, 0 duplicates skipped, 1 rejected" in drained.stdout
    for _ in range(2):  # every later read works too
        shown = tether("run-deep", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        rows = [json.loads(line) for line in shown.stdout.splitlines()]
        assert rows[0]["body"] is None
        assert rows[0]["rejected_reason"].startswith("not_json: JSON nested deeper than")
        assert rows[1]["body"] == MESSAGES[0]
        assert "Traceback" not in shown.stderr


class LineReader:
    """Read a child's stdout lines on a thread, so a test can wait with a limit."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        self.stream = proc.stdout
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.stream:
            self.lines.put(line)

    def close(self) -> None:
        self.thread.join(timeout=20)
        self.stream.close()

    def take(self, n: int, limit: float = HANG_S) -> list[str]:
        deadline = time.monotonic() + limit
        got = []
        while len(got) < n and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                got.append(self.lines.get(timeout=left).rstrip("\n"))
        return got


def test_follow_prints_new_messages(tmp_path: Path) -> None:
    db, path = tmp_path / "t.db", tmp_path / "r" / "inbox.jsonl"
    path.parent.mkdir()
    append_inbox(path, MESSAGES[0])
    tether("drain", str(path), "--db", str(db))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "inbox", "r", "--json", "--follow", "--db", str(db)],
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = LineReader(proc)
    try:
        assert len(reader.take(1)) == 1
        append_inbox(path, MESSAGES[1])
        tether("drain", str(path), "--db", str(db))
        (line,) = reader.take(1)
        assert json.loads(line)["body"] == MESSAGES[1]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        reader.close()


def test_drain_follow_keeps_draining_until_terminated(tmp_path: Path) -> None:
    db, path = tmp_path / "t.db", tmp_path / "inbox.jsonl"
    command = ["drain", str(path), "--run", "r", "--follow", "--db", str(db)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "inbox", *command],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for message in MESSAGES:
            append_inbox(path, message)

        def all_stored() -> bool:  # (a database: polled)
            rows = tether("r", "--json", "--no-drain", "--db", str(db)).stdout.splitlines()
            return len(rows) == len(MESSAGES)

        wait_until(all_stored, "every message stored", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "5 new" in out
