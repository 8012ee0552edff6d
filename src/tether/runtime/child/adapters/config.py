"""Pointing an agent at a model server: what each CLI needs, written into its own home.

``tether run --base-url URL``, ``SpawnOptions(base_url=URL)`` and the daemon's
``agent.spawn {base_url}`` (for ``tether model-server`` or any server of the right API)
need no hand-written file: :func:`plan_config` says, per agent, the environment, the
``--agent-arg`` values and the files under the agent's private home (its ``HOME``,
0700) that make its CLI use the server, and :func:`write_config` writes them (0600 files
in 0700 directories, each file replaced whole). The home is the agent's own: its CLI
keeps its sessions there too (Claude Code's ``~/.claude``, Codex's ``CODEX_HOME``,
pi's ``~/.pi``), so a run that resumes it uses the same home.

- Claude Code, claude-code-acp: ``ANTHROPIC_BASE_URL`` (Anthropic Messages), a
  placeholder ``ANTHROPIC_API_KEY``;
- Codex: ``CODEX_HOME/config.toml`` with a ``tether`` model provider (``wire_api =
  "responses"``, OpenAI Responses at ``URL/v1``, no retries), its key variable set;
- pi: ``~/.pi/agent/models.json`` with a ``tether`` provider (``openai-completions`` at
  ``URL/v1``) and ``--provider tether --offline`` (``--model scripted`` unless the run
  names a model, which is then the provider's one model);
- Gemini CLI: ``~/.gemini/settings.json`` (API-key auth), ``GOOGLE_GEMINI_BASE_URL``, an
  explicit model (with its default, Gemini CLI first asks a router model);
- bash-agent: ``ANTHROPIC_BASE_URL=URL/v1``; the built-in agent: its ``anthropic`` or
  ``openai`` provider's base URL (no home: it keeps no files).

Variables the run's own environment sets win over these (an API key for a real server),
except the ones that say where the home is (``HOME``, ``CODEX_HOME``:
:data:`HOME_VARIABLES`): the configuration is there and nowhere else.
Permissions are not configuration: the run's own ``--agent-arg`` values choose them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tether import fsafe
from tether.errors import SpawnError
from tether.paths import ensure_private_dir

__all__ = [
    "HOME_VARIABLES",
    "KEY",
    "AgentConfig",
    "check_base_url",
    "plan_config",
    "write_config",
]

KEY: Final = "no-key-needed"  # what a local model server takes as a key
DEFAULT_MODEL: Final = "scripted"
GEMINI_MODEL: Final = "gemini-2.5-flash"
_URL_LIMIT: Final = 2048
HOME_VARIABLES: Final = ("HOME", "CODEX_HOME")  # where the configuration is: never overridden


class AgentConfig(NamedTuple):
    """What makes an agent use a model server (see the module docstring)."""

    env: dict[str, str]  # for the agent's environment (HOME included when it has a home)
    args: tuple[str, ...]  # --agent-arg values, before the run's own
    files: tuple[tuple[str, str], ...]  # (path under the home, text) to write
    home: str  # the agent's private home ("" when it needs none)

    def child_env(self, env: dict[str, str] | None) -> dict[str, str]:
        """The agent's environment: this configuration, ``env`` over it, the home's
        variables over both."""
        fixed = {k: v for k, v in self.env.items() if k in HOME_VARIABLES}
        return {**self.env, **(env or {}), **fixed}


class _Plan(NamedTuple):
    url: str
    home: str
    model: str | None


def check_base_url(url: str) -> str | None:
    """What is wrong with ``url`` as a model server's base URL (None: nothing)."""
    if len(url) > _URL_LIMIT or not url.isprintable() or any(c.isspace() for c in url):
        return f"base_url {url[:80]!r} is not a URL"
    if not url.startswith(("http://", "https://")) or len(url.split("//", 1)[1]) < 1:
        return f"base_url {url[:80]!r} is not an http:// or https:// URL"
    return None


def _anthropic(plan: _Plan) -> AgentConfig:
    env = {"ANTHROPIC_BASE_URL": plan.url, "ANTHROPIC_API_KEY": KEY, "HOME": plan.home}
    return AgentConfig(env, (), (), plan.home)


def _codex(plan: _Plan) -> AgentConfig:
    url = json.dumps(f"{plan.url}/v1")  # a JSON string is a TOML basic string
    model = json.dumps(plan.model or DEFAULT_MODEL)
    text = (
        f'model = {model}\nmodel_provider = "tether"\n'
        "[model_providers.tether]\n"
        f'name = "tether"\nbase_url = {url}\nwire_api = "responses"\n'
        'env_key = "TETHER_MODEL_SERVER_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    codex_home = os.path.join(plan.home, ".codex")
    env = {"CODEX_HOME": codex_home, "TETHER_MODEL_SERVER_KEY": KEY, "HOME": plan.home}
    return AgentConfig(env, (), ((".codex/config.toml", text),), plan.home)


def _pi(plan: _Plan) -> AgentConfig:
    provider = {
        "baseUrl": f"{plan.url}/v1",
        "api": "openai-completions",
        "apiKey": KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": plan.model or DEFAULT_MODEL, "reasoning": False}],
    }
    text = json.dumps({"providers": {"tether": provider}})
    args: tuple[str, ...] = ("--provider", "tether", "--offline")
    if plan.model is None:  # a run's model reaches pi as --model (commands)
        args += ("--model", DEFAULT_MODEL)
    files = ((".pi/agent/models.json", text),)
    return AgentConfig({"HOME": plan.home}, args, files, plan.home)


def _gemini(plan: _Plan) -> AgentConfig:
    settings = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    env = {
        "GEMINI_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": plan.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "HOME": plan.home,
    }
    args = ("--model", GEMINI_MODEL) if plan.model is None else ()
    return AgentConfig(env, args, ((".gemini/settings.json", settings),), plan.home)


def _bash_agent(plan: _Plan) -> AgentConfig:
    env = {"ANTHROPIC_BASE_URL": f"{plan.url}/v1", "ANTHROPIC_API_KEY": KEY}
    return AgentConfig(env, (), (), "")


_PLANS: Final[dict[str, Callable[[_Plan], AgentConfig]]] = {
    "claude": _anthropic,
    "codex": _codex,
    "pi": _pi,
    "gemini": _gemini,
    "bash-agent": _bash_agent,
}
_PROVIDER_ENV: Final = {
    "anthropic": ("ANTHROPIC_BASE_URL", ""),
    "openai": ("OPENAI_BASE_URL", "/v1"),
}


def plan_config(
    agent: str,
    base_url: str,
    home: str,
    *,
    model: str | None = None,
    provider: str | None = None,
    command: Sequence[str] = (),
) -> AgentConfig:
    """What points ``agent`` at the server at ``base_url``, its home at ``home``; raises
    ``ValueError`` (saying why) for a bad URL or an agent tether cannot point at one."""
    problem = check_base_url(base_url)
    if problem is not None:
        raise ValueError(problem)
    url = base_url.rstrip("/")
    if agent == "builtin":
        if provider not in _PROVIDER_ENV:
            raise ValueError("base_url goes with the built-in agent's anthropic or openai provider")
        name, suffix = _PROVIDER_ENV[provider]
        return AgentConfig({name: url + suffix}, (), (), "")
    if agent == "acp" and command and os.path.basename(command[0]) == "claude-code-acp":
        return _anthropic(_Plan(url, home, model))
    build = _PLANS.get(agent)
    if build is None:
        raise ValueError(
            f"tether does not know how to point agent {agent} at a server: set its "
            "environment yourself (env) instead of base_url"
        )
    return build(_Plan(url, home, model))


def write_config(config: AgentConfig) -> None:
    """Make the home (0700) and write the config's files in it (0600, each replaced).

    The agent lives in its home and may have planted anything there (a resume writes the
    files again): every folder under the home is opened by one plain name relative to
    its parent's descriptor, never through a symlink (a ``.pi`` linked to the user's own
    ``~/.pi`` is refused, not written through), and the home is a folder of tether's
    homes directory, itself never a symlink."""
    if not config.home:
        return
    home = Path(os.path.abspath(config.home))
    try:
        _write_files(home, config.files)
    except OSError as exc:
        raise SpawnError(
            f"cannot write the agent's configuration in its home {home}: {exc}; "
            "something there is not a folder of its own (a symlink the agent left?): "
            "remove it, or start the agent afresh"
        ) from None


def _write_files(home: Path, files: tuple[tuple[str, str], ...]) -> None:
    with contextlib.ExitStack() as stack:
        parent = ensure_private_dir(home.parent, tighten=False)  # (tether's homes/)
        homes = stack.enter_context(fsafe.opened_dir(parent))
        top = stack.enter_context(fsafe.made_subdir(homes, home.name))
        for name, text in files:  # names of this module's own (no .., not absolute)
            *folders, leaf = name.split("/")
            with contextlib.ExitStack() as walk:
                at = top
                for folder in folders:
                    at = walk.enter_context(fsafe.made_subdir(at, folder))
                fsafe.replace_in(at, leaf, text.encode())
