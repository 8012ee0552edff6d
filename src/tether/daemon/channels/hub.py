"""``channel.*``: channels that receive MCP channel notifications, kept by the daemon.

Theory of operation: a channel lives in the hub's registry, not in a connection (the
fno-agents client opens one connection per request). ``channel.register_channel
{cc_session_id, name?}`` (``session_id`` works too) creates a channel for that session and
makes the calling connection its *receiver*; registering the same session again (as the
MCP channel server, ``tether mcp-channel``, does when it starts) returns the same channel,
and the new connection becomes its receiver when it has none (a receiver that stays
connected keeps receiving). When the receiver's connection closes the
channel stays, without a receiver, until ``channel.unregister_channel {mcp_channel_id}``.
The result carries both spellings of the id, ``{mcp_channel_id, channel_id}``.

Channels survive a daemon restart, as in the reference daemon whose registry holds them:
with a :class:`~tether.daemon.channels.store.ChannelStore` (the daemon's is in the
registry's database) every channel and every held envelope is written there and read
back by :meth:`ChannelHub.start`, receivers apart (they are connections).

Any connection may push: ``channel.push_to_channel {mcp_channel_id, envelope?}`` validates
the envelope (the MCP ``notifications/claude/channel`` shape), then sends the receiver a
request ``channel.deliver {channel_id, envelope}`` and waits for its answer:
``{routed: true, delivered: true}`` on a success answer, else ``delivered: false`` with a
``reason`` (the receiver answered an error, timed out, or went away). With no receiver
connected the envelope is held (up to :data:`MAX_HELD` per channel) and handed over when
one registers: ``delivered: false`` with a reason saying so. Without an envelope the push
only confirms the route: ``{routed: true}``. An unknown channel id is ``channel_unknown``.

Other daemon parts push with :meth:`ChannelHub.push` and build envelopes with
:func:`make_channel_envelope` (the inbox uses this to forward messages).

A channel reserved *for an agent* (:meth:`ChannelHub.reserve` with ``to_agent``: a ``-p``
Claude Code agent, which never shows channel notifications to its model) sends its pushes
to the agent instead of the receiver: :meth:`ChannelHub.deliver_by` gives it the
agent's delivery once the agent is ready (held pushes go first, in order); until then
pushes are held. The receiver (``tether mcp-channel``) still registers, for its tools.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from tether.daemon.channels.store import ChannelStore
from tether.daemon.rpc.connection import Connection, ConnectionClosed
from tether.daemon.rpc.methods import RpcFailure, decode_params
from tether.daemon.rpc.protocol import ErrorCode
from tether.daemon.rpc.server import CallContext, Daemon

log = logging.getLogger(__name__)

ENVELOPE_JSONRPC: Final = "2.0"
ENVELOPE_METHOD: Final = "notifications/claude/channel"
META_KEY: Final = re.compile(r"[A-Za-z0-9_]+")
DELIVER_METHOD: Final = "channel.deliver"
DEFAULT_DELIVER_TIMEOUT_S: Final = 10.0
DEFAULT_MAX_CHANNELS: Final = 4096
MAX_HELD: Final = 64  # envelopes held per channel while no receiver is connected
MAX_NAME_CHARS: Final = 256


def make_channel_envelope(content: str, meta: dict[str, str] | None = None) -> dict[str, Any]:
    """An MCP channel notification carrying ``content``; raises ``ValueError`` for bad meta."""
    envelope = {
        "jsonrpc": ENVELOPE_JSONRPC,
        "method": ENVELOPE_METHOD,
        "params": {"content": content, "meta": dict(meta or {})},
    }
    problem = envelope_problem(envelope)
    if problem is not None:
        raise ValueError(problem)
    return envelope


def envelope_problem(envelope: Any) -> str | None:
    """Why ``envelope`` is not an MCP channel notification, or ``None`` when it is.

    Pinned: top-level keys exactly ``jsonrpc``, ``method``, ``params``; ``params`` holds a
    string ``content`` and optionally an object ``meta`` (nothing else) whose keys match
    ``[A-Za-z0-9_]+`` and whose values are strings.
    """
    if not isinstance(envelope, dict):
        return "envelope must be a JSON object"
    keys = set(envelope)
    if keys != {"jsonrpc", "method", "params"}:
        return f"envelope keys must be exactly jsonrpc, method, params (got {sorted(keys)})"
    if envelope["jsonrpc"] != ENVELOPE_JSONRPC:
        return f"envelope jsonrpc must be {ENVELOPE_JSONRPC!r}"
    if envelope["method"] != ENVELOPE_METHOD:
        return f"envelope method must be {ENVELOPE_METHOD!r}"
    return _params_problem(envelope["params"])


def _params_problem(params: Any) -> str | None:
    if not isinstance(params, dict):
        return "envelope params must be an object"
    extra = set(params) - {"content", "meta"}
    if extra:
        return f"envelope params has unexpected keys {sorted(extra)}"
    if not isinstance(params.get("content"), str):
        return "envelope params.content must be a string"
    return _meta_problem(params.get("meta", {}))


def _meta_problem(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return "envelope params.meta must be an object"
    for key, value in meta.items():
        if not META_KEY.fullmatch(key):
            return f"meta key {key!r} must match [A-Za-z0-9_]+"
        if not isinstance(value, str):
            return f"meta value for {key!r} must be a string"
    return None


class RegisterParams(msgspec.Struct, frozen=True):
    """``cc_session_id`` (fno-agents) or ``session_id`` (tether's first name for it)."""

    cc_session_id: str | None = None
    session_id: str | None = None
    name: str | None = None

    @property
    def session(self) -> str:
        return self.cc_session_id or self.session_id or ""


class ChannelIdParams(msgspec.Struct, frozen=True):
    """``mcp_channel_id`` (fno-agents) or ``channel_id``."""

    mcp_channel_id: str | None = None
    channel_id: str | None = None

    @property
    def id(self) -> str:
        if self.mcp_channel_id is None and self.channel_id is None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "missing mcp_channel_id")
        return self.mcp_channel_id or self.channel_id or ""


class PushParams(ChannelIdParams, frozen=True):
    envelope: Any = msgspec.UNSET


@dataclass
class Channel:
    channel_id: str
    session_id: str
    name: str | None
    receiver: Connection | None
    created_at: float = field(default_factory=time.time)
    delivered: int = 0
    held: deque[Any] = field(default_factory=deque)
    to_agent: bool = False  # pushes go to ``deliverer`` (an agent), not the receiver
    deliverer: Deliverer | None = None


class RegisterReply(msgspec.Struct, frozen=True, kw_only=True):
    """``channel.register_channel``: the new channel's id (under both names clients use)."""

    mcp_channel_id: str
    channel_id: str


class UnregisterReply(msgspec.Struct, frozen=True, kw_only=True):
    """``channel.unregister_channel``: done (an unknown id is an error, not a reply)."""

    unregistered: bool


class PushResult(msgspec.Struct, frozen=True, omit_defaults=True):
    routed: bool
    delivered: bool | None = None  # None: the push only confirmed the route
    reason: str | None = None


Deliverer = Callable[[Any], Awaitable[PushResult]]  # an envelope -> what became of it


class ChannelHub:
    """The daemon's channels, keyed by id; each has at most one receiving connection."""

    def __init__(
        self,
        *,
        deliver_timeout_s: float = DEFAULT_DELIVER_TIMEOUT_S,
        max_channels: int = DEFAULT_MAX_CHANNELS,
        open_store: Callable[[], ChannelStore] | None = None,
    ) -> None:
        self.deliver_timeout_s = deliver_timeout_s
        self.max_channels = max_channels
        self._open_store = open_store
        self._store: ChannelStore | None = None
        self._channels: dict[str, Channel] = {}
        self._handing: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Read back the channels a previous daemon stored (none without a store)."""
        if self._open_store is None or self._store is not None:
            return
        self._store = self._open_store()
        for stored in self._store.load():
            self._channels[stored.channel_id] = Channel(
                stored.channel_id,
                stored.session_id,
                stored.name,
                None,
                created_at=stored.created_at,
                held=deque(stored.held),
            )

    async def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def install(self, daemon: Daemon) -> None:
        daemon.methods.register("channel.register_channel", self._register)
        daemon.methods.register("channel.unregister_channel", self._unregister)
        daemon.methods.register("channel.push_to_channel", self._push)
        daemon.count_channels(self.__len__)

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, channel_id: str) -> Channel | None:
        return self._channels.get(channel_id)

    def register(self, connection: Connection, session_id: str, name: str | None) -> Channel:
        """The session's channel (a new one, or the one it registered before) with
        ``connection`` as its receiver."""
        channel = self.reserve(session_id, name)
        if channel.receiver is None or channel.receiver.closed:
            channel.receiver = connection  # a receiver that stays connected keeps receiving
        connection.add_close_callback(self._drop_connection)
        if channel.held and not channel.to_agent:
            task = asyncio.get_running_loop().create_task(self._hand_over(channel))
            self._handing.add(task)
            task.add_done_callback(self._handing.discard)
        return channel

    def reserve(
        self, session_id: str, name: str | None, *, to_agent: bool | None = None
    ) -> Channel:
        """The session's channel, made without a receiver when it has none yet;
        ``to_agent`` True holds its pushes for :meth:`deliver_by`, False sends them to the
        receiver again, None (registering) leaves that as it is."""
        channel = self._of_session(session_id, name)
        if channel is None:
            if len(self._channels) >= self.max_channels:
                raise RpcFailure(ErrorCode.BUSY, f"too many channels (cap {self.max_channels})")
            channel = Channel("ch_" + secrets.token_hex(8), session_id, name, None)
            self._channels[channel.channel_id] = channel
            self._save(channel)
        if to_agent is not None:
            channel.to_agent, channel.deliverer = to_agent, None
        return channel

    def _save(self, channel: Channel) -> None:
        if self._store is not None:
            self._store.save(channel.channel_id, channel.session_id, channel.name)

    def _of_session(self, session_id: str, name: str | None) -> Channel | None:
        for channel in self._channels.values():
            if channel.session_id == session_id and name in (None, channel.name):
                return channel
            if channel.session_id == session_id and channel.name is None:
                channel.name = name  # the session's channel, now named
                self._save(channel)
                return channel
        return None

    def unregister(self, channel_id: str) -> None:
        if self._channels.pop(channel_id, None) is None:
            raise _unknown_channel(channel_id)
        if self._store is not None:
            self._store.delete(channel_id)

    async def push(self, channel_id: str, envelope: Any) -> PushResult:
        """Deliver ``envelope`` to the channel's receiver and report what happened."""
        problem = envelope_problem(envelope)
        if problem is not None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, problem)
        channel = self._channels.get(channel_id)
        if channel is None:
            raise _unknown_channel(channel_id)
        if channel.to_agent:
            if channel.deliverer is None:
                return self._hold(channel, envelope, "the agent is not ready", "it is")
            return await channel.deliverer(envelope)
        if channel.receiver is None:
            return self._hold(
                channel, envelope, "no receiver is connected", "the channel server registers"
            )
        return await self._deliver(channel, channel.receiver, envelope)

    async def deliver_by(self, channel_id: str, deliverer: Deliverer) -> None:
        """From now on ``deliverer`` takes the channel's pushes (its agent is ready); what
        was held goes first, in order (a held envelope it refuses is dropped, logged)."""
        channel = self._channels.get(channel_id)
        if channel is None or not channel.to_agent:
            return
        while channel.held:  # pushes made meanwhile are held behind these
            result = await deliverer(channel.held[0])
            if not result.delivered:
                log.warning("channel %s: held push dropped: %s", channel_id, result.reason)
            channel.held.popleft()
            if self._store is not None:
                self._store.release_oldest(channel.channel_id)
        channel.deliverer = deliverer

    def _hold(self, channel: Channel, envelope: Any, why: str, until: str) -> PushResult:
        if len(channel.held) >= MAX_HELD:
            reason = f"{why} and {MAX_HELD} envelopes already wait; dropped"
            return PushResult(routed=True, delivered=False, reason=reason)
        channel.held.append(envelope)
        if self._store is not None:
            self._store.hold(channel.channel_id, envelope)
        reason = f"{why}; held until {until}"
        return PushResult(routed=True, delivered=False, reason=reason)

    async def _hand_over(self, channel: Channel) -> None:
        """Deliver what was held, in order, to the channel's new receiver."""
        while channel.held and channel.receiver is not None:
            result = await self._deliver(channel, channel.receiver, channel.held[0])
            if not result.delivered:
                return
            channel.held.popleft()
            if self._store is not None:
                self._store.release_oldest(channel.channel_id)

    async def _deliver(self, channel: Channel, receiver: Connection, envelope: Any) -> PushResult:
        params = {"channel_id": channel.channel_id, "envelope": envelope}
        try:
            async with asyncio.timeout(self.deliver_timeout_s):
                answer = await receiver.call(DELIVER_METHOD, params)
        except TimeoutError:
            reason = f"the channel did not answer within {self.deliver_timeout_s:g}s"
            return PushResult(routed=True, delivered=False, reason=reason)
        except ConnectionClosed:
            return PushResult(routed=True, delivered=False, reason="the channel disconnected")
        if answer.is_error:
            error = answer.error
            reason = f"the channel refused: {getattr(error, 'message', error)}"
            return PushResult(routed=True, delivered=False, reason=reason)
        channel.delivered += 1
        return PushResult(routed=True, delivered=True)

    # -- handlers ----------------------------------------------------------------------------

    def _register(self, context: CallContext, params: Any) -> RegisterReply:
        args = decode_params(params, RegisterParams)
        if not args.session:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "cc_session_id must not be empty")
        if args.name is not None and len(args.name) > MAX_NAME_CHARS:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"name exceeds {MAX_NAME_CHARS} chars")
        channel = self.register(context.socket(), args.session, args.name)
        return RegisterReply(mcp_channel_id=channel.channel_id, channel_id=channel.channel_id)

    def _unregister(self, context: CallContext, params: Any) -> UnregisterReply:
        self.unregister(decode_params(params, ChannelIdParams).id)
        return UnregisterReply(unregistered=True)

    async def _push(self, context: CallContext, params: Any) -> PushResult:
        args = decode_params(params, PushParams)
        if args.envelope is msgspec.UNSET:
            if self.get(args.id) is None:
                raise _unknown_channel(args.id)
            return PushResult(routed=True)  # confirm-only: the route exists
        return await self.push(args.id, args.envelope)

    def _drop_connection(self, connection: Connection) -> None:
        for channel in self._channels.values():
            if channel.receiver is connection:
                channel.receiver = None


def _unknown_channel(channel_id: str) -> RpcFailure:
    return RpcFailure(ErrorCode.CHANNEL_UNKNOWN, f"no channel with id {channel_id!r}")
