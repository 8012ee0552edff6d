"""How the tests, ``tether demo`` and the benches drive each agent CLI against a model server.

:data:`CLIENTS`, one entry per CLI: for a server at ``url`` and a private ``home``,
:meth:`Client.configure` writes the CLI's configuration with the product's own writer
(:func:`tether.runtime.child.adapters.config.plan_config`, what ``--base-url`` does) and
returns its environment and ``--agent-arg`` values, plus the permissions a scripted
tool call needs (Claude Code ``--allowedTools=Bash``, claude-code-acp's session mode,
Codex's sandbox, Gemini CLI ``--yolo``); ``shell_tool`` / ``tool_args`` say how a
scripted reply runs a shell command with the CLI's own tool.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

from tether.runtime.child.adapters.config import plan_config, write_config

__all__ = ["CLIENTS", "Client"]


class Client(NamedTuple):
    agent: str  # the --agent name
    command: tuple[str, ...]  # the agent's command after -- (acp), else ()
    shell_tool: str  # the CLI's shell tool, as the model calls it
    tool_args: Callable[[str], dict[str, Any]]  # its arguments for a command
    permissions: tuple[str, ...] = ()  # --agent-arg values that let scripted tools run

    def configure(self, url: str, home: Path) -> tuple[dict[str, str], list[str]]:
        """Write the CLI's config under ``home``; its environment (HOME included) and
        ``--agent-arg`` values for a model server at ``url``."""
        config = plan_config(self.agent, url, str(home), command=self.command)
        write_config(config)
        return {"HOME": str(home), **config.env}, [*config.args, *self.permissions]


CLIENTS: Final[dict[str, Client]] = {
    "claude": Client(
        "claude",
        (),
        "Bash",
        lambda command: {"command": command, "description": "run it"},
        ("--allowedTools=Bash",),
    ),
    "codex": Client(
        "codex",
        (),
        "exec_command",
        # without yield_time_ms Codex leaves a command running in the background after 10 s
        lambda command: {"cmd": command, "yield_time_ms": 30000},
        ("-c", 'sandbox_mode="danger-full-access"'),
    ),
    "pi": Client("pi", (), "bash", lambda command: {"command": command}),
    "gemini": Client(
        "gemini", (), "run_shell_command", lambda command: {"command": command}, ("--yolo",)
    ),
    "claude-code-acp": Client(
        "acp",
        ("claude-code-acp",),
        "Bash",
        lambda command: {"command": command, "description": "run it"},
        ("--session-mode=bypassPermissions",),
    ),
}
