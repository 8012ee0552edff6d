"""The agent kinds tether can run as a child, as data: one table, used everywhere.

``tether run --agent NAME``, ``tether child --agent NAME``, ``tether.spawn(agent=NAME)``,
the daemon's ``agent.spawn {agent}`` and ``tether agents`` all read :data:`AGENTS`. Each
:class:`AgentKind` says which command runs it (looked up on PATH unless a command follows
``--``), how to ask that command its version, which npm package pins it, which runner
adapts its machine protocol to the wire (``module:Class``, imported only when used), and,
control by control, what the adapter really does (:class:`Capability`): ``native`` when
the CLI has the control itself, ``emulated`` when the adapter builds the closest honest
equivalent from what the CLI has, ``rejected`` when the control is refused with an ack
whose reason says why, and how the run's model reaches it (:attr:`AgentKind.model`).
``docs/agents.md`` is generated from this table
(``tether agents --markdown``) and a test keeps it current.

Imports nothing heavy: ``tether child`` reads it before ``ready``.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from tether.errors import AgentError

__all__ = [
    "AGENTS",
    "BASH_AGENT_INTERRUPT_S",
    "CONTROLS",
    "DEFAULT_AGENT",
    "AgentKind",
    "Capability",
    "Support",
    "UnknownAgent",
    "ack_notes",
    "agent_child_args",
    "find_command",
    "get_agent",
    "resolve_agent",
    "version_of",
]

DEFAULT_AGENT: Final = "builtin"
# The rows of the capability table: the wire's controls after `prompt`, and the deadline.
CONTROLS: Final = ("steer", "follow-up", "finalize", "cancel", "deadline", "close")
VERSION_TIMEOUT_S: Final = 30.0  # gemini --version takes ~12 s on a busy machine


class Support(enum.StrEnum):
    NATIVE = "native"
    EMULATED = "emulated"
    REJECTED = "rejected"


class Capability(NamedTuple):
    support: Support
    how: str


class AgentKind(NamedTuple):
    name: str
    title: str
    protocol: str
    runner: str  # "module:Class" of its turn runner; "" for the built-in agent
    command: tuple[str, ...] = ()  # run when no command follows `--`; () = one must
    version_args: tuple[str, ...] = ("--version",)
    package: str | None = None  # the npm package@version CI installs
    controls: Mapping[str, Capability] = {}
    notes: str = ""
    # An environment variable naming the program (a path) to run instead of `command`
    # when no command follows `--`; "" = none.
    command_env: str = ""
    # how the run's model (`tether run --model`, spawn(model=), agent.spawn {model})
    # reaches it (see tether.runtime.child.adapters.commands)
    model: str = "not passed on"
    # how a later run continues its conversation (`tether run --resume RUN`), and how a
    # new one starts from it (fork); "" when it cannot, and then `not_resumable` says why
    resume: str = ""
    fork: str = ""
    not_resumable: str = "tether keeps no session of it"
    # How long finalize may take here before the last turn's model call: the adapter's own
    # wait for its agent to stop, plus a new process when the last turn starts one. A
    # parent's automatic finalize comes at least this much (and a last turn) before the
    # deadline (`tether run`'s default lead).
    stop_s: float = 1.0
    # how the agent's permission requests reach the run's approval desk and its answer
    # goes back (tether.agent.desk); the capability table's "approvals" row
    approvals: Capability = Capability(
        Support.REJECTED, "the program asks nothing: no approvals, and rules see no calls"
    )


BASH_AGENT_INTERRUPT_S: Final = 5.0
"""After its SIGINT, how long bash-agent may take to stop (it runs a trap only once the
command in the foreground ends) before its group is ended."""


class UnknownAgent(AgentError, ValueError):
    """A name that is not in :data:`AGENTS`."""


def _caps(**cells: tuple[Support, str]) -> dict[str, Capability]:
    table = {key.replace("_", "-"): Capability(*cell) for key, cell in cells.items()}
    assert set(table) == set(CONTROLS), sorted(table)
    return table


N, E, R = Support.NATIVE, Support.EMULATED, Support.REJECTED
_ABORT = "the turn is cancelled at once (tools' process groups ended)"
_ACP_APPROVALS = Capability(
    N,
    "session/request_permission answered with the option the person (or a rule) chose "
    "from those offered: allow once / always, reject once / always; ACP carries no reason "
    "to the agent",
)
_ACP_CANCEL = "session/cancel, then its process group is ended"
_ACP_CONTROLS = {
    "steer": (
        E,
        "ACP cannot add to a running prompt: the steer waits until the current "
        "session/prompt ends and is sent as the next one, within the same turn",
    ),
    "follow_up": (E, "the next session/prompt, within the same turn, when the current one ends"),
    "finalize": (
        E,
        "session/cancel, then one last session/prompt with the note; ACP cannot turn the "
        "agent's tools off, so only the note asks for none",
    ),
    "cancel": (N, _ACP_CANCEL),
    "deadline": (N, _ACP_CANCEL),
    "close": (
        N,
        "ends the run after the current turn; the agent's group is ended (claude-code-acp "
        "never exits on stdin EOF)",
    ),
}

AGENTS: Final[dict[str, AgentKind]] = {
    agent.name: agent
    for agent in (
        AgentKind(
            name="builtin",
            title="tether's built-in agent",
            protocol="in-process agent loop",
            runner="",
            version_args=(),
            model="the provider's model (`--model`)",
            stop_s=0.5,  # its tools' groups are ended at once
            resume="its conversation, saved in the run directory as the run goes "
            "(conversation.jsonl), loaded by the new run",
            fork="the saved conversation copied into the new run",
            controls=_caps(
                steer=(N, "added as a user message before the next model call"),
                follow_up=(N, "the next user message when the turn would end"),
                finalize=(N, "interrupt, then one last turn with the note and no tools"),
                cancel=(N, _ABORT),
                deadline=(N, _ABORT),
                close=(N, "ends the run after the current turn"),
            ),
            approvals=Capability(
                N,
                "with --approval ask its bash, write and edit wait for an answer (default: "
                "they run); rules decide any tool; a denied call's result says why",
            ),
        ),
        AgentKind(
            name="claude",
            title="Claude Code",
            protocol="stream-json on stdin and stdout (claude -p --input-format stream-json)",
            runner="tether.runtime.child.adapters.claude:ClaudeRunner",
            command=("claude",),
            package="@anthropic-ai/claude-code@2.1.197",
            model="`--model NAME`",
            stop_s=4.0,  # the interrupt, then Claude Code started again for the last turn
            resume="`--resume SESSION` (the session's file, found under the CLI's home)",
            fork="`--resume SESSION --fork-session`",
            controls=_caps(
                steer=(
                    N,
                    "a user message written during the turn; Claude Code takes it in before "
                    "its next model call (or, during its last answer, right after it, in the "
                    "same turn); steering-injected when its echo shows it was taken in",
                ),
                follow_up=(N, "the next user message, written when the turn's result arrives"),
                finalize=(
                    E,
                    "interrupt control request, then the last turn with the note in a "
                    "Claude Code resumed from the session with --tools '' (no tools at all)",
                ),
                cancel=(N, "interrupt control request, then its process group and tools ended"),
                deadline=(N, "interrupt control request, then its process group and tools ended"),
                close=(N, "stdin is closed after the current turn; Claude Code exits"),
            ),
            approvals=Capability(
                N,
                "can_use_tool control requests (--permission-prompt-tool stdio): allow with "
                "the input, or deny with a message the model reads",
            ),
            notes="what Claude Code asks about is its own setting: "
            "--agent-arg=--permission-mode=MODE, --agent-arg=--allowedTools=TOOLS",
        ),
        AgentKind(
            name="codex",
            title="Codex",
            protocol="JSON-RPC over stdio (codex app-server)",
            runner="tether.runtime.child.adapters.codex:CodexRunner",
            command=("codex", "app-server"),
            package="@openai/codex@0.171.0",
            model="`thread/start {model}`",
            resume="`thread/resume {threadId}` (its rollout under CODEX_HOME)",
            fork="`thread/fork {threadId}`",
            controls=_caps(
                steer=(
                    N,
                    "turn/steer into the running Codex turn (one that arrives as the turn "
                    "ends opens the next Codex turn instead)",
                ),
                follow_up=(
                    E,
                    "Codex has no follow-up request: turn/start of the next Codex turn, "
                    "within the same tether turn, when the current one completes",
                ),
                finalize=(
                    E,
                    "turn/interrupt, then one last turn/start with the note; Codex cannot "
                    "turn its tools off for a turn, so only the note asks for none",
                ),
                cancel=(
                    N,
                    "turn/interrupt, then its process group and the sessions its tools run "
                    "in are ended",
                ),
                deadline=(
                    N,
                    "turn/interrupt, then its process group and the sessions its tools run "
                    "in are ended",
                ),
                close=(N, "ends the run after the current turn (stdin closed, Codex exits)"),
            ),
            approvals=Capability(
                N,
                "item/commandExecution and item/fileChange requestApproval answered accept "
                "(acceptForSession for always) or decline; Codex sends no reason on",
            ),
            notes="Codex asks under its own approval policy (on-request unless its config or "
            "--agent-arg=-c --agent-arg=approval_policy=... says otherwise): when the model "
            "wants out of its sandbox",
        ),
        AgentKind(
            name="pi",
            title="pi",
            protocol="pi RPC: JSON lines on stdio (pi --mode rpc)",
            runner="tether.runtime.child.adapters.pi:PiRunner",
            command=("pi", "--mode", "rpc"),
            package="@mariozechner/pi-coding-agent@0.73.1",
            model="`--model NAME` (a model of its --provider)",
            resume="`--session FILE` (its session file, under its HOME)",
            fork="`--fork FILE`",
            controls=_caps(
                steer=(
                    N,
                    "prompt with streamingBehavior steer: pi takes it in after its current "
                    "tool calls, before its next model call",
                ),
                follow_up=(
                    N,
                    "prompt with streamingBehavior followUp: pi takes it in when it would stop",
                ),
                finalize=(
                    E,
                    "abort, then one last prompt with the note; pi cannot turn its tools "
                    "off for a prompt, so only the note asks for none",
                ),
                cancel=(N, "abort, then its process group is ended"),
                deadline=(N, "abort, then its process group is ended"),
                close=(N, "ends the run after the current turn (pi exits on stdin EOF)"),
            ),
            approvals=Capability(
                E,
                "pi has no permission prompts of its own: an extension's dialogs (select, "
                "confirm, input, editor) are answered with what the person chose",
            ),
        ),
        AgentKind(
            name="gemini",
            title="Gemini CLI",
            protocol="Agent Client Protocol (gemini --acp)",
            runner="tether.runtime.child.adapters.acp:AcpRunner",
            command=("gemini", "--acp"),
            package="@google/gemini-cli@0.61.0",
            model="`--model NAME`",
            resume="`session/load {sessionId}` (it advertises loadSession)",
            fork="`session/fork` when it advertises it (Gemini CLI 0.61.0 does not)",
            controls=_caps(**_ACP_CONTROLS),
            approvals=_ACP_APPROVALS,
            notes="what it asks about is its own setting: --agent-arg=--yolo (or "
            "--approval-mode) asks nothing",
        ),
        AgentKind(
            name="acp",
            title="any ACP agent (the command after --)",
            protocol="Agent Client Protocol over stdio",
            runner="tether.runtime.child.adapters.acp:AcpRunner",
            version_args=(),
            package="@zed-industries/claude-code-acp@0.16.2",
            model="`session/set_model {modelId}` after session/new; refused, the run fails",
            resume="`session/load {sessionId}` when the agent advertises loadSession, "
            "else the run fails `not resumable`",
            fork="`session/fork` when the agent advertises sessionCapabilities.fork",
            controls=_caps(**_ACP_CONTROLS),
            approvals=_ACP_APPROVALS,
            notes="e.g. -- claude-code-acp, or -- gemini --acp; --agent-arg=--session-mode=ID "
            "sets the session mode (claude-code-acp: bypassPermissions, acceptEdits, ...; "
            "claude-code-acp ends its turn when a call is rejected)",
        ),
        AgentKind(
            name="resp",
            title="a program speaking RESP frames (the command after --)",
            protocol="RESP message frames on stdio",
            runner="tether.runtime.child.resp_runner:RespRunner",
            version_args=(),
            model="not passed on: RESP frames name no model (the program chooses)",
            not_resumable="RESP frames carry no session to continue",
            controls=_caps(
                steer=(E, "written as a further USER_INPUT frame during the turn"),
                follow_up=(N, "written as a USER_INPUT frame when every input is answered"),
                finalize=(
                    E,
                    "the turn ends on tether's side; the note is one more input (the "
                    "program cannot be kept from using tools)",
                ),
                cancel=(N, "its process group is ended"),
                deadline=(N, "its process group is ended"),
                close=(N, "stdin is closed after the current turn"),
            ),
        ),
        AgentKind(
            name="bash-agent",
            title="bash-agent, unmodified (lloydzhou/bash-agent)",
            protocol="one process per input: the text on stdin until EOF, "
            "--output-format stream-json on stdout, --session for the conversation",
            runner="tether.runtime.child.adapters.bash_agent:BashAgentRunner",
            command=("bash-agent",),
            command_env="TETHER_BASH_AGENT",
            version_args=(),
            model="not passed on (bash-agent reads its own configuration)",
            not_resumable="tether does not resume bash-agent's --session yet",
            stop_s=BASH_AGENT_INTERRUPT_S + 1.0,  # its SIGINT wait, a process for the note
            controls=_caps(
                steer=(
                    E,
                    "bash-agent reads nothing while it works: the steer is its next input "
                    "(a new process of the same --session) when its answer is done, same turn",
                ),
                follow_up=(N, "the next input of the same --session, in the same turn"),
                finalize=(
                    E,
                    "SIGINT to its group (its own Ctrl-C), then one last input with the "
                    "note (its tools cannot be turned off)",
                ),
                cancel=(N, "its process group is ended"),
                deadline=(N, "its process group is ended"),
                close=(N, "ends the run after the current turn (no process is left)"),
            ),
            notes="-- bash path/to/agent.sh ARGS... runs a checkout (or set "
            "TETHER_BASH_AGENT=path/to/agent.sh); point it at a model "
            "with ANTHROPIC_BASE_URL=http://HOST:PORT/v1 (it appends /messages)",
        ),
    )
}
del N, E, R, _ACP_CONTROLS, _ACP_APPROVALS


def ack_notes(agent: AgentKind) -> dict[str, str]:
    """What an accepted control's ack says for ``agent``: each control it does not have
    natively, with how the adapter does it (the presenter adds it as the ack's reason)."""
    return {
        control: f"{cap.support.value}: {cap.how}"
        for control, cap in agent.controls.items()
        if control != "deadline" and cap.support is not Support.NATIVE
    }


def resolve_agent(name: str | None, provider: str | None = None) -> str:
    """The agent's name: ``name``, else fno-agents' ``provider`` when it names an agent
    (``claude``, ``codex``), else the built-in one. Raises :class:`UnknownAgent`."""
    if name is None and provider is not None and provider in AGENTS:
        name = provider
    name = name or DEFAULT_AGENT
    get_agent(name)
    return name


def get_agent(name: str) -> AgentKind:
    try:
        return AGENTS[name]
    except KeyError:
        known = ", ".join(AGENTS)
        raise UnknownAgent(f"unknown agent {name!r} (known: {known})") from None


def search_path(env: Mapping[str, str] | None = None) -> str:
    """PATH, then the CI install of the npm CLIs (``$TETHER_CI_CACHE/npm``)."""
    env = os.environ if env is None else env
    parts = [env.get("PATH", os.defpath)]
    cache = env.get("TETHER_CI_CACHE")
    if cache:
        parts.append(os.path.join(cache, "npm", "node_modules", ".bin"))
    return os.pathsep.join(parts)


def find_command(
    agent: AgentKind, command: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> list[str] | None:
    """The command that runs ``agent``: ``command`` if given, else the program named by
    its ``command_env`` variable, else its default, with the program resolved to a path;
    None when it is not installed (or there is none)."""
    import shutil

    named = (
        (os.environ if env is None else env).get(agent.command_env) if agent.command_env else None
    )
    argv = list(command) or ([named] if named else list(agent.command))
    if not argv:
        return None
    if os.sep in argv[0]:
        return argv  # a path: used as given (a missing one fails when it is started)
    found = shutil.which(argv[0], path=search_path(env))
    return None if found is None else [found, *argv[1:]]


def version_of(agent: AgentKind, env: Mapping[str, str] | None = None) -> str | None:
    """What the agent's program says its version is (first line), None if it cannot."""
    import subprocess

    argv = find_command(agent, agent.command[:1], env)
    if argv is None or not agent.version_args:
        return None
    try:
        done = subprocess.run(
            [argv[0], *agent.version_args],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def agent_child_args(
    agent: str, agent_args: Sequence[str] = (), command: Sequence[str] = ()
) -> list[str]:
    """The ``tether child`` arguments that run ``agent`` (nothing for the built-in one).

    ``--agent-arg=VALUE`` keeps values that start with ``-``; ``--`` comes last.
    """
    if agent == DEFAULT_AGENT:
        if agent_args or command:
            raise ValueError("agent_args and a command go with an external agent")
        return []
    args = ["--agent", agent, *(f"--agent-arg={arg}" for arg in agent_args)]
    return [*args, "--", *command] if command else args
