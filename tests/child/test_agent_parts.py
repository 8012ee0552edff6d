"""The child's parts in-process: tools, the scripted provider, the registry, the result
line, process groups. Real processes and files throughout; no mocks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support.waits import loop_pass, pid_alive, wait_pid_file, wait_until_async

from tether.agent.provider import (
    BlockEnd,
    Finished,
    ModelRequest,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolUse,
    UserTurn,
)
from tether.agent.registry import ProviderSetupError, get_provider
from tether.agent.scripted import ScriptedProvider, ScriptError, chunk_text, load_script
from tether.agent.tools import OUTPUT_CAP_BYTES, ToolContext, cap_output
from tether.agent.toolset import UnknownToolError, select_tools
from tether.procs import (
    NEW_GROUP,
    group_alive,
    group_has_live_members,
    terminate_group,
    terminate_group_sync,
)
from tether.runtime.child.files import result_fields
from tether.wire import Result, Sender

# -- tools ------------------------------------------------------------------------------


def call(name: str, arguments: dict[str, Any], cwd: Path, **context: Any) -> tuple[str, bool]:
    registry = select_tools(None)
    return asyncio.run(registry.call(name, arguments, ToolContext(cwd=cwd, **context)))


def test_cap_output_keeps_head_and_tail() -> None:
    data = b"a" * 60 + b"b" * 60
    text = cap_output(data, 40)
    assert text.startswith("a" * 20)
    assert text.endswith("b" * 20)
    assert "[... 80 bytes omitted (output capped at 40 bytes) ...]" in text
    assert cap_output(b"short", 40) == "short"


def test_bash_runs_in_cwd_and_reports_failure(tmp_path: Path) -> None:
    assert call("bash", {"command": "pwd"}, tmp_path) == (f"{tmp_path}\n", False)
    text, is_error = call("bash", {"command": "echo oops >&2; exit 3"}, tmp_path)
    assert is_error
    assert text == "oops\n[exit status 3]"
    text, is_error = call("bash", {}, tmp_path)
    assert is_error
    assert "command" in text


def test_bash_output_is_capped(tmp_path: Path) -> None:
    text, is_error = call("bash", {"command": "head -c 300000 /dev/zero | tr '\\0' x"}, tmp_path)
    assert not is_error
    assert "bytes omitted" in text
    assert len(text.encode()) < OUTPUT_CAP_BYTES + 200


def test_bash_timeout_kills_the_group(tmp_path: Path) -> None:
    command = "sleep 30 & echo $! > bg.pid; sleep 30"
    text, is_error = call("bash", {"command": command, "timeout_s": 0.3}, tmp_path)
    assert is_error
    assert "timed out after 0.3 s" in text
    assert not pid_alive(int((tmp_path / "bg.pid").read_text()))


def test_bash_background_job_does_not_hang_the_call(tmp_path: Path) -> None:
    text, is_error = call("bash", {"command": "sleep 30 & echo $! > bg.pid; echo ok"}, tmp_path)
    assert (text, is_error) == ("ok\n", False)
    assert not pid_alive(int((tmp_path / "bg.pid").read_text()))


def test_cancelling_bash_kills_the_group_at_once(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, bool, bool]:
        registry = select_tools(["bash"])
        context = ToolContext(cwd=tmp_path)
        # the pid file appears whole (renamed into place): `> bg.pid` alone creates it empty first
        command = "trap '' TERM; sleep 30 & echo $! > bg.tmp && mv bg.tmp bg.pid; wait"
        task = asyncio.ensure_future(registry.call("bash", {"command": command}, context))
        bg = tmp_path / "bg.pid"
        await wait_until_async(bg.exists, "the tool's background pid", files=[bg])
        pid = int(bg.read_text())
        group = os.getpgid(pid)
        assert group != os.getpgrp()  # the tool runs bash in a group of its own
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the moment the cancelled call returns, nothing of the group may be running
        return group, pid_alive(pid), group_has_live_members(group)

    group, sleeper_alive, group_live = asyncio.run(scenario())
    # SIGTERM is ignored by the whole group, so only the SIGKILL after the grace ends it
    assert (sleeper_alive, group_live) == (False, False), f"group {group} outlived the cancel"


def test_read_write_edit(tmp_path: Path) -> None:
    assert call("write", {"path": "d/f.txt", "content": "one two"}, tmp_path)[1] is False
    assert call("read", {"path": "d/f.txt"}, tmp_path) == ("one two", False)
    assert call("edit", {"path": "d/f.txt", "old": "two", "new": "2"}, tmp_path)[1] is False
    assert (tmp_path / "d" / "f.txt").read_text() == "one 2"
    text, is_error = call("edit", {"path": "d/f.txt", "old": "zzz", "new": ""}, tmp_path)
    assert is_error
    assert "not found" in text
    (tmp_path / "twice.txt").write_text("x x")
    twice = call("edit", {"path": "twice.txt", "old": "x", "new": "y"}, tmp_path)[0]
    assert "found 2 times" in twice
    text, is_error = call("read", {"path": "missing.txt"}, tmp_path)
    assert is_error
    assert "No such file" in text


def test_unknown_tool_and_allow_list(tmp_path: Path) -> None:
    text, is_error = call("teleport", {}, tmp_path)
    assert is_error
    assert "unknown tool 'teleport'" in text
    assert select_tools([]).names == []
    assert select_tools(["read", "bash", "read"]).names == ["read", "bash"]
    assert select_tools(None).names == [
        "bash", "read", "write", "edit", "subagent", "report", "ask"
    ]  # fmt: skip
    with pytest.raises(UnknownToolError, match="unknown tool nope"):
        select_tools(["bash", "nope"])
    specs = select_tools(["bash"]).specs()
    assert specs[0].parameters["required"] == ["command"]


# -- the scripted provider --------------------------------------------------------------


def collect(provider: ScriptedProvider, tool_choice: str = "auto") -> list[object]:
    request = ModelRequest(model="m", messages=(UserTurn("hi"),), tool_choice=tool_choice)  # type: ignore[arg-type]

    async def run() -> list[object]:
        return [event async for event in provider.stream(request)]

    return asyncio.run(run())


def test_scripted_streams_thinking_text_tools_and_finish() -> None:
    provider = ScriptedProvider(
        script=[
            {
                "thinking": ["a", "b"],
                "text": "hello",
                "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
                "usage": {"input": 3, "output": 4},
            }
        ]
    )
    events = collect(provider)
    assert events[:3] == [ThinkingDelta(0, "a"), ThinkingDelta(0, "b"), events[2]]
    assert isinstance(events[2], BlockEnd)
    assert events[3] == TextDelta(1, "hello")
    assert isinstance(events[5], ToolUse)
    assert events[5].id == "call-1-1"
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.stop_reason == "tool_use"
    assert (finished.usage.input, finished.usage.output) == (3, 4)


def test_scripted_drops_tool_calls_under_tool_choice_none() -> None:
    provider = ScriptedProvider(script=[{"tool_calls": [{"name": "bash"}]}])
    events = collect(provider, "none")
    assert not any(isinstance(e, ToolUse) for e in events)
    assert isinstance(events[-1], Finished)
    assert events[-1].stop_reason == "end_turn"


def test_scripted_error_and_exhaustion() -> None:
    provider = ScriptedProvider(script=[{"error": "rate limited"}])
    with pytest.raises(ProviderError, match="rate limited"):
        collect(provider)
    with pytest.raises(ProviderError, match="replies are used up"):
        collect(provider)


def test_scripted_delay_is_cancellable() -> None:
    provider = ScriptedProvider(script=[{"text": "late", "delay_ms": 60_000}])

    async def run() -> None:
        request = ModelRequest(model="m", messages=())
        task = asyncio.ensure_future(anext(aiter(provider.stream(request))))
        await loop_pass()  # the task ran to its first wait: the 60 s delay
        assert not task.done()
        task.cancel()
        # a delay that ignored the cancel would end in "late", not CancelledError
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ({"text": "x"}, "must be a JSON list"),
        ([1], "reply 1: must be an object"),
        ([{"txt": "x"}], "unknown key 'txt'"),
        ([{"delay_ms": -1}], "delay_ms"),
        ([{"tool_calls": [{"arguments": {}}]}], "string name"),
        ([{"usage": {"input": "many"}}], "usage: input"),
    ],
)
def test_bad_scripts_are_explained(tmp_path: Path, script: object, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(script))
    with pytest.raises(ScriptError, match=message):
        load_script(path)


def test_chunk_text_prefers_spaces() -> None:
    text = "word " * 40
    chunks = chunk_text(text, 12)
    assert "".join(chunks) == text
    assert all(len(c) <= 12 for c in chunks)
    assert chunks[0] == "word word "


def test_registry(tmp_path: Path) -> None:
    with pytest.raises(ProviderSetupError, match="unknown provider 'nope'"):
        get_provider("nope", None)
    assert get_provider("scripted", None).replies is None  # the built-in first try
    (tmp_path / "s.json").write_text("[]")
    options = {"script": str(tmp_path / "s.json")}
    provider = get_provider("scripted", "my-model", options=options, script=None)
    assert provider.name == "scripted"


# -- the result line --------------------------------------------------------------------


def test_result_fits_or_spills(tmp_path: Path) -> None:
    usage = {"input": 1, "output": 2}
    short = result_fields("short", "stop", usage, run="r", spill_dirs=[tmp_path])
    assert short == {
        "final_text": "short",
        "stop_reason": "stop",
        "usage": usage,
        "context": "complete",
    }
    partial = result_fields("cut", "aborted", usage, run="r", spill_dirs=[], context="partial")
    assert partial["context"] == "partial"
    text = "\x01" * 60_000  # escapes to six bytes each: the cut must halve to fit
    long = result_fields(text, "stop", usage, run="r", spill_dirs=[tmp_path])
    assert long["truncated"] is True
    assert Path(long["final_text_path"]).read_text() == text
    assert text.startswith(long["final_text"])
    line = Sender("r", last_seq=5).next(Result, **long)
    assert isinstance(line, bytes)
    assert len(line) < 65536


def test_result_without_a_writable_spill_dir_keeps_the_cut(tmp_path: Path) -> None:
    text = "é" * 40_000
    fields = result_fields(text, "stop", {}, run="r", spill_dirs=[tmp_path / "missing"])
    assert "final_text_path" not in fields
    assert fields["truncated"] is True
    assert len(fields["final_text"].encode()) <= 65536 - 1024
    assert text.startswith(fields["final_text"])


# -- process groups ---------------------------------------------------------------------


def test_terminate_group_sync_kills_a_term_ignoring_grandchild(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    command = f"trap '' TERM; sleep 30 & echo $! > {pid_file}; wait"
    proc = subprocess.Popen(["bash", "-c", command], **NEW_GROUP)
    pid = wait_pid_file(pid_file, proc=proc)
    code = terminate_group_sync(proc, grace_s=0.2)
    assert code == -9
    assert not pid_alive(pid)


def test_terminate_group_async_and_gone_groups() -> None:
    async def scenario() -> tuple[int | None, int | None]:
        proc = await asyncio.create_subprocess_exec("sleep", "30", **NEW_GROUP)
        first = await terminate_group(proc, grace_s=1.0)
        second = await terminate_group(proc, grace_s=1.0)  # already gone: harmless
        return first, second

    first, second = asyncio.run(scenario())
    assert first == -15
    assert second == -15
    assert not group_alive(2**22 + 7)  # beyond pid_max: no such group
    with pytest.raises(ValueError, match="refusing"):
        group_alive(1)


def test_scripted_without_a_script_lists_then_answers_the_task() -> None:
    import asyncio

    from tether.agent.provider import ModelRequest, UserTurn
    from tether.agent.scripted import ScriptedProvider

    provider = ScriptedProvider()

    async def call() -> list[object]:
        request = ModelRequest(model="scripted", messages=(UserTurn("count files"),))
        return [event async for event in provider.stream(request)]

    first = asyncio.run(call())
    assert any(type(e).__name__ == "ToolUse" for e in first)
    second = asyncio.run(call())
    text = "".join(getattr(e, "text", "") for e in second if type(e).__name__ == "TextDelta")
    assert text.startswith("You asked: count files")
    assert "no model was called" in text
