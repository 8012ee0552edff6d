"""The Codex, pi and ACP adapters against the REAL CLIs (codex app-server, pi --mode rpc,
gemini --acp, claude-code-acp), each pointed at the scripted model server.

Every test runs once per CLI (see :data:`agent_world.SETUPS`) with its own HOME and model
server, through `tether run --agent NAME`, the parent API (`tether.spawn(agent=NAME)`)
or the daemon; each run's events.jsonl is checked for the wire invariants and no process
may outlive it. Under CI=true a CLI that is not installed fails the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.support.daemon import connect_answering
from tests.support.gates import ToolGate
from tether.display.boundary import tool_output
from tether.modelserver import open_model_server
from tether.runtime.child.adapters.config import plan_config, write_config
from tether.runtime.child.adapters.registry import AGENTS, ack_notes

from .agent_world import SETUPS, Setup, World, of, shell, until
from .cli_helpers import cli_env, kill_marked, read_events, require_cli, require_program, survivors


class Worlds:
    """Makes the worlds of one test for one CLI; ``setup`` says which."""

    def __init__(self, name: str, setup: Setup, program: str, tmp_path: Path) -> None:
        self.name = name
        self.setup = setup
        self.program = program
        self.tmp_path = tmp_path
        self.managers: list[Any] = []
        self.worlds: list[World] = []

    def __call__(self, script: list[Any]) -> World:
        log = self.tmp_path / f"requests{len(self.managers)}.jsonl"
        manager = open_model_server(script, log=log)
        server = manager.__enter__()
        self.managers.append(manager)
        world = World(self.setup, self.tmp_path / f"w{len(self.worlds)}", self.program, server)
        self.worlds.append(world)
        return world

    def shell(self, command: str) -> list[dict[str, Any]]:
        return shell(self.setup, command)

    def close(self) -> None:
        for world in self.worlds:
            kill_marked(world.mark)
        for manager in self.managers:
            manager.__exit__(None, None, None)


ALL = sorted(SETUPS)
# gemini and claude-code-acp share one adapter: every control runs against gemini (the
# named agent); claude-code-acp, slow to start too, gets a prompt, a tool and a cancel
# (the suite's time).
FULL = [name for name in ALL if name != "claude-code-acp"]
each_cli = pytest.mark.parametrize("make_world", ALL, indirect=True)
each_full_cli = pytest.mark.parametrize("make_world", FULL, indirect=True)


@pytest.fixture
def make_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Worlds]:
    setup = SETUPS[request.param]
    program = _require_command(setup) if setup.command else require_cli(setup.program)
    worlds = Worlds(request.param, setup, program, tmp_path)
    yield worlds
    worlds.close()


def _require_command(setup: Setup) -> str:
    return require_program(setup.command[0], AGENTS[setup.agent].package or setup.command[0])


# -- tether run --agent NAME ----------------------------------------------------------------


# Longer than one wire line (final-text-path), non-ASCII and escapes, no two lines alike
# (Gemini CLI cuts a reply that repeats itself).
LONG_ANSWER = "".join(f'línea {n:04} — "ß→✓" \\ {n * 7919 % 10007}\t🚀\n' for n in range(2400))


@each_cli
def test_run_two_tool_calls_that_really_run_and_a_long_answer(make_world: Worlds) -> None:
    # the tool also writes to the run's inbox: the CLI passes TETHER_INBOX_PATH on
    progress = '{"type":"progress","text":"from the tool"}'
    report = f"echo '{progress}' >> \"$TETHER_INBOX_PATH\""
    client = make_world.setup.client
    commands = [f"echo made > marker.txt; echo shown-output; {report}", "printf 'ß→✓' > two.txt"]
    calls = [{"name": client.shell_tool, "arguments": client.tool_args(c)} for c in commands]
    tools = {"thinking": "Two at once…", "text": "Running both.", "tool_calls": calls}
    answer = {"text": LONG_ANSWER, "usage": {"input": 30, "output": 7}}
    world = make_world([tools, answer])
    done = world.run_cli("make the marker")
    assert done.returncode == 0, done.stderr
    assert done.stdout == LONG_ANSWER
    assert (world.work / "marker.txt").read_text() == "made\n"
    assert (world.work / "two.txt").read_text() == "ß→✓"
    run_dir = world.cli_run_dir()
    events = world.checked(run_dir)
    assert "make the marker" in world.model_texts(1)
    assert any(" session " in e.get("summary", "") for e in of(events, "info"))
    assert (run_dir / "agent-session").read_text().strip()
    assert of(events, "assistant-text-delta")
    assert of(events, "turn-complete")[0]["stop-reason"] == "stop"
    ids = [e["id"] for e in of(events, "tool-call")]
    assert len(ids) == 2
    assert sorted(e["tool-call-id"] for e in of(events, "tool-result")) == sorted(ids)
    assert not [e for e in of(events, "tool-result") if e["is-error?"]]
    # what a display shows: each command in its call, the output as text (not raw JSON)
    shown = [json.dumps(e.get("arguments"), ensure_ascii=False) for e in of(events, "tool-call")]
    for command in commands:
        assert any(command.split(";")[0] in arguments for arguments in shown), shown
    outputs = [tool_output(e["result"]) for e in of(events, "tool-result")]
    assert any(isinstance(o, str) and "shown-output" in o for o in outputs), outputs
    assert [e["stop-reason"] for e in of(events, "llm-end")][-1] == "stop"
    assert events[-2]["truncated?"] is True
    assert events[-2]["final-text-path"]
    assert LONG_ANSWER.startswith(events[-2]["final-text"])
    if make_world.setup.reports_usage:
        assert of(events, "turn-complete")[0]["usage"]["output"] > 0
    inbox = read_events(run_dir / "inbox.jsonl")
    assert {"type": "progress", "text": "from the tool"} in inbox


@each_full_cli
def test_steer_and_follow_up_during_a_tool(
    make_world: Worlds, tmp_path: Path, tool_gate: Callable[[Path], ToolGate]
) -> None:
    answers = [{"text": "Answer."}] * 3  # enough for every CLI's way of taking them in
    gate = tool_gate(tmp_path / "gate")  # the tool runs until both controls are acked
    world = make_world([*make_world.shell(f"{gate.command}; echo slept"), *answers])

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("start")
        updates = handle.updates()
        await until(updates, "tool-call")
        steer = await handle.steer("ALSO CHECK THE TESTS")
        follow = await handle.follow_up("AND THEN SUMMARIZE")
        assert (steer.status, follow.status) == ("accepted", "accepted")
        # an ack says what a control that is not native really does (the table's words)
        notes = ack_notes(AGENTS[world.setup.agent])
        assert (steer.reason or None) == notes.get("steer")
        assert (follow.reason or None) == notes.get("follow-up")
        gate.open()
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Answer."
    events = world.checked(run_dir)
    steered = of(events, "steering-injected")
    followed = of(events, "follow-up-injected")
    assert [e["text"] for e in steered] == ["ALSO CHECK THE TESTS"]
    assert [e["text"] for e in followed] == ["AND THEN SUMMARIZE"]
    # one turn: native steers join the running one; ACP's steer waits for the prompt to
    # end and opens the next prompt of the same turn (a turn ending with a steer queued
    # looked idle to the parent, whose automatic close then refused the follow-up)
    assert len(of(events, "turn-started")) == 1
    texts = world.all_model_texts()
    assert "ALSO CHECK THE TESTS" in texts
    assert "AND THEN SUMMARIZE" in texts


@each_full_cli
def test_finalize_interrupts_a_tool_and_gets_a_last_answer(make_world: Worlds) -> None:
    call = make_world.shell("sleep 60")[0]
    world = make_world([call, {"text": "Final answer from what I have."}])

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("work long")
        updates = handle.updates()
        await until(updates, "tool-call")
        ack = await handle.finalize("WRAP UP NOW")
        assert ack.status == "accepted"
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Final answer from what I have."
    events = world.checked(run_dir)
    stops = [e["stop-reason"] for e in of(events, "turn-complete")]
    assert stops == ["aborted", "stop"]
    assert "WRAP UP NOW" in world.all_model_texts()
    assert "sleep 60" not in "".join(survivors(world.mark))


@each_cli
def test_cancel_inside_a_tool_ends_everything(make_world: Worlds) -> None:
    # a tool that never ends by itself: a cancel that waited for it would never return
    # (how soon it returns is a figure: bench/agents_check.py --scenario spawn-cancel)
    world = make_world(make_world.shell("sleep infinity"))

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("work long")
        updates = handle.updates()
        await until(updates, "tool-call")
        await handle.cancel()
        await until(updates, "exit")
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "cancelled"
    events = world.checked(run_dir)
    assert events[-1]["status"] == "cancelled"


@each_full_cli
def test_the_deadline_ends_a_run_inside_a_tool(make_world: Worlds) -> None:
    world = make_world(make_world.shell("sleep 60"))

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("work long", deadline_s=world.setup.deadline_s)
        updates = handle.updates()
        await until(updates, "tool-call")
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "timed-out", result
    events = world.checked(run_dir)
    assert events[-1]["error"] == "run deadline exceeded"


@each_full_cli
def test_the_cli_killed_mid_turn_ends_the_turn_and_the_run_with_its_error(
    make_world: Worlds,
) -> None:
    world = make_world(make_world.shell("sleep 60"))

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("work long")
        updates = handle.updates()
        await until(updates, "tool-call")
        world.kill_cli()
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "failed", result  # it can run no more turns
    events = world.checked(run_dir)
    errors = [e["error"] for e in of(events, "error")]
    died = ("killed by signal 9", "closed its stdout")
    assert any(d in e for e in errors for d in died), errors
    assert of(events, "turn-complete")[-1]["stop-reason"] == "error"  # the turn, then the run
    assert any(d in events[-1]["error"] for d in died), events[-1]


@pytest.mark.parametrize("make_world", ["codex", "gemini"], indirect=True)
def test_a_cli_killed_between_turns_ends_the_run_at_once(make_world: Worlds) -> None:
    """Idle, a dead CLI would fail every turn it was given: the run ends ``failed`` (a
    later run resumes its session: tests/daemon/fleet/test_agent_resume.py)."""
    world = make_world([{"text": "First answer."}])

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("answer once", close_when_idle=False)
        updates = handle.updates()
        await until(updates, "turn-complete")
        world.kill_cli()
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "failed", result
    assert "killed by signal 9" in str(result.error) or "closed its stdout" in str(result.error)
    world.checked(run_dir)


@pytest.mark.parametrize("make_world", ["codex"], indirect=True)
@pytest.mark.parametrize("end", ["kill", "cancel"])
def test_a_model_call_ended_mid_stream_is_closed(make_world: Worlds, end: str) -> None:
    # as the built-in agent closes one: assistant-stream-end, then llm-end (error/aborted)
    world = make_world([{"text": ["streaming "] * 40, "chunk_ms": 400}])

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("stream slowly")
        updates = handle.updates()
        await until(updates, "assistant-text-delta")
        if end == "kill":
            world.kill_cli()
        else:
            await handle.cancel()
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == ("failed" if end == "kill" else "cancelled"), result
    events = world.checked(run_dir)
    kinds = [e["type"] for e in events if e["type"].startswith(("llm-", "assistant-stream"))]
    assert kinds == ["llm-start", "assistant-stream-end", "llm-end"]
    stop = {"kill": "error", "cancel": "aborted"}[end]
    assert of(events, "llm-end")[0]["stop-reason"] == stop


# -- the daemon -----------------------------------------------------------------------------


@each_full_cli
def test_the_daemon_spawns_the_agent(make_world: Worlds) -> None:
    world = make_world([{"text": "Daemon answer."}])
    socket_dir = Path("/tmp") / f"td{os.getpid()}"
    socket_dir.mkdir(mode=0o700, exist_ok=True)
    env = dict(world.env, TETHER_SOCKET=str(socket_dir / "d.sock"))
    stderr = (world.root / "daemon.stderr").open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "daemon", "--foreground"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        client = connect_answering(socket_dir / "d.sock", daemon)
        with client:
            client.settimeout(120)
            params: dict[str, Any] = {
                "name": "cli",
                "task": "hi",
                "agent": world.setup.agent,
                "agent_args": world.agent_args,
                "cwd": str(world.work),
            }
            if world.setup.command:
                params["argv"] = list(world.setup.command)
            status = client.call("agent.spawn", params | {"wait": True, "timeout_s": 90})
            assert status["answer"]["text"] == "Daemon answer."
            stopped = client.call("agent.stop", {"name": "cli", "mode": "close", "timeout_s": 30})
            assert stopped["ended"] is True
            run_dir = Path(client.call("agent.status", {"name": "cli"})["run_dir"])
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        stderr.close()
        for leftover in socket_dir.iterdir():
            leftover.unlink()
        socket_dir.rmdir()
    world.checked(run_dir)


MODEL = "tether-test-model-7"


def requested_model(request: dict[str, Any]) -> str:
    """The model a logged request asked for (Gemini names it in the path)."""
    body = request["body"]
    if isinstance(body, dict) and body.get("model"):
        return str(body["model"])
    path = str(request["path"])
    return path.split("/models/", 1)[-1].split(":", 1)[0] if "/models/" in path else ""


def without_model(args: list[str]) -> list[str]:
    """A client's --agent-arg values without their own ``--model NAME``."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--model":
            skip = True
        else:
            out.append(arg)
    return out


@each_cli
def test_the_runs_model_reaches_the_model_request(make_world: Worlds) -> None:
    world = make_world([{"text": "Hi."}])
    world.agent_args = without_model(world.agent_args)
    if make_world.name == "pi":  # pi knows only the models of its models.json: the run's
        write_config(plan_config("pi", world.server.url, world.env["HOME"], model=MODEL))

    async def go() -> tether.Result:
        handle = await world.spawn("hello", model=MODEL)
        return await handle.wait()

    result = asyncio.run(go())
    assert result.status == "done", result.error
    asked = [requested_model(r) for r in world.server.model_requests()]
    assert asked, "no model request reached the server"
    assert set(asked) == {MODEL}, asked


def test_a_model_given_twice_fails_the_run(tmp_path: Path) -> None:
    program = require_cli("pi")
    env = cli_env(tmp_path, program)
    argv = [sys.executable, "-m", "tether", "run", "--no-stdin", "--agent", "pi"]
    argv += ["--model", "a", "--agent-arg=--model", "--agent-arg=b", "hi"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 4
    assert "the model is given twice" in done.stderr


@pytest.mark.parametrize(
    ("agent", "program"), [("codex", "codex"), ("pi", "pi"), ("gemini", "gemini")]
)
def test_a_missing_cli_fails_the_run(agent: str, program: str, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TETHER_HOME": str(tmp_path / "t")}
    argv = [sys.executable, "-m", "tether", "run", "--no-stdin", "--agent", agent, "hi"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 4
    assert f"{program} is not on PATH" in done.stderr


@pytest.mark.parametrize("make_world", ["claude-code-acp"], indirect=True)
def test_a_permission_request_with_no_one_to_ask_is_refused_at_once(make_world: Worlds) -> None:
    world = make_world([*make_world.shell("touch should-not-exist"), {"text": "Refused."}])
    world.agent_args = []  # its default session mode asks before Bash
    done = world.run_cli("touch a file")
    assert done.returncode == 0, done.stderr
    assert "no one to ask: not a terminal" in done.stderr
    assert not (world.work / "should-not-exist").exists()
    run_dir = world.cli_run_dir()
    events = world.checked(run_dir)
    (decision,) = read_events(run_dir / "inbox.jsonl")
    assert (decision["type"], decision["by"]) == ("approval_decision", "no-one")
    assert "touch should-not-exist" in decision["summary"]
    assert [e for e in of(events, "info") if "no one to ask" in e.get("summary", "")]
