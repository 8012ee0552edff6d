"""One real agent CLI under test: its private HOME and config pointed at a scripted model
server, runs through `tether run`, the parent API and the daemon, and the checks.

:data:`SETUPS` says, per CLI, its entry in :data:`tether.modelserver.clients.CLIENTS`
(how it is pointed at the server, its shell tool) and what the tests need beyond it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import tether
from tether.modelserver import ModelServer
from tether.modelserver.clients import CLIENTS, Client
from tether.runtime.parent.updates import RunEvent
from tether.wire import tag_of

from .cli_helpers import MARK, assert_no_survivors, check_wire, cli_env, read_events, survivors

Event = dict[str, Any]


class Setup(NamedTuple):
    """One CLI under test: its client entry and what the tests need to know beyond it."""

    client: Client
    program: str  # the CLI looked up for require_cli (an agent name in AGENTS)
    cli_match: tuple[str, ...] = ()  # its command line has one of these (to find it)
    cli_title: str = ""  # the process title it gives itself once started (pi: "pi")
    reports_usage: bool = True  # claude-code-acp 0.16.2 sends no usage
    deadline_s: float = 20.0  # a deadline that falls inside a first tool call (slow starts)

    @property
    def agent(self) -> str:
        return self.client.agent

    @property
    def command(self) -> tuple[str, ...]:
        return self.client.command


SETUPS: dict[str, Setup] = {
    "pi": Setup(CLIENTS["pi"], "pi", cli_match=("--mode rpc",), cli_title="pi", deadline_s=12.0),
    "codex": Setup(CLIENTS["codex"], "codex", cli_match=("app-server",), deadline_s=10.0),
    "gemini": Setup(CLIENTS["gemini"], "gemini", cli_match=("--acp",), deadline_s=25.0),
    "claude-code-acp": Setup(
        CLIENTS["claude-code-acp"], "acp", cli_match=("claude-code-acp",), reports_usage=False
    ),
}
# Claude Code has its own tests (test_claude.py); bench/agents_check.py plays every CLI.
CHECKED: dict[str, Setup] = {
    "claude": Setup(CLIENTS["claude"], "claude", cli_match=("--input-format",)),
    **SETUPS,
}


class World:
    """One test's world: the CLI, a model server, a private HOME, the survivor check."""

    def __init__(self, setup: Setup, root: Path, program: str, server: ModelServer) -> None:
        self.setup = setup
        self.root = root
        self.server = server
        self.env = cli_env(root, program)
        extra_env, self.agent_args = setup.client.configure(server.url, Path(self.env["HOME"]))
        self.env.update(extra_env)
        self.mark = self.env[MARK]
        self.work = root / "work"
        self.work.mkdir()

    def run_cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        agent = ["--agent", self.setup.agent, *(f"--agent-arg={a}" for a in self.agent_args)]
        tail = ["--", *self.setup.command] if self.setup.command else []
        argv = [sys.executable, "-m", "tether", "run", "--no-stdin", *agent, *args, *tail]
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env, cwd=self.work, timeout=timeout
        )

    async def spawn(self, task: str, **options: Any) -> tether.RunHandle:
        return await tether.spawn(
            task,
            agent=self.setup.agent,
            agent_args=self.agent_args,
            argv=list(self.setup.command) or None,
            cwd=self.work,
            env=self.env,
            runs_root=self.root / "runs",
            db=self.root / "runs.db",
            **options,
        )

    def checked(self, run_dir: Path) -> list[Event]:
        events = read_events(run_dir / "events.jsonl")
        check_wire(events, read_events(run_dir / "control.jsonl"))
        assert_no_survivors(self.mark)
        return events

    def cli_run_dir(self) -> Path:
        runs = sorted((self.root / "tether-home").glob("**/events.jsonl"))
        assert len(runs) == 1, runs
        return runs[0].parent

    def model_texts(self, n: int) -> str:
        """Everything the n-th model call (1-based) was sent, as one JSON text."""
        return json.dumps(self.server.model_requests()[n - 1]["body"])

    def all_model_texts(self) -> str:
        return json.dumps([r["body"] for r in self.server.model_requests()])

    def cli_pids(self) -> list[int]:
        """The CLI's own processes (not the adapter child, not tools)."""
        found = []
        for line in survivors(self.mark):
            pid, _, command = line.partition(" ")
            words = command.split()
            if "-m tether" in command or not words:
                continue
            if any(m in command for m in self.setup.cli_match) or words == [self.setup.cli_title]:
                found.append(int(pid))
        return found

    def kill_cli(self) -> None:
        pids = self.cli_pids()
        assert pids, survivors(self.mark)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def shell(setup: Setup, command: str, text: str = "Running it.") -> list[dict[str, Any]]:
    """A reply that runs ``command`` with the CLI's shell tool."""
    client = setup.client
    call = {"name": client.shell_tool, "arguments": client.tool_args(command)}
    return [{"text": text, "tool_calls": [call]}]


async def until(updates: AsyncIterator[Any], kind: str, **fields: Any) -> Event:
    """The next event of ``kind`` (with ``fields``) from the run's updates."""
    async for update in updates:
        if not isinstance(update, RunEvent) or tag_of(type(update.event)) != kind:
            continue
        event = json.loads(update.raw)
        if all(event.get(k) == v for k, v in fields.items()):
            return event
    raise AssertionError(f"the run ended without a {kind} event")


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["type"] == kind]
