"""Spawning a PTY agent through a test daemon (shared by the PTY, attach and browser tests)."""

from __future__ import annotations

from typing import Any

from tests.support.agentd import AgentDaemon

BASH = ["bash", "--norc", "--noprofile", "-i"]


def spawn_pty(agentd: AgentDaemon, name: str, argv: list[str], **params: Any) -> dict[str, Any]:
    params.setdefault("cwd", str(agentd.root))
    params.setdefault("env", {"PS1": "$ ", "HISTFILE": "/dev/null"})
    result: dict[str, Any] = agentd.call(
        "agent.spawn", {"name": name, "pty": True, "argv": argv, **params}
    )
    return result
