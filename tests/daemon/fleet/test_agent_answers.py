"""Answers reach daemon agents: ``agent.answer`` / ``tether agent answer`` for a question the
built-in agent asked with its ``ask`` tool (an ``answer`` control while it waits) and for an
approval request the agent wrote to its inbox itself (nothing waits in the child: a
follow-up while it is idle); unanswered questions in ``agent.list`` and the CLI table."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.support.agentd import AgentDaemon, agentd

from tether.daemon.rpc.protocol import ErrorCode

__all__ = ["agentd"]


def tether(agentd: AgentDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tether", "agent", *args]
    return subprocess.run(
        command, env=agentd.env, capture_output=True, text=True, timeout=60, check=False
    )


def questions(agentd: AgentDaemon, name: str) -> list[dict[str, Any]]:
    status = agentd.wait_for(name, lambda s: bool(s.get("questions")))
    found: list[dict[str, Any]] = status["questions"]
    return found


def tool_results(agentd: AgentDaemon, name: str) -> list[str]:
    return [str(e.get("result")) for e in agentd.events(name) if e["type"] == "tool-result"]


def test_ask_tool_waits_for_the_cli_answer(agentd: AgentDaemon) -> None:
    ask = {"name": "ask", "arguments": {"question": "Which branch?", "timeout_s": 120}}
    agentd.spawn("asker", [{"tool_calls": [ask]}, {"text": "Merged into main."}], task="merge")
    [question] = questions(agentd, "asker")
    assert question["type"] == "clarification"
    assert question["text"] == "Which branch?"
    listed = tether(agentd, "list")
    assert f"? asker question {question['key']}: Which branch?" in listed.stdout

    answered = tether(agentd, "answer", "asker", question["key"], "main, please")
    assert answered.returncode == 0, answered.stderr
    assert "as answer applied" in answered.stdout  # blocked in the tool, at the desk
    done = agentd.wait_for("asker", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert done["questions"] == []
    assert any("answer: main, please" in text for text in tool_results(agentd, "asker"))

    again = tether(agentd, "answer", "asker", question["key"], "other")
    assert again.returncode == 2
    assert "answered" in again.stderr
    assert tether(agentd, "answer", "asker", question["key"]).returncode == 2


def test_approval_answered_while_idle_is_a_follow_up(agentd: AgentDaemon) -> None:
    report = {"name": "report", "arguments": {"type": "approval_request", "text": "Deploy?"}}
    replies = [{"tool_calls": [report]}, {"text": "Waiting for approval."}, {"text": "Deployed."}]
    agentd.spawn("deployer", replies, task="deploy")
    agentd.wait_for("deployer", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    [question] = questions(agentd, "deployer")
    assert question["type"] == "approval_request"
    result = agentd.call(
        "agent.answer", {"name": "deployer", "key": question["key"], "decision": "approve"}
    )
    assert result["sent_as"] == "follow-up"
    assert result["answer"] == "Approved."
    agentd.wait_for("deployer", lambda s: s["state"] == "ready" and s["turn"] >= 2)
    injected = [e for e in agentd.events("deployer") if e["type"] == "follow-up-injected"]
    assert injected
    assert 'Your approval request: "Deploy?"' in str(injected[-1])
    message = agentd.expect(
        ErrorCode.INVALID_PARAMS, "agent.answer", {"name": "deployer", "key": "nope:1", "text": "x"}
    )
    assert "no inbox message" in message
