"""Adapters: external agent CLIs run as wire children.

An adapter is a :class:`tether.agent.runner.TurnRunner` that owns one agent CLI process
(:class:`tether.runtime.child.adapters.base.CliProcess`) and translates between the CLI's own
machine protocol and the wire's display events; the child presenter
(:mod:`tether.runtime.child.presenter`) does everything else (acks, the state table, the result,
the exit). :mod:`tether.runtime.child.adapters.registry` names the agents and says, control by
control, what each adapter really does.

:func:`open_runner` builds the runner for an agent name: the CLI is found (on PATH, or
``$TETHER_CI_CACHE/npm/node_modules/.bin``) before ``ready`` is answered with the first
turn, and a missing CLI is a :class:`~tether.agent.runner.RunnerSetupError` naming it.
Every runner class offers ``for_agent(options, emit)``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from tether.runtime.child.adapters.registry import DEFAULT_AGENT, find_command, get_agent

if TYPE_CHECKING:  # pathlib's import is ~8 ms, before the CLI starts (early.py)
    import subprocess
    from pathlib import Path

    from tether.agent.desk import Desk
    from tether.agent.runner import EmitFn, TurnRunner
    from tether.runtime.child.adapters.commands import Resume
    from tether.runtime.child.adapters.early import Early

__all__ = ["START_TIMEOUT_ENV", "AdapterOptions", "open_runner"]

# The run's start timeout in seconds, set by the parent (``tether.spawn``): it bounds the
# agent CLI's hand-shake (``AdapterOptions.start_s``); without it the default applies.
START_TIMEOUT_ENV = "TETHER_START_TIMEOUT_S"


class AdapterOptions(NamedTuple):
    """What an adapter is built from."""

    agent: str
    # the CLI's command, program resolved to a path; for the agents in
    # commands.LAUNCHES the whole command line (agent_args and the model included)
    argv: list[str]
    agent_args: list[str]  # extra CLI arguments from --agent-arg, in order
    cwd: str
    env: dict[str, str]  # the CLI's environment (the child's: inbox paths included)
    run_dir: Path | None = None  # where the adapter may keep files (the run directory)
    model: str | None = None  # the run's model (commands says how each CLI gets it)
    process: subprocess.Popen[bytes] | None = None  # the CLI, started early (early.py)
    sent: Sequence[dict[str, Any]] = ()  # what early.py wrote to its stdin already
    start_s: float | None = None  # the run's start timeout: the hand-shake's bound
    started_at: float | None = None  # time.monotonic() when the child started
    desk: Desk | None = None  # where the CLI's approval requests are decided
    resume: Resume | None = None  # the saved session this run continues (or forks)


class _AdapterClass(Protocol):
    def for_agent(self, options: AdapterOptions, emit: EmitFn) -> TurnRunner: ...


def open_runner(
    agent: str,
    emit: EmitFn,
    *,
    command: Sequence[str] = (),
    agent_args: Sequence[str] = (),
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    run_dir: Path | None = None,
    model: str | None = None,
    early: Early | None = None,
    start_s: float | None = None,
    started_at: float | None = None,
    desk: Desk | None = None,
    resume: Resume | None = None,
) -> TurnRunner:
    """The turn runner for ``agent``; raises ``RunnerSetupError`` when it cannot be built.

    ``early`` is the CLI :func:`~tether.runtime.child.adapters.early.start_early` started with
    the same arguments: the runner adopts it. The caller ends it if this raises."""
    from tether.agent.runner import RunnerSetupError
    from tether.runtime.child.adapters.commands import cli_launch, resume_refusal

    kind = get_agent(agent)
    if agent == DEFAULT_AGENT or not kind.runner:
        raise RunnerSetupError(f"agent {agent!r} has no adapter")
    if resume is not None:
        refused = resume_refusal(agent, resume)
        if refused is not None:
            raise RunnerSetupError(f"agent {agent}: cannot resume: {refused}")
    argv = early.launch.argv if early is not None else find_command(kind, command, env)
    if argv is None:
        raise RunnerSetupError(missing_cli(agent, command, env) or f"agent {agent}: no command")
    module_name, _, attr = kind.runner.partition(":")
    try:
        cls: _AdapterClass = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RunnerSetupError(f"agent {agent}: its adapter is not in this build ({exc})") from exc
    cli_env = dict(env)
    if early is not None:
        cli_env = early.launch.env
    else:
        try:
            launch = cli_launch(agent, argv, agent_args, env, model, resume=resume)
        except ValueError as exc:  # the model given twice
            raise RunnerSetupError(f"agent {agent}: {exc}") from exc
        if launch is not None:
            argv, cli_env = launch
    options = AdapterOptions(
        agent,
        argv,
        list(agent_args),
        os.fspath(cwd),
        cli_env,
        run_dir,
        model=model,
        process=None if early is None else early.popen,
        sent=() if early is None else early.sent,
        start_s=start_s,
        started_at=started_at,
        desk=desk,
        resume=resume,
    )
    return cls.for_agent(options, emit)


def missing_cli(agent: str, command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why ``agent``'s CLI cannot be run with ``env`` (not installed, no command given),
    or None when it can. The parent asks before it starts anything; the adapter again."""
    import shlex

    kind = get_agent(agent)
    if find_command(kind, command, env) is not None:
        return None
    wanted = shlex.join(command) if command else " ".join(kind.command)
    if not wanted:
        return f"--agent {agent} needs the agent's command after --"
    hint = f" (npm install {kind.package})" if kind.package else ""
    return f"agent {agent}: {wanted.split()[0]} is not on PATH{hint}"
