"""The client end of ``agent.drive``: a WebSocket onto a PTY agent, over the daemon socket.

:meth:`DriveConnection.open` calls ``agent.drive``, sends the opening handshake on the
same connection and waits for the daemon's answer; then binary messages carry PTY bytes
and text messages JSON controls (see :mod:`tether.daemon.pty.drive`). Blocking, for the
terminal client (``tether agent attach``); :func:`open_drive_async` is the asyncio one
(the dashboard). Both speak through :class:`~tether.transports.ws.WsPeer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path
from typing import Any, Final

from tether.daemon.rpc.client import DaemonClient, DaemonConnectionLost, check_server, result_of
from tether.daemon.rpc.protocol import PREFIX_BYTES, ProtocolError, decode_response, encode_call
from tether.transports.ws import WsEvent, WsOpen, WsPeer

RECV_BYTES: Final = 65536
HOST: Final = "tether"


def _target(name: str) -> str:
    return f"/agent/{name}"


class DriveConnection:
    """A blocking WebSocket onto one PTY agent; see the module docstring."""

    def __init__(self, sock: socket.socket, peer: WsPeer, info: dict[str, Any]) -> None:
        self.sock = sock
        self.peer = peer
        self.info = info
        self.last_words = "detached; the agent keeps running"  # what the last control said
        self._pending: list[WsEvent] = []

    @classmethod
    def open(
        cls, name: str, socket_path: Path | None = None, *, timeout: float | None = 10.0
    ) -> DriveConnection:
        client = DaemonClient.connect(socket_path, timeout=timeout)
        try:
            info = client.call("agent.drive", {"name": name})
        except BaseException:
            client.close()
            raise
        sock, rest = client.take_socket()
        peer = WsPeer(client=True)
        conn = cls(sock, peer, info)
        try:
            sock.sendall(peer.handshake(HOST, _target(name)))
            conn._pending = peer.feed(rest) if rest else []
            while not any(isinstance(event, WsOpen) for event in conn._pending):
                if peer.closed:
                    raise DaemonConnectionLost("the daemon refused the WebSocket handshake")
                conn._pending += conn._read()
        except BaseException:
            sock.close()
            raise
        conn._pending = [e for e in conn._pending if not isinstance(e, WsOpen)]
        return conn

    def fileno(self) -> int:
        return self.sock.fileno()

    def send_input(self, data: bytes) -> None:
        self.sock.sendall(self.peer.send_binary(data))

    def send_control(self, **message: Any) -> None:
        self.sock.sendall(self.peer.send_text(json.dumps(message)))

    def receive(self) -> list[WsEvent]:
        """Whatever is waiting (blocks for at least one read when nothing is)."""
        if self._pending:
            events, self._pending = self._pending, []
            return events
        return self._read()

    def _read(self) -> list[WsEvent]:
        data = self.sock.recv(RECV_BYTES)
        events = self.peer.feed(data if data else None)
        reply = self.peer.take_outgoing()
        if reply:
            with contextlib.suppress(OSError):  # a close reply to a peer already gone
                self.sock.sendall(reply)
        if not data and not events:
            raise DaemonConnectionLost("the daemon closed the drive connection")
        return events

    def close(self) -> None:
        try:
            closing = self.peer.close()
            if closing:
                self.sock.sendall(closing)
        except OSError:
            pass
        finally:
            self.sock.close()


class AsyncDrive:
    """The asyncio client end of one drive connection."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: WsPeer
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.pending: list[WsEvent] = []

    def send_binary(self, data: bytes) -> None:
        self._write(self.peer.send_binary(data))

    def send_text(self, text: str) -> None:
        self._write(self.peer.send_text(text))

    async def receive(self) -> list[WsEvent]:
        """Events from the daemon; an empty list means the connection ended."""
        if self.pending:
            events, self.pending = self.pending, []
            return events
        while True:
            data = await self.reader.read(RECV_BYTES)
            events = self.peer.feed(data if data else None)
            self._write(self.peer.take_outgoing())
            if events or not data:
                return events

    def close(self) -> None:
        self._write(self.peer.close())
        self.writer.close()

    def _write(self, data: bytes) -> None:
        if data and not self.writer.is_closing():
            self.writer.write(data)


async def open_drive_async(socket_path: Path, name: str) -> AsyncDrive:
    """``agent.drive`` and the handshake on a new connection; raises ``DaemonClientError``."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        check_server(writer.get_extra_info("socket"), socket_path)  # before a single byte
        writer.write(encode_call(1, "agent.drive", {"name": name}))
        size = int.from_bytes(await reader.readexactly(PREFIX_BYTES), "little")
        response = decode_response(await reader.readexactly(size))
        if isinstance(response, ProtocolError):
            raise DaemonConnectionLost(f"unreadable answer from the daemon: {response.message}")
        result_of(response)
        peer = WsPeer(client=True)
        drive = AsyncDrive(reader, writer, peer)
        writer.write(peer.handshake(HOST, _target(name)))
        events: list[WsEvent] = []
        while not any(isinstance(event, WsOpen) for event in events):
            more = await drive.receive()
            if not more:
                raise DaemonConnectionLost("the daemon refused the WebSocket handshake")
            events += more
    except asyncio.IncompleteReadError:
        writer.close()
        raise DaemonConnectionLost("the daemon closed the connection") from None
    except BaseException:
        writer.close()
        raise
    drive.pending = [e for e in events if not isinstance(e, WsOpen)]
    return drive


__all__ = ["AsyncDrive", "DriveConnection", "open_drive_async"]
