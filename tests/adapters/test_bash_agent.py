"""``--agent bash-agent`` against the scripted model server: the task on stdin until EOF,
stream-json with ``session_start`` first, ``stop end_turn`` twice per answer,
``--session`` for follow-ups, SIGINT as its Ctrl-C.

Every process test runs against ``tests/doubles/bash_agent_like.py`` (a double with the
real program's outside behaviour), and ALSO against the real bash-agent when
``TETHER_BASH_AGENT`` names its ``agent.sh`` (a checkout of lloydzhou/bash-agent, with its
``awk/`` and ``tools.json`` beside it): those runs find the program through that variable,
as a user's would, so they test the adapter's lookup too. CI has no copy of the real
program (it is not packaged), so there only the double's cases exist (no skips to read past).
:class:`BashAgentStream` is also fed the recorded shapes of a real session
(``tests/framing/fixtures``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.support.gates import ToolGate
from tether.modelserver import ModelServer, open_model_server
from tether.runtime.child.adapters.bash_agent import BashAgentStream, session_name

from .cli_helpers import (
    assert_no_survivors,
    check_wire,
    cli_env,
    daemon_client,
    kill_marked,
    read_events,
)
from .test_claude import of, until

DOUBLE = Path(__file__).parents[1] / "doubles" / "bash_agent_like.py"
REAL = os.environ.get("TETHER_BASH_AGENT", "")
SESSION = Path(__file__).parents[1] / "framing" / "fixtures" / "bash_agent_session.stream.jsonl"


def bash(command: str, text: str = "Running it.") -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": "Bash", "arguments": {"command": command}}]}


class World:
    """One test's model server, HOME and process mark, and which bash-agent runs: the
    double (given as the command) or the real one (found through ``TETHER_BASH_AGENT``)."""

    def __init__(self, root: Path, server: ModelServer, program: str) -> None:
        self.root = root
        self.server = server
        # bash-agent runs under `set -u`: without a key it dies before calling the model
        extra = {"ANTHROPIC_BASE_URL": f"{server.url}/v1", "ANTHROPIC_API_KEY": "test-key"}
        if program == "real":
            extra["TETHER_BASH_AGENT"] = REAL
        self.env = cli_env(root, sys.executable, **extra)
        self.mark = self.env["TETHER_TEST_MARK"]
        self.work = root / "work"
        self.work.mkdir()
        self.command = [sys.executable, str(DOUBLE)] if program == "double" else []

    def run_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tether", "run", "--no-stdin", "--agent", "bash-agent"]
        argv += [*args, "--", *self.command] if self.command else [*args]
        return subprocess.run(
            argv, capture_output=True, text=True, env=self.env, cwd=self.work, timeout=120
        )

    async def spawn(self, task: str, **options: Any) -> tether.RunHandle:
        if self.command:
            options["argv"] = self.command
        return await tether.spawn(
            task,
            agent="bash-agent",
            cwd=self.work,
            env=self.env,
            runs_root=self.root / "runs",
            db=self.root / "runs.db",
            **options,
        )

    def checked(self, run_dir: Path) -> list[dict[str, Any]]:
        events = read_events(run_dir / "events.jsonl")
        check_wire(events, read_events(run_dir / "control.jsonl"))
        assert_no_survivors(self.mark)
        return events

    def bodies(self) -> list[str]:
        return [json.dumps(r["body"]) for r in self.server.model_requests()]


@pytest.fixture(params=["double", "real"] if REAL else ["double"])
def make_world(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[list[Any]], World]]:
    program: str = request.param
    managers: list[Any] = []
    worlds: list[World] = []

    def make(script: list[Any]) -> World:
        manager = open_model_server(script, log=tmp_path / f"requests{len(managers)}.jsonl")
        managers.append(manager)
        world = World(tmp_path / f"w{len(worlds)}", manager.__enter__(), program)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        kill_marked(world.mark)
    for manager in managers:
        manager.__exit__(None, None, None)


# -- the translator on a real session's shapes -----------------------------------------------


def test_the_stream_of_a_real_session_gives_one_answer_per_stop_pair() -> None:
    stream = BashAgentStream()
    events = [e for line in SESSION.read_bytes().splitlines() for e in stream.receive(line)]
    assert events[0] == {"type": "info", "summary": "bash-agent session 20261201-101500-3f2a"}
    ends = [e["stop-reason"] for e in events if e["type"] == "llm-end"]
    # two tool-use calls, two answers each ending `stop end_turn` twice: one llm-end each
    assert ends == ["tool-use", "tool-use", "stop", "stop"]
    answers = [e["text"] for e in events if e["type"] == "assistant-text"]
    assert answers == ["There are two files: a.txt and b.txt.", "The sub-agent agrees: 2 files."]
    assert stream.final_text == "The sub-agent agrees: 2 files."
    assert stream.error == "Response truncated (max_tokens reached)"
    call = next(e for e in events if e["type"] == "tool-call")
    assert call["arguments"] == {"command": "ls -1", "timeout": 1.5}
    assert stream.usage.input == 1200 + 1500 + 1700 + 300 + 1800
    assert not [e for e in events if e["type"] == "error" and e["source"] == "adapter"]


def test_session_names_are_safe() -> None:
    assert session_name("20261201T101500-ab/../x") == "tether-20261201T101500-ab-..-x"


# -- real processes ----------------------------------------------------------------------------


def test_run_a_task_with_a_tool_call(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([bash("echo hello from the tool"), {"text": "The tool said hello."}])
    done = world.run_cli("say hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("The tool said hello.")
    runs = sorted((world.root / "tether-home").glob("runs/*/events.jsonl"))
    events = world.checked(runs[0].parent)
    assert of(events, "tool-result")[0]["result"] == "hello from the tool"  # as `$(...)` keeps it
    assert len(of(events, "turn-complete")) == 1  # one answer, though bash-agent stops twice
    result = events[-2]
    assert (result["final-text"], result["stop-reason"], result["context"]) == (
        "The tool said hello.",
        "stop",
        "complete",
    )
    assert '"say hello"' in world.bodies()[0]  # the task reached it through stdin


def test_follow_up_goes_on_in_its_session(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([{"text": "First answer.", "delay_ms": 800}, {"text": "Second answer."}])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("first question")
        updates = handle.updates()
        await until(updates, "agent-started")
        ack = await handle.follow_up("SECOND QUESTION")
        assert ack.status == "accepted"
        await until(updates, "follow-up-injected", ref=ack.ref)
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "done", result.error
    assert result.final_text == "Second answer."
    events = world.checked(run_dir)
    assert [e["text"] for e in of(events, "assistant-text")] == ["First answer.", "Second answer."]
    first, second = world.bodies()
    assert "SECOND QUESTION" in second
    assert "first question" in second  # --session went on from the first process
    assert "First answer." in second
    assert "SECOND QUESTION" not in first


def test_a_steer_is_its_next_input_in_the_same_turn(
    make_world: Callable[[list[Any]], World],
    tmp_path: Path,
    tool_gate: Callable[[Path], ToolGate],
) -> None:
    gate = tool_gate(tmp_path / "gate")  # the tool runs until the steer is acked
    world = make_world(
        [bash(f"{gate.command}; echo slept"), {"text": "Slept."}, {"text": "Steered."}]
    )

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("start")
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
    assert result.final_text == "Steered."
    events = world.checked(run_dir)
    assert len(of(events, "turn-started")) == 1
    assert "ALSO CHECK THE TESTS" in world.bodies()[2]


def test_finalize_interrupts_it_and_answers_the_note(
    make_world: Callable[[list[Any]], World],
) -> None:
    world = make_world([bash("sleep 60"), {"text": "Final answer from what I have."}])

    async def go() -> tuple[tether.RunResult, Path]:
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
    assert [e["stop-reason"] for e in of(events, "turn-complete")] == ["aborted", "stop"]
    assert events[-2]["context"] == "partial"
    assert "WRAP UP NOW" in world.bodies()[-1]


def test_cancel_ends_its_whole_group(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([bash("sleep 60")])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long")
        updates = handle.updates()
        await until(updates, "tool-call")
        await handle.cancel()
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "cancelled"
    world.checked(run_dir)  # no process outlived it: not the double, not its `sleep 60`


def test_the_deadline_ends_it_inside_a_tool(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([bash("sleep 60")])

    async def go() -> tuple[tether.RunResult, Path]:
        handle = await world.spawn("work long", deadline_s=15)
        updates = handle.updates()
        await until(updates, "tool-call")
        return await handle.wait(), handle.run_dir.path

    result, run_dir = asyncio.run(go())
    assert result.status == "timed-out", result
    events = world.checked(run_dir)
    assert events[-1]["error"] == "run deadline exceeded"


def test_the_default_finalize_lead_leaves_bash_agent_its_stop_time(
    make_world: Callable[[list[Any]], World],
) -> None:
    """``tether run --deadline`` while bash-agent is inside a tool that outlives its
    SIGINT: the default lead was a fifth of the deadline (2.4 s of 12), shorter than the
    adapter's own 5 s wait for bash-agent to stop, so the run timed out with no answer.
    The lead now counts the agent's stop time (its registry entry's ``stop_s``)."""
    world = make_world([bash("trap '' INT; sleep 60"), {"text": "Final answer."}])
    done = world.run_cli("--deadline", "12", "work long")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Final answer.\n"
    run_dir = sorted((world.root / "tether-home" / "runs").iterdir())[-1]
    events = world.checked(run_dir)
    assert [e["stop-reason"] for e in of(events, "turn-complete")] == ["aborted", "stop"]


def test_a_model_error_fails_the_turn(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([{"error": "overloaded"}])
    done = world.run_cli("try")
    runs = sorted((world.root / "tether-home").glob("runs/*/events.jsonl"))
    events = world.checked(runs[0].parent)
    assert of(events, "turn-complete")[0]["stop-reason"] == "error"
    assert any("HTTP" in e.get("error", "") for e in of(events, "error")), done.stderr


def test_without_a_key_it_dies_and_says_why(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([{"text": "never asked"}])
    del world.env["ANTHROPIC_API_KEY"]
    done = world.run_cli("try")
    runs = sorted((world.root / "tether-home").glob("runs/*/events.jsonl"))
    events = world.checked(runs[0].parent)
    assert of(events, "turn-complete")[0]["stop-reason"] == "error"
    (error,) = of(events, "error")
    assert "ANTHROPIC_API_KEY: unbound variable" in error["error"], done.stderr
    assert "\x1b" not in error["error"]
    assert not world.bodies()


def test_the_daemon_spawns_bash_agent(make_world: Callable[[list[Any]], World]) -> None:
    world = make_world([{"text": "Daemon answer."}, {"text": "Asked again."}])
    with daemon_client(world.env) as client:
        params: dict[str, Any] = {
            "name": "ba",
            "task": "hi",
            "agent": "bash-agent",
            "cwd": str(world.work),
        }
        if world.command:
            params["argv"] = world.command
        status = client.call("agent.spawn", params | {"wait": True, "timeout_s": 60})
        assert status["answer"]["text"] == "Daemon answer."
        assert status["harness"] == "bash-agent"
        asked = client.call("agent.ask", {"name": "ba", "message": "again", "timeout": 60})
        assert asked["reply"] == "Asked again."
        stopped = client.call("agent.stop", {"name": "ba", "mode": "close", "timeout_s": 30})
        assert stopped["ended"] is True
        run_dir = Path(client.call("agent.status", {"name": "ba"})["run_dir"])
    world.checked(run_dir)  # the daemon is gone too now: nothing may be left
    assert '"content": "hi"' in world.bodies()[1]  # the ask went on in the same --session
