"""Channels meet agents: an agent's inbox forwarded to its channel, and a Claude Code agent
given its own channel. Wired into the fleet by the composition root
(:mod:`tether.daemon.app`), never by the generic fleet itself.

- :class:`ChannelWiring` is a :class:`~tether.daemon.fleet.supervisor.FleetExtension`: a
  spawn naming an unknown ``channel_id`` is refused; an agent spawned with one has its
  inbox messages pushed there as MCP channel notifications, in order, by its own
  :class:`Forwarder` (an observer of its run), whose counters its status shows.
- ``agent.spawn {agent: "claude", channel: true}`` (:meth:`ChannelWiring.claude_spawn`)
  reserves the agent's channel, writes its MCP config and adds Claude Code's flags; a
  ``-p`` Claude Code never shows channel notifications to its model, so each push is sent
  to it as a ``steer`` carrying the ``<channel>`` tag (:meth:`ChannelWiring.deliver_to`),
  also after a daemon restart (:meth:`ChannelWiring.rewire`).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from tether.daemon.channels import claude as cc
from tether.daemon.channels.hub import ChannelHub, PushResult, make_channel_envelope
from tether.daemon.fleet.assembly import FleetExtension
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import RunEnded
from tether.runtime.parent.observer import Observer
from tether.wire.session import ControlKind

if TYPE_CHECKING:
    from pathlib import Path

    from tether.daemon.fleet.params import SpawnParams
    from tether.daemon.fleet.supervisor import Supervisor
    from tether.daemon.fleet.wire_agent import WireAgent
    from tether.runtime.parent.outcome import RunResult

__all__ = ["ChannelWiring", "Forwarder", "channel_envelope"]

MAX_OUTBOX: Final = 10_000  # inbox messages waiting for one channel
_CONTENT_KEYS: Final = ("text", "q", "note", "summary", "reason")


class ChannelWiring(FleetExtension):
    """The channel side of the fleet; see the module docstring."""

    def __init__(self, hub: ChannelHub, config_dir: Path) -> None:
        self.hub = hub
        self._config_dir = config_dir
        self._forwarders: dict[str, Forwarder] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- FleetExtension -----------------------------------------------------------------

    def check_spawn(self, params: SpawnParams) -> None:
        if params.channel_id is not None and self.hub.get(params.channel_id) is None:
            raise RpcFailure(ErrorCode.CHANNEL_UNKNOWN, f"no channel with id {params.channel_id!r}")

    def observers(self, agent: WireAgent) -> list[Observer]:
        channel_id = agent.record.channel_id
        if channel_id is None:
            return []
        forwarder = Forwarder(self.hub, agent, channel_id)
        self._forwarders[agent.name] = forwarder
        return [forwarder]

    def status_fields(self, agent: WireAgent) -> dict[str, Any]:
        forwarder = self._forwarders.get(agent.name)
        return {} if forwarder is None else {"channel": dict(forwarder.stats)}

    def forget(self, name: str) -> None:
        """The agent was removed: stop forwarding for it."""
        forwarder = self._forwarders.pop(name, None)
        if forwarder is not None:
            forwarder.close()

    async def close(self) -> None:
        for forwarder in self._forwarders.values():
            forwarder.close()
        for task in self._tasks:
            task.cancel()

    # -- a Claude Code agent's own channel ----------------------------------------------

    def claude_channel(self, name: str, socket: str, *, to_agent: bool) -> tuple[list[str], str]:
        """The agent's channel reserved (``to_agent``: its pushes go to the agent as
        steers), its MCP config written: Claude Code's flags that load it, and its id."""
        session = cc.session_of(name)
        channel = self.hub.reserve(session, name, to_agent=to_agent)
        config = cc.mcp_config(session, name, socket)
        path = cc.write_config(self._config_dir, name, config)
        return cc.claude_args(path), channel.channel_id

    def deliver_to(self, agent: WireAgent) -> None:
        """Send ``agent``'s channel pushes to it as steers (what was held first), in the
        background: a slow child's held pushes must not hold up serving."""
        channel_id = agent.record.channel_id
        if channel_id is None:
            return
        task = asyncio.get_running_loop().create_task(
            self.hub.deliver_by(channel_id, _steer_to(agent))
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def rewire(self, supervisor: Supervisor) -> None:
        """After recovery: a ``-p`` Claude Code agent's own channel delivers to it again
        (the wiring is not stored)."""
        for agent in list(supervisor.agents.values()):
            channel = self.hub.get(agent.record.channel_id or "")
            if channel is not None and channel.session_id == cc.session_of(agent.name):
                self.hub.reserve(channel.session_id, agent.name, to_agent=True)
                self.deliver_to(agent)


class Forwarder(Observer):
    """Pushes one agent's inbox messages to its channel, in order, one at a time; its
    counters are its own (:attr:`stats`)."""

    def __init__(self, channels: ChannelHub, agent: WireAgent, channel_id: str) -> None:
        self._channels = channels
        self._agent = agent
        self._channel_id = channel_id
        self._queue: deque[dict[str, Any]] = deque()
        self._ready = asyncio.Event()
        self.stats: dict[str, Any] = {"pushed": 0, "failed": 0}
        self._task: asyncio.Task[None] | None = None

    def on_inbox(self, messages: list[dict[str, Any]]) -> None:
        channel = self._channels.get(self._channel_id)
        if channel is not None and channel.to_agent and channel.name == self._agent.name:
            return  # its own channel pushes to it: its inbox would loop back into it
        for message in messages:
            self._put(message)

    async def on_end(self, result: RunResult) -> str | None:
        return None  # what is queued is still pushed

    def _put(self, message: dict[str, Any]) -> None:
        if len(self._queue) >= MAX_OUTBOX:
            self.stats["failed"] += 1
            self.stats["last_error"] = "too many messages waiting; dropped"
            return
        self._queue.append(message)
        self._ready.set()
        if self._task is None:
            name = f"tether-forward-{self._agent.name}"
            self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            while self._queue:
                envelope = channel_envelope(self._agent, self._queue.popleft())
                reason = await self._push(envelope)
                if reason is None:
                    self.stats["pushed"] += 1
                else:
                    self.stats["failed"] += 1
                    self.stats["last_error"] = reason
            self._ready.clear()

    async def _push(self, envelope: dict[str, Any]) -> str | None:
        try:
            result = await self._channels.push(self._channel_id, envelope)
        except RpcFailure as exc:
            return exc.message
        return None if result.delivered else (result.reason or "not delivered")


def channel_envelope(agent: WireAgent, message: dict[str, Any]) -> dict[str, Any]:
    """The MCP channel notification for one inbox message of ``agent``."""
    kind = message.get("type")
    content = next(
        (message[k] for k in _CONTENT_KEYS if isinstance(message.get(k), str)),
        None,
    )
    if content is None:
        content = json.dumps(message, ensure_ascii=False)
    meta = {
        "run_id": agent.run_id,
        "agent": agent.name,
        "type": kind if isinstance(kind, str) else "message",
        "source": "tether_inbox",
    }
    return make_channel_envelope(content, meta)


def _steer_to(agent: WireAgent) -> Any:
    """A ``-p`` Claude Code agent's channel deliveries: each push sent to it as a steer
    (queued while a turn runs, starting one when idle) carrying the ``<channel>`` tag;
    delivered once the child accepted it."""

    async def deliver(envelope: Any) -> PushResult:
        try:
            handle = agent.live()
            ack = await handle.send(ControlKind.STEER, text=cc.channel_text(envelope))
        except RpcFailure as exc:
            return PushResult(routed=True, delivered=False, reason=exc.message)
        except (RunEnded, ValueError) as exc:
            return PushResult(routed=True, delivered=False, reason=str(exc))
        if ack.status == "rejected":
            reason = ack.reason if isinstance(ack.reason, str) else "rejected"
            return PushResult(routed=True, delivered=False, reason=reason)
        return PushResult(routed=True, delivered=True)

    return deliver
