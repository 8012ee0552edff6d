"""The daemon's fork server: built-in agents forked from its template, against exec'd ones.

A ``command`` provider (``tests/parent/doubles/report_child.py``) reports on the agent's
process from ``/proc``; ``TETHER_FORKSERVER=0`` in an agent's ``env`` makes it exec'd.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tests.support.agentd import AgentDaemon, agentd
from tests.wake_probe import kill_and_wait, parent_pid

from tether.runtime.parent import forkserver

__all__ = ["agentd"]

REPORT = Path(__file__).parents[2] / "parent" / "doubles" / "report_child.py"
PER_RUN = re.compile(
    r"^(FEN_WIRE_|TETHER_WIRE_|TETHER_RUN_DIR$|TETHER_INBOX_PATH$|RUNEX_INBOX|TETHER_AGENT_NAME$|TMPDIR$)"
)


def _spawn(agentd: AgentDaemon, name: str, env: dict[str, str]) -> dict[str, Any]:
    params = {
        "name": name,
        "task": "report",
        "provider": "command",
        "cwd": str(agentd.root),
        "env": {"TETHER_COMMAND_PROVIDER": f"{sys.executable} {REPORT}", **env},
        "wait": True,
    }
    result = agentd.call("agent.spawn", params)
    report: dict[str, Any] = json.loads(result["answer"]["text"])
    assert report["pid"] == result["pid"]
    return report


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in report["env"].items() if not PER_RUN.match(k)}
    env.pop(forkserver.ENV, None)
    fds = dict(report["fds"])
    fds.pop(env.pop("TETHER_WAKE_FD"))
    return {**report, **dict.fromkeys(("pid", "ppid", "pgrp", "session")), "env": env, "fds": fds}


def test_daemon_agents_are_forked_and_match_execd_ones(agentd: AgentDaemon) -> None:
    daemon = agentd.process.proc.pid
    forked = _spawn(agentd, "forked", {})
    execd = _spawn(agentd, "execd", {forkserver.ENV: "0"})
    template = forked["ppid"]
    assert execd["ppid"] == daemon
    assert template != daemon
    assert parent_pid(template) == daemon  # the daemon's template forked it
    assert b"tether.cli.forkserver" in Path(f"/proc/{template}/cmdline").read_bytes()
    for report in (forked, execd):
        assert report["session"] == report["pgrp"] == report["pid"]
        assert report["sig_blocked"] == "0000000000000000"
        assert report["fds"]["0"] == "/dev/null"
        assert report["fds"]["1"] == report["fds"]["2"] == "RUN/stderr.log"
        assert "TETHER_LIFELINE_FD" not in report["env"]  # daemon agents outlive it
        assert report["fds"][report["env"]["TETHER_WAKE_FD"]] == "pipe"  # its pass_fds
        assert report["env"]["TETHER_AGENT_NAME"] in ("forked", "execd")
    assert _comparable(forked) == _comparable(execd)


def test_daemon_agents_outlive_a_killed_template(agentd: AgentDaemon) -> None:
    first = agentd.spawn("a1", [{"text": "one"}, {"text": "two"}], task="go", wait=True)
    template = parent_pid(first["pid"])
    assert template != agentd.process.proc.pid
    kill_and_wait(template)
    answer = agentd.call("agent.ask", {"name": "a1", "text": "second"})  # still supervised
    assert answer["text"] == "two"
    second = agentd.spawn("a2", [{"text": "three"}], task="go", wait=True)  # a new template
    assert parent_pid(second["pid"]) not in (template, agentd.process.proc.pid)
    assert second["answer"]["text"] == "three"
    stopped = agentd.call("agent.stop", {"name": "a1"})
    assert stopped["state"] in ("done", "stopped", "cancelled"), stopped
    assert agentd.wait_for("a1", lambda s: s.get("ended_at") is not None)["exit_code"] is None


def test_a_killed_forked_agent_ends_with_its_signal(agentd: AgentDaemon) -> None:
    status = agentd.spawn("k", [{"text": "slow", "delay_ms": 60_000}], task="go")
    assert parent_pid(status["pid"]) != agentd.process.proc.pid
    kill_and_wait(status["pid"])
    ended = agentd.wait_for("k", lambda s: s.get("ended_at") is not None)
    assert ended["state"] == "failed"
    assert ended["exit_code"] == -9  # the template reaped it and said so


def test_a_bad_configuration_fails_an_idle_agent_forked_or_execd(agentd: AgentDaemon) -> None:
    """What can fail in building the agent is done at the start, not at the first prompt
    (the tools and the agent themselves are built at the first turn): an agent spawned
    without a task whose tools do not exist fails at once, forked or exec'd alike."""
    argv = [*forkserver.child_prefix(), "--tools", "bash,teleport"]
    assert forkserver.eligible(argv)
    for name, env in (("forked", {}), ("execd", {forkserver.ENV: "0"})):
        params = {"name": name, "argv": argv, "cwd": str(agentd.root), "env": env}
        agentd.call("agent.spawn", params)
        status = agentd.wait_for(name, lambda s: s["state"] not in ("starting", "ready"))
        assert status["state"] == "failed", status
        assert "unknown tool teleport" in json.dumps(status), status
