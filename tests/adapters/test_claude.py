"""The Claude Code adapter against the REAL `claude` CLI, pointed at the scripted model server.

Each test gets its own HOME and model server. Runs go through `tether run --agent
claude`, the parent API (`tether.spawn(agent="claude")`) and the daemon; every run's
events.jsonl is checked for the wire invariants and no process may outlive it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.support.daemon import connect_answering
from tests.support.gates import ToolGate
from tether.modelserver import ModelServer, open_model_server
from tether.runtime.parent.updates import RunEvent
from tether.wire import tag_of

from .cli_helpers import (
    MARK,
    assert_no_survivors,
    check_wire,
    cli_env,
    kill_marked,
    read_events,
    require_cli,
    survivors,
)

BASH = "--agent-arg=--allowedTools=Bash"
Event = dict[str, Any]


def bash(command: str, text: str = "Running it.") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


class Claude:
    """One test's world: the CLI, a model server, a private HOME, the survivor check."""

    def __init__(self, root: Path, program: str, server: ModelServer) -> None:
        self.root = root
        self.server = server
        self.env = cli_env(
            root, program, ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test-key"
        )
        self.mark = self.env[MARK]
        self.work = root / "work"
        self.work.mkdir()

    def run_cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tether", "run", "--no-stdin", "--agent", "claude", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env, cwd=self.work, timeout=timeout
        )

    def events(self, run_dir: Path) -> list[Event]:
        return read_events(run_dir / "events.jsonl")

    def controls(self, run_dir: Path) -> list[Event]:
        return read_events(run_dir / "control.jsonl")

    def checked(self, run_dir: Path) -> list[Event]:
        events = self.events(run_dir)
        check_wire(events, self.controls(run_dir))
        assert_no_survivors(self.mark)
        return events

    def cli_run_dir(self) -> Path:
        runs = sorted((self.root / "tether-home").glob("**/events.jsonl"))
        assert len(runs) == 1, runs
        return runs[0].parent

    async def spawn(self, task: str, *args: str, **options: Any) -> tether.RunHandle:
        return await tether.spawn(
            task,
            agent="claude",
            agent_args=list(args),
            cwd=self.work,
            env=self.env,
            runs_root=self.root / "runs",
            db=self.root / "runs.db",
            **options,
        )

    def model_texts(self, n: int) -> str:
        """Everything the n-th model call (1-based) was sent, as one JSON text."""
        return json.dumps(self.server.model_requests()[n - 1]["body"])


@pytest.fixture
def claude_cli() -> str:
    return require_cli("claude")


@pytest.fixture
def make_claude(tmp_path: Path, claude_cli: str) -> Iterator[Callable[[list[Any]], Claude]]:
    servers: list[Any] = []
    worlds: list[Claude] = []

    def make(script: list[Any]) -> Claude:
        manager = open_model_server(script, log=tmp_path / f"requests{len(servers)}.jsonl")
        server = manager.__enter__()
        servers.append(manager)
        world = Claude(tmp_path / f"w{len(worlds)}", claude_cli, server)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        kill_marked(world.mark)
    for manager in servers:
        manager.__exit__(None, None, None)


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


# -- tether run --agent claude --------------------------------------------------------------


def test_run_a_plain_prompt(make_claude: Callable[[list[Any]], Claude]) -> None:
    world = make_claude([{"thinking": "Easy.", "text": "Hello from the scripted model."}])
    done = world.run_cli("say hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello from the scripted model."
    run_dir = world.cli_run_dir()
    events = world.checked(run_dir)
    assert events[-2]["final-text"] == "Hello from the scripted model."
    session = (run_dir / "agent-session").read_text().strip()  # for claude --resume
    assert any(session in e.get("summary", "") for e in of(events, "info"))
    assert of(events, "assistant-thinking-delta")
    assert of(events, "turn-complete")[0]["stop-reason"] == "stop"
    assert of(events, "turn-complete")[0]["usage"]["output"] > 0
    assert "say hello" in world.model_texts(1)


def test_run_a_tool_call_that_really_runs(make_claude: Callable[[list[Any]], Claude]) -> None:
    world = make_claude([bash("echo made > marker.txt; cat marker.txt"), {"text": "It is made."}])
    done = world.run_cli("--agent-arg", "--allowedTools", "--agent-arg", "Bash", "make the marker")
    assert done.returncode == 0, done.stderr
    assert (world.work / "marker.txt").read_text() == "made\n"
    events = world.checked(world.cli_run_dir())
    call = of(events, "tool-call")[0]
    assert call["name"] == "Bash"
    assert call["arguments"]["command"].startswith("echo made")
    result = of(events, "tool-result")[0]
    assert result["tool-call-id"] == call["id"]
    assert result["is-error?"] is False
    assert "made" in result["result"]["content"]
    assert [e["stop-reason"] for e in of(events, "llm-end")] == ["tool-use", "stop"]
    assert events[-2]["final-text"] == "It is made."


def test_a_long_answer_comes_whole_through_final_text_path(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    chunks = [f"part {i} " + "x" * 9990 + "\n" for i in range(10)]  # ~100 KB
    world = make_claude([{"text": chunks}])
    done = world.run_cli("write a lot")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n") == "".join(chunks).rstrip("\n")
    events = world.checked(world.cli_run_dir())
    result = events[-2]
    assert result["type"] == "result"
    assert "final-text-path" in result


def test_a_permission_prompt_with_no_one_to_ask_is_denied_at_once_and_says_why(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([bash("touch should-not-exist"), {"text": "Denied, fine."}])
    done = world.run_cli("touch a file")  # no --allowedTools: Claude Code asks
    assert done.returncode == 0, done.stderr
    assert "no one to ask: not a terminal" in done.stderr
    assert not (world.work / "should-not-exist").exists()
    run_dir = world.cli_run_dir()
    events = world.checked(run_dir)
    assert of(events, "tool-result")[0]["is-error?"] is True
    (decision,) = read_events(run_dir / "inbox.jsonl")  # no request: no one could answer
    assert (decision["type"], decision["by"], decision["tool"]) == (
        "approval_decision",
        "no-one",
        "Bash",
    )
    assert "no one to ask: not a terminal" in world.model_texts(2)


def test_tether_run_model_reaches_the_model_request(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([{"text": "Modelled."}])
    done = world.run_cli("--model", "claude-run-model-5", "hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Modelled."
    world.checked(world.cli_run_dir())
    assert [r["body"]["model"] for r in world.server.model_requests()] == ["claude-run-model-5"]


def test_a_claude_that_cannot_start_fails_the_run(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([{"text": "never"}])
    done = world.run_cli("--agent-arg=--no-such-flag", "hi")
    assert done.returncode == 4
    events = world.checked(world.cli_run_dir())
    assert events[-1]["status"] == "failed"
    assert "no-such-flag" in events[-1]["error"]  # Claude Code's own complaint, from stderr
    assert world.server.model_requests() == []


def test_a_missing_claude_fails_the_run(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TETHER_HOME": str(tmp_path / "t")}
    argv = [sys.executable, "-m", "tether", "run", "--no-stdin", "--agent", "claude", "hi"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 4
    assert "claude is not on PATH" in done.stderr


# -- the parent API ------------------------------------------------------------------------


def test_tether_run_and_open_run_take_the_agent_keywords(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([{"text": "Blocking answer."}, {"text": "Handle answer."}])
    where = {"cwd": world.work, "env": world.env, "db": world.root / "runs.db"}
    result = tether.run("one", agent="claude", runs_root=world.root / "a", **where)
    assert result.status == "done", result.error
    assert result.final_text == "Blocking answer."
    with tether.open_run("two", agent="claude", runs_root=world.root / "b", **where) as run:
        assert run.wait(timeout=120).final_text == "Handle answer."
    for root in ("a", "b"):
        (events,) = (world.root / root).glob("*/events.jsonl")
        world.checked(events.parent)


def test_steer_reaches_the_model_inside_the_turn(
    make_claude: Callable[[list[Any]], Claude],
    tmp_path: Path,
    tool_gate: Callable[[Path], ToolGate],
) -> None:
    gate = tool_gate(tmp_path / "gate")  # the tool runs until the steer is acked
    steered = {"text": "Steered answer."}
    world = make_claude([bash(f"{gate.command}; echo slept"), steered, steered])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("start", "--allowedTools=Bash")
        updates = handle.updates()
        await until(updates, "tool-call")
        ack = await handle.steer("ALSO CHECK THE TESTS")
        assert ack.status == "accepted"
        gate.open()
        injected = await until(updates, "steering-injected")
        assert injected["ref"] == ack.ref
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Steered answer."
    events = world.checked(run_dir)
    assert len(of(events, "turn-started")) == 1  # the steer joined the running turn
    # Claude Code takes a message written mid-turn in before its next model call, or, when
    # the tool's result reached it first, as one more pass of the same turn: the steer
    # reaches the model in the second call or the third, never only in a later turn
    later = [world.model_texts(n) for n in range(2, len(world.server.model_requests()) + 1)]
    assert any("ALSO CHECK THE TESTS" in text for text in later[:2]), later


def test_a_steer_during_the_last_answer_is_one_more_pass_of_the_turn(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([{"text": "First answer.", "delay_ms": 1500}, {"text": "After steer."}])

    async def go() -> tuple[tether.Result, Path]:
        handle = await world.spawn("answer")
        updates = handle.updates()
        await until(updates, "llm-start")  # the model call that has no tool calls
        ack = await handle.steer("ONE MORE THING")
        await until(updates, "steering-injected", ref=ack.ref)
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "After steer."
    events = world.checked(run_dir)
    assert len(of(events, "turn-complete")) == 1
    assert "ONE MORE THING" in world.model_texts(2)


def test_a_model_error_ends_the_turn_with_it(make_claude: Callable[[list[Any]], Claude]) -> None:
    world = make_claude([{"error": "scripted overload"}])
    done = world.run_cli("fail please")
    assert done.returncode == 4
    events = world.checked(world.cli_run_dir())
    (complete,) = of(events, "turn-complete")
    assert complete["stop-reason"] == "error"
    assert "scripted overload" in json.dumps(of(events, "agent-turn-complete"))


def test_follow_up_is_the_next_user_turn(make_claude: Callable[[list[Any]], Claude]) -> None:
    world = make_claude([{"text": "First.", "delay_ms": 800}, {"text": "Second."}])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("one")
        updates = handle.updates()
        await until(updates, "llm-start")
        ack = await handle.follow_up("AND THEN TWO")
        assert ack.status == "accepted"
        await until(updates, "follow-up-injected", ref=ack.ref)
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Second."
    events = world.checked(run_dir)
    texts = [e["text"] for e in of(events, "assistant-text")]
    assert texts == ["First.", "Second."]
    assert len(of(events, "follow-up-injected")) == 1
    assert "AND THEN TWO" in world.model_texts(2)
    assert of(events, "turn-complete")[-1]["usage"]["input"] > 0


def test_finalize_interrupts_a_tool_and_answers_without_tools(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([bash("sleep 60"), {"text": "Final answer from what I have."}])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long", "--allowedTools=Bash")
        updates = handle.updates()
        await until(updates, "tool-call")
        ack = await handle.finalize("WRAP UP NOW")
        assert ack.status == "accepted"
        assert isinstance(ack.reason, str)
        assert ack.reason.startswith("emulated: ")  # the capability table, in the ack
        assert "--tools" in ack.reason
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Final answer from what I have."
    events = world.checked(run_dir)
    stops = [e["stop-reason"] for e in of(events, "turn-complete")]
    assert stops == ["aborted", "stop"]
    final_request = world.server.model_requests()[-1]["body"]
    assert final_request.get("tools") in (None, [])  # the final turn had no tools
    assert "WRAP UP NOW" in json.dumps(final_request)
    assert "sleep 60" not in "".join(survivors(world.mark))


def test_cancel_inside_a_tool_ends_everything(make_claude: Callable[[list[Any]], Claude]) -> None:
    # a tool that never ends by itself: a cancel that waited for it would never return
    # (how soon it returns is a figure: bench/agents_check.py --scenario spawn-cancel)
    world = make_claude([bash("sleep infinity")])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long", "--allowedTools=Bash")
        updates = handle.updates()
        await until(updates, "tool-call")
        await handle.cancel()
        await until(updates, "exit")
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "cancelled"
    events = world.checked(run_dir)
    assert events[-1]["status"] == "cancelled"


def test_the_deadline_ends_a_run_inside_a_tool(make_claude: Callable[[list[Any]], Claude]) -> None:
    world = make_claude([bash("sleep 60")])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long", "--allowedTools=Bash", deadline_s=15)
        updates = handle.updates()
        await until(updates, "tool-call")
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "timed-out", result
    events = world.checked(run_dir)
    assert events[-1]["error"] == "run deadline exceeded"


def test_claude_killed_mid_turn_ends_the_turn_and_the_run_with_its_error(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([bash("sleep 60")])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long", "--allowedTools=Bash")
        updates = handle.updates()
        await until(updates, "tool-call")
        pids = [int(line.split()[0]) for line in survivors(world.mark) if "stream-json" in line]
        assert pids, survivors(world.mark)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "failed"  # the turn, then the run: it can run no more turns
    events = world.checked(run_dir)
    errors = [e["error"] for e in of(events, "error")]
    assert any("killed by signal 9" in e for e in errors), errors
    assert of(events, "turn-complete")[-1]["stop-reason"] == "error"


# -- the daemon ----------------------------------------------------------------------------


def test_the_daemon_spawns_claude_by_provider_synonym(
    make_claude: Callable[[list[Any]], Claude], tmp_path: Path
) -> None:

    world = make_claude([{"text": "Daemon answer."}])
    socket_dir = Path("/tmp") / f"tc{os.getpid()}"
    socket_dir.mkdir(mode=0o700, exist_ok=True)
    env = dict(world.env, TETHER_SOCKET=str(socket_dir / "d.sock"))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "daemon", "--foreground"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = connect_answering(socket_dir / "d.sock", daemon)
        with client:
            client.settimeout(120)
            params = {"name": "cc", "task": "hi", "provider": "claude", "cwd": str(world.work)}
            params["model"] = "claude-daemon-model-3"  # reaches Claude Code as --model
            status = client.call("agent.spawn", params | {"wait": True, "timeout_s": 90})
            assert status["answer"]["text"] == "Daemon answer."
            assert [r["body"]["model"] for r in world.server.model_requests()] == [
                "claude-daemon-model-3"
            ]
            stopped = client.call("agent.stop", {"name": "cc", "mode": "close", "timeout_s": 30})
            assert stopped["ended"] is True
            run_dir = Path(client.call("agent.status", {"name": "cc"})["run_dir"])
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        for leftover in socket_dir.iterdir():
            leftover.unlink()
        socket_dir.rmdir()
    world.checked(run_dir)  # the daemon is gone too now: nothing may be left


# -- tether demo --agent claude --------------------------------------------------------------


def test_the_demo_steers_finalizes_and_cancels_real_claude(tmp_path: Path, claude_cli: str) -> None:
    env = cli_env(tmp_path, claude_cli)
    argv = [sys.executable, "-m", "tether", "demo", "--agent", "claude"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for line in ("steered: done", "deadline: done", "cancelled: cancelled"):
        assert f"{line} (expected" in out
    assert "sent steer" in out
    assert_no_survivors(env[MARK])


def test_the_demo_names_the_agents_it_has(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "tether", "demo", "--agent", "nope"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no demo for --agent nope" in done.stderr
