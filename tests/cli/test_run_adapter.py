"""`tether run --adapter resp TASK -- PROGRAM...` supervises the example bash agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "examples" / "bash-agent" / "agent.sh"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "TETHER_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "tether", "run", "--no-stdin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )


def test_run_supervises_the_example_bash_agent(tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("x")
    proc = _run(tmp_path, "--adapter", "resp", "what is here?", "--", "bash", str(AGENT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("You asked: what is here?")
    assert "marker.txt" in proc.stdout
    assert "→ bash" in proc.stderr  # the live view went to stderr


def test_adapter_and_program_go_together(tmp_path: Path) -> None:
    assert _run(tmp_path, "--adapter", "resp", "task").returncode == 2
    assert _run(tmp_path, "task", "--", "bash", str(AGENT)).returncode == 2
