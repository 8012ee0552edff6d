"""How to point each agent CLI at a model server: its config files, environment, flags.

One table (:data:`CLIENTS`) used by ``tether demo --agent NAME``, the real-CLI tests and
``bench/agents.py``: for a server at ``url`` and a private ``home`` (the CLI's HOME),
:meth:`Client.configure` writes the CLI's own config files under ``home`` and returns
the environment and ``--agent-arg`` values that make it use the server with no key, and
``shell_tool`` / ``tool_args`` say how a scripted reply runs a shell command with the
CLI's own tool.

- Claude Code and claude-code-acp: ``ANTHROPIC_BASE_URL`` (Anthropic Messages);
  claude-code-acp asks a small model about each Bash output, so a script needs one
  filler reply after each Bash call (``after_tool``);
- Codex: ``$CODEX_HOME/config.toml`` with a ``tether`` provider, ``wire_api =
  "responses"`` (OpenAI Responses), no retries;
- pi: ``~/.pi/agent/models.json`` with a ``tether`` provider, ``api:
  "openai-completions"`` (Chat Completions);
- Gemini CLI: ``~/.gemini/settings.json`` (API-key auth), ``GOOGLE_GEMINI_BASE_URL``,
  an explicit model (with its default, Gemini CLI first asks a router model).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NamedTuple

__all__ = ["CLIENTS", "PI_ARGS", "Client"]

KEY: Final = "no-key-needed"
# pi's flags for the `tether` provider that _pi writes (its --agent-arg values)
PI_ARGS: Final = ("--provider", "tether", "--model", "scripted", "--offline")


class Client(NamedTuple):
    agent: str  # the --agent name
    command: tuple[str, ...]  # the agent's command after -- (acp), else ()
    shell_tool: str  # the CLI's shell tool, as the model calls it
    tool_args: Callable[[str], dict[str, Any]]  # its arguments for a command
    setup: Callable[[str, Path], tuple[dict[str, str], list[str]]]
    after_tool: tuple[dict[str, Any], ...] = ()  # replies the CLI uses up after each tool

    def configure(self, url: str, home: Path) -> tuple[dict[str, str], list[str]]:
        """Write the CLI's config under ``home``; its environment (HOME included) and
        ``--agent-arg`` values for a model server at ``url``."""
        env, args = self.setup(url, home)
        return {"HOME": str(home), **env}, args


def _anthropic(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY}, []


def _claude(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    return _anthropic(url, home)[0], ["--allowedTools=Bash"]


def _claude_acp(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    return _anthropic(url, home)[0], ["--session-mode=bypassPermissions"]


def _codex(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "scripted"\nmodel_provider = "tether"\nsandbox_mode = "danger-full-access"\n'
        "[model_providers.tether]\n"
        f'name = "tether scripted"\nbase_url = "{url}/v1"\nwire_api = "responses"\n'
        'env_key = "TETHER_MODEL_SERVER_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    return {"CODEX_HOME": str(codex_home), "TETHER_MODEL_SERVER_KEY": KEY}, []


def _pi(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    provider = {
        "baseUrl": f"{url}/v1",
        "api": "openai-completions",
        "apiKey": KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "scripted", "reasoning": False}],
    }
    folder = home / ".pi" / "agent"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.json").write_text(json.dumps({"providers": {"tether": provider}}))
    return {}, list(PI_ARGS)


def _gemini(url: str, home: Path) -> tuple[dict[str, str], list[str]]:
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
    (folder / "settings.json").write_text(json.dumps(settings))
    env = {
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    return env, ["--yolo", "--model", "gemini-2.5-flash"]


CLIENTS: Final[dict[str, Client]] = {
    "claude": Client(
        "claude",
        (),
        "Bash",
        lambda command: {"command": command, "description": "run it"},
        _claude,
    ),
    "codex": Client(
        "codex",
        (),
        "exec_command",
        # without yield_time_ms Codex leaves a command running in the background after 10 s
        lambda command: {"cmd": command, "yield_time_ms": 30000},
        _codex,
    ),
    "pi": Client("pi", (), "bash", lambda command: {"command": command}, _pi),
    "gemini": Client(
        "gemini", (), "run_shell_command", lambda command: {"command": command}, _gemini
    ),
    "claude-code-acp": Client(
        "acp",
        ("claude-code-acp",),
        "Bash",
        lambda command: {"command": command, "description": "run it"},
        _claude_acp,
        after_tool=({"text": "ok"},),
    ),
}
