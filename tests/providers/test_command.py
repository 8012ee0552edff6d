"""CommandProvider with real bash and Python commands: stdin JSON, streamed stdout, failures,
and cancellation that takes the whole process group down."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.gates import ToolGate
from tests.support.waits import pid_alive, wait_gone, wait_until_async
from tether.agent.provider import (
    AssistantTurn,
    BlockEnd,
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ToolOutcome,
    ToolSpec,
    ToolUse,
    Usage,
    UserTurn,
)
from tether.agent.providers.command import CommandProvider

HELLO = ModelRequest(model="echo-1", messages=(UserTurn("Hi"),))


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def python_command(tmp_path: Path, body: str) -> str:
    return shlex.join([sys.executable, script(tmp_path, "model.py", body)])


def bash_command(tmp_path: Path, body: str) -> str:
    return shlex.join(["bash", script(tmp_path, "model.sh", body)])


async def collect(
    p: CommandProvider, request: ModelRequest = HELLO
) -> tuple[list[StreamEvent], ProviderError | None]:
    events: list[StreamEvent] = []
    try:
        async for event in p.stream(request):
            events.append(event)
    except ProviderError as exc:
        return events, exc
    finally:
        await p.aclose()
    return events, None


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_success_streams_stdout_and_receives_the_conversation(tmp_path: Path) -> None:
    seen = tmp_path / "stdin.json"
    command = python_command(
        tmp_path,
        f"""
import os, sys
data = sys.stdin.buffer.read()
open({str(seen)!r}, "wb").write(data)
out = sys.stdout.buffer
out.write(b"pgid-ok " if os.getpgrp() == os.getpid() else b"same-group ")
out.flush()
out.write(b"caf\\xc3")
out.flush()
out.write(b"\\xa9 \\xff!")
""",
    )
    request = ModelRequest(
        model="",
        system="Be kind.",
        messages=(
            UserTurn("Run it"),
            AssistantTurn(
                (
                    ThinkingBlock("hmm", "sig"),
                    TextBlock("ok"),
                    ToolUse("t1", "bash", {"command": "ls"}),
                )
            ),
            ToolOutcome("t1", "bash", "boom", is_error=True),
        ),
        tools=(ToolSpec("bash", "Run", {"type": "object"}),),
        tool_choice="none",
        max_tokens=77,
        thinking_budget=2048,
    )
    p = CommandProvider(model="local-1", options={"command": command})
    events, error = asyncio.run(collect(p, request))
    assert error is None
    assert text_of(events) == "pgid-ok café \ufffd!"
    assert events[-2:] == [
        BlockEnd(0, TextBlock("pgid-ok café \ufffd!")),
        Finished("end_turn", Usage()),
    ]
    assert all(e.index == 0 for e in events if isinstance(e, TextDelta))
    assert json.loads(seen.read_bytes()) == {
        "model": "local-1",
        "system": "Be kind.",
        "max_tokens": 77,
        "thinking_budget": 2048,
        "tool_choice": "none",
        "tools": [{"name": "bash", "description": "Run", "parameters": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Run it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "t1",
                "name": "bash",
                "content": "boom",
                "is_error": True,
            },
        ],
    }


def test_chunks_stream_before_the_command_exits(
    tmp_path: Path, tool_gate: Callable[[Path], ToolGate]
) -> None:
    gate = tool_gate(tmp_path / "gate")
    command = bash_command(tmp_path, f"cat >/dev/null\necho first\n{gate.command}\necho second\n")

    async def main() -> list[StreamEvent]:
        p = CommandProvider(options={"command": command})
        events: list[StreamEvent] = []
        async for event in p.stream(HELLO):
            events.append(event)
            if event == TextDelta(0, "first\n"):
                gate.open()  # the command only finishes after we saw its first line
        return events

    events = asyncio.run(main())
    assert text_of(events) == "first\nsecond\n"
    assert events[-1] == Finished("end_turn")


def test_non_zero_exit_reports_the_stderr_tail(tmp_path: Path) -> None:
    command = bash_command(
        tmp_path,
        'for i in $(seq 1 40); do echo "noise $i" >&2; done\n'
        "echo partial\n"
        'echo "fatal: model not loaded" >&2\n'
        "exit 3\n",
    )
    events, error = asyncio.run(collect(CommandProvider(options={"command": command})))
    assert text_of(events) == "partial\n"
    assert not any(isinstance(e, Finished) for e in events)
    assert error is not None
    assert not error.retryable
    assert error.message.startswith("command: bash exited with status 3: noise 22\n")
    assert error.message.endswith("noise 40\nfatal: model not loaded")


def test_killed_by_signal_and_no_stderr(tmp_path: Path) -> None:
    command = bash_command(tmp_path, "kill -KILL $$\n")
    _, error = asyncio.run(collect(CommandProvider(options={"command": command})))
    assert error is not None
    assert error.message == "command: bash was killed by SIGKILL: (no stderr output)"


def test_command_that_ignores_a_large_stdin(tmp_path: Path) -> None:
    command = bash_command(tmp_path, "echo done\n")
    big = ModelRequest(model="m", messages=(UserTurn("x" * 2_000_000),))
    events, error = asyncio.run(collect(CommandProvider(options={"command": command}), big))
    assert error is None
    assert text_of(events) == "done\n"


def test_configuration_errors(tmp_path: Path) -> None:
    cases = [
        (CommandProvider(env={}), "command: no command given; pass --provider-option"),
        (CommandProvider(options={"command": "'unclosed"}), "command: cannot parse the command"),
        (
            CommandProvider(options={"command": str(tmp_path / "missing-model")}),
            f"command: cannot start {str(tmp_path / 'missing-model')!r}: No such file or directory",
        ),
        (
            CommandProvider(options={"command": "x", "cmd": "y"}),
            "command: unknown --provider-option cmd",
        ),
    ]
    for p, prefix in cases:
        events, error = asyncio.run(collect(p))
        assert events == []
        assert error is not None
        assert error.message.startswith(prefix), error.message


def test_command_from_environment(tmp_path: Path) -> None:
    command = bash_command(tmp_path, 'echo "from env $TETHER_TEST_MARK"\n')
    env = {"TETHER_COMMAND_PROVIDER": command, "PATH": "/usr/bin:/bin", "TETHER_TEST_MARK": "7"}
    events, error = asyncio.run(collect(CommandProvider(env=env)))
    assert error is None
    assert text_of(events) == "from env 7\n"


def _cancel_after_first_delta(command: str, grace: str) -> list[StreamEvent]:
    async def main() -> list[StreamEvent]:
        p = CommandProvider(options={"command": command, "kill_grace": grace})
        seen: list[StreamEvent] = []
        started = asyncio.Event()

        async def consume() -> None:
            async for event in p.stream(HELLO):
                seen.append(event)
                started.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    return asyncio.run(main())


def test_cancellation_kills_the_process_group_including_a_grandchild(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    command = bash_command(
        tmp_path, f"sleep 1000 &\necho $! > {shlex.quote(str(pidfile))}\necho started\nwait\n"
    )
    seen = _cancel_after_first_delta(command, "2")
    assert seen == [TextDelta(0, "started\n")]
    pid = int(pidfile.read_text())
    wait_gone([pid], "the sleep grandchild to end with the cancellation")


def test_cancellation_escalates_to_sigkill_when_term_is_ignored(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    command = bash_command(
        tmp_path,
        f"trap '' TERM\nsleep 1000 &\necho $! > {shlex.quote(str(pidfile))}\necho started\nwait\n",
    )
    seen = _cancel_after_first_delta(command, "0.3")
    assert seen == [TextDelta(0, "started\n")]
    pid = int(pidfile.read_text())
    wait_gone([pid], "the TERM-ignoring grandchild to end")


def test_leftover_child_holding_stdout_is_stopped_after_exit(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    command = bash_command(
        tmp_path, f"sleep 1000 &\necho $! > {shlex.quote(str(pidfile))}\necho answer\n"
    )
    p = CommandProvider(options={"command": command, "kill_grace": "0.3"})
    events, error = asyncio.run(collect(p))
    assert error is None
    assert text_of(events) == "answer\n"
    assert events[-1] == Finished("end_turn")
    wait_gone([int(pidfile.read_text())], "the leftover child to be stopped")


def test_closing_the_stream_early_stops_the_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    command = bash_command(
        tmp_path, f"sleep 1000 &\necho $! > {shlex.quote(str(pidfile))}\necho started\nwait\n"
    )

    async def main() -> StreamEvent:
        p = CommandProvider(options={"command": command})
        stream = p.stream(HELLO)
        first = await anext(stream)
        await stream.aclose()  # what `async with aclosing(...)` does when the loop stops early
        pid = int(pidfile.read_text())  # stopped by the close, while the loop still runs:
        await wait_until_async(lambda: not pid_alive(pid), "the command's end", pids=[pid])
        return first

    assert asyncio.run(main()) == TextDelta(0, "started\n")
