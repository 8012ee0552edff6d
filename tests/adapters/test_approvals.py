"""Approvals with the REAL CLIs (Claude Code, Codex, Gemini CLI, claude-code-acp, pi with a
permission-gate extension), each configured to ask, against the scripted model server.

The model asks for one shell command with a side effect (``touch made.txt``). The request
reaches the run's approval desk and waits with a key (the run's inbox holds it); nothing
runs while it waits; the answer goes down as an ``answer`` control and back to the CLI in
its own protocol: deny -> nothing runs and the run still ends with the model's text,
approve -> the command runs. A rule decides without a request being written.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import tether
from tether.modelserver import open_model_server

from .agent_world import CHECKED, Setup, World
from .cli_helpers import kill_marked, read_events, require_cli, require_program

FIXTURES = Path(__file__).parent / "fixtures"
COMMAND = "touch made.txt"
FINAL = "Finished here."
BEFORE = "Making the file."


class Asking(NamedTuple):
    """How a CLI is made to ask: arguments it drops and adds, what the model's call adds."""

    drop: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    tool_extra: dict[str, Any] = {}  # noqa: RUF012 (read only)
    # claude-code-acp answers Claude Code's prompt {deny, interrupt: true} on a reject:
    # its turn ends at once, with the text the model gave before the call
    deny_ends_turn: bool = False


ASKING = {
    "claude": Asking(drop=("--allowedTools=Bash",)),
    # Codex asks when the model wants out of its sandbox (its own on-request policy)
    "codex": Asking(
        add=("-c", 'sandbox_mode="workspace-write"'),
        tool_extra={"sandbox_permissions": "require_escalated", "justification": "a file"},
    ),
    "gemini": Asking(drop=("--yolo",)),
    "claude-code-acp": Asking(drop=("--session-mode=bypassPermissions",), deny_ends_turn=True),
    "pi": Asking(add=("--extension", str(FIXTURES / "pi_gate.ts"))),
}


@pytest.fixture(params=sorted(ASKING))
def asking(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Asker]:
    setup = CHECKED[request.param]
    if setup.command:
        program = require_program(setup.command[0], setup.command[0])
    else:
        program = require_cli(setup.program)
    asker = Asker(request.param, setup, program, tmp_path)
    yield asker
    asker.close()


class Asker:
    """Worlds of one CLI configured to ask (see :data:`ASKING`)."""

    def __init__(self, name: str, setup: Setup, program: str, tmp_path: Path) -> None:
        self.name, self.setup, self.program, self.tmp_path = name, setup, program, tmp_path
        self.how = ASKING[name]
        self.managers: list[Any] = []
        self.worlds: list[World] = []

    def world(self) -> World:
        client = self.setup.client
        args = {**client.tool_args(COMMAND), **self.how.tool_extra}
        call = {"name": client.shell_tool, "arguments": args}
        script = [
            {"text": BEFORE, "tool_calls": [call]},
            {"text": FINAL},
        ]
        manager = open_model_server(script, log=self.tmp_path / f"requests{len(self.worlds)}")
        self.managers.append(manager)
        root = self.tmp_path / f"w{len(self.worlds)}"
        world = World(self.setup, root, self.program, manager.__enter__())
        world.agent_args = [a for a in world.agent_args if a not in self.how.drop]
        world.agent_args += list(self.how.add)
        self.worlds.append(world)
        return world

    def close(self) -> None:
        for world in self.worlds:
            kill_marked(world.mark)
        for manager in self.managers:
            manager.__exit__(None, None, None)


def inbox(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "inbox.jsonl"
    return read_events(path) if path.exists() else []


def answered_run(world: World, decision: str) -> tuple[tether.Result, Path, str]:
    async def go() -> tuple[tether.Result, Path, str]:
        handle = await world.spawn("make the file")
        approval = await anext(handle.approvals())
        key = approval.key
        run, _, offset = key.rpartition(":")
        assert run == handle.run_id
        raw = (handle.run_dir.path / "inbox.jsonl").read_bytes()[int(offset) :]
        request = json.loads(raw.split(b"\n", 1)[0])
        assert request["type"] == "approval_request"
        assert {**request, "msg_key": key} == approval.message
        assert not (world.work / "made.txt").exists()  # nothing ran while it waits
        answer = approval.approve if decision == "approve" else approval.deny
        ack = await answer("said the test")
        assert ack.status == "applied", ack
        again = await handle.send("answer", key=key, decision="approve")
        assert again.status == "rejected"
        return await handle.wait(), handle.run_dir.path, key

    return asyncio.run(go())


def test_deny_runs_nothing_and_the_run_still_finishes(asking: Asker) -> None:
    world = asking.world()
    result, run_dir, key = answered_run(world, "deny")
    assert result.status == "done", result.error
    assert result.final_text == (BEFORE if asking.how.deny_ends_turn else FINAL)
    assert not (world.work / "made.txt").exists()
    world.checked(run_dir)
    (denial,) = result.denied
    assert (denial.key, denial.by, denial.text) == (key, "person", "said the test")
    request, decision = [m for m in inbox(run_dir) if m["type"].startswith("approval")]
    assert request["kind"] in ("shell", "dialog")
    assert COMMAND in json.dumps(request)
    assert (decision["key"], decision["decision"], decision["by"]) == (key, "deny", "person")


def test_approve_runs_the_command(asking: Asker) -> None:
    world = asking.world()
    result, run_dir, _ = answered_run(world, "approve")
    assert result.status == "done", result.error
    assert result.final_text == FINAL
    assert (world.work / "made.txt").exists()
    world.checked(run_dir)


def test_a_rule_decides_without_a_request(asking: Asker) -> None:
    world = asking.world()
    rule = "dialog" if asking.name == "pi" else "shell:*touch made.txt*"

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("make the file", approve=[rule])
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert (world.work / "made.txt").exists()
    world.checked(run_dir)
    lines = inbox(run_dir)
    assert [m["type"] for m in lines] == ["approval_decision"]
    assert (lines[0]["by"], lines[0]["rule"]) == ("rule", rule)
