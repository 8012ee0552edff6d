"""Approvals through the daemon, with the built-in agent under ``approval: "ask"``: the
request waits with a key, the agent shows ``waiting``, ``agent.approvals`` lists it, the
answer goes down as an ``answer`` control (once), it survives a daemon SIGKILL and restart;
``--notify`` pages a person; a queued follow-up is listed and withdrawn before it is
injected."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import AgentDaemon, agentd
from tests.support.daemon import DaemonProcess
from tests.support.gates import ToolGate
from tests.support.waits import wait_until

from tether.daemon.rpc.protocol import ErrorCode

__all__ = ["agentd"]

TOUCH = "touch made.txt"


def tether(agentd: AgentDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tether", "agent", *args]
    return subprocess.run(
        command, env=agentd.env, capture_output=True, text=True, timeout=60, check=False
    )


def _asking(agentd: AgentDaemon, name: str, **params: Any) -> Path:
    work = agentd.root / name
    work.mkdir()
    bash = {"name": "bash", "arguments": {"command": TOUCH}}
    replies = [{"text": "Making it.", "tool_calls": [bash]}, {"text": "All done."}]
    agentd.spawn(name, replies, task="make the file", cwd=str(work), approval="ask", **params)
    return work


def _waiting(agentd: AgentDaemon, name: str) -> dict[str, Any]:
    status = agentd.wait_for(name, lambda s: "waiting" in s)
    waiting: dict[str, Any] = status["waiting"]
    return waiting


def test_an_approval_waits_is_listed_and_answered_once(agentd: AgentDaemon) -> None:
    work = _asking(agentd, "maker")
    waiting = _waiting(agentd, "maker")
    assert (waiting["kind"], waiting["tool"]) == ("approval", "bash")
    key = waiting["key"]
    assert not (work / "made.txt").exists()  # nothing runs while it waits
    listed = agentd.call("agent.approvals")["approvals"]
    assert [(a["name"], a["key"], a["tool"], a["summary"]) for a in listed] == [
        ("maker", key, "bash", TOUCH)
    ]
    table = tether(agentd, "list")
    assert "waiting" in table.stdout, table.stdout
    approvals = tether(agentd, "approvals")
    assert f"maker  {key}  bash: {TOUCH}" in approvals.stdout, approvals.stdout
    runs = subprocess.run(
        [sys.executable, "-m", "tether", "runs", "--json"],
        env=agentd.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    (row,) = [json.loads(line) for line in runs.stdout.splitlines()]
    assert (row["waiting"]["kind"], row["waiting"]["key"]) == ("approval", key)

    answered = tether(agentd, "answer", "maker", key, "--deny", "not today")
    assert answered.returncode == 0, answered.stderr
    assert "as answer applied" in answered.stdout
    done = agentd.wait_for("maker", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert "waiting" not in done
    assert done["questions"] == []
    assert not (work / "made.txt").exists()
    assert agentd.call("agent.approvals")["approvals"] == []
    again = tether(agentd, "answer", "maker", key, "--approve")
    assert again.returncode == 2
    assert "answered" in again.stderr


def test_a_waiting_approval_survives_a_daemon_sigkill(agentd: AgentDaemon) -> None:
    work = _asking(agentd, "survivor")
    key = _waiting(agentd, "survivor")["key"]
    agentd.kill()
    agentd.restart()
    assert _waiting(agentd, "survivor")["key"] == key  # re-adopted, still waiting
    assert [a["key"] for a in agentd.call("agent.approvals")["approvals"]] == [key]
    result = agentd.call("agent.answer", {"name": "survivor", "key": key, "decision": "approve"})
    assert (result["sent_as"], result["ack"]) == ("answer", "applied")
    agentd.wait_for("survivor", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert (work / "made.txt").exists()
    message = agentd.expect(
        ErrorCode.INVALID_STATUS,
        "agent.answer",
        {"name": "survivor", "key": key, "decision": "approve"},
    )
    assert "answered" in message


def test_a_rule_decides_and_nothing_waits(agentd: AgentDaemon) -> None:
    work = _asking(agentd, "ruled", deny=["shell:touch *"])
    done = agentd.wait_for("ruled", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert "waiting" not in done
    assert not (work / "made.txt").exists()
    assert _denied(agentd, done["run_id"]) == [
        "bash: touch made.txt (denied by rule shell:touch *)"
    ]


def _denied(agentd: AgentDaemon, run_id: str) -> list[str]:
    """What ``tether show RUN`` says the run denied."""
    shown = subprocess.run(
        [sys.executable, "-m", "tether", "show", run_id, "--json"],
        env=agentd.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    denied: list[str] = json.loads(shown.stdout).get("denied", [])
    return denied


def test_a_queued_follow_up_is_listed_and_withdrawn(
    agentd: AgentDaemon, tool_gate: Callable[[Path], ToolGate]
) -> None:
    work = agentd.root / "queued"
    work.mkdir()
    gate = tool_gate(work / "go")
    bash = {"name": "bash", "arguments": {"command": gate.command}}
    replies = [{"text": "Working.", "tool_calls": [bash]}, {"text": "Done."}, {"text": "x"}]
    agentd.spawn("queued", replies, task="work", cwd=str(work))
    agentd.wait_for("queued", lambda s: s["state"] == "running")
    sent = agentd.call("agent.follow_up", {"name": "queued", "text": "NEVER TO BE SEEN"})
    assert sent["ack"] == "accepted"
    queue = agentd.call("agent.queue", {"name": "queued"})["queue"]
    assert [(q["ref"], q["kind"], q["text"]) for q in queue] == [
        (sent["seq"], "follow-up", "NEVER TO BE SEEN")
    ]
    listed = tether(agentd, "queue", "queued")
    assert "follow-up NEVER TO BE SEEN" in listed.stdout
    agentd.kill()  # a restarted daemon still lists what was queued before it
    agentd.restart()
    again = agentd.call("agent.queue", {"name": "queued"})["queue"]
    assert [(q["ref"], q["text"]) for q in again] == [(sent["seq"], "NEVER TO BE SEEN")]
    withdrawn = tether(agentd, "unqueue", "queued", str(sent["seq"]))
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert agentd.call("agent.queue", {"name": "queued"})["queue"] == []
    twice = agentd.call("agent.unqueue", {"name": "queued", "ref": sent["seq"]})
    assert (twice["ack"], twice["reason"]) == ("rejected", f"control {sent['seq']} was withdrawn")
    gate.open()
    agentd.wait_for("queued", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    events = agentd.events("queued")
    assert not [e for e in events if e["type"] == "follow-up-injected"]
    assert "NEVER TO BE SEEN" not in json.dumps([e for e in events if e["type"] != "control-ack"])


@pytest.fixture
def paged(daemon_env: DaemonProcess, tmp_path: Path) -> Any:
    from tests.support.agentd import kill_agents

    out = tmp_path / "pages"
    daemon_env.start("--notify", f"cat >> {out}")
    try:
        yield AgentDaemon(daemon_env), out
    finally:
        daemon_env.stop()
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def test_notify_runs_the_command_with_the_request_on_stdin(paged: Any) -> None:
    agentd, out = paged
    _asking(agentd, "paging")
    key = _waiting(agentd, "paging")["key"]
    wait_until(lambda: out.exists() and out.read_text().endswith("\n"), "the page", files=[out])
    page = json.loads(out.read_text().splitlines()[0])
    assert page["name"] == "paging"
    assert (page["key"], page["type"], page["tool"]) == (key, "approval_request", "bash")


@pytest.fixture
def policed(daemon_env: DaemonProcess, tmp_path: Path) -> Any:
    from tests.support.agentd import kill_agents

    policy = tmp_path / "policy.toml"
    policy.write_text('deny = ["shell:touch *"]\n')
    daemon_env.start("--policy", str(policy))
    try:
        yield AgentDaemon(daemon_env)
    finally:
        daemon_env.stop()
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def test_the_daemons_policy_decides_for_a_spawn_that_names_none(policed: AgentDaemon) -> None:
    """``tether daemon --policy FILE``: its rules decide every agent's requests (nothing
    waits, the decision is recorded); a spawn's own policy takes its place."""
    work = _asking(policed, "policed")
    done = policed.wait_for("policed", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert "waiting" not in done
    assert not (work / "made.txt").exists()
    assert _denied(policed, done["run_id"]) == [
        "bash: touch made.txt (denied by rule shell:touch *)"
    ]
    own = policed.root / "own.toml"
    own.write_text('approve = ["shell:touch *"]\n')
    mine = _asking(policed, "mine", policy=str(own))
    policed.wait_for("mine", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    assert (mine / "made.txt").exists()
    # resumed, it keeps its own policy (the daemon's fills in only where none was named)
    policed.call("agent.stop", {"name": "mine", "mode": "close"})
    (mine / "made.txt").unlink()
    resumed = policed.call("agent.follow_up", {"name": "mine", "text": "again"})["resumed"]
    again = policed.wait_for("mine", lambda s: s["run_id"] != resumed and s["turn"] >= 1)
    policed.wait_for("mine", lambda s: s["state"] in ("ready", "done"))
    assert _denied(policed, again["run_id"]) == []
    assert (mine / "made.txt").exists()


def test_a_daemon_policy_that_does_not_hold_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('approve = ["shell:git *"\n')
    for policy in (bad, tmp_path / "missing.toml"):
        started = subprocess.run(
            [sys.executable, "-m", "tether", "daemon", "--policy", str(policy), "start"],
            env={"TETHER_SOCKET": str(tmp_path / "d.sock"), "TETHER_HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert started.returncode == 2, started
        assert "--policy" in started.stderr
