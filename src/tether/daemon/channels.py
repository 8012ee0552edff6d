"""``channel.*``: connection-bound channels that receive MCP channel notifications.

Theory of operation: ``channel.register_channel`` binds a new channel id to the calling
connection; when that connection closes, its channels go away. ``channel.push_to_channel``
validates the envelope (the MCP ``notifications/claude/channel`` shape), then sends the
registering connection a request ``channel.deliver {channel_id, envelope}`` and waits for
its answer: ``{routed: true, delivered: true}`` on a success answer, else
``delivered: false`` with a ``reason`` (the client answered an error, timed out, or went
away). An unknown channel id is ``channel_unknown``.

Other daemon parts push with :meth:`ChannelHub.push` and build envelopes with
:func:`make_channel_envelope` (the inbox uses this to forward messages).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from tether.daemon.methods import RpcFailure, decode_params
from tether.daemon.protocol import ErrorCode
from tether.daemon.server import CallContext, Connection, ConnectionClosed, Daemon

ENVELOPE_JSONRPC: Final = "2.0"
ENVELOPE_METHOD: Final = "notifications/claude/channel"
META_KEY: Final = re.compile(r"[A-Za-z0-9_]+")
DELIVER_METHOD: Final = "channel.deliver"
DEFAULT_DELIVER_TIMEOUT_S: Final = 10.0
DEFAULT_MAX_CHANNELS: Final = 4096
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
    session_id: str
    name: str | None = None


class ChannelIdParams(msgspec.Struct, frozen=True):
    channel_id: str


class PushParams(msgspec.Struct, frozen=True):
    channel_id: str
    envelope: Any


@dataclass
class Channel:
    channel_id: str
    session_id: str
    name: str | None
    connection: Connection
    created_at: float = field(default_factory=time.time)
    delivered: int = 0


class PushResult(msgspec.Struct, frozen=True, omit_defaults=True):
    routed: bool
    delivered: bool
    reason: str | None = None


class ChannelHub:
    """The daemon's channels, keyed by id, each bound to its registering connection."""

    def __init__(
        self,
        *,
        deliver_timeout_s: float = DEFAULT_DELIVER_TIMEOUT_S,
        max_channels: int = DEFAULT_MAX_CHANNELS,
    ) -> None:
        self.deliver_timeout_s = deliver_timeout_s
        self.max_channels = max_channels
        self._channels: dict[str, Channel] = {}

    def install(self, daemon: Daemon) -> None:
        daemon.methods.register("channel.register_channel", self._register)
        daemon.methods.register("channel.unregister_channel", self._unregister)
        daemon.methods.register("channel.push_to_channel", self._push)
        daemon.add_counter("channels", self.__len__)

    def __len__(self) -> int:
        return len(self._channels)

    def get(self, channel_id: str) -> Channel | None:
        return self._channels.get(channel_id)

    def register(self, connection: Connection, session_id: str, name: str | None) -> Channel:
        if len(self._channels) >= self.max_channels:
            raise RpcFailure(ErrorCode.BUSY, f"too many channels (cap {self.max_channels})")
        channel_id = "ch_" + secrets.token_hex(8)
        channel = Channel(channel_id, session_id, name, connection)
        self._channels[channel_id] = channel
        connection.add_close_callback(self._drop_connection)
        return channel

    def unregister(self, channel_id: str) -> None:
        if self._channels.pop(channel_id, None) is None:
            raise _unknown_channel(channel_id)

    async def push(self, channel_id: str, envelope: Any) -> PushResult:
        """Deliver ``envelope`` to the channel's connection and report what happened."""
        problem = envelope_problem(envelope)
        if problem is not None:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, problem)
        channel = self._channels.get(channel_id)
        if channel is None:
            raise _unknown_channel(channel_id)
        params = {"channel_id": channel_id, "envelope": envelope}
        try:
            async with asyncio.timeout(self.deliver_timeout_s):
                answer = await channel.connection.call(DELIVER_METHOD, params)
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

    def _register(self, context: CallContext, params: Any) -> dict[str, str]:
        args = decode_params(params, RegisterParams)
        if not args.session_id:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "session_id must not be empty")
        if args.name is not None and len(args.name) > MAX_NAME_CHARS:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"name exceeds {MAX_NAME_CHARS} chars")
        channel = self.register(context.connection, args.session_id, args.name)
        return {"channel_id": channel.channel_id}

    def _unregister(self, context: CallContext, params: Any) -> dict[str, bool]:
        self.unregister(decode_params(params, ChannelIdParams).channel_id)
        return {"unregistered": True}

    async def _push(self, context: CallContext, params: Any) -> PushResult:
        args = decode_params(params, PushParams)
        return await self.push(args.channel_id, args.envelope)

    def _drop_connection(self, connection: Connection) -> None:
        gone = [cid for cid, ch in self._channels.items() if ch.connection is connection]
        for channel_id in gone:
            del self._channels[channel_id]


def _unknown_channel(channel_id: str) -> RpcFailure:
    return RpcFailure(ErrorCode.CHANNEL_UNKNOWN, f"no channel with id {channel_id!r}")
