"""How each agent CLI is started: its command line and environment, in one place.

What the adapters add to an agent's command (the machine-protocol flags, Claude Code's
permission prompt tool, Codex's approval policy, the run's model where the CLI takes it
as a flag) and to its environment, for the agents whose CLI runs once for the whole run
(:data:`LAUNCHES`). It is read twice: by ``tether child`` to start the CLI first thing,
before its own heavy imports (:mod:`tether.runtime.child.adapters.early`), and by
:func:`tether.runtime.child.adapters.open_runner` when nothing was started early, so both
start exactly the same command.

The run's ``model`` (``tether run --model``, ``tether.spawn(model=)``, the daemon's
``agent.spawn {model}``) reaches each CLI its own way: ``--model NAME`` for Claude Code,
pi and Gemini CLI (here); Codex takes it in ``thread/start {model}`` and any ACP agent
in ``session/set_model`` (their translators). A model given both as the run's model and
as a ``--agent-arg`` flag is an error (:class:`ModelTwice`): one of them would be
silently ignored.

:data:`HANDSHAKES`: the messages an agent's hand-shake opens with that need nothing from
the CLI's answers (Codex: ``initialize``, ``initialized`` and ``thread/start``, pipelined:
the app-server reads them in order). ``tether child`` writes them to the CLI's stdin as
soon as the CLI is started (:mod:`~tether.runtime.child.adapters.early`), so the CLI answers
them when it is up, not when the adapter is; the adapter's translator opens its
hand-shake with the same messages (the driver checks that) and does not send them again.

Imports nothing heavy: ``tether child`` calls it before ``ready``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from tether.errors import AgentError
from tether.runtime.child.adapters.jsonrpc import Outbox

__all__ = [
    "CLAUDE_ARGS",
    "CODEX_CLIENT",
    "GEMINI_ENV",
    "HANDSHAKES",
    "LAUNCHES",
    "MODE_ARG",
    "QUIET_ENV",
    "CliLaunch",
    "ModelTwice",
    "approval_args",
    "claude_command",
    "cli_launch",
    "codex_handshake",
    "split_mode_arg",
]

CLAUDE_ARGS: Final = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--replay-user-messages",
)
# No title-generation model call (it would take a scripted reply), no telemetry.
QUIET_ENV: Final = {
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
# Gemini CLI's shell tool without a pseudo-terminal: with one, its tool result is terminal
# cells, which its ACP server does not send, so a run showed every command with no output.
GEMINI_ENV: Final = {"GEMINI_PTY_INFO": "child_process"}
MODE_ARG: Final = "--session-mode="
_OWN_PROMPT_FLAGS: Final = ("--permission-prompt-tool", "--dangerously-skip-permissions")


class CliLaunch(NamedTuple):
    argv: list[str]  # the program (a path) and every argument
    env: dict[str, str]


class ModelTwice(AgentError, ValueError):
    """The run's model and a ``--agent-arg`` model flag both name the model."""


def claude_command(program: Sequence[str], agent_args: Sequence[str]) -> list[str]:
    """Claude Code's command: the base flags, the prompt tool, the user's arguments."""
    args = [*program, *CLAUDE_ARGS]
    if not any(a.split("=", 1)[0] in _OWN_PROMPT_FLAGS for a in agent_args):
        args += ["--permission-prompt-tool", "stdio"]
    return [*args, *agent_args]


def approval_args(agent_args: Sequence[str]) -> list[str]:
    """Codex: ``-c approval_policy="never"`` unless the user's arguments set a policy."""
    if any("approval_policy" in arg for arg in agent_args):
        return []
    return ["-c", 'approval_policy="never"']


def split_mode_arg(agent_args: Sequence[str]) -> tuple[str | None, list[str]]:
    """ACP: the adapter's ``--session-mode=ID`` (last wins) and the arguments for the agent."""
    mode = None
    rest = []
    for arg in agent_args:
        if arg.startswith(MODE_ARG):
            mode = arg[len(MODE_ARG) :] or None
        else:
            rest.append(arg)
    return mode, rest


def _model_flag(agent_args: Sequence[str], model: str | None, flags: tuple[str, ...]) -> list[str]:
    """``--model NAME`` for the run's model; ModelTwice when an agent argument sets it too."""
    if not model:
        return []
    for arg in agent_args:
        if arg in flags or arg.split("=", 1)[0] in flags:
            raise ModelTwice(
                f"the model is given twice: as the run's model ({model!r}) and as "
                f"--agent-arg {arg}; give it once"
            )
    return ["--model", model]


Build = Callable[[list[str], Sequence[str], dict[str, str], str | None], CliLaunch]


def _claude(
    argv: list[str], args: Sequence[str], env: dict[str, str], model: str | None
) -> CliLaunch:
    flag = _model_flag(args, model, ("--model",))
    return CliLaunch(claude_command(argv, [*args, *flag]), {**QUIET_ENV, **env})


def _codex(
    argv: list[str], args: Sequence[str], env: dict[str, str], model: str | None
) -> CliLaunch:
    return CliLaunch([*argv, *approval_args(args), *args], env)  # model: thread/start


def _pi(argv: list[str], args: Sequence[str], env: dict[str, str], model: str | None) -> CliLaunch:
    return CliLaunch([*argv, *args, *_model_flag(args, model, ("--model",))], env)


def _gemini(
    argv: list[str], args: Sequence[str], env: dict[str, str], model: str | None
) -> CliLaunch:
    flag = _model_flag(args, model, ("--model", "-m"))
    return CliLaunch([*argv, *args, *flag], {**GEMINI_ENV, **env})


def _acp(argv: list[str], args: Sequence[str], env: dict[str, str], model: str | None) -> CliLaunch:
    _, rest = split_mode_arg(args)  # model: session/set_model
    if os.path.basename(argv[0]) == "claude-code-acp" and os.geteuid() == 0:
        env = {**env, "IS_SANDBOX": "1"}  # anything else and session/new fails as root
    return CliLaunch([*argv, *rest], env)


# The agents whose CLI runs once for the whole run (started early by `tether child`).
LAUNCHES: Final[dict[str, Build]] = {
    "claude": _claude,
    "codex": _codex,
    "pi": _pi,
    "gemini": _gemini,
    "acp": _acp,
}


def cli_launch(
    agent: str,
    argv: Sequence[str],
    agent_args: Sequence[str],
    env: Mapping[str, str],
    model: str | None = None,
) -> CliLaunch | None:
    """The command and environment ``agent``'s CLI starts with (``argv``: its program,
    resolved); None for an agent not in :data:`LAUNCHES`. Raises :class:`ModelTwice`."""
    build = LAUNCHES.get(agent)
    return None if build is None else build(list(argv), list(agent_args), dict(env), model)


CODEX_CLIENT: Final = {"name": "tether", "title": "tether", "version": "0"}


def codex_handshake(rpc: Outbox, cwd: str, model: str | None) -> list[dict[str, Any]]:
    """Codex's hand-shake, pipelined: ``initialize``, ``initialized``, ``thread/start {cwd,
    model?}`` (its answer, the thread id, is what a turn needs)."""
    params = {"clientInfo": CODEX_CLIENT, "capabilities": {"experimentalApi": True}}
    thread = {"cwd": cwd} if not model else {"cwd": cwd, "model": model}
    return [
        rpc.request("initialize", params),
        rpc.notify("initialized"),
        rpc.request("thread/start", thread),
    ]


def _codex_opening(cwd: str, model: str | None) -> list[dict[str, Any]]:
    return codex_handshake(Outbox(jsonrpc=False), cwd, model)


# The agents whose hand-shake opens with messages written as the CLI starts (see above):
# given the CLI's working directory and the run's model, those messages.
HANDSHAKES: Final[dict[str, Callable[[str, str | None], list[dict[str, Any]]]]] = {
    "codex": _codex_opening,
}
