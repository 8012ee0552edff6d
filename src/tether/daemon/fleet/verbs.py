"""``agent.*``: long-lived agents supervised by the daemon (installed by
:mod:`tether.daemon.app`).

Verbs (params -> result; errors are ``RpcError`` codes):

- ``agent.spawn {name, task?, agent?, agent_args?, provider?, model?, cwd?, argv?,
  deadline_s?, channel_id?, script?, env?, wait?, timeout_s?, host?}`` -> the agent's status (plus
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
- ``agent.rm {name, force?, keep_branch?}`` removes the registry row (the run directory
  stays as history) and the agent's worktree with its branch; a live agent is
  ``invalid_status`` unless ``force``, which kills it first; so is a worktree with work
  merged nowhere, unless ``force`` (dropped) or ``keep_branch`` (kept on the branch).
- ``agent.follow_up`` to an agent whose run has ended starts a new run of it that resumes
  its conversation (same name, same worktree): ``{..., resumed: RUN_ID}``; see
  :mod:`tether.daemon.fleet.workspaces` for that and ``agent.diff|merge|fork``.
- ``agent.reconcile`` -> ``{scanned, recovered[], orphaned[], skipped[], errors[]}``; see
  :mod:`tether.daemon.fleet.supervisor` (it also runs when the daemon starts; idempotent).
- ``agent.steer|follow_up {name, text}``, ``agent.finalize {name, note?}``,
  ``agent.cancel {name}`` send one control and return the child's ack: ``{name, seq, ack,
  reason?, state, event}``. A control the run's state refuses is answered with ``ack:
  "rejected"`` and the table's ``reason``, as :meth:`tether.RunHandle.steer` returns it
  locally and across hosts; only a run that has ended is ``invalid_status``.
- ``agent.events {name, after_seq?=0, follow?=false, limit?=1000, wait_s?}``: the run's
  events with ``seq > after_seq``, read from its ``events.jsonl`` (the permanent log).
  Without ``follow``: ``{name, events: [...], last_seq, more, state, ended}`` (at most
  ``limit`` events; ``more`` says to call again from ``last_seq``; ``wait_s``: when there
  is none yet and the run goes on, wait up to that long for one). With ``follow``, the events are
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
- In a cluster (``tether daemon --nats URL``; :mod:`tether.daemon.fleet.elsewhere`), names
  are unique across its hosts: a spawn of a name another host runs is ``agent_exists``,
  ``agent.spawn {host}`` starts the agent on that host, every verb naming an agent another
  host runs (``ask``, ``status``, ``stop``, ``rm``, ``events``, the controls, ``answer``,
  ``queue``, ``unqueue``, ``diff``, ``merge``, ``fork``) is answered by that host through
  this daemon (its reply Struct, or its error code; a host with no daemon is
  ``shutting_down``), ``list`` shows every host's agents with their ``host``, and
  ``agent.drive`` of another host's PTY agent says where to drive it. A call relayed from
  another host is answered by this daemon's own agents alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from msgspec import UNSET

from tether.daemon.fleet.answers import AnswerDesk, AnswerParams
from tether.daemon.fleet.elsewhere import FORWARDED, forwarding, pages
from tether.daemon.fleet.events import STREAM_BATCH, page, read_events, stream_events, stream_pages
from tether.daemon.fleet.fleet import AgentChannels, Fleet, FleetAgent
from tether.daemon.fleet.params import (
    AskParams,
    EventsParams,
    FinalizeParams,
    NameParams,
    RmParams,
    SpawnRequest,
    StopParams,
    TextParams,
    UnqueueParams,
    check_name,
)
from tether.daemon.fleet.queues import Queues, queue_reply, unqueue
from tether.daemon.fleet.replies import (
    LANE,
    AgentStatus,
    AnswerReply,
    AskReply,
    ControlReply,
    EventsReply,
    QueueReply,
    ReconcileReport,
    RmReply,
    StopReply,
    StreamEnd,
)
from tether.daemon.fleet.rows import AgentRows
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.fleet.turns import AskFailed, Outcome
from tether.daemon.fleet.wire_agent import ACK_TIMEOUT_S, WireAgent, send_control
from tether.daemon.rpc.methods import RpcFailure, decode_params, invalid_status
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import RunEnded
from tether.runtime.parent.answering import by_steer
from tether.wire.session import ControlKind, State

if TYPE_CHECKING:
    from tether.daemon.fleet.workspaces import Workspaces
    from tether.daemon.rpc.server import CallContext, Daemon

__all__ = [
    "ACK_TIMEOUT_S",
    "AgentVerbs",
    "PtySpawner",
    "SpawnRequest",
    "check_name",
    "read_events",
]


class PtySpawner(Protocol):
    """The PTY agents' spawn (:class:`tether.daemon.pty.fleet.PtyFleet`)."""

    async def spawn_pty(self, args: SpawnRequest) -> FleetAgent: ...


class AgentVerbs:
    """The ``agent.*`` handlers over one :class:`Fleet` (see the module docstring)."""

    def __init__(
        self,
        fleet: Fleet,
        supervisor: Supervisor,
        ptys: PtySpawner,
        *,
        channels: AgentChannels | None = None,
        workspaces: Workspaces | None = None,
        queues: Queues | None = None,
    ) -> None:
        self.fleet = fleet
        self.sup = supervisor
        self.ptys = ptys
        self.channels = channels
        self.workspaces = workspaces
        self.queues = queues
        self.answers = AnswerDesk(supervisor.db)
        self.rows = AgentRows(fleet, supervisor, self.answers, channels)

    def register(self, daemon: Daemon) -> None:
        handlers: dict[str, Callable[[CallContext, Any], Any]] = {
            "spawn": self.spawn,
            "ask": self.ask,
            "list": self.rows.list_agents,
            "status": self.rows.status_of,
            "stop": self.stop,
            "rm": self.rm,
            "reconcile": self.reconcile,
            "events": self.events,
            "steer": self.steer,
            "follow_up": self.follow_up,
            "finalize": self.finalize,
            "cancel": self.cancel,
            "answer": self.answer,
            "approvals": self.rows.approvals,
            "queue": self.queue,
            "unqueue": self.unqueue,
        }
        for verb, handler in handlers.items():
            method, wrapped, elsewhere = f"agent.{verb}", handler, self.fleet.elsewhere
            if verb in FORWARDED and elsewhere is not None:
                follow = self._follow_elsewhere if verb == "events" else None
                reply, where = FORWARDED[verb], self.fleet.host_of
                wrapped = forwarding(method, reply, handler, elsewhere, where=where, follow=follow)
            daemon.methods.register(method, wrapped)

    def _wire(self, name: str) -> WireAgent:
        return self.fleet.require(check_name(name)).wire()

    # -- spawn ------------------------------------------------------------------------

    async def spawn(self, context: CallContext, params: Any) -> AgentStatus:
        args = decode_params(params, SpawnRequest).spawn_params()
        check_name(args.name)
        if args.cwd is not None and not Path(args.cwd).is_absolute():
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "cwd must be an absolute path")
        if self.fleet.taken(args.name):
            where = self.fleet.host_of(args.name)
            on = f" on host {where!r}" if where else ""
            raise RpcFailure(
                ErrorCode.AGENT_EXISTS, f"an agent named {args.name!r} already exists{on}"
            )
        if args.host is not None and args.host != self.rows.host:
            return await self._spawn_on(context, args.host, params)
        if args.pty:
            if args.channel:
                flags, channel_id = self._claude_channel(args.name, context, to_agent=False)
                args = msgspec.structs.replace(
                    args, argv=(*(args.argv or ()), *flags), channel_id=channel_id
                )
            return (await self.ptys.spawn_pty(args)).status()
        if args.channel:
            args = self._with_channel(args, context)
        agent, answer = await self.sup.spawn(args)
        if args.channel and self.channels is not None:
            self.channels.deliver_to(agent)
        if answer is None:
            return self.rows.row(agent)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(answer), args.timeout_s)
        except TimeoutError:
            reply = AskReply(seq=1, turn=0, timed_out=True)
        else:
            agent = self.sup.agents.get(agent.name, agent)  # a queued one has started since
            reply = _answer(agent, outcome)
        return msgspec.structs.replace(self.rows.row(agent), answer=reply)

    def _with_channel(self, args: SpawnRequest, context: CallContext) -> SpawnRequest:
        """``channel: true``: the agent's reserved channel and Claude Code's flags for it."""
        from tether.runtime.child.adapters.registry import resolve_agent

        if resolve_agent(args.agent, args.provider) != "claude":
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "channel: true goes with agent: claude")
        if args.channel_id is not None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "give channel: true or channel_id")
        flags, channel_id = self._claude_channel(args.name, context, to_agent=True)
        return msgspec.structs.replace(
            args,
            agent="claude",
            agent_args=(*args.agent_args, *flags),
            channel_id=channel_id,
        )

    def _claude_channel(
        self, name: str, context: CallContext, *, to_agent: bool
    ) -> tuple[list[str], str]:
        if self.channels is None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "this daemon serves no channels")
        socket = context.daemon.statistics().socket
        return self.channels.claude_channel(name, socket, to_agent=to_agent)

    # -- ask --------------------------------------------------------------------------

    async def ask(self, context: CallContext, params: Any) -> AskReply | AgentStatus:
        args = decode_params(params, AskParams)
        check_name(args.name)
        if self.fleet.get(args.name) is None and (args.provider or args.agent):
            return await self._first_contact(context, args)
        agent = self._wire(args.name)
        kind = _ask_kind(agent)
        seq, future = _send(agent.ask, kind, args.body)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(future), args.wait_s)
            if isinstance(outcome, AskFailed) and outcome.rejected and kind is ControlKind.PROMPT:
                agent.catch_up()  # the child started a turn meanwhile: ask as a follow-up
                if agent.mirror_state is State.RUNNING:
                    agent.forget_ask(seq)
                    seq, future = _send(agent.ask, ControlKind.FOLLOW_UP, args.body)
                    outcome = await asyncio.wait_for(asyncio.shield(future), args.wait_s)
        except TimeoutError:
            agent.catch_up()
            return AskReply(
                name=agent.name, seq=seq, turn=agent.turn, state=agent.state, timed_out=True
            )
        finally:
            agent.forget_ask(seq)
        answer = _answer(agent, outcome)
        return msgspec.structs.replace(answer, reply=answer.text or "", backend=LANE)

    async def _first_contact(self, context: CallContext, args: AskParams) -> AgentStatus:
        """fno-agents' ask of an unknown name with a provider: create it with the message as
        its task -> ``{created: true, short_id}`` (with tether's status keys)."""
        spawn: dict[str, Any] = {"name": args.name, "task": args.body}
        for key in ("provider", "agent", "cwd"):
            if getattr(args, key):
                spawn[key] = getattr(args, key)
        status = await self.spawn(context, spawn)
        return msgspec.structs.replace(status, created=True)

    # -- answers, stop, rm, reconcile -------------------------------------------------

    async def answer(self, context: CallContext, params: Any) -> AnswerReply:
        args = decode_params(params, AnswerParams)
        agent = self._wire(args.name)
        agent.live()

        async def send(fields: dict[str, Any], text: str, kind: str) -> tuple[str, ControlReply]:
            reply = await send_control(agent, ControlKind.ANSWER, fields)
            if reply.ack != "rejected" or not by_steer(reply.reason, kind):
                return ControlKind.ANSWER.value, reply
            agent.catch_up()
            running = agent.mirror_state is State.RUNNING
            control = ControlKind.STEER if running else ControlKind.FOLLOW_UP
            return control.value, await send_control(agent, control, {"text": text})

        return await self.answers.answer(agent.run_id, args, send)

    def queue(self, context: CallContext, params: Any) -> QueueReply:
        """The steers and follow-ups queued in the agent's run, oldest first."""
        agent = self._wire(decode_params(params, NameParams).name)
        return queue_reply(agent, None if self.queues is None else self.queues.book(agent.name))

    async def unqueue(self, context: CallContext, params: Any) -> ControlReply:
        """Withdraw a queued steer or follow-up (``ref``: its seq) before it is injected."""
        args = decode_params(params, UnqueueParams)
        agent = self._wire(args.name)
        book = None if self.queues is None else self.queues.book(agent.name)
        return await unqueue(agent, book, args.ref)

    async def stop(self, context: CallContext, params: Any) -> StopReply:
        args = decode_params(params, StopParams)
        agent = self.fleet.require(check_name(args.name))
        return await agent.stop(args.mode, args.timeout_s, args.note)

    async def rm(self, context: CallContext, params: Any) -> RmReply:
        args = decode_params(params, RmParams)
        agent = self.fleet.require(check_name(args.name))
        work = self.workspaces if isinstance(agent, WireAgent) else None
        if work is not None:
            await work.check_rm(agent.wire(), force=args.force, keep_branch=args.keep_branch)
        reply = await self.fleet.remove(args.name, force=args.force)
        if work is not None:
            await work.removed(agent.wire(), keep_branch=args.keep_branch)
        if self.queues is not None:
            self.queues.forget(args.name)
        if isinstance(agent, WireAgent):
            self.answers.forget(agent.run_id)
            if self.channels is not None:
                self.channels.forget(agent.name)
        return reply

    async def reconcile(self, context: CallContext, params: Any) -> ReconcileReport:
        return await self.fleet.reconcile()

    # -- controls ---------------------------------------------------------------------

    async def steer(self, context: CallContext, params: Any) -> ControlReply:
        args = decode_params(params, TextParams)
        return await send_control(self._wire(args.name), ControlKind.STEER, {"text": args.text})

    async def follow_up(self, context: CallContext, params: Any) -> ControlReply:
        """A follow-up; to an agent whose run has ended, a new run that resumes it."""
        args = decode_params(params, TextParams)
        agent = self._wire(args.name)
        if agent.ended and not agent.queued:
            resumed, seq = await self.sup.resume(agent.name, args.text)
            source = (resumed.record.spawn or {}).get("resume", agent.run_id)
            return ControlReply(
                name=agent.name, seq=seq or 0, ack="accepted", state=resumed.state, resumed=source
            )
        return await send_control(agent, ControlKind.FOLLOW_UP, {"text": args.text})

    async def finalize(self, context: CallContext, params: Any) -> ControlReply:
        args = decode_params(params, FinalizeParams)
        fields = {} if args.note is None else {"note": args.note}
        return await send_control(self._wire(args.name), ControlKind.FINALIZE, fields)

    async def cancel(self, context: CallContext, params: Any) -> ControlReply:
        args = decode_params(params, NameParams)
        return await send_control(self._wire(args.name), ControlKind.CANCEL, {})

    # -- events -----------------------------------------------------------------------

    async def events(self, context: CallContext, params: Any) -> EventsReply | StreamEnd:
        args = decode_params(params, EventsParams)
        agent = self._wire(args.name)
        if args.follow:
            return await stream_events(context, agent, args.after_seq)
        return await page(agent, args)

    # -- the other hosts of a cluster -------------------------------------------------

    async def _spawn_on(self, context: CallContext, host: str, params: Any) -> AgentStatus:
        """``agent.spawn {host}``: start the agent on that host of the cluster."""
        elsewhere = self.fleet.elsewhere
        if elsewhere is None:
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS,
                f"cannot spawn on host {host!r}: this daemon is in no cluster "
                "(start it with tether daemon --nats URL)",
            )
        if context.relayed:  # another host's call is answered here, never sent on
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"this is host {elsewhere.host!r}")
        forwarded = {key: value for key, value in params.items() if key != "host"}
        return await elsewhere.call(host, "agent.spawn", forwarded, AgentStatus)

    async def _follow_elsewhere(self, context: CallContext, host: str, params: Any) -> StreamEnd:
        """``agent.events {follow}`` of another host's agent: its host's pages, streamed."""
        assert self.fleet.elsewhere is not None
        args = decode_params(params, EventsParams)
        source = pages(self.fleet.elsewhere, host, args.name, args.after_seq, STREAM_BATCH)
        try:
            return await stream_pages(context, args.name, args.after_seq, source)
        finally:
            await source.aclose()


# -- helpers --------------------------------------------------------------------------------


def _ask_kind(agent: WireAgent) -> ControlKind:
    handle = agent.live()
    state = handle.mirror.state
    if state is State.READY and not handle.mirror.pending:
        return ControlKind.PROMPT
    if state in (State.READY, State.RUNNING):
        return ControlKind.FOLLOW_UP
    raise invalid_status(f"agent {agent.name!r} is {state}; ask needs ready or running")


def _send(send: Callable[[ControlKind, str], Any], kind: ControlKind, text: str) -> Any:
    try:
        return send(kind, text)
    except RunEnded as exc:
        raise invalid_status(str(exc)) from None
    except OSError as exc:  # its control file is unusable: the run is ending
        raise invalid_status(f"cannot send {kind}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RpcFailure(ErrorCode.INVALID_PARAMS, f"cannot send {kind}: {exc}") from None


def _answer(agent: WireAgent, outcome: Outcome) -> AskReply:
    if isinstance(outcome, AskFailed):
        raise invalid_status(f"agent {agent.name!r}: {outcome.reason}")
    return AskReply(
        name=agent.name,
        seq=outcome.seq,
        turn=outcome.turn,
        text=outcome.text,
        usage=outcome.usage,
        stop_reason=outcome.stop_reason,
        error=UNSET if outcome.error is None else outcome.error,
        truncated=outcome.truncated,
        state=agent.state,
        timed_out=False,
    )
