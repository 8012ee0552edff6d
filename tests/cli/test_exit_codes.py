"""`tether run` exit codes, including a run whose last turn ended in an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether.cli.run import exit_code


@pytest.mark.parametrize(
    ("status", "stop_reason", "code"),
    [
        ("done", "end_turn", 0),
        ("done", None, 0),
        ("done", "error", 4),
        ("cancelled", None, 3),
        ("failed", None, 4),
        ("timed-out", "aborted", 5),
        ("weird", None, 4),
    ],
)
def test_exit_code_table(status: str, stop_reason: str | None, code: int) -> None:
    assert exit_code(status, stop_reason) == code


def test_provider_error_exits_failed(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "TETHER_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "run", "--no-stdin", "--provider", "anthropic", "hi"],
        capture_output=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 4, proc.stderr
    assert b"ANTHROPIC_API_KEY" in proc.stderr
