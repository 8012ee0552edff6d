"""``agent.spawn {agent: "claude", channel: true}``: a Claude Code agent with its channel.

The daemon reserves a channel for the agent (session ``tether-agent-NAME``, no receiver
yet), writes a private MCP config naming ``tether mcp-channel`` for that session, and adds
Claude Code's flags to load it as a development channel::

    --mcp-config FILE --dangerously-load-development-channels server:tether

When Claude Code starts the server, it registers the session and becomes the channel's
receiver. The agent's ``channel_id`` is that channel, so its inbox messages are pushed
there too. See docs/channels.md.

A ``-p`` Claude Code (the adapter's mode) never shows channel notifications to its model,
so the daemon sends that agent each push as a ``steer`` whose text is
:func:`channel_text`, the tag an interactive session shows for the notification; the
channel server stays loaded for its ``reply`` tool. An interactive (PTY) Claude Code gets
the notification itself.
"""

from __future__ import annotations

import html
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


def channel_text(envelope: dict[str, Any]) -> str:
    """The ``<channel>`` tag Claude Code shows its model for a (valid) channel envelope::

    <channel source="tether" agent="ci">
    TEXT
    </channel>
    """
    params = envelope["params"]
    meta = {k: v for k, v in params.get("meta", {}).items() if k != "source"}
    tag = {"source": SERVER, **meta}  # the source is the server, always
    attributes = "".join(f' {key}="{html.escape(value)}"' for key, value in tag.items())
    return f"<channel{attributes}>\n{params['content']}\n</channel>"
