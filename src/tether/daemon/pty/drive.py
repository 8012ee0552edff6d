"""``agent.drive {name}``: a daemon connection becomes a WebSocket onto a PTY agent.

Theory of operation: the handler answers ``{name, upgrade: "websocket", cols, rows,
state}`` and marks the connection for upgrade
(:meth:`~tether.daemon.rpc.server.Connection.upgrade`).
The client then sends an RFC 6455 opening handshake on the same connection; the
:class:`DriveSession` built for it answers through :class:`~tether.transports.ws.WsPeer`.
After the handshake:

- the daemon sends the agent's output ring as the first binary message (what the screen
  shows), then ``{"type": "attached", cols, rows, viewers}`` as text, then every chunk
  the program writes, as binary;
- binary messages from the client are keystrokes, passed to the program in the order the
  daemon reads them (several viewers may type; their bytes interleave by arrival);
- text messages are JSON controls: ``{"type": "resize", "cols": C, "rows": R}`` and
  ``{"type": "detach"}`` (the daemon closes with 1000). Anything else is answered
  ``{"type": "error", "message": ...}``;
- the daemon sends ``{"type": "resize", cols, rows}`` when anyone resizes, and
  ``{"type": "exit", state, exit_code}`` then a close (1000) when the program ends.

A viewer that stops reading is closed (1008) once ``MAX_VIEWER_BUFFER`` bytes wait for it,
so a stalled client costs bounded memory; a handshake not sent within
``HANDSHAKE_TIMEOUT_S`` closes the connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from tether import jsondepth
from tether.daemon.pty.frames import CHUNK_BYTES, HolderRejection, check_size
from tether.daemon.rpc.methods import RpcFailure, decode_params
from tether.daemon.rpc.protocol import ErrorCode
from tether.transports.ws import (
    CLOSE_NORMAL,
    CLOSE_POLICY,
    WsBinary,
    WsClosed,
    WsPeer,
    WsRequest,
    WsText,
)

if TYPE_CHECKING:
    from tether.daemon.fleet.fleet import Fleet
    from tether.daemon.pty.agent import PtyAgent
    from tether.daemon.pty.fleet import PtyFleet
    from tether.daemon.rpc.server import CallContext

HANDSHAKE_TIMEOUT_S: Final = 30.0
MAX_VIEWER_BUFFER: Final = 8 * 1_048_576


class DriveParams(msgspec.Struct, frozen=True):
    name: str


class DriveSession:
    """One viewer of one PTY agent over an upgraded connection."""

    def __init__(self, agent: PtyAgent, transport: asyncio.Transport) -> None:
        self.agent = agent
        self.transport = transport
        self.peer = WsPeer(client=False)
        loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = loop.call_later(HANDSHAKE_TIMEOUT_S, self._end)

    # -- the connection ---------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        for event in self.peer.feed(data):
            if isinstance(event, WsRequest):
                self._accept()
            elif isinstance(event, WsBinary):
                self._input(event.data)
            elif isinstance(event, WsText):
                self._control(event.text)
            elif isinstance(event, WsClosed):
                self._end()
        self._write(self.peer.take_outgoing())

    def eof_received(self) -> bool | None:
        self.peer.feed(None)
        self._end()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.agent.remove_viewer(self)

    # -- Viewer -------------------------------------------------------------------------

    def send_output(self, data: bytes) -> None:
        if self.transport.get_write_buffer_size() > MAX_VIEWER_BUFFER:
            self._write(self.peer.close(CLOSE_POLICY, "viewer too slow; reattach"))
            self._end()
            return
        self._write(self.peer.send_binary(data))

    def send_control(self, message: dict[str, Any]) -> None:
        self._write(self.peer.send_text(json.dumps(message)))

    def agent_ended(self, message: dict[str, Any]) -> None:
        self.send_control(message)
        self._write(self.peer.close(CLOSE_NORMAL, str(message.get("type", "ended"))))
        self._end()

    # -- internals ------------------------------------------------------------------------

    def _accept(self) -> None:
        self._cancel_timer()
        self._write(self.peer.accept())
        agent = self.agent
        ring = agent.add_viewer(self)
        if ring:
            self._write(self.peer.send_binary(ring))
        viewers = len(agent.viewers)
        self.send_control(
            {"type": "attached", "cols": agent.cols, "rows": agent.rows, "viewers": viewers}
        )
        if agent.ended:
            self.agent_ended({"type": "exit", "state": agent.state, "exit_code": agent.exit_code})

    def _input(self, data: bytes) -> None:
        for start in range(0, len(data), CHUNK_BYTES):
            if not self.agent.write_input(data[start : start + CHUNK_BYTES]):
                self.send_control({"type": "error", "message": "the program is not reachable"})
                return

    def _control(self, text: str) -> None:
        try:
            message = jsondepth.loads(text)
        except ValueError:
            message = None
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "detach":
            self._write(self.peer.close(CLOSE_NORMAL, "detached"))
            self._end()
        elif kind == "resize":
            assert isinstance(message, dict)
            size = check_size(message.get("cols"), message.get("rows"))
            if isinstance(size, HolderRejection):
                self.send_control({"type": "error", "message": str(size)})
            else:
                self.agent.resize(*size)
        else:
            error = 'controls are {"type": "resize", "cols": C, "rows": R} or {"type": "detach"}'
            self.send_control({"type": "error", "message": error})

    def _write(self, data: bytes) -> None:
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def _end(self) -> None:
        self._cancel_timer()
        self.agent.remove_viewer(self)
        self.transport.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def drive_handler(ptys: PtyFleet, fleet: Fleet) -> Any:
    """The inline ``agent.drive`` handler over the PTY agents (``fleet``: every agent, to
    tell a wire agent's name from an unknown one); see the module docstring."""

    def drive(context: CallContext, params: Any) -> dict[str, Any]:
        name = decode_params(params, DriveParams).name
        agent = ptys.get(name)
        if agent is None:
            host = fleet.host_of(name)
            if host is not None:
                raise RpcFailure(
                    ErrorCode.INVALID_STATUS,
                    f"agent {name!r} runs on host {host!r}: drive its terminal there",
                )
            if fleet.get(name) is not None:
                raise RpcFailure(
                    ErrorCode.INVALID_STATUS,
                    f"agent {name!r} is a wire agent; drive needs a PTY agent (spawn with "
                    "pty: true); follow a wire agent with agent.events and steer it",
                )
            raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name!r}")
        if agent.ended:
            raise RpcFailure(ErrorCode.INVALID_STATUS, f"agent {name!r} has ended ({agent.state})")
        context.socket().upgrade(lambda transport: DriveSession(agent, transport))
        return {
            "name": name,
            "upgrade": "websocket",
            "cols": agent.cols,
            "rows": agent.rows,
            "state": agent.state,
        }

    return cast(Any, drive)


__all__ = ["DriveSession", "drive_handler"]
