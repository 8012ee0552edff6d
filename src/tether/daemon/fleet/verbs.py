"""``agent.*``: long-lived agents supervised by the daemon (installed by
:mod:`tether.daemon.app`).

Verbs (params -> result; errors are ``RpcError`` codes):

- ``agent.spawn {name, task?, agent?, agent_args?, provider?, model?, cwd?, argv?,
  deadline_s?, channel_id?, script?, env?, wait?, timeout_s?}`` -> the agent's status (plus
  ``answer`` with ``wait``: the first turn's answer, as ``ask`` returns it). ``agent``
  names the agent (``tether agents``; fno-agents' ``provider: "claude" | "codex"`` is read
  as ``agent``); with an external agent ``argv`` is its CLI's command, else the wire
  child's. ``name`` is 1-64 characters of
  ``[A-Za-z0-9_-]`` (else ``invalid_params``); a taken name is ``agent_exists``; a child
  that cannot be started, an unknown provider, a bad script or a child that ends before
  ``ready`` is ``spawn_failed``; an unknown ``channel_id`` is ``channel_unknown``.
- ``agent.ask {name, text, timeout_s?}`` sends ``text`` as ``prompt`` when the agent is
  ready, as ``follow-up`` when it is running, and answers when the turn that read it
  completes: ``{name, seq, turn, text, usage, stop_reason, truncated, state, timed_out:
  false}`` (``text`` is that turn's last assistant message, ``usage`` that turn's). Other
  states are ``invalid_status``; so is a message the child refused or dropped unread.
  **Timeout**: when ``timeout_s`` passes first the call still succeeds, with ``{name, seq,
  turn, state, timed_out: true}``: the message was delivered and the turn goes on (follow
  it with ``agent.events`` from ``last_seq``). The CLI exits 5 (timed out) then.
- ``agent.list {cwd?, provider?, status?}`` -> ``{agents: [status...], filters_applied,
  fields_omitted}``; ``agent.status {name}`` -> ``{name, state, turn, pid, run_id, run_dir,
  usage, created_at, started_at, last_seq, ...}``; ``agent.status {}`` is the daemon's own
  status (fno-agents' ``status-v1``: ``{schema_version, daemon, agents, restarts,
  channels}``).
- fno-agents' requests are accepted as its client sends them (REFERENCE-FACTS §3):
  ``message`` for ``task`` (spawn) and ``text`` (ask), ``timeout`` for ``timeout_s``;
  ``agent.ask`` of an unknown name with ``provider`` (or ``agent``) creates the agent with
  the message as its task -> ``{created: true, short_id, ...}``; answers carry the keys
  its client reads (:mod:`tether.daemon.fleet.fno_shapes`: ``short_id``, ``harness``, ``status``
  live/exited/orphaned/unknown, ``reply``/``backend`` on ask, ``stopped`` or
  ``already_exited`` on stop, ``registry_removed``/``was_orphaned`` on rm) beside tether's.
- ``agent.stop {name, mode: close|finalize|cancel, timeout_s?=10, note?}`` sends that
  control, then waits up to ``timeout_s`` for the run to end -> ``{name, mode, seq, ack,
  state, ended}``. A cancelled child that does not exit within its grace is killed.
- ``agent.rm {name, force?}`` removes the registry row (the run directory stays as
  history); a live agent is ``invalid_status`` unless ``force``, which kills it first.
- ``agent.reconcile`` -> ``{scanned, recovered[], orphaned[], skipped[], errors[]}``; see
  :mod:`tether.daemon.fleet.supervisor` (it also runs when the daemon starts; idempotent).
- ``agent.steer|follow_up {name, text}``, ``agent.finalize {name, note?}``,
  ``agent.cancel {name}`` send one control and return its ack: ``{name, seq, ack,
  state}``; a control the current state refuses is ``invalid_status``.
- ``agent.events {name, after_seq?=0, follow?=false, limit?=1000}``: the run's events with
  ``seq > after_seq``, read from its ``events.jsonl`` (the permanent log).
  Without ``follow``: ``{name, events: [...], last_seq, more, state}`` (at most ``limit``
  events; ``more`` says to call again from ``last_seq``). With ``follow``, the events are
  streamed to the calling connection as daemon-to-client requests ``agent.event {name,
  events: [...]}`` (one batch at a time; the client answers each, any result; an error
  answer stops the stream), first the recorded ones, then live ones until the run ends;
  then the call answers ``{name, last_seq, count, state, ended}``. Every event is sent
  exactly once, in increasing seq order, so a client that reconnects with its last seq
  loses nothing.
- ``agent.answer {name, key, text?, decision?}`` answers a question in the agent's inbox
  (:mod:`tether.daemon.fleet.answers`); ``list`` and ``status`` carry each wire agent's
  unanswered ``questions: [{key, type, text, at}]``.
- PTY agents (:mod:`tether.daemon.pty.agent`): ``agent.spawn {name, pty: true, argv,
  cols?=80, rows?=24, cwd?, env?, channel?}`` runs any program on a pseudo-terminal
  (``channel: true``: argv is Claude Code's, given the agent's channel as for ``agent:
  "claude"``; an interactive Claude Code shows its pushes to the model); ``status``,
  ``list``, ``stop`` and ``rm`` serve them too, and ``agent.drive {name}`` turns the
  connection into a WebSocket onto the terminal (:mod:`tether.daemon.pty.drive`). The wire
  verbs (``ask``, ``steer``, ``events``, ...) answer ``invalid_status`` for them.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec

from tether.daemon.fleet.answers import AnswerDesk, AnswerParams
from tether.daemon.fleet.fno_shapes import (
    FIELDS_OMITTED,
    LANE,
    agent_fields,
    daemon_status,
    with_reference,
)
from tether.daemon.fleet.followers import Follower
from tether.daemon.fleet.supervisor import SpawnParams, Supervisor
from tether.daemon.fleet.turns import AskFailed, TurnAnswer
from tether.daemon.fleet.wire_agent import AgentRun
from tether.daemon.pty.agent import PtyAgent, PtyFleet
from tether.daemon.pty.drive import drive_handler
from tether.daemon.pty.frames import MAX_SIZE, MIN_SIZE
from tether.daemon.rpc.methods import RpcFailure, decode_params
from tether.daemon.rpc.protocol import ErrorCode
from tether.numbers import Seconds
from tether.transports.tail import FileTail
from tether.wire import Rejection, TooLarge, decode
from tether.wire.session import AckStatus, ControlKind, State, decide

if TYPE_CHECKING:
    from tether.daemon.channels.hub import Deliverer
    from tether.daemon.rpc.server import CallContext, Daemon

NAME_RULE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
ACK_TIMEOUT_S: Final = 30.0
MAX_EVENTS: Final = 10_000
EVENTS_BYTES: Final = 8 * 1024 * 1024  # per response or streamed batch
STREAM_BATCH: Final = 512
EVENT_METHOD: Final = "agent.event"

Reply = dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]


class NameParams(msgspec.Struct, frozen=True):
    name: str


class StatusParams(msgspec.Struct, frozen=True):
    name: str | None = None  # none: the daemon's own status (fno-agents' agent.status {})


class AskParams(msgspec.Struct, frozen=True):
    """``text`` (or fno-agents' ``message``); ``provider``/``agent`` create the agent on first
    contact; ``timeout`` is fno-agents' name for ``timeout_s``."""

    name: str
    text: str | None = None
    message: str | None = None
    timeout_s: Seconds | None = None
    timeout: Seconds | None = None
    provider: str | None = None
    agent: str | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.message is None):
            raise ValueError("give the message as text (or message), once")

    @property
    def body(self) -> str:
        return self.text if self.text is not None else self.message or ""

    @property
    def wait_s(self) -> float | None:
        return self.timeout_s if self.timeout_s is not None else self.timeout


class ListParams(msgspec.Struct, frozen=True):
    """fno-agents' filters (all optional; ``all`` and the rest are accepted and ignored)."""

    cwd: str | None = None
    provider: str | None = None
    status: str | None = None


class TextParams(msgspec.Struct, frozen=True):
    name: str
    text: str


class FinalizeParams(msgspec.Struct, frozen=True):
    name: str
    note: str | None = None


class StopParams(msgspec.Struct, frozen=True):
    name: str
    mode: Literal["close", "finalize", "cancel"] = "close"
    timeout_s: Seconds = 10.0
    note: str | None = None


class RmParams(msgspec.Struct, frozen=True):
    name: str
    force: bool = False


class EventsParams(msgspec.Struct, frozen=True):
    name: str
    after_seq: Annotated[int, msgspec.Meta(ge=0)] = 0
    follow: bool = False
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_EVENTS)] = 1000


PtySize = Annotated[int, msgspec.Meta(ge=MIN_SIZE, le=MAX_SIZE)]


class SpawnRequest(SpawnParams, frozen=True):
    timeout_s: Seconds | None = None
    message: str | None = None  # fno-agents' name for task
    channel: bool = False  # agent "claude": load `tether mcp-channel` into its session

    def spawn_params(self) -> SpawnRequest:
        """With fno-agents' ``message`` read as ``task``."""
        if self.message is None or self.task is not None:
            return self
        return msgspec.structs.replace(self, task=self.message, message=None)

    pty: bool = False
    cols: PtySize = 80
    rows: PtySize = 24


_ENCODER: Final = msgspec.json.Encoder()


def _status_name(params: Any) -> str | None:
    """``agent.status``'s ``name`` (None: the daemon's own status); ``{"name": str}``, the
    common call, without a conversion."""
    if type(params) is dict and len(params) == 1:
        name = params.get("name")
        if type(name) is str:
            return name
    return decode_params(params, StatusParams).name


def check_name(name: str) -> str:
    if not NAME_RULE.fullmatch(name):
        raise RpcFailure(
            ErrorCode.INVALID_PARAMS,
            f"invalid agent name {name[:80]!r}: use 1-64 characters of A-Z a-z 0-9 _ -",
        )
    return name


def invalid_status(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.INVALID_STATUS, message)


class AgentVerbs:
    """The ``agent.*`` handlers over one :class:`Supervisor`."""

    def __init__(self, supervisor: Supervisor, ptys: PtyFleet) -> None:
        self.sup = supervisor
        self.ptys = ptys
        self.answers = AnswerDesk(supervisor.db)
        self._rewiring: set[asyncio.Task[None]] = set()  # see rewire_channels

    def register(self, daemon: Daemon) -> None:
        handlers: dict[str, Callable[[CallContext, Any], Any]] = {
            "spawn": self.spawn,
            "ask": self.ask,
            "list": self.list,
            "status": self.status,
            "stop": self.stop,
            "rm": self.rm,
            "reconcile": self.reconcile,
            "events": self.events,
            "steer": self.steer,
            "follow_up": self.follow_up,
            "finalize": self.finalize,
            "cancel": self.cancel,
            "answer": self.answer,
        }
        for verb, handler in handlers.items():
            daemon.methods.register(f"agent.{verb}", handler)
        daemon.methods.register("agent.drive", drive_handler(self.ptys))

    async def rewire_channels(self) -> None:
        """After recovery: the pushes to a ``-p`` Claude Code agent's own channel
        (``channel: true``) go to it as steers again (the wiring is not stored); what
        was held is sent first, in the background."""
        from tether.daemon.channels.claude import session_of

        hub = self.sup.channels
        if hub is None:
            return
        for agent in list(self.sup.agents.values()):
            channel = hub.get(agent.record.channel_id or "")
            if channel is not None and channel.session_id == session_of(agent.name):
                hub.reserve(channel.session_id, agent.name, to_agent=True)
                # in a task: a slow child's held pushes must not hold up serving
                wiring = hub.deliver_by(channel.channel_id, _channel_steer(agent))
                task = asyncio.get_running_loop().create_task(wiring)
                self._rewiring.add(task)
                task.add_done_callback(self._rewiring.discard)

    def _agent(self, name: str) -> AgentRun:
        if self.ptys.get(check_name(name)) is not None:
            raise invalid_status(
                f"agent {name!r} is a PTY agent: type into it through agent.drive "
                f"('tether agent attach {name}')"
            )
        return self.sup.require(name)

    def _pty(self, name: str) -> PtyAgent | None:
        return self.ptys.get(check_name(name))

    def _live(self, name: str) -> AgentRun:
        agent = self._agent(name)
        agent.catch_up()
        if agent.ended or agent.mirror.finished:
            raise invalid_status(f"agent {name!r} has ended ({agent.state})")
        return agent

    # -- verbs ------------------------------------------------------------------------

    async def spawn(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, SpawnRequest).spawn_params()
        check_name(args.name)
        if args.cwd is not None and not Path(args.cwd).is_absolute():
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "cwd must be an absolute path")
        if args.pty:
            return await self._spawn_pty(args, context)
        if args.channel:
            args = self._with_channel(args, context)
        agent, answer = await self.sup.spawn(args)
        if args.channel and args.channel_id is not None and self.sup.channels is not None:
            await self.sup.channels.deliver_by(args.channel_id, _channel_steer(agent))
        if answer is None:
            return with_reference(agent.status_dict(), agent)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(answer), args.timeout_s)
        except TimeoutError:
            reply: dict[str, Any] = {"timed_out": True, "seq": 1}
        else:
            reply = _answer(agent, outcome)
        return with_reference({**agent.status_dict(), "answer": reply}, agent)

    def _with_channel(self, args: SpawnRequest, context: CallContext) -> SpawnRequest:
        """``channel: true``: the agent's reserved channel and Claude Code's flags for it."""
        from tether.runtime.child.adapters.registry import resolve_agent

        if resolve_agent(args.agent, args.provider) != "claude":
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "channel: true goes with agent: claude")
        if args.channel_id is not None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "give channel: true or channel_id")
        flags, channel_id = self._claude_channel(args.name, context, to_agent=True)
        agent_args = [*(args.agent_args or []), *flags]
        return msgspec.structs.replace(
            args, agent="claude", agent_args=agent_args, channel_id=channel_id
        )

    def _claude_channel(
        self, name: str, context: CallContext, *, to_agent: bool = False
    ) -> tuple[list[str], str]:
        """The agent's channel reserved (``to_agent``: its pushes go to the agent as
        steers), its MCP config written: Claude Code's flags that load it, and its id."""
        from tether import paths
        from tether.daemon.channels import claude as cc

        hub = self.sup.channels
        if hub is None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "this daemon serves no channels")
        session = cc.session_of(name)
        channel = hub.reserve(session, name, to_agent=to_agent)
        socket = str(context.daemon.statistics()["socket"])
        config = cc.mcp_config(session, name, socket)
        path = cc.write_config(paths.state_dir() / "mcp", name, config)
        return cc.claude_args(path), channel.channel_id

    async def _spawn_pty(self, args: SpawnRequest, context: CallContext) -> dict[str, Any]:
        if not args.argv or not all(isinstance(a, str) and a and "\0" not in a for a in args.argv):
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS, "a PTY agent needs argv: a list of non-empty strings"
            )
        unused = [
            k for k in ("task", "provider", "model", "script", "channel_id") if getattr(args, k)
        ]
        if unused or args.wait:
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS,
                f"a PTY agent runs argv only; {', '.join(unused) or 'wait'} does not apply",
            )
        argv, channel_id = list(args.argv), None
        if args.channel:  # argv is Claude Code's: load the channel server into it
            flags, channel_id = self._claude_channel(args.name, context)
            argv += flags
        agent = await self.ptys.spawn(
            args.name,
            argv,
            cwd=args.cwd or os.getcwd(),
            cols=args.cols,
            rows=args.rows,
            env=args.env,
            channel_id=channel_id,
        )
        return agent.status_dict()

    async def ask(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, AskParams)
        check_name(args.name)
        unknown = args.name not in self.sup.agents and self._pty(args.name) is None
        if unknown and (args.provider or args.agent):
            return await self._first_contact(context, args)
        agent = self._live(args.name)
        kind = _ask_kind(agent)
        seq, future = _send(agent.ask, kind, args.body)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(future), args.wait_s)
            if isinstance(outcome, AskFailed) and outcome.rejected and kind is ControlKind.PROMPT:
                agent.catch_up()  # the child started a turn meanwhile: ask as a follow-up
                if agent.mirror.state is State.RUNNING:
                    seq, future = _send(agent.ask, ControlKind.FOLLOW_UP, args.body)
                    outcome = await asyncio.wait_for(asyncio.shield(future), args.wait_s)
        except TimeoutError:
            agent.catch_up()
            return {
                "name": agent.name,
                "seq": seq,
                "turn": agent.mirror.turn,
                "state": agent.state,
                "timed_out": True,
            }
        finally:
            agent.forget_ask(seq)
        answer = _answer(agent, outcome)
        return {**answer, "reply": answer.get("text", ""), "backend": LANE}

    async def _first_contact(self, context: CallContext, args: AskParams) -> dict[str, Any]:
        """fno-agents' ask of an unknown name with a provider: create it with the message as
        its task -> ``{created: true, short_id}`` (with tether's status keys)."""
        spawn: dict[str, Any] = {"name": args.name, "task": args.body}
        for key in ("provider", "agent", "cwd"):
            if getattr(args, key):
                spawn[key] = getattr(args, key)
        status = await self.spawn(context, spawn)
        return {**status, "created": True}

    # ``list`` and ``status`` are plain functions: answered inline from memory, and only
    # when the questions of some run are not cached do they return a coroutine (the
    # server awaits it in a task). Each agent's status is built once, with no SQLite.

    def list(self, context: CallContext, params: Any) -> Reply:
        args = decode_params(params, ListParams)
        agents: list[AgentRun | PtyAgent] = [*self.sup.agents.values(), *self.ptys.agents.values()]
        agents.sort(key=_created)
        rows = [(with_reference(agent.status_dict(), agent), agent) for agent in agents]
        rows = [(row, agent) for row, agent in rows if _matches(row, args)]
        reply = {
            "agents": [row for row, _ in rows],
            "filters_applied": {"cwd": args.cwd, "provider": args.provider, "status": args.status},
            "fields_omitted": list(FIELDS_OMITTED),
        }
        return self._with_questions(rows, reply)

    def status(self, context: CallContext, params: Any) -> Reply | msgspec.Raw:
        name = _status_name(params)
        if name is None:
            agents: list[AgentRun | PtyAgent] = [
                *self.sup.agents.values(),
                *self.ptys.agents.values(),
            ]
            return daemon_status(context.daemon.statistics(), agents)
        agent = self.sup.agents.get(name)  # a wire agent's name was checked at its spawn
        if agent is None:
            pty = self.ptys.get(check_name(name))
            if pty is not None:
                return with_reference(pty.status_dict(), pty)
            agent = self.sup.require(name)
        questions = self.answers.cached_one(agent.run_id, agent.inbox_version)
        if questions is None:
            row = self._status_row(agent)
            return self._with_questions([(row, agent)], row)
        stamp = agent.status_stamp()
        if stamp is None:
            return {**self._status_row(agent), "questions": questions}
        key = (stamp, questions)  # tuple equality: equal questions, equal answer
        hit = agent.status_cache
        if hit is not None and hit[0] == key:
            return hit[1]
        raw = msgspec.Raw(_ENCODER.encode({**self._status_row(agent), "questions": questions}))
        agent.status_cache = (key, raw)
        return raw

    def _status_row(self, agent: AgentRun) -> dict[str, Any]:
        data = agent.status_dict()
        if agent.ended and agent.final_text:  # the whole answer, once read (status only)
            data["final_text"] = agent.final_text
        return with_reference(data, agent)

    def _with_questions(
        self, rows: Sequence[tuple[dict[str, Any], AgentRun | PtyAgent]], reply: dict[str, Any]
    ) -> Reply:
        """``reply`` once each wire agent's row has its unanswered inbox questions as
        ``questions``: at once when all are cached, else a coroutine that reads the rest."""
        versions = {a.run_id: a.inbox_version for _, a in rows if type(a) is AgentRun}
        found, missing = self.answers.cached(versions)
        if not missing:
            return _put_questions(rows, found, reply)

        async def read() -> dict[str, Any]:
            return _put_questions(rows, await self.answers.questions(versions), reply)

        return read()

    async def answer(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, AnswerParams)
        agent = self._live(args.name)

        async def send(text: str) -> dict[str, Any]:
            agent.catch_up()
            running = agent.mirror.state is State.RUNNING
            kind = ControlKind.STEER if running else ControlKind.FOLLOW_UP
            return {**await _control(agent, kind, {"text": text}), "sent_as": kind.value}

        return await self.answers.answer(agent.run_id, args, send)

    async def stop(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, StopParams)
        pty = self._pty(args.name)
        if pty is not None:
            if pty.ended:
                raise invalid_status(f"agent {args.name!r} has ended ({pty.state})")
            ended = await pty.stop(max(1.0, args.timeout_s))
            result = {"name": args.name, "seq": 0, "ack": "accepted", "state": pty.state}
            return {**result, "mode": args.mode, "ended": ended}
        kind = ControlKind(args.mode)
        fields = {"note": args.note} if args.note and kind is ControlKind.FINALIZE else {}
        agent = self._agent(args.name)
        agent.catch_up()
        if agent.ended or agent.mirror.finished:
            # fno-agents' answer for stopping what already ended (tether's keys beside it)
            return {"name": agent.name, "already_exited": True, "state": agent.state}
        result = await _control(agent, kind, fields)
        ended = await agent.wait_ended(args.timeout_s)
        stopped = {"stopped": True, "short_id": agent.run_id}
        return {**result, "mode": args.mode, "state": agent.state, "ended": ended, **stopped}

    async def rm(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, RmParams)
        pty = self._pty(args.name)
        agent = pty if pty is not None else self.sup.agents.get(args.name)
        extra = {} if agent is None else agent_fields(agent)
        if pty is not None:
            result = await self.ptys.remove(args.name, force=args.force)
        else:
            result = await self.sup.remove(args.name, force=args.force)
            if isinstance(agent, AgentRun):
                self.answers.forget(agent.run_id)
        return {
            **result,
            "registry_removed": bool(result.get("removed")),
            "harness": extra.get("harness"),
            "was_orphaned": extra.get("status") == "orphaned",
        }

    async def reconcile(self, context: CallContext, params: Any) -> dict[str, Any]:
        report = await self.sup.reconcile()
        ptys = await self.ptys.reconcile()
        report["recovered"] += ptys["recovered"]
        report["orphaned"] += ptys["orphaned"]
        return report

    async def steer(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, TextParams)
        return await _control(self._live(args.name), ControlKind.STEER, {"text": args.text})

    async def follow_up(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, TextParams)
        return await _control(self._live(args.name), ControlKind.FOLLOW_UP, {"text": args.text})

    async def finalize(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, FinalizeParams)
        fields = {} if args.note is None else {"note": args.note}
        return await _control(self._live(args.name), ControlKind.FINALIZE, fields)

    async def cancel(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, NameParams)
        return await _control(self._live(args.name), ControlKind.CANCEL, {})

    async def events(self, context: CallContext, params: Any) -> dict[str, Any]:
        args = decode_params(params, EventsParams)
        agent = self._agent(args.name)
        if args.follow:
            return await _stream(context, agent, args.after_seq)
        batch, more = await asyncio.to_thread(
            read_events, agent.run.events, agent.run_id, args.after_seq, args.limit
        )
        return {
            "name": agent.name,
            "events": [msgspec.Raw(raw) for _, raw in batch],
            "last_seq": batch[-1][0] if batch else args.after_seq,
            "more": more,
            "state": agent.state,
        }


# -- helpers --------------------------------------------------------------------------------


def _created(agent: AgentRun | PtyAgent) -> tuple[float, str]:
    return agent.record.created_at, agent.name


def _put_questions(
    rows: Sequence[tuple[dict[str, Any], AgentRun | PtyAgent]],
    found: dict[str, list[dict[str, Any]]],
    reply: dict[str, Any],
) -> dict[str, Any]:
    for row, agent in rows:
        if isinstance(agent, AgentRun):
            row["questions"] = found.get(agent.run_id, [])
    return reply


def _matches(row: dict[str, Any], args: ListParams) -> bool:
    """fno-agents' list filters: cwd, provider (the harness or tether's provider), status."""
    if args.cwd is not None and row.get("cwd") != args.cwd:
        return False
    if args.provider is not None and args.provider not in (row.get("harness"), row.get("provider")):
        return False
    return args.status is None or args.status in (row.get("status"), row.get("state"))


def _ask_kind(agent: AgentRun) -> ControlKind:
    state = agent.mirror.state
    if state is State.READY and not agent.mirror.pending:
        return ControlKind.PROMPT
    if state in (State.READY, State.RUNNING):
        return ControlKind.FOLLOW_UP
    raise invalid_status(f"agent {agent.name!r} is {state}; ask needs ready or running")


def _channel_steer(agent: AgentRun) -> Deliverer:
    """A ``-p`` Claude Code agent's channel deliveries: each push sent to it as a steer
    (queued while a turn runs, starting one when idle) carrying the ``<channel>`` tag;
    delivered once the child accepted it."""
    from tether.daemon.channels.claude import channel_text
    from tether.daemon.channels.hub import PushResult

    async def deliver(envelope: Any) -> PushResult:
        if agent.ended:
            reason = f"agent {agent.name!r} has ended ({agent.state})"
            return PushResult(routed=True, delivered=False, reason=reason)
        agent.catch_up()
        try:
            await _control(agent, ControlKind.STEER, {"text": channel_text(envelope)})
        except RpcFailure as exc:
            return PushResult(routed=True, delivered=False, reason=exc.message)
        return PushResult(routed=True, delivered=True)

    return deliver


def _send(send: Callable[[ControlKind, str], Any], kind: ControlKind, text: str) -> Any:
    try:
        return send(kind, text)
    except ValueError as exc:
        raise RpcFailure(ErrorCode.INVALID_PARAMS, f"cannot send {kind}: {exc}") from None
    except LookupError as exc:  # its control file is unusable: the run is ending
        raise RpcFailure(ErrorCode.INVALID_STATUS, f"cannot send {kind}: {exc}") from None


def _answer(agent: AgentRun, outcome: TurnAnswer | AskFailed) -> dict[str, Any]:
    if isinstance(outcome, AskFailed):
        raise invalid_status(f"agent {agent.name!r}: {outcome.reason}")
    return {"name": agent.name, **outcome.as_dict(), "state": agent.state, "timed_out": False}


async def _control(agent: AgentRun, kind: ControlKind, fields: dict[str, Any]) -> dict[str, Any]:
    decision = decide(agent.mirror.state, kind)
    if decision.ack is AckStatus.REJECTED:
        raise invalid_status(f"agent {agent.name!r} cannot take {kind}: {decision.reason}")
    try:
        seq = agent.send(kind, **fields)
    except ValueError as exc:
        raise RpcFailure(ErrorCode.INVALID_PARAMS, f"cannot send {kind}: {exc}") from None
    except LookupError as exc:  # its control file is unusable: the run is ending
        raise invalid_status(f"agent {agent.name!r}: {exc}") from None
    try:
        # Awaited directly (no shield, no wait_for): only this call waits on this seq, and
        # its answer is written on the loop pass right after the pump reads the ack.
        async with asyncio.timeout(ACK_TIMEOUT_S):
            ack = await agent.ack_future(seq)
    except LookupError as exc:
        raise invalid_status(f"agent {agent.name!r}: {exc}") from None
    except TimeoutError:
        raise RpcFailure(
            ErrorCode.INTERNAL,
            f"agent {agent.name!r} did not acknowledge {kind} (seq {seq}) within "
            f"{ACK_TIMEOUT_S:g} s; it may be stuck (see its stderr.log in {agent.run.path})",
        ) from None
    if ack.status == "rejected":
        reason = ack.reason if isinstance(ack.reason, str) else "rejected"
        raise invalid_status(f"agent {agent.name!r} rejected {kind}: {reason}")
    # "event": the child's control-ack itself, so a caller on another host (RemoteRunHandle)
    # has it without waiting for the line to be replicated
    return {"name": agent.name, "seq": seq, "ack": ack.status, "state": agent.state, "event": ack}


def read_events(
    path: Path, run_id: str, after_seq: int, limit: int, max_bytes: int = EVENTS_BYTES
) -> tuple[list[tuple[int, bytes]], bool]:
    """Valid events of ``run_id`` in ``path`` with increasing seq > ``after_seq``.

    At most ``limit`` events and about ``max_bytes``; the bool says more are waiting.
    """
    out: list[tuple[int, bytes]] = []
    size, last = 0, after_seq
    with FileTail(path) as tail:
        while (read := tail.read()).items:
            for item in read.items:
                if isinstance(item, TooLarge):
                    continue
                message = decode(item.data, "event")
                if isinstance(message, Rejection) or message.run != run_id:
                    continue
                if message.seq <= last:
                    continue
                if len(out) >= limit or (out and size + len(item.data) > max_bytes):
                    return out, True
                out.append((message.seq, item.data))
                size += len(item.data)
                last = message.seq
    return out, False


async def _stream(context: CallContext, agent: AgentRun, after_seq: int) -> dict[str, Any]:
    """``agent.events`` with ``follow``: see the module docstring."""
    context.socket()  # a caller without a connection (another host) is refused up front
    follower = agent.follow(after_seq)
    count = 0
    try:
        while True:  # what the log holds
            batch, more = await asyncio.to_thread(
                read_events, agent.run.events, agent.run_id, follower.last_seq, STREAM_BATCH
            )
            if batch and not await _deliver(context, agent.name, batch):
                return _stream_end(agent, follower, count + len(batch))
            count += len(batch)
            if batch:
                follower.last_seq = batch[-1][0]
            if not more:
                break
        while True:  # then live
            batch = follower.take(STREAM_BATCH)
            if batch:
                if not await _deliver(context, agent.name, batch):
                    return _stream_end(agent, follower, count + len(batch))
                count += len(batch)
                continue
            if follower.ended and follower.drained:
                break
            await follower.wait()
    finally:
        agent.unfollow(follower)
    if follower.overflowed:
        raise RpcFailure(
            ErrorCode.BUSY,
            f"the client fell behind after seq {follower.last_seq}; reconnect with that after_seq",
        )
    return _stream_end(agent, follower, count)


async def _deliver(context: CallContext, name: str, batch: list[tuple[int, bytes]]) -> bool:
    """Send one batch; False when the client answered an error (stop streaming)."""
    params = {"name": name, "events": [msgspec.Raw(raw) for _, raw in batch]}
    response = await context.socket().call(EVENT_METHOD, params)
    return not response.is_error


def _stream_end(agent: AgentRun, follower: Follower, count: int) -> dict[str, Any]:
    return {
        "name": agent.name,
        "last_seq": follower.last_seq,
        "count": count,
        "state": agent.state,
        "ended": agent.ended,
    }


__all__ = ["NAME_RULE", "AgentVerbs", "check_name", "read_events"]
