"""``agent.spawn {agent: "claude", channel: true}``: a Claude Code agent with its channel.

The daemon reserves a channel for the agent (session ``tether-agent-NAME``, no receiver
yet), writes a private MCP config naming ``tether mcp-channel`` for that session, and adds
Claude Code's flags to load it as a development channel::

    --mcp-config FILE --dangerously-load-development-channels server:tether

When Claude Code starts the server, it registers the session and becomes the channel's
receiver; pushes made before that are held and handed over. The agent's ``channel_id`` is
that channel, so its inbox messages are pushed there too. See docs/channels.md.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Final

SERVER: Final = "tether"
LOAD_FLAG: Final = "--dangerously-load-development-channels"


def session_of(name: str) -> str:
    """The channel session of a daemon agent."""
    return f"tether-agent-{name}"


def mcp_config(session_id: str, name: str, socket: str) -> dict[str, Any]:
    """The MCP config that makes Claude Code start ``tether mcp-channel`` for the session."""
    args = ["-m", "tether", "mcp-channel", "--session-id", session_id, "--name", name]
    return {
        "mcpServers": {
            SERVER: {"command": sys.executable, "args": [*args, "--socket", socket]},
        }
    }


def write_config(directory: Path, name: str, config: dict[str, Any]) -> Path:
    """``config`` in a new 0600 file in ``directory`` (made 0700 when missing)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{name}-{secrets.token_hex(4)}.mcp.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return path


def claude_args(config_path: Path) -> list[str]:
    """Claude Code's arguments that load the channel server."""
    return ["--mcp-config", str(config_path), LOAD_FLAG, f"server:{SERVER}"]
