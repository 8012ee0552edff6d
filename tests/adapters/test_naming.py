"""One way to name an agent: `tether run --agent`, `tether.spawn(agent=...)`, missing CLIs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import tether

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


def test_agent_resp_is_the_adapter_resp_alias(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--agent", "resp", "what is here?", "--", "bash", str(AGENT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("You asked: what is here?")


def test_a_missing_cli_fails_the_run_and_says_which(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--agent", "claude", "hello")
    assert proc.returncode == 4
    assert "claude is not on PATH" in proc.stderr
    assert "@anthropic-ai/claude-code" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--agent", "nope", "task"),
        ("--agent", "acp", "task"),  # acp needs its command after --
        ("task", "--", "bash", "x"),  # a command needs an agent
        ("--adapter", "resp", "--agent", "claude", "task", "--", "x"),
    ],
)
def test_bad_agent_flags_are_usage_errors(tmp_path: Path, args: tuple[str, ...]) -> None:
    assert _run(tmp_path, *args).returncode == 2


def test_spawn_names_the_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("TETHER_CI_CACHE", raising=False)
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))

    with pytest.raises(tether.SpawnError, match="claude is not on PATH"):
        asyncio.run(tether.spawn("hi", agent="claude", runs_root=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()  # refused before anything was made
    with pytest.raises(tether.SpawnError, match="unknown agent 'nope'"):
        asyncio.run(tether.spawn("hi", agent="nope", runs_root=tmp_path / "runs"))


def test_agent_arg_values_may_start_with_a_dash() -> None:
    from tether.cli.child import join_agent_args

    argv = ["--agent-arg", "--permission-mode", "--agent-arg", "plan", "t", "--", "--agent-arg"]
    assert join_agent_args(argv) == [
        "--agent-arg=--permission-mode",
        "--agent-arg=plan",
        "t",
        "--",
        "--agent-arg",
    ]
    assert join_agent_args(["--agent-arg"]) == ["--agent-arg"]
