"""Resume and fork, agent by agent, at the adapters' sans-IO parts: the command line
(Claude Code, pi), the hand-shake (Codex, ACP), the session each records, and the
refusals (an agent without resume, a session that would read as a flag)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.agent.runner import Injection
from tether.runtime.child.adapters.acp import AcpTranslator
from tether.runtime.child.adapters.claude import final_command
from tether.runtime.child.adapters.codex import CodexTranslator
from tether.runtime.child.adapters.commands import (
    HANDSHAKES,
    Resume,
    claude_session_file,
    cli_launch,
    resume_refusal,
)
from tether.runtime.child.adapters.pi import PiTranslator
from tether.runtime.child.adapters.translate import Action, Broken, Send, Show, Started

SID = "c40ae918-22d3-415a-a1dd-e8ce36640518"


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    return [a.message for a in actions if isinstance(a, Send)]


def test_claude_resumes_by_its_session_file_and_forks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = home / ".claude" / "projects" / "-tmp-work"
    project.mkdir(parents=True)
    (project / f"{SID}.jsonl").write_text("{}\n")
    env = {"HOME": str(home)}
    assert claude_session_file(SID, env) == str(project / f"{SID}.jsonl")
    assert claude_session_file("other", env) is None
    assert claude_session_file(SID, {"CLAUDE_CONFIG_DIR": str(tmp_path)}) is None
    resumed = cli_launch("claude", ["/x/claude"], [], env, resume=Resume(SID))
    assert resumed is not None
    assert resumed.argv[-2:] == ["--resume", str(project / f"{SID}.jsonl")]
    forked = cli_launch("claude", ["/x/claude"], [], env, "m", resume=Resume(SID, fork=True))
    assert forked is not None
    assert forked.argv[-5:] == [
        "--model",
        "m",
        "--resume",
        str(project / f"{SID}.jsonl"),
        "--fork-session",
    ]
    unknown = cli_launch("claude", ["/x/claude"], [], env, resume=Resume("not-there"))
    assert unknown is not None
    assert unknown.argv[-2:] == ["--resume", "not-there"]  # Claude Code says it is not found
    # the final turn resumes the run's own session, not the one it started from
    final = final_command(forked.argv, "new-session")
    assert "--fork-session" not in final
    assert final[-4:] == ["--resume", "new-session", "--tools", ""]
    assert final.count("--resume") == 1


def test_pi_resumes_and_forks_its_session_file() -> None:
    file = "/h/.pi/agent/sessions/--w--/s.jsonl"
    resumed = cli_launch("pi", ["/x/pi", "--mode", "rpc"], ["--offline"], {}, resume=Resume(file))
    forked = cli_launch("pi", ["/x/pi"], [], {}, resume=Resume(file, fork=True))
    assert resumed is not None
    assert forked is not None
    assert resumed.argv == ["/x/pi", "--mode", "rpc", "--offline", "--session", file]
    assert forked.argv == ["/x/pi", "--fork", file]
    pi = PiTranslator()
    pi.handshake()
    state = {"sessionId": "abc", "sessionFile": file}
    answer = {"id": "tether-state", "type": "response", "success": True, "data": state}
    assert pi.receive(answer) == [Started(file)]  # the file is what --session takes
    bare = PiTranslator()
    bare.handshake()
    answer["data"] = {"sessionId": "abc"}  # pi --no-session: no file
    assert bare.receive(answer) == [Started("abc")]


@pytest.mark.parametrize(("fork", "method"), [(False, "thread/resume"), (True, "thread/fork")])
def test_codex_resumes_and_forks_in_its_handshake(fork: bool, method: str) -> None:
    codex = CodexTranslator("/work", model="m", resume=Resume("thr-1", fork=fork))
    opening = sent(codex.handshake())
    assert [m.get("method") for m in opening] == ["initialize", "initialized", method]
    assert opening[2]["params"] == {
        "threadId": "thr-1",
        "cwd": "/work",
        "model": "m",
        "excludeTurns": True,
    }
    assert opening == HANDSHAKES["codex"]("/work", "m", Resume("thr-1", fork=fork))
    codex.receive({"id": 1, "result": {}})
    new = "thr-2" if fork else "thr-1"
    assert codex.receive({"id": 2, "result": {"thread": {"id": new}}}) == [Started(new)]
    turn = sent(codex.start_turn(Injection("go on")))
    assert turn[0]["params"]["threadId"] == new


def test_codex_refused_resume_says_so() -> None:
    codex = CodexTranslator("/work", resume=Resume("gone"))
    codex.handshake()
    codex.receive({"id": 1, "result": {}})
    out = codex.receive({"id": 2, "error": {"code": -32600, "message": "no rollout found"}})
    assert out == [Broken("codex could not resume the thread (thread/resume): no rollout found")]


def acp_initialized(translator: AcpTranslator, capabilities: dict[str, Any]) -> list[Action]:
    translator.handshake()
    result = {
        "protocolVersion": 1,
        "agentCapabilities": capabilities,
        "agentInfo": {"name": "claude-code-acp"},
    }
    return translator.receive({"jsonrpc": "2.0", "id": 1, "result": result})


def test_acp_loads_a_session_without_showing_its_replayed_history() -> None:
    acp = AcpTranslator("/work", resume=Resume("s-1"))
    load = sent(acp_initialized(acp, {"loadSession": True}))
    assert load == [
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/load",
            "params": {"sessionId": "s-1", "cwd": "/work", "mcpServers": []},
        }
    ]
    replay = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old"}}
    note = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s-1", "update": replay},
    }
    assert acp.receive(note) == []  # the history it replays is not this run's
    assert acp.receive({"jsonrpc": "2.0", "id": 2, "result": {"modes": {}}}) == [Started("s-1")]
    acp.start_turn(Injection("go on"))
    shown = [a for a in acp.receive(note) if isinstance(a, Show)]
    assert shown  # after the load, updates are shown again


def test_acp_forks_when_advertised_and_refuses_otherwise() -> None:
    acp = AcpTranslator("/work", resume=Resume("s-1", fork=True))
    fork = sent(acp_initialized(acp, {"sessionCapabilities": {"fork": {}}}))
    assert fork[0]["method"] == "session/fork"
    assert fork[0]["params"]["sessionId"] == "s-1"
    assert acp.receive({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s-2"}}) == [
        Started("s-2")
    ]
    no_fork = AcpTranslator("/work", resume=Resume("s-1", fork=True))
    out = acp_initialized(no_fork, {"loadSession": True})
    assert len(out) == 1
    assert isinstance(out[0], Broken)
    assert out[0].reason.startswith("not forkable: the ACP agent claude-code-acp")
    no_load = AcpTranslator("/work", resume=Resume("s-1"))
    out = acp_initialized(no_load, {"loadSession": False})
    assert isinstance(out[0], Broken)
    assert "not resumable" in out[0].reason
    assert "loadSession" in out[0].reason


def test_acp_failed_load_fails_the_setup() -> None:
    acp = AcpTranslator("/work", resume=Resume("s-1"))
    acp_initialized(acp, {"loadSession": True})
    failed = {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32603, "message": "Internal error", "data": {"details": "none"}},
    }
    out = acp.receive(failed)
    assert isinstance(out[0], Broken)
    assert out[0].reason.startswith("the ACP agent could not load the session (session/load)")


@pytest.mark.parametrize(
    ("agent", "resume", "why"),
    [
        ("claude", Resume("--dangerously-skip-permissions"), "not a session"),
        ("claude", Resume("a b"), "not a session id"),
        ("codex", Resume("x\n--y"), "control characters"),
        ("pi", Resume("relative/s.jsonl"), "not a session file"),
        ("resp", Resume("x"), "not resumed: RESP frames carry no session"),
        ("bash-agent", Resume("x"), "not resumed"),
        ("claude", Resume(""), "not a session"),
    ],
)
def test_a_session_that_cannot_be_handed_on_is_refused(
    agent: str, resume: Resume, why: str
) -> None:
    refusal = resume_refusal(agent, resume)
    assert refusal is not None
    assert why in refusal


def test_good_sessions_pass() -> None:
    assert resume_refusal("claude", Resume(SID, fork=True)) is None
    assert resume_refusal("codex", Resume("01a242b7-c4cc-72a0-be9d-84d95a8a9156")) is None
    assert resume_refusal("pi", Resume("/h/s.jsonl", fork=True)) is None
    assert resume_refusal("acp", Resume("s-1", fork=True)) is None
