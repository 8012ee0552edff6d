"""An agent CLI that never answers its hand-shake fails the run within the start timeout.

The CLI is the silent TEST DOUBLE (tests/doubles/silent_cli.py): it takes everything on
stdin, answers nothing and ignores SIGTERM. Every adapter's hand-shake (Claude Code's
``initialize`` control request, Codex's and ACP's ``initialize``, pi's ``get_state``)
must end the run ``failed`` with an error naming the hand-shake and the run's start
timeout, well before the old fixed 60 s, and leave no process behind.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import tether
from tests.doubles import silent_cli
from tests.support.waits import pid_alive
from tether.runtime.parent.outcome import Timeouts

from .cli_helpers import MARK, survivors

pytestmark = pytest.mark.timeout(60)
START_S = 5.0  # room for a loaded machine to reach ready; the old bound was 60 s


@pytest.mark.parametrize("agent", ["claude", "codex", "pi", "gemini", "acp"])
def test_a_cli_that_never_answers_the_hand_shake_fails_within_the_start_timeout(
    agent: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "cli.pid"

    async def go() -> tether.Result:
        handle = await tether.spawn(
            "hello",
            agent=agent,
            argv=silent_cli(pid_file=pid_file),
            cwd=tmp_path,
            runs_root=tmp_path / "runs",
            db=tmp_path / "runs.db",
            timeouts=Timeouts(start_s=START_S),
        )
        return await handle.wait()

    result = asyncio.run(go())
    assert result.status == "failed"
    assert result.error is not None
    # the run's start timeout ended it, not the old fixed 60 s (the module's timeout is 60 s;
    # how soon after the timeout it ends is a figure: bench/start_timeout.py)
    assert f"no answer to the hand-shake within {START_S:g} s" in result.error
    assert "start timeout" in result.error
    pid = int(pid_file.read_text())
    assert not pid_alive(pid), f"the silent CLI {pid} outlived the run"


def test_the_start_timeout_does_not_reach_the_cli(tmp_path: Path) -> None:
    # the bound is the run's: the CLI and its tools never see it in their environment
    env_file = tmp_path / "cli.env"

    async def go() -> tether.Result:
        handle = await tether.spawn(
            "hello",
            agent="acp",
            argv=silent_cli(pid_file=tmp_path / "cli.pid", env_file=env_file),
            cwd=tmp_path,
            runs_root=tmp_path / "runs",
            db=tmp_path / "runs.db",
            timeouts=Timeouts(start_s=START_S),
        )
        return await handle.wait()

    assert asyncio.run(go()).status == "failed"
    names = env_file.read_text().split()
    assert "TETHER_INBOX_PATH" in names
    assert "TETHER_START_TIMEOUT_S" not in names


def test_a_cli_started_early_is_ended_when_the_child_fails_first(tmp_path: Path) -> None:
    # `tether child` starts the CLI before it checks the wire environment; a child that
    # then fails (here: a bad deadline) ends that CLI itself before it exits
    mark = uuid.uuid4().hex
    (tmp_path / "control.jsonl").touch()
    env = {
        **os.environ,
        MARK: mark,
        "FEN_WIRE_CONTROL_PATH": str(tmp_path / "control.jsonl"),
        "FEN_WIRE_EVENT_PATH": str(tmp_path / "events.jsonl"),
        "FEN_WIRE_DEADLINE": "soon",
    }
    argv = [sys.executable, "-m", "tether", "child", "--agent", "acp", "--"]
    argv += silent_cli(pid_file=tmp_path / "cli.pid")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 4  # its exit line says failed
    assert "invalid FEN_WIRE_DEADLINE" in done.stderr
    # the CLI is gone when the child exits (not later, by the reaper, which still runs)
    assert [s for s in survivors(mark) if "silent_cli.py" in s] == []
