"""The child's command for a run's :class:`~tether.runtime.parent.options.SpawnOptions`,
checked once for every way of starting one (the parent API, ``tether run``, the daemon).

:func:`child_command` decides what runs: the built-in agent (``tether child`` with its
provider, model and script), any program that speaks the wire (``argv``), or an external
agent CLI behind its adapter (``tether child --agent NAME``, with ``argv`` the CLI's own
command). Options that contradict each other, an unknown agent or provider, or a script
that does not load are :class:`~tether.errors.BadOptions` (a usage error: nothing has
been created yet); an agent CLI that is not installed is a
:class:`~tether.errors.SpawnError` (nothing is started).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tether.errors import BadOptions, SpawnError
from tether.runtime.child.adapters import START_TIMEOUT_ENV
from tether.runtime.child.adapters.prestart import CliRequest
from tether.runtime.parent.launch import default_argv
from tether.runtime.parent.options import SpawnOptions
from tether.runtime.parent.outcome import Timeouts

__all__ = ["ChildCommand", "child_command"]


@dataclass(frozen=True, slots=True)
class ChildCommand:
    """What to exec: ``argv``; ``agent``: the agent's name (``builtin`` for tether's own);
    ``cli``: an external agent's CLI, started before the child when the child is exec'd;
    ``env``: variables the child must get (the CLI's hand-shake time)."""

    argv: list[str]
    agent: str
    cli: CliRequest | None = None
    env: dict[str, str] = field(default_factory=dict)


def child_command(options: SpawnOptions, timeouts: Timeouts | None = None) -> ChildCommand:
    """The command for ``options``; raises :class:`BadOptions`. Reads the script file."""
    from tether.runtime.child.adapters.registry import resolve_agent

    try:
        agent = resolve_agent(options.agent, options.provider)
    except ValueError as exc:
        raise BadOptions(str(exc)) from None
    if agent == "builtin":
        return ChildCommand(_builtin(options), agent)
    return _external(options, agent, timeouts)


def _builtin(options: SpawnOptions) -> list[str]:
    if options.agent_args:
        raise BadOptions("agent_args go with an external agent (agent: NAME)")
    if options.argv is not None:
        _check_strings("argv", options.argv, empty_ok=False)
        if options.script is not None:
            raise BadOptions("script goes with the built-in child, not with argv")
        return list(options.argv)
    from tether.agent.registry import ProviderSetupError, check_provider

    try:
        check_provider(options.provider or "scripted")
    except ProviderSetupError as exc:
        raise BadOptions(str(exc)) from None
    command = [*default_argv(options.provider, options.model), *options.child_args]
    if options.script is None:
        return command
    script = os.path.abspath(options.script)  # the child may work elsewhere
    _check_script(script)
    return [*command, "--script", script]


def _external(options: SpawnOptions, agent: str, timeouts: Timeouts | None) -> ChildCommand:
    from tether.runtime.child.adapters import missing_cli
    from tether.runtime.child.adapters.registry import agent_child_args

    if options.script is not None:
        raise BadOptions("script goes with the built-in child; point the CLI at a model server")
    _check_strings("argv", options.argv or (), empty_ok=True)
    _check_strings("agent_args", options.agent_args, empty_ok=True)
    own = list(options.argv or ())
    problem = missing_cli(agent, own, {**os.environ, **(options.env or {})})
    if problem is not None:  # not installed: nothing is started (the daemon: spawn_failed)
        raise SpawnError(problem)
    extra = agent_child_args(agent, list(options.agent_args), own)
    argv = [*default_argv(None, options.model), *options.child_args, *extra]
    cli = None
    if not options.child_args:  # a plain adapter child: its CLI may start before it
        cli = CliRequest(agent, own, list(options.agent_args), options.model)
    env = {} if timeouts is None else {START_TIMEOUT_ENV: f"{timeouts.start_s:g}"}
    return ChildCommand(argv, agent, cli, env)


def _check_strings(name: str, values: tuple[str, ...] | list[str], *, empty_ok: bool) -> None:
    if not empty_ok and not values:
        raise BadOptions(f"{name} must be a non-empty list of non-empty strings")
    if not all(isinstance(value, str) and value for value in values):
        raise BadOptions(f"{name} must be a list of non-empty strings")


def _check_script(path: str) -> None:
    from tether.agent.scripted import ScriptError, load_script

    try:
        load_script(path)
    except ScriptError as exc:
        raise BadOptions(f"script {path}: {exc}") from None
