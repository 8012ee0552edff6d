"""``agent.spawn {agent: "claude", channel: true}``: the REAL Claude Code loads
``tether mcp-channel`` (its MCP config written by the daemon) and receives the pushes.

Claude Code shows channel notifications to the model only in an interactive session
(``-p`` sessions do not listen for them), so this checks what the wire can: Claude Code
started the channel server, the server registered the agent's session, and a push to the
agent's channel was delivered into the Claude Code process.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.daemon import claude_channel
from tether.daemon.client import DaemonCallError

from .cli_helpers import daemon_client
from .test_claude import Claude, claude_cli, make_claude

__all__ = ["claude_cli", "make_claude"]

if os.environ.get("CI") != "true":  # under CI the SDK must be there (it is in `dev`)
    pytest.importorskip("mcp", reason="the mcp extra is not installed")


def envelope(content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {"content": content, "meta": {"from_name": "test"}},
    }


def test_mcp_config_names_the_channel_server(tmp_path: Path) -> None:
    config = claude_channel.mcp_config("tether-agent-a", "a", "/run/d.sock")
    server = config["mcpServers"]["tether"]
    assert server["command"] == sys.executable
    assert server["args"][:3] == ["-m", "tether", "mcp-channel"]
    path = claude_channel.write_config(tmp_path / "mcp", "a", config)
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "mcp").stat().st_mode & 0o777 == 0o700
    assert claude_channel.claude_args(path) == [
        "--mcp-config",
        str(path),
        "--dangerously-load-development-channels",
        "server:tether",
    ]


def test_a_claude_agent_with_a_channel_receives_pushes(
    make_claude: Callable[[list[Any]], Claude],
) -> None:
    world = make_claude([{"text": "Ready."}, {"text": "More."}, {"text": "Even more."}])
    with daemon_client(world.env) as client:
        bad = {"name": "x", "channel": True, "cwd": str(world.work)}
        with pytest.raises(DaemonCallError, match="channel: true goes with agent: claude"):
            client.call("agent.spawn", bad)
        params = {"name": "cc", "task": "hi", "agent": "claude", "channel": True}
        status = client.call("agent.spawn", params | {"cwd": str(world.work), "wait": True})
        assert status["answer"]["text"] == "Ready."
        channel_id = status["channel_id"]
        assert channel_id.startswith("ch_")
        route = {"mcp_channel_id": channel_id, "envelope": envelope("PING")}
        deadline = time.monotonic() + 90
        pushed = client.call("channel.push_to_channel", route)
        while not pushed["delivered"] and time.monotonic() < deadline:
            time.sleep(0.5)  # Claude Code starts the channel server in the background
            pushed = client.call("channel.push_to_channel", route)
        assert pushed == {"routed": True, "delivered": True}
        client.call("agent.stop", {"name": "cc", "mode": "close", "timeout_s": 30})
