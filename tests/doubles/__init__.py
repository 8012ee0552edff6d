"""Test doubles shared by every test package: ``hostile_child.py`` (one program, many
modes) and ``silent_cli.py`` (an agent CLI that never answers)."""

from __future__ import annotations

import sys
from pathlib import Path

HOSTILE = Path(__file__).parent / "hostile_child.py"
SILENT_CLI = Path(__file__).parent / "silent_cli.py"


def hostile(
    mode: str,
    *,
    arg: str | Path = "",
    size: int | None = None,
    count: int | None = None,
    turn_ms: int = 50,
) -> list[str]:
    """argv of the hostile TEST DOUBLE child in ``mode`` (see ``hostile_child.py --list``)."""
    argv = [sys.executable, str(HOSTILE), mode, "--arg", str(arg), "--turn-ms", str(turn_ms)]
    if size is not None:
        argv += ["--size", str(size)]
    if count is not None:
        argv += ["--count", str(count)]
    return argv


def silent_cli(*, pid_file: Path, env_file: Path | None = None) -> list[str]:
    """argv of the silent agent CLI TEST DOUBLE (see ``silent_cli.py``), SIGTERM ignored."""
    argv = [sys.executable, str(SILENT_CLI), "--ignore-term", "--pid-file", str(pid_file)]
    return argv if env_file is None else [*argv, "--env-file", str(env_file)]
