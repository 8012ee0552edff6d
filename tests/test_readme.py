"""Every code block of README.md runs as written (the Python API, the first command's demo).

The install line itself (``python3 -m venv .venv && .venv/bin/pip install -q . &&
.venv/bin/tether demo``) runs in a fresh venv of its own; the test command
(``scripts/check``) is what CI runs, so it is not run again from here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```$", README, flags=re.M | re.S)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "FEN_WIRE_"))}
    return {**env, "TETHER_HOME": str(home), "XDG_RUNTIME_DIR": str(home / "rt")}


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    kinds = [kind for kind, _ in BLOCKS]
    assert kinds.count("python") == 1
    assert "sh" in kinds


@pytest.mark.parametrize(
    "code", [code for kind, code in BLOCKS if kind == "python"], ids=["python-api"]
)
def test_python_blocks_run_as_written(code: str, tmp_path: Path) -> None:
    (tmp_path / "rt").mkdir(mode=0o700)
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "accepted" in done.stdout  # the steer's ack, before the run ended
    assert "You asked: now in one sentence" in done.stdout  # the follow-up's turn answered


@pytest.mark.slow
def test_the_first_command_installs_and_runs_the_demo(tmp_path: Path) -> None:
    line = next(
        line
        for kind, code in BLOCKS
        if kind == "sh"
        for line in code.splitlines()
        if line.startswith("python3 -m venv")
    )
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT,
        checkout,
        ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", "artifacts"),
    )
    (tmp_path / "rt").mkdir(mode=0o700)
    python = shutil.which("python3") or sys.executable
    env = {**_env(tmp_path / "home"), "PATH": f"{Path(python).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shown = done.stdout + done.stderr
    for outcome in ("steered: done", "deadline: done", "cancelled: cancelled"):
        assert f"{outcome} (expected " in shown, shown[-3000:]
