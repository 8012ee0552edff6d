"""`tether run` under signals and an open stdin: honest exit codes, no stale rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
