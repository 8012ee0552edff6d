"""`tether run` under signals and an open stdin: honest exit codes, no stale rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.waits import wait_glob, wait_gone, wait_text
from tether.store.index import RunIndex

from .test_cli_run import TIMEOUT, _env


def _run_with_stdin(tmp_path: Path, stdin: int) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "run", "--provider", "scripted", "hi"],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_exit_is_clean_while_a_stdin_pipe_stays_open(tmp_path: Path) -> None:
    # `sleep 5 | tether run hi`: the writer keeps the pipe open past the run's end.
    read_end, write_end = os.pipe()
    try:
        out = _run_with_stdin(tmp_path, read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert b"Fatal Python error" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr
    assert b"scripted" in out.stdout


def test_exit_is_clean_with_a_terminal_on_stdin(tmp_path: Path) -> None:
    controller, terminal = os.openpty()
    try:
        out = _run_with_stdin(tmp_path, terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert b"Fatal Python error" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr


def _sleeping_run(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`tether run` whose child is in a `sleep 30` bash tool; returns it and the run dir."""
    script = tmp_path / "script.json"
    bash = {"name": "bash", "arguments": {"command": "sleep 30"}}
    script.write_text(json.dumps([{"text": "Busy.", "tool_calls": [bash]}, {"text": "Done."}]))
    argv = [sys.executable, "-m", "tether", "run", "--provider", "scripted", "--script"]
    proc = subprocess.Popen(
        [*argv, str(script), "t"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    events = wait_glob(tmp_path / "home" / "runs", "*/events.jsonl", proc=proc)
    wait_text(events, '"type":"tool-call"', proc=proc)
    return proc, events.parent


def _row(tmp_path: Path, run_id: str) -> dict[str, object]:
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "show", run_id, "--json"],
        capture_output=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    row: dict[str, object] = json.loads(shown.stdout)
    return row


def test_sighup_cancels_the_run_and_ends_its_row(tmp_path: Path) -> None:
    proc, run_dir = _sleeping_run(tmp_path)
    record = RunIndex(tmp_path / "home" / "tether.db").get(run_dir.name)
    assert record is not None
    assert record.pid is not None
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 3, stderr
    assert b"Traceback" not in stderr
    wait_gone([record.pid], "the child")
    row = _row(tmp_path, run_dir.name)
    assert row["status"] == "cancelled", row


def test_after_sigkill_of_tether_run_its_row_reads_lost(tmp_path: Path) -> None:
    proc, run_dir = _sleeping_run(tmp_path)
    record = RunIndex(tmp_path / "home" / "tether.db").get(run_dir.name)
    assert record is not None
    assert record.status == "running"
    assert record.owner_pid == proc.pid
    assert record.pid is not None
    proc.kill()
    proc.communicate(timeout=TIMEOUT)
    wait_gone([record.pid], "the child")  # the lifeline ends it when its parent is gone
    row = _row(tmp_path, run_dir.name)
    assert row["status"] == "failed", row
    assert str(row["error"]).startswith("lost: its parent process"), row
    listed = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "--json"],
        capture_output=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
        check=True,
    )
    assert [json.loads(line)["status"] for line in listed.stdout.splitlines()] == ["failed"]
