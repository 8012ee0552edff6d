"""The example bash agent supervised as a user would: the parent API and ``tether run``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.runtime.parent.spawn import RunEvent, spawn
from tether.wire import tag_of

from .helpers import AGENT

ADAPTER = [sys.executable, "-m", "tether", "child", "--adapter", "resp", "--", "bash", str(AGENT)]


@pytest.fixture(autouse=True)
def tether_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs, the index and the inbox rows live in the test's tmp dir."""
    home = tmp_path / "home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    for name in ("FEN_WIRE_RUN_ID", "TETHER_SUBAGENT_DEPTH", "AGENT_STEP_DELAY"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_spawn_runs_the_example_agent_to_a_result(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("a\n")
    (work / "b.txt").write_text("b\n")

    async def go() -> tuple[object, list[str], list[object]]:
        handle = await spawn("list the files", argv=ADAPTER, cwd=work, db=tmp_path / "index.db")
        seen: list[str] = []
        inbox: list[object] = []
        async for update in handle.updates():
            if isinstance(update, RunEvent):
                seen.append(tag_of(type(update.event)))
            else:
                inbox.append(update)
        return await handle.wait(), seen, inbox

    result, seen, inbox = asyncio.run(go())
    assert getattr(result, "status", None) == "done", result
    final_text = getattr(result, "final_text", "")
    assert final_text.startswith("You asked: list the files")
    assert "has 2 entries (a.txt, b.txt)" in final_text
    assert getattr(result, "usage", {})["input"] > 0
    assert "tool-call" in seen
    assert "tool-result" in seen
    assert inbox, "the agent's tether_inbox progress line did not arrive"


def test_spawn_steer_and_cancel_through_the_parent(tmp_path: Path) -> None:
    async def go() -> tuple[object, object]:
        handle = await spawn(
            "slow task",
            argv=ADAPTER,
            cwd=tmp_path,
            env={"AGENT_STEP_DELAY": "0.5"},
            db=tmp_path / "index.db",
        )
        steered = None
        async for update in handle.updates():
            if not isinstance(update, RunEvent):
                continue
            kind = tag_of(type(update.event))
            if kind == "tool-call" and steered is None:
                steered = await handle.steer("and then stop")
            if kind == "steering-injected":
                await handle.cancel()
        return steered, await handle.wait()

    ack, result = asyncio.run(go())
    assert getattr(ack, "status", None) == "accepted"
    assert getattr(result, "status", None) == "cancelled"


def test_tether_run_supervises_the_example_agent(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["TETHER_HOME"] = str(tmp_path / "home")
    env["NO_COLOR"] = "1"
    for name in ("TETHER_PROVIDER", "TETHER_MODEL", "FEN_WIRE_RUN_ID", "AGENT_STEP_DELAY"):
        env.pop(name, None)
    (tmp_path / "readme.md").write_text("hi\n")
    argv = [sys.executable, "-m", "tether", "run", "--no-stdin"]
    argv += [f"--child-arg={arg}" for arg in ("--adapter", "resp", "bash", str(AGENT))]
    argv += ["what is in here?"]
    done = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("You asked: what is in here?")
    assert "readme.md" in done.stdout
    assert "→ bash" in done.stderr  # the live view showed the tool call
