"""How each agent CLI is started: its command line and environment, in one place.

What the adapters add to an agent's command (the machine-protocol flags, Claude Code's
permission prompt tool, the run's model where the CLI takes it as a flag) and to its
environment (Codex keeps its own approval policy: it asks, and the run's approval desk
answers), for the agents whose CLI runs once for the whole run
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

A run that continues an earlier one (:class:`Resume`: ``tether child --resume SESSION
[--fork]``) reaches each CLI its own way too: Claude Code ``--resume SESSION`` (the
session's file when it is found, so the session is found from another working directory
too) and ``--fork-session``; pi ``--session FILE`` or ``--fork FILE``; Codex
``thread/resume`` or ``thread/fork`` in its hand-shake (:data:`HANDSHAKES`); an ACP agent
``session/load`` or ``session/fork`` (its translator). They go last on the command line.

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
from tether.runtime.child.adapters.registry import get_agent

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
    "Resume",
    "claude_command",
    "claude_session_file",
    "cli_launch",
    "codex_handshake",
    "resume_refusal",
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


class Resume(NamedTuple):
    """A run that continues an agent's saved session: its id (a Claude Code session, a
    Codex thread, an ACP session) or file (pi; the built-in agent's saved conversation);
    with ``fork`` a new session starts from it and the saved one is left as it was."""

    session: str
    fork: bool = False


_SESSION_LIMIT: Final = 4096
# Agents whose session is a file (the rest name theirs by an id).
_SESSION_FILES: Final = frozenset({"pi", "builtin"})


def resume_refusal(agent: str, resume: Resume) -> str | None:
    """Why ``resume`` cannot be handed to ``agent``'s CLI (None: it can): the agent has no
    resume (or fork) at all, or the session is not one. A session comes
    from a file the earlier run's child wrote: it must not read as a flag, and an id must
    look like one (letters, digits, ``-``, ``_``, ``.``, ``:``)."""
    kind = get_agent(agent)
    if not (kind.fork if resume.fork else kind.resume):
        what = "forked" if resume.fork and kind.resume else "resumed"
        why = "it has no fork" if resume.fork and kind.resume else kind.not_resumable
        return f"not {what}: {why}"
    session = resume.session
    if not session or len(session) > _SESSION_LIMIT or session.startswith("-"):
        return f"not a session: {session[:80]!r}"
    if not session.isprintable():
        return "not a session: it has control characters"
    if agent in _SESSION_FILES:
        return None if os.path.isabs(session) else f"not a session file: {session[:80]!r}"
    if not all(c.isalnum() or c in "-_.:" for c in session):
        return f"not a session id: {session[:80]!r}"
    return None


def claude_session_file(session: str, env: Mapping[str, str]) -> str | None:
    """Claude Code's file of ``session`` (under ``$CLAUDE_CONFIG_DIR``, else
    ``$HOME/.claude``: ``projects/<its working directory>/<id>.jsonl``); None if none."""
    if not session or "/" in session or session.startswith("."):
        return None
    config = env.get("CLAUDE_CONFIG_DIR") or os.path.join(env.get("HOME", ""), ".claude")
    projects = os.path.join(config, "projects")
    try:
        folders = sorted(os.listdir(projects))
    except OSError:
        return None
    for folder in folders:
        path = os.path.join(projects, folder, f"{session}.jsonl")
        if os.path.isfile(path):
            return path
    return None


def _resume_args(resume: Resume | None, flags: tuple[str, str], session: str = "") -> list[str]:
    """``flags[0] SESSION`` to resume, ``flags[1] SESSION`` to fork (pi's two flags)."""
    if resume is None:
        return []
    return [flags[1] if resume.fork else flags[0], session or resume.session]


def claude_command(program: Sequence[str], agent_args: Sequence[str]) -> list[str]:
    """Claude Code's command: the base flags, the prompt tool, the user's arguments."""
    args = [*program, *CLAUDE_ARGS]
    if not any(a.split("=", 1)[0] in _OWN_PROMPT_FLAGS for a in agent_args):
        args += ["--permission-prompt-tool", "stdio"]
    return [*args, *agent_args]


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


class _Start(NamedTuple):
    """What a CLI's launch is built from (see :func:`cli_launch`)."""

    argv: list[str]
    args: Sequence[str]
    env: dict[str, str]
    model: str | None
    resume: Resume | None


Build = Callable[[_Start], CliLaunch]


def _claude(start: _Start) -> CliLaunch:
    argv, args, env, model, resume = start
    flag = _model_flag(args, model, ("--model",))
    again: list[str] = []
    if resume is not None:
        again = ["--resume", claude_session_file(resume.session, env) or resume.session]
        again += ["--fork-session"] if resume.fork else []
    return CliLaunch(claude_command(argv, [*args, *flag, *again]), {**QUIET_ENV, **env})


def _codex(start: _Start) -> CliLaunch:
    argv, args, env, _, _ = start  # model and resume: thread/start, thread/resume, thread/fork
    return CliLaunch([*argv, *args], env)  # its own approval policy: it asks, the desk answers


def _pi(start: _Start) -> CliLaunch:
    argv, args, env, model, resume = start
    again = _resume_args(resume, ("--session", "--fork"))
    return CliLaunch([*argv, *args, *_model_flag(args, model, ("--model",)), *again], env)


def _gemini(start: _Start) -> CliLaunch:
    argv, args, env, model, _ = start  # resume: session/load (the ACP translator)
    flag = _model_flag(args, model, ("--model", "-m"))
    return CliLaunch([*argv, *args, *flag], {**GEMINI_ENV, **env})


def _acp(start: _Start) -> CliLaunch:
    argv, args, env, _, _ = start  # model: session/set_model; resume: session/load
    _, rest = split_mode_arg(args)
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
    *,
    resume: Resume | None = None,
) -> CliLaunch | None:
    """The command and environment ``agent``'s CLI starts with (``argv``: its program,
    resolved); None for an agent not in :data:`LAUNCHES`. Raises :class:`ModelTwice`."""
    build = LAUNCHES.get(agent)
    start = _Start(list(argv), list(agent_args), dict(env), model, resume)
    return None if build is None else build(start)


CODEX_CLIENT: Final = {"name": "tether", "title": "tether", "version": "0"}


def codex_handshake(
    rpc: Outbox, cwd: str, model: str | None, resume: Resume | None = None
) -> list[dict[str, Any]]:
    """Codex's hand-shake, pipelined: ``initialize``, ``initialized``, ``thread/start {cwd,
    model?}`` (its answer, the thread id, is what a turn needs), or to continue a thread
    ``thread/resume`` / ``thread/fork {threadId, cwd, model?, excludeTurns}``."""
    params = {"clientInfo": CODEX_CLIENT, "capabilities": {"experimentalApi": True}}
    thread: dict[str, Any] = {"cwd": cwd} if not model else {"cwd": cwd, "model": model}
    method = "thread/start"
    if resume is not None:
        method = "thread/fork" if resume.fork else "thread/resume"
        thread = {"threadId": resume.session, **thread, "excludeTurns": True}
    return [
        rpc.request("initialize", params),
        rpc.notify("initialized"),
        rpc.request(method, thread),
    ]


def _codex_opening(cwd: str, model: str | None, resume: Resume | None) -> list[dict[str, Any]]:
    return codex_handshake(Outbox(jsonrpc=False), cwd, model, resume)


# The agents whose hand-shake opens with messages written as the CLI starts (see above):
# given the CLI's working directory, the run's model and what it resumes, those messages.
Opening = Callable[[str, str | None, Resume | None], list[dict[str, Any]]]
HANDSHAKES: Final[dict[str, Opening]] = {
    "codex": _codex_opening,
}
