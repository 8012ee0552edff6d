"""The built-in agent saves its conversation as the run goes and a later run resumes or
forks it (``tether child --resume FILE [--fork]``). Checked on the model server's side:
the resumed run's first model request carries the first run's turns."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.agent.conversation import (
    UNANSWERED_TOOL,
    ConversationLog,
    load_conversation,
    repaired,
)
from tether.agent.provider import AssistantTurn, TextBlock, ToolOutcome, ToolUse, UserTurn
from tether.modelserver import ModelServer, open_model_server
from tether.runtime.parent.updates import RunEvent
from tether.wire import tag_of


def spawn_options(root: Path, server: ModelServer) -> dict[str, Any]:
    return {
        "provider": "anthropic",
        "env": {"ANTHROPIC_BASE_URL": server.url},
        "runs_root": root / "runs",
        "db": root / "runs.db",
    }


def conversation(handle: tether.RunHandle) -> Path:
    return Path(handle.run_dir.path) / "conversation.jsonl"  # type: ignore[attr-defined]


def sent_messages(server: ModelServer, n: int) -> str:
    return json.dumps(server.model_requests()[n - 1]["body"]["messages"])


async def _a_done_run_resumes_and_the_model_sees_its_turns(tmp_path: Path) -> None:
    script = [{"text": "noted: PINEAPPLE"}, {"text": "it was PINEAPPLE"}]
    with open_model_server(script) as server:
        options = spawn_options(tmp_path, server)
        first = await tether.spawn("remember the word PINEAPPLE", **options)
        assert (await first.wait()).status == "done"
        saved = conversation(first)
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        second = await tether.spawn(
            "what was the word?", child_args=["--resume", str(saved)], **options
        )
        result = await second.wait()
    assert result.status == "done"
    assert result.final_text == "it was PINEAPPLE"
    request = sent_messages(server, 2)
    assert "remember the word PINEAPPLE" in request
    assert "noted: PINEAPPLE" in request
    items = load_conversation(conversation(second))
    assert isinstance(items, list)
    assert [type(i).__name__ for i in items] == ["UserTurn", "AssistantTurn"] * 2


async def _a_sigkilled_run_resumes_with_its_unanswered_tool_call_answered(
    tmp_path: Path,
) -> None:
    call = {"name": "bash", "arguments": {"command": "sleep 60"}}
    script = [{"text": "PINEAPPLE: running it", "tool_calls": [call]}, {"text": "back again"}]
    with open_model_server(script) as server:
        options = spawn_options(tmp_path, server)
        first = await tether.spawn("remember PINEAPPLE, then sleep", **options)
        async for update in first.updates():
            if isinstance(update, RunEvent) and tag_of(type(update.event)) == "tool-call":
                break
        os.killpg(first.pid, signal.SIGKILL)  # the child's whole group, mid-tool
        assert (await first.wait()).status == "failed"
        second = await tether.spawn(
            "are you back?", child_args=["--resume", str(conversation(first))], **options
        )
        result = await second.wait()
    assert result.status == "done", result.error
    messages = server.model_requests()[1]["body"]["messages"]
    text = json.dumps(messages)
    assert "remember PINEAPPLE, then sleep" in text
    assert "PINEAPPLE: running it" in text
    results = [
        block
        for message in messages
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1
    assert UNANSWERED_TOOL in json.dumps(results[0])


async def _a_fork_starts_from_the_conversation_and_leaves_it_as_it_was(
    tmp_path: Path,
) -> None:
    script = [{"text": "noted: MANGO"}, {"text": "fork: MANGO"}, {"text": "source: MANGO"}]
    with open_model_server(script) as server:
        options = spawn_options(tmp_path, server)
        source = await tether.spawn("remember MANGO", **options)
        await source.wait()
        saved = conversation(source)
        digest = hashlib.sha256(saved.read_bytes()).hexdigest()
        fork = await tether.spawn(
            "fork: the word?", child_args=["--resume", str(saved), "--fork"], **options
        )
        assert (await fork.wait()).status == "done"
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == digest
        again = await tether.spawn(
            "source: the word?", child_args=["--resume", str(saved)], **options
        )
        assert (await again.wait()).status == "done"
    assert "remember MANGO" in sent_messages(server, 2)
    assert "fork: the word?" not in sent_messages(server, 3)  # the two went their own ways


async def _a_conversation_that_cannot_be_read_fails_the_run_at_its_start(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "user", "text": "ok"}\nnot json\n')
    with open_model_server([]) as server:
        handle = await tether.spawn(
            "go on", child_args=["--resume", str(bad)], **spawn_options(tmp_path, server)
        )
        result = await handle.wait()
    assert result.status == "failed"
    assert "bad line 2" in (result.error or "")
    assert server.model_requests() == []


def test_load_is_total_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    log = ConversationLog(path, [UserTurn("a")])
    log.append(AssistantTurn((TextBlock("b"), ToolUse("t1", "bash", {"command": "x"}))))
    log.close()
    with path.open("ab") as out:
        out.write(b'{"type": "user", "te')  # a line cut short by a kill: left out
    items = load_conversation(path)
    assert isinstance(items, list)
    assert len(items) == 2
    fixed = repaired(items)
    assert fixed[-1] == ToolOutcome("t1", "bash", UNANSWERED_TOOL, True)
    assert repaired(fixed) == fixed
    assert "larger than" in str(load_conversation(path, limit=10))
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b'{"type":"tool-use","x":' + b"[" * 5000 + b"]" * 5000 + b"}\n")
    assert "bad line 1" in str(load_conversation(deep))
    os.symlink(path, tmp_path / "link.jsonl")
    assert isinstance(load_conversation(tmp_path / "link.jsonl"), str)  # never followed
    with pytest.raises(FileExistsError):
        ConversationLog(path)  # created exclusively: an existing file is never appended to


def test_a_done_run_resumes_and_the_model_sees_its_turns(tmp_path: Path) -> None:
    asyncio.run(_a_done_run_resumes_and_the_model_sees_its_turns(tmp_path))


def test_a_sigkilled_run_resumes_with_its_unanswered_tool_call_answered(tmp_path: Path) -> None:
    asyncio.run(_a_sigkilled_run_resumes_with_its_unanswered_tool_call_answered(tmp_path))


def test_a_fork_starts_from_the_conversation_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    asyncio.run(_a_fork_starts_from_the_conversation_and_leaves_it_as_it_was(tmp_path))


def test_a_conversation_that_cannot_be_read_fails_the_run_at_its_start(tmp_path: Path) -> None:
    asyncio.run(_a_conversation_that_cannot_be_read_fails_the_run_at_its_start(tmp_path))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=2000))
def test_any_bytes_load_as_a_conversation_or_a_reason(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "any.jsonl"
    path.write_bytes(data)
    items = load_conversation(path)
    assert isinstance(items, list | str)
    if isinstance(items, list):
        assert repaired(repaired(items)) == repaired(items)


@given(
    st.sampled_from(["builtin", "claude", "codex", "pi", "gemini", "acp"]),
    st.text(max_size=300),
    st.booleans(),
)
def test_any_session_is_handed_on_or_refused_with_a_reason(
    agent: str, session: str, fork: bool
) -> None:
    from tether.runtime.child.adapters.commands import Resume, resume_refusal

    refusal = resume_refusal(agent, Resume(session, fork=fork))
    if refusal is None:
        assert not session.startswith("-")
        assert session.isprintable()
