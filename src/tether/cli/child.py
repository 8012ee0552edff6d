"""``tether child``: run as a live wire child over a control file and an event file.

The files come from the environment (``FEN_WIRE_*``, or the same names with
``TETHER_WIRE_*``): ``CONTROL_PATH`` and ``EVENT_PATH`` (required), ``RUN_ID``
(default ``run``) and ``DEADLINE`` (Unix seconds). The task arrives as the first
``prompt`` control. Exit status 0 only after ``exit done``.

``tether child --agent NAME [--agent-arg ARG]... [-- CMD ARGS...]`` runs an external
agent instead of the built-in one, through its adapter (see
:mod:`tether.runtime.child.adapters`): ``claude``, ``codex``, ``pi``, ``gemini`` (their CLI looked
up on PATH unless a command follows ``--``), ``acp`` and ``resp`` (the command after
``--``). ``--adapter resp`` is ``--agent resp``.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether import exits
from tether.numbers import SECONDS_OR_ZERO, count

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from tether.agent.conversation import ConversationLog
    from tether.agent.desk import Desk
    from tether.agent.provider import Provider
    from tether.agent.runner import EmitFn, TurnControl, TurnOutcome, TurnRequest, TurnRunner
    from tether.policy.config import DeskConfig
    from tether.runtime.child.adapters.commands import Resume
    from tether.runtime.child.adapters.early import Early
    from tether.runtime.child.files import EventLog
    from tether.runtime.parent.spawn import RunHandle

MISSING_ENV = "FEN_WIRE_CONTROL_PATH and FEN_WIRE_EVENT_PATH are required"


@functools.cache  # built once per process: the fork server's children share the template's
def _build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run a live child agent driven by wire controls. Reads FEN_WIRE_CONTROL_PATH, "
            "FEN_WIRE_EVENT_PATH, FEN_WIRE_RUN_ID and FEN_WIRE_DEADLINE (or TETHER_WIRE_*)."
        ),
    )
    parser.add_argument("--provider", default="scripted", help="model provider (default: scripted)")
    parser.add_argument("--model", help="model name (the provider's default if omitted)")
    parser.add_argument("--script", help="the scripted provider's replies (a JSON list)")
    parser.add_argument(
        "--provider-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a provider option (repeatable)",
    )
    parser.add_argument("--cwd", help="working directory for tools (default: the current one)")
    tools = parser.add_mutually_exclusive_group()
    tools.add_argument("--tools", help="comma-separated allow-list, e.g. bash,read")
    tools.add_argument("--no-tools", action="store_true", help="offer no tools")
    parser.add_argument("--system", help="system prompt ({cwd} is replaced)")
    parser.add_argument("--max-tokens", type=count(), default=8192, help="per model call")
    add_agent_flags(parser)
    parser.add_argument(
        "--resume",
        metavar="SESSION",
        help="continue a saved session: the agent CLI's session id (pi: its session file), "
        "or the built-in agent's saved conversation (an earlier run's conversation.jsonl)",
    )
    parser.add_argument(
        "--fork",
        action="store_true",
        help="with --resume: start a new session from it, leaving the saved one as it was",
    )
    add_approval_flags(parser)
    # The program may also follow the flags without `--` (what `tether run --child-arg`
    # can pass); everything from its first word on belongs to it.
    parser.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


ADAPTER_USAGE = "a command after -- goes with --agent NAME (e.g. --agent resp -- CMD ARGS...)"


def add_agent_flags(parser: argparse.ArgumentParser) -> None:
    """``--agent NAME``, ``--agent-arg ARG`` (repeatable) and ``--adapter resp``.

    The names are checked by :func:`agent_name` (the registry is imported only when one
    is given: ``tether child`` without ``--agent`` must reach ``ready`` fast)."""
    parser.add_argument(
        "--agent",
        metavar="NAME",
        help="the agent to run: builtin (the default), claude, codex, pi, gemini, acp, resp, "
        "...; see `tether agents`. The command after -- runs it instead of its CLI on PATH "
        "(required for acp and resp)",
    )
    parser.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for the agent's CLI (repeatable; it may start with -)",
    )
    parser.add_argument("--adapter", choices=("resp",), help="the same as --agent resp")


def add_approval_flags(parser: argparse.ArgumentParser, *, child: bool = True) -> None:
    """How the run's approvals are decided (see :mod:`tether.agent.desk`); ``child``: the
    parent's own ``--no-one-to-ask`` too (``tether run`` decides that itself)."""
    parser.add_argument(
        "--approval",
        choices=("ask", "auto"),
        help="ask: the built-in agent's bash, write and edit ask first (default auto: they "
        "run; an external agent asks as its own settings say)",
    )
    parser.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="RULE",
        help="approve calls like "
        "RULE without asking: KIND[:GLOB], e.g. shell:git status*, edit:src/**, read "
        "(repeatable)",
    )
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="deny calls like RULE without asking (repeatable; deny wins over approve)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="a TOML policy file: approve = [RULE, ...], deny = [RULE, ...]",
    )
    parser.add_argument(
        "--approval-timeout",
        type=SECONDS_OR_ZERO,
        metavar="S",
        help="decide a request nobody answered in S seconds by --approval-default",
    )
    parser.add_argument(
        "--approval-default",
        choices=("approve", "deny"),
        help="the decision --approval-timeout takes (both or neither)",
    )
    if child:
        parser.add_argument("--no-one-to-ask", metavar="WHY", help=argparse.SUPPRESS)


def approval_config(args: argparse.Namespace) -> DeskConfig | str:
    """The run's approval settings from the parsed flags, or what is wrong with them."""
    from tether.policy.config import DeskConfig, desk_config

    nobody = getattr(args, "no_one_to_ask", None)
    given = (args.approval, args.policy, args.approval_timeout, args.approval_default)
    if not (args.approve or args.deny or nobody) and given == (None,) * 4:
        return DeskConfig()

    policy_text = None
    if args.policy is not None:
        try:
            with open(args.policy, encoding="utf-8") as file:
                policy_text = file.read(1024 * 1024 + 1)
        except (OSError, UnicodeDecodeError) as exc:
            return f"cannot read the policy file {args.policy}: {exc}"
    return desk_config(
        approval=args.approval,
        approve=args.approve,
        deny=args.deny,
        policy_text=policy_text,
        policy_name=args.policy or "policy file",
        timeout_s=args.approval_timeout,
        default=args.approval_default,
        nobody=nobody,
    )


def join_agent_args(argv: list[str]) -> list[str]:
    """``--agent-arg VALUE`` as ``--agent-arg=VALUE``, so a value may start with ``-``
    (``--agent-arg --permission-mode --agent-arg plan``); flags only, before ``--``."""
    out: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg == "--":
            out += [arg, *rest]
            break
        if arg == "--agent-arg":
            value = next(rest, None)
            out.append(arg if value is None else f"--agent-arg={value}")
        else:
            out.append(arg)
    return out


def agent_name(args: argparse.Namespace) -> str | None:
    """The ``--agent`` name (``--adapter`` is its alias); ValueError for an unknown one or
    when both are given and differ."""
    if args.adapter is not None and args.agent not in (None, args.adapter):
        raise ValueError(f"--adapter {args.adapter} and --agent {args.agent} disagree")
    name: str | None = args.agent or args.adapter
    if name is not None:
        from tether.runtime.child.adapters.registry import get_agent

        get_agent(name)  # UnknownAgent (a ValueError) names the known ones
    return name


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """The flags, and the program after the first ``--`` (empty when there is none)."""
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1 :]


def _ack_notes(agent: str | None) -> dict[str, str] | None:
    from tether.runtime.child.adapters.registry import AGENTS, DEFAULT_AGENT, ack_notes

    return None if agent in (None, DEFAULT_AGENT) else ack_notes(AGENTS[agent])


def _default_command(agent: str) -> tuple[str, ...]:
    from tether.runtime.child.adapters.registry import AGENTS, DEFAULT_AGENT

    return ("",) if agent == DEFAULT_AGENT else AGENTS[agent].command


def _lifeline(env: dict[str, str]) -> int | None:
    """The read end of the parent's lifeline pipe (``TETHER_LIFELINE_FD``), if any.

    The variable is removed from ``env`` and this process's environment: a number that
    names our descriptor means nothing (or something else) in the processes we start.
    """
    raw = env.pop("TETHER_LIFELINE_FD", "")
    os.environ.pop("TETHER_LIFELINE_FD", None)
    return int(raw) if raw.isdigit() else None


def _wake_fd(env: dict[str, str]) -> str | None:
    """``TETHER_WAKE_FD`` as given (checked later), removed like the lifeline's variable."""
    os.environ.pop("TETHER_WAKE_FD", None)
    return env.pop("TETHER_WAKE_FD", None)


def _start_timeout(env: dict[str, str]) -> float | None:
    """The run's start timeout from ``TETHER_START_TIMEOUT_S`` (removed from ``env``: it
    is this run's, not the agent CLI's or its tools')."""
    from tether.runtime.child.adapters import START_TIMEOUT_ENV

    raw = env.pop(START_TIMEOUT_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _adopt_env(env: dict[str, str]) -> str | None:
    """``TETHER_ADOPT`` (``adapters.early.ADOPT_ENV``: the CLI the pre-exec stage started),
    removed like the lifeline's variable."""
    os.environ.pop("TETHER_ADOPT", None)
    return env.pop("TETHER_ADOPT", None)


def resume_of(args: argparse.Namespace) -> Resume | None:
    """The session ``--resume`` / ``--fork`` name (None without ``--resume``)."""
    if not args.resume:
        return None
    from tether.runtime.child.adapters.commands import Resume

    return Resume(args.resume, fork=bool(args.fork))


def _start_early(
    args: argparse.Namespace, command: list[str], env: dict[str, str], adopt: str | None
) -> list[Early]:
    """An external agent's CLI, started before anything heavy is imported, or the one
    the pre-exec stage started (``adopt``), taken over (see
    :mod:`tether.runtime.child.adapters.early`); [] when it is not started early."""
    adopted = None
    if adopt is not None:
        from tether.runtime.child.adapters.early import adopt as take_over

        adopted = take_over(adopt)
    try:
        agent = agent_name(args)
    except ValueError:
        agent = None
    if agent is None:
        if adopted is not None:
            from tether.runtime.child.adapters.early import discard

            discard(adopted)
        return []
    from tether.runtime.child.adapters.early import start_early

    cwd = os.path.realpath(args.cwd or os.getcwd())
    early = start_early(
        agent,
        command=command,
        agent_args=args.agent_arg,
        cwd=cwd,
        env=env,
        model=args.model,
        adopted=adopted,
        resume=resume_of(args),
    )
    return [] if early is None else [early]


def _options(pairs: list[str]) -> dict[str, str] | str:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            return f"--provider-option expects KEY=VALUE, got {pair!r}"
        options[key] = value
    return options


def _fail_early(event_path: str | None, run: str, error: str) -> int:
    """Report a start-up error on stderr and, when possible, as the run's exit line.

    The exit status follows the exit line (4, failed); without one it is 2 (set-up).
    """
    print(f"tether child: {error}", file=sys.stderr)
    if not event_path:
        return exits.USAGE
    from tether.runtime.child.files import EventLog, first_line
    from tether.wire import Exit

    try:
        log = EventLog(event_path, run)
        log.emit(Exit, status="failed", error=first_line(error))
        log.close()
    except (OSError, ValueError) as exc:
        print(f"tether child: cannot write the exit line: {exc}", file=sys.stderr)
        return exits.USAGE
    return exits.FAILED


@functools.lru_cache(maxsize=16)
def _parsed(prog: str, argv: tuple[str, ...]) -> tuple[argparse.Namespace, tuple[str, ...]]:
    flags, command = _split_command(join_agent_args(list(argv)))
    return _build_parser(prog).parse_args(flags), tuple(command)


def parse_flags(argv: Sequence[str], prog: str) -> tuple[argparse.Namespace, list[str]]:
    """The parsed flags and the program after ``--`` (argparse exits on bad flags).

    Cached by ``argv``: the fork server's template parses each request's flags before it
    forks (:mod:`tether.cli.forkserver`), so its children share the result instead of
    each running argparse (~0.15 MiB of private memory per child). Nothing changes the
    result: treat it as read-only.
    """
    args, command = _parsed(prog, tuple(argv))
    return args, list(command or args.command)


def main(argv: list[str], prog: str) -> int:
    started = time.monotonic()
    args, command = parse_flags(argv, prog)
    env = dict(os.environ)
    lifeline = _lifeline(env)
    if lifeline is not None:  # ends this child even if its loop never runs (backstop)
        from tether.runtime.child.backstop import watch_lifeline

        watch_lifeline(lifeline)
    wake = _wake_fd(env)
    adopt = _adopt_env(env)
    start_s = _start_timeout(env) if args.agent or args.adapter else None
    early_cli = _start_early(args, command, env, adopt)  # the CLI boots while we import and set up
    try:
        return _main(
            args,
            command,
            env,
            lifeline=lifeline,
            wake=wake,
            start_s=start_s,
            started=started,
            early_cli=early_cli,
        )
    finally:
        if early_cli:  # never adopted: the child failed before its adapter was built
            from tether.runtime.child.adapters.early import stop_early

            stop_early(early_cli.pop())


def _main(
    args: argparse.Namespace,
    command: list[str],
    env: dict[str, str],
    *,
    lifeline: int | None,
    wake: str | None,
    start_s: float | None,
    started: float,
    early_cli: list[Early],
) -> int:
    from pathlib import Path  # here: an agent's CLI starts before (early.py)

    from tether.wire.env import read_wire_env

    control = read_wire_env(env, "CONTROL_PATH")
    events = read_wire_env(env, "EVENT_PATH")
    run = read_wire_env(env, "RUN_ID") or "run"
    if not control or not events:
        return _fail_early(events, run, MISSING_ENV)
    deadline: float | None = None
    raw_deadline = read_wire_env(env, "DEADLINE")
    if raw_deadline is not None:
        try:
            deadline = float(raw_deadline)
        except ValueError:
            deadline = math.nan
        if not math.isfinite(deadline):
            return _fail_early(events, run, f"invalid FEN_WIRE_DEADLINE {raw_deadline!r}")
    options = _options(args.provider_option)
    if isinstance(options, str):
        return _fail_early(events, run, options)
    approvals = approval_config(args)
    if isinstance(approvals, str):
        return _fail_early(events, run, approvals)
    try:
        agent = agent_name(args)
    except ValueError as exc:
        return _fail_early(events, run, str(exc))
    if command and agent in (None, "builtin"):
        return _fail_early(events, run, ADAPTER_USAGE)
    if args.fork and not args.resume:
        return _fail_early(events, run, "--fork goes with --resume SESSION")
    if agent is not None and not command and not _default_command(agent):
        return _fail_early(events, run, f"--agent {agent} needs the agent's command after --")
    cwd = Path(args.cwd or os.getcwd()).resolve()
    if not cwd.is_dir():
        return _fail_early(events, run, f"--cwd {cwd} is not a directory")

    # `ready` goes out before asyncio, the agent and the providers are imported: the
    # parent may append controls at once; they are read as soon as the loop runs.
    from tether.runtime.child.backstop import handle_stop_signals

    early: list[int] = []  # a signal before the loop's handlers exist still ends `failed`
    handle_stop_signals(early.append)  # and ends the child even if the loop never runs
    log = _ready(events, run)
    if isinstance(log, int):
        return log

    from tether.runtime.child.presenter import ChildOptions, run_child
    from tether.transports.wake import inherited_wake_fd
    from tether.transports.watch import polling_forced

    desk = _open_desk(approvals, env, log)

    async def factory(emit: EmitFn) -> TurnRunner:
        if agent not in (None, "builtin"):
            from tether.runtime.child.adapters import open_runner
            from tether.runtime.child.adapters.early import stop_early

            handed = early_cli.pop() if early_cli else None
            try:
                return open_runner(
                    agent,
                    emit,
                    command=command,
                    agent_args=args.agent_arg,
                    cwd=cwd,
                    env=env,
                    run_dir=Path(events).parent,
                    model=args.model,
                    early=handed,
                    start_s=start_s,
                    started_at=started,
                    desk=desk,
                    resume=resume_of(args),
                )
            except BaseException:
                stop_early(handed)
                raise
        return _LazyAgent(
            args,
            emit,
            cwd=cwd,
            env=env,
            options=options,
            desk=desk,
            run_dir=Path(events).parent,
        )

    child = ChildOptions(
        control_path=Path(control),
        event_path=Path(events),
        runner_factory=factory,
        run=run,
        deadline=deadline,
        force_polling=polling_forced(env),
        ready_sent=True,
        early_signals=early,
        lifeline_fd=lifeline,
        wake_fd=inherited_wake_fd(wake),
        ack_notes=_ack_notes(agent),
        desk=desk,
    )
    return run_child(child, log)


def _ready(events: str, run: str) -> EventLog | int:
    """The event log, ``ready`` written to it; else the exit status (nothing can be said:
    the file cannot be opened, or not even ``ready`` could be written on a full disk)."""
    from tether.runtime.child.files import EventLog
    from tether.wire import Ready

    try:
        log = EventLog(events, run)
    except OSError as exc:
        print(f"tether child: cannot open event file {events}: {exc}", file=sys.stderr)
        return exits.USAGE
    log.emit(Ready)
    if log.closed:
        print(f"tether child: cannot write the event file {events}", file=sys.stderr)
        return exits.FAILED
    return log


def _open_desk(config: DeskConfig, env: dict[str, str], log: EventLog) -> Desk:
    """The run's approval desk: its requests go to the run's inbox, its notes to events."""
    from tether.agent.desk import Desk
    from tether.inbox.writer import inbox_path_from_env

    return Desk(config, inbox=inbox_path_from_env(env), emit=log.emit_display)


class _LazyAgent:
    """The built-in agent, built in two steps after ``ready`` (start-up speed, memory).

    Before ``ready`` only the cheap checks run (a known provider, a script for
    ``scripted``). :meth:`prepare`, right after ``ready``, does everything that can fail:
    the tool names checked and the provider built (importing it, httpx for the HTTP ones,
    off the event loop), the conversation it resumes read (``--resume FILE``) and the
    run's own ``conversation.jsonl`` made (with the resumed items in it), so a bad
    configuration or a bad saved conversation still ends the run at its start. The tools
    and the agent, which cannot fail, are built at the first turn: an idle forked child
    never touches them (~0.3 MiB less private memory each).
    """

    def __init__(
        self,
        args: argparse.Namespace,
        emit: EmitFn,
        *,
        cwd: Path,
        env: dict[str, str],
        options: dict[str, str],
        desk: Desk | None = None,
        run_dir: Path,
    ) -> None:
        from tether.agent.registry import check_provider

        check_provider(args.provider)
        self._build = (args, emit, cwd, env, options)
        self._desk = desk
        self._run_dir = run_dir
        self._log: ConversationLog | None = None
        self._provider: Provider | None = None
        self._agent: TurnRunner | None = None
        self._task: asyncio.Task[None] | None = None

    async def prepare(self) -> None:
        import asyncio

        if self._task is None:
            self._task = asyncio.ensure_future(self._prepare())
        await asyncio.shield(self._task)

    async def _prepare(self) -> None:
        import asyncio

        from tether.agent.runner import RunnerSetupError

        args, _emit, _cwd, env, options = self._build
        self._log = await _open_log(self._run_dir, args.resume)
        if _imported(args.provider):  # forked from the fork server: ~1 ms, and no thread
            try:
                self._provider = _build_provider(args, env=env, options=options)
            except (ValueError, OSError) as exc:
                raise RunnerSetupError(str(exc)) from exc
            return
        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # the loop thread gets the GIL back quickly
        try:
            provider = await asyncio.to_thread(_build_provider, args, env=env, options=options)
        except (ValueError, OSError) as exc:
            raise RunnerSetupError(str(exc)) from exc
        finally:
            sys.setswitchinterval(interval)
        self._provider = provider

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        await self.prepare()
        if self._agent is None:
            assert self._provider is not None
            args, emit, cwd, env, _options = self._build
            self._agent = _build_agent(
                args, emit, self._provider, cwd=cwd, env=env, desk=self._desk, log=self._log
            )
        return await self._agent.run_turn(request, control)

    def final_text(self) -> str:
        return "" if self._agent is None else self._agent.final_text()

    async def aclose(self) -> None:
        if self._agent is not None:
            await self._agent.aclose()
        elif self._provider is not None:
            await self._provider.aclose()
        if self._log is not None:
            self._log.close()


async def _open_log(run_dir: Path, resume: str | None) -> ConversationLog:
    """The run's ``conversation.jsonl``, holding the conversation it resumes (if any)
    first; ``RunnerSetupError`` when that cannot be read or the file cannot be made."""
    import asyncio

    from tether.agent.conversation import (
        CONVERSATION_FILE,
        ConversationLog,
        load_conversation,
        repaired,
    )
    from tether.agent.runner import RunnerSetupError

    def made() -> ConversationLog:
        items = load_conversation(resume) if resume else []
        if isinstance(items, str):
            raise RunnerSetupError(f"cannot resume: {items}")
        return ConversationLog(run_dir / CONVERSATION_FILE, repaired(items))

    try:
        return made() if not resume else await asyncio.to_thread(made)
    except OSError as exc:
        raise RunnerSetupError(f"cannot save the conversation in {run_dir}: {exc}") from exc


def _imported(provider: str) -> bool:
    """True when building the agent imports nothing (a child forked from the fork server's
    template has it all): then it is built on the loop, sparing a thread (~0.7 MiB of
    private memory per child)."""
    from tether.agent.registry import PROVIDERS

    module = PROVIDERS.get(provider, "").partition(":")[0]
    needed = ("tether.agent.loop", "tether.agent.toolset", "tether.agent.tools", module)
    return all(name in sys.modules for name in needed)


async def _spawn_subrun(task: str, **options: Any) -> RunHandle:
    """The subagent tool's ``spawn``: the parent API, imported when a sub-run starts."""
    from tether.runtime.parent.spawn import spawn

    return await spawn(task, **options)


def _allowed_tools(args: argparse.Namespace) -> list[str] | None:
    return [] if args.no_tools else (args.tools.split(",") if args.tools is not None else None)


def _build_provider(
    args: argparse.Namespace, *, env: dict[str, str], options: dict[str, str]
) -> Provider:
    """What can fail in building the built-in agent for the parsed flags: the tool names
    are checked and the provider is built; raises a clear error on bad ones."""
    import tether.agent.loop  # noqa: F401 (imported here: off the loop for an exec'd child)
    from tether.agent.registry import get_provider
    from tether.agent.toolset import tool_names

    tool_names(_allowed_tools(args))
    return get_provider(args.provider, args.model, script=args.script, env=env, options=options)


def _build_agent(
    args: argparse.Namespace,
    emit: EmitFn,
    provider: Provider,
    *,
    cwd: Path,
    env: dict[str, str],
    desk: Desk | None = None,
    log: ConversationLog | None,
) -> TurnRunner:
    """The built-in agent around ``provider`` (:func:`_build_provider` checked the rest),
    its conversation started from ``log``'s (a resumed one) and saved there."""
    from tether.agent.loop import Agent
    from tether.agent.tools import ToolContext
    from tether.agent.toolset import select_tools

    return Agent(
        provider,
        emit=emit,
        tools=select_tools(_allowed_tools(args), spawn=_spawn_subrun),
        context=ToolContext(cwd=cwd, env=env, desk=desk),
        model=args.model,
        system=args.system,
        max_tokens=args.max_tokens,
        history=() if log is None else log.items,
        log=log,
    )
