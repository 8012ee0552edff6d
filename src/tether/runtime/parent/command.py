"""The child's command for a run's :class:`~tether.runtime.parent.options.SpawnOptions`,
checked once for every way of starting one (the parent API, ``tether run``, the daemon).

:func:`child_command` decides what runs: the built-in agent (``tether child`` with its
provider, model and script), any program that speaks the wire (``argv``), or an external
agent CLI behind its adapter (``tether child --agent NAME``, with ``argv`` the CLI's own
command). Options that contradict each other, an unknown agent or provider, a script
that does not load, or approval settings that do not hold (a bad rule, a policy file that
cannot be read, a timeout without its default) are :class:`~tether.errors.BadOptions` (a
usage error: nothing has been created yet); an agent CLI that is not installed is a
:class:`~tether.errors.SpawnError` (nothing is started). The approval settings reach the
child as its flags (``--approve=RULE``, ...; a policy file's rules among them).

A run that continues another gets ``--resume SESSION`` (``--fork``) on the child's
command line (:mod:`tether.runtime.parent.continuation` finds the session); a run with
``base_url`` gets its agent's configuration (:mod:`tether.runtime.child.adapters.config`:
its environment, its ``--agent-arg`` values and the files the caller writes into the
agent's home before the child starts, :attr:`ChildCommand.config`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from tether.errors import BadOptions, SpawnError
from tether.paths import homes_dir
from tether.runtime.child.adapters import START_TIMEOUT_ENV
from tether.runtime.child.adapters.commands import Resume
from tether.runtime.child.adapters.config import AgentConfig, plan_config
from tether.runtime.child.adapters.prestart import CliRequest
from tether.runtime.parent.options import SpawnOptions
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import new_run_id

__all__ = ["ChildCommand", "approval_args", "child_command", "default_argv"]


@dataclass(frozen=True, slots=True)
class ChildCommand:
    """What to exec: ``argv``; ``agent``: the agent's name (``builtin`` for tether's own);
    ``cli``: an external agent's CLI, started before the child when the child is exec'd;
    ``env``: variables the child must get (the CLI's hand-shake time); ``config``: the
    agent's configuration for ``base_url`` (write it, then give the child
    :meth:`child_env`)."""

    argv: list[str]
    agent: str
    cli: CliRequest | None = None
    env: dict[str, str] = field(default_factory=dict)
    config: AgentConfig | None = None

    def child_env(self, env: dict[str, str] | None) -> dict[str, str] | None:
        """The run's environment for the child: with a configuration, its (see
        :meth:`AgentConfig.child_env`), else ``env``."""
        return env if self.config is None else self.config.child_env(env)


def child_command(
    options: SpawnOptions, timeouts: Timeouts | None = None, resume: Resume | None = None
) -> ChildCommand:
    """The command for ``options`` (continuing ``resume``'s session); raises
    :class:`BadOptions`. Reads the script file."""
    from tether.runtime.child.adapters.registry import resolve_agent

    try:
        agent = resolve_agent(options.agent, options.provider)
    except ValueError as exc:
        raise BadOptions(str(exc)) from None
    config = _config(options, agent)
    approvals = approval_args(options)  # tether child's own flags: before any `--`
    if agent == "builtin":
        if resume is not None and options.argv is not None:
            raise BadOptions("resume goes with tether's own child, not with argv")
        command = [*_builtin(options, approvals), *_resume_args(resume)]
        return ChildCommand(command, agent, config=config)
    return _external(options, agent, timeouts, resume, config, approvals=approvals)


def _resume_args(resume: Resume | None) -> list[str]:
    """``tether child``'s flags for the session it resumes (forks)."""
    if resume is None:
        return []
    return ["--resume", resume.session, *(["--fork"] if resume.fork else [])]


def _config(options: SpawnOptions, agent: str) -> AgentConfig | None:
    """The agent's configuration for ``base_url`` (None without one)."""
    if options.base_url is None:
        return None
    homes = homes_dir()
    home = options.home or str(homes / new_run_id())
    inside = os.path.dirname(os.path.normpath(home)) == os.path.normpath(os.path.abspath(homes))
    if not os.path.isabs(home) or not inside:  # never a real HOME: its files would be replaced
        raise BadOptions(f"home {home!r} is not one of tether's agent homes (in {homes})")
    try:
        return plan_config(
            agent,
            options.base_url,
            home,
            model=options.model,
            provider=options.provider,
            command=options.argv or (),
        )
    except ValueError as exc:
        raise BadOptions(str(exc)) from None


def approval_args(options: SpawnOptions) -> list[str]:
    """``tether child``'s flags for the run's approval settings; raises BadOptions."""
    from tether.policy.config import desk_config

    policy_text = None
    if options.policy is not None:
        policy_text = _read_policy(options.policy)
    config = desk_config(
        approval=options.approval,
        approve=options.approve,
        deny=options.deny,
        policy_text=policy_text,
        policy_name=options.policy or "policy file",
        timeout_s=options.approval_timeout_s,
        default=options.approval_default,
        nobody=options.no_one_to_ask,
    )
    if isinstance(config, str):
        raise BadOptions(config)
    return config.to_args()


def _decides(options: SpawnOptions) -> bool:
    """The run sets how its approvals are decided (rules, a policy, ask, a timeout)."""
    return bool(
        options.approve
        or options.deny
        or options.policy is not None
        or options.approval is not None
        or options.approval_timeout_s is not None
        or options.approval_default is not None
    )


def _read_policy(path: str) -> str:
    from tether.fsafe import UnsafeFileError, read_given
    from tether.policy.file import MAX_POLICY_BYTES

    try:
        return read_given(path, MAX_POLICY_BYTES).decode("utf-8")
    except (OSError, UnsafeFileError, UnicodeDecodeError) as exc:
        raise BadOptions(f"cannot read the policy file {path}: {exc}") from None


def _builtin(options: SpawnOptions, approvals: list[str]) -> list[str]:
    if options.agent_args:
        raise BadOptions("agent_args go with an external agent (agent: NAME)")
    if options.argv is not None:
        _check_strings("argv", options.argv, empty_ok=False)
        if options.script is not None:
            raise BadOptions("script goes with the built-in child, not with argv")
        if _decides(options):  # a bare no_one_to_ask is no setting: nothing asks there
            raise BadOptions("approval settings go with tether's child or an agent, not argv")
        return list(options.argv)
    from tether.agent.registry import ProviderSetupError, check_provider

    try:
        check_provider(options.provider or "scripted")
    except ProviderSetupError as exc:
        raise BadOptions(str(exc)) from None
    command = [*default_argv(options.provider, options.model), *options.child_args, *approvals]
    if options.script is None:
        return command
    script = os.path.abspath(options.script)  # the child may work elsewhere
    _check_script(script)
    return [*command, "--script", script]


def _external(
    options: SpawnOptions,
    agent: str,
    timeouts: Timeouts | None,
    resume: Resume | None,
    config: AgentConfig | None,
    *,
    approvals: list[str],
) -> ChildCommand:
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
    agent_args = [*(config.args if config else ()), *options.agent_args]
    extra = agent_child_args(agent, agent_args, own)
    argv = [*default_argv(None, options.model), *options.child_args, *_resume_args(resume)]
    argv += [*approvals, *extra]
    cli = None
    if not options.child_args:  # a plain adapter child: its CLI may start before it
        cli = CliRequest(agent, own, agent_args, options.model, resume)
    env = {} if timeouts is None else {START_TIMEOUT_ENV: f"{timeouts.start_s:g}"}
    return ChildCommand(argv, agent, cli, env, config)


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


def default_argv(provider: str | None, model: str | None) -> list[str]:
    """``tether child`` with the provider and model flags."""
    argv = [sys.executable, "-m", "tether", "child"]
    if provider:
        argv += ["--provider", provider]
    if model:
        argv += ["--model", model]
    return argv
