"""Resume and fork against the REAL agent CLIs, pointed at the scripted model server by
``base_url`` alone (tether writes each CLI's configuration: no hand-written file).

Checked on the model server's side: the resumed run's first model request carries the
first run's turn, and a fork's does too while the source's next one does not carry the
fork's. Each CLI's own protocol does it: Claude Code ``--resume`` / ``--fork-session``,
Codex ``thread/resume`` / ``thread/fork``, pi ``--session`` / ``--fork``, claude-code-acp
``session/load`` / ``session/fork``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.modelserver import ModelServer, open_model_server
from tether.runtime.parent.updates import RunEvent
from tether.wire import tag_of

from .cli_helpers import MARK, assert_no_survivors, cli_env, require_cli

# agent, its command after -- (claude-code-acp), the program require_cli finds
CLIS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "claude": ("claude", (), "claude"),
    "codex": ("codex", (), "codex"),
    "pi": ("pi", (), "pi"),
    "claude-code-acp": ("acp", ("claude-code-acp",), "acp"),
}
GEMINI = ("gemini", (), "gemini")  # its session/load fails (see the last test)


class World:
    def __init__(self, root: Path, name: str, server: ModelServer) -> None:
        agent, command, program = CLIS.get(name, GEMINI)
        path = (
            require_cli(program)
            if program != "acp"
            else _require_program("claude-code-acp", "@zed-industries/claude-code-acp")
        )
        self.agent = agent
        self.command = command
        self.server = server
        self.env = cli_env(root, path)
        self.mark = self.env[MARK]
        self.work = root / "work"
        self.work.mkdir()
        self.root = root

    def options(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "argv": list(self.command) or None,
            "base_url": self.server.url,
            "cwd": str(self.work),
            "env": self.env,
            "runs_root": self.root / "runs",
            "db": self.root / "runs.db",
        }

    def sent(self, n: int) -> str:
        """What the n-th model request (1-based; -1 the last) carried, as one text."""
        requests = self.server.model_requests()
        return json.dumps(requests[n - 1 if n > 0 else n]["body"])


def _require_program(program: str, package: str) -> str:
    from .cli_helpers import require_program

    return require_program(program, package)


CONVERSATION = [
    {"text": "noted: PINEAPPLE"},
    {"text": "it was PINEAPPLE"},
    {"text": "forked"},
    {"text": "the source again"},
]
WAIT = {"name": "Bash", "arguments": {"command": "sleep 60", "description": "wait"}}
KILLED = [{"text": "PINEAPPLE: waiting", "tool_calls": [WAIT]}, {"text": "back"}]


@pytest.fixture
def world(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    """``request.param``: the CLI, or (the CLI, its script)."""
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "state"))  # the agent's home goes here
    name, script = (
        request.param if isinstance(request.param, tuple) else (request.param, CONVERSATION)
    )
    with open_model_server(script) as server:
        yield World(tmp_path, name, server)


async def _resume_then_fork(world: World) -> None:
    options = world.options()
    first = await tether.spawn("remember the word PINEAPPLE", **options)
    assert (await first.wait()).status == "done"
    session = (Path(first.run_dir.path) / "agent-session").read_text().strip()
    assert session
    again = await tether.resume(
        first.run_id, "what was the word?", runs_root=options["runs_root"], db=options["db"]
    )
    result = await again.wait()
    assert result.status == "done", result.error
    assert "remember the word PINEAPPLE" in world.sent(2)
    assert "noted: PINEAPPLE" in world.sent(2)
    fork = await tether.resume(
        again.run_id,
        "fork: say forked",
        fork=True,
        runs_root=options["runs_root"],
        db=options["db"],
    )
    assert (await fork.wait()).status == "done"
    assert "what was the word?" in world.sent(3)  # the fork carries the whole conversation
    forked = (Path(fork.run_dir.path) / "agent-session").read_text().strip()
    assert forked != session
    source = await tether.resume(
        again.run_id, "source: go on", runs_root=options["runs_root"], db=options["db"]
    )
    assert (await source.wait()).status == "done"
    assert "what was the word?" in world.sent(4)
    assert "fork: say forked" not in world.sent(4)  # the two went their own ways


@pytest.mark.parametrize("world", sorted(CLIS), indirect=True)
def test_resume_and_fork_carry_the_conversation(world: World) -> None:
    asyncio.run(_resume_then_fork(world))
    assert_no_survivors(world.mark)
    homes = list((world.root / "state" / "homes").iterdir())
    assert len(homes) == 1  # one private home, kept for the runs that resume it
    assert oct(homes[0].stat().st_mode & 0o777) == "0o700"


async def _killed_then_resumed(world: World) -> None:
    options = world.options() | {"agent_args": ["--allowedTools=Bash"]}
    first = await tether.spawn("remember PINEAPPLE, then wait", **options)
    async for update in first.updates():
        if isinstance(update, RunEvent) and tag_of(type(update.event)) == "tool-call":
            break
    assert first.pid is not None
    os.killpg(first.pid, signal.SIGKILL)  # the child, the CLI and its tool, at once
    assert (await first.wait()).status == "failed"
    again = await tether.resume(
        first.run_id, "are you back?", runs_root=options["runs_root"], db=options["db"]
    )
    result = await again.wait()
    assert result.status == "done", result.error
    assert "remember PINEAPPLE, then wait" in world.sent(-1)


@pytest.mark.parametrize("world", [("claude", KILLED)], indirect=True)
def test_claude_code_resumes_after_a_sigkill(world: World) -> None:
    asyncio.run(_killed_then_resumed(world))


async def _gemini(world: World) -> None:
    options = world.options()
    first = await tether.spawn("remember the word PINEAPPLE", **options)
    assert (await first.wait()).status == "done"
    again = await tether.resume(
        first.run_id, "what was the word?", runs_root=options["runs_root"], db=options["db"]
    )
    result = await again.wait()
    # Gemini CLI 0.61.0 advertises loadSession, yet its ACP server finds none of the
    # sessions it saved: the run fails at its start with Gemini CLI's own reason.
    assert result.status == "failed"
    assert "could not load the session (session/load)" in (result.error or "")
    assert "No previous sessions found" in (result.error or "")
    assert len(world.server.model_requests()) == 1  # nothing was sent on a lost conversation


def test_gemini_cli_refuses_to_load_its_own_session_and_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "state"))
    with open_model_server(CONVERSATION) as server:
        world = World(tmp_path, "gemini", server)
        asyncio.run(_gemini(world))
    assert_no_survivors(world.mark)
