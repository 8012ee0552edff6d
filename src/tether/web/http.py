"""A small HTTP/1.1 server for the dashboard: h11 for requests, wsproto for WebSockets.

Theory of operation: :func:`serve_connection` runs one TCP connection. h11 parses each
request (its head is at most ``MAX_HEAD_BYTES``, its body at most ``MAX_BODY_BYTES``:
over either the connection is answered 413/400 and closed), the application's
``handle(request)`` returns a :class:`Response`, and keep-alive goes on until the client
or h11 says otherwise. A request that asks to become a WebSocket is handed, with the bytes
that followed it, to ``websocket(request, socket)`` once the application accepts it; the
:class:`ServerSocket` then speaks :class:`~tether.transports.ws.WsPeer` over the stream.
A whole request (head and body) must arrive within ``IDLE_S`` of the connection starting to
wait for it, however the bytes trickle in (a client sending one byte a minute is closed
like a silent one), so an idle or stalled client costs one task for a bounded time. While
a connection waits for a request it sits in :class:`Waiting`, oldest first, where a full
server may close it to admit a newcomer (:func:`tether.web.server.serve`).

Writing is bounded too: an answer (or a WebSocket frame) that the client does not read
within ``WRITE_S`` aborts the connection, so a client that pipelines requests and never
reads cannot hold its slot. A request the gate refuses (no token, a foreign Host or
Origin) is answered and the connection closed, and it stays in :class:`Waiting` while its
answer drains: a client that proved nothing never holds a slot a newcomer could need.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote

import h11

from tether import jsondepth
from tether.transports.ws import WsEvent, WsPeer, WsRequest

_MIGHT_SWITCH: Final = h11.MIGHT_SWITCH_PROTOCOL  # type: ignore[attr-defined]
MAX_HEAD_BYTES: Final = 16 * 1024
MAX_BODY_BYTES: Final = 256 * 1024
IDLE_S: Final = 60.0
WRITE_S: Final = 30.0  # an answer the client does not take in this long: the connection goes
READ_BYTES: Final = 65536
MAX_SOCKET_BUFFER: Final = 4 * 1_048_576
SECURITY_HEADERS: Final = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    raw_headers: list[tuple[bytes, bytes]]
    body: bytes = b""

    @property
    def websocket(self) -> bool:
        return self.headers.get("upgrade", "").lower() == "websocket"

    def json(self) -> Any:
        try:
            return jsondepth.loads(self.body or b"{}")
        except ValueError:
            return None


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(data).encode())

    @classmethod
    def error(cls, status: int, message: str) -> Response:
        return cls.json({"error": message}, status)


class ServerSocket:
    """The server end of one accepted WebSocket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = WsPeer(client=False)
        self.pending: list[WsEvent] = []

    async def send_text(self, text: str) -> None:
        await self._write(self.peer.send_text(text))

    async def send_binary(self, data: bytes) -> None:
        await self._write(self.peer.send_binary(data))

    async def receive(self) -> list[WsEvent]:
        """The next events; an empty list means the connection is gone."""
        if self.pending:
            events, self.pending = self.pending, []
            return events
        while True:
            data = await self.reader.read(READ_BYTES)
            events = self.peer.feed(data if data else None)
            await self._write(self.peer.take_outgoing())
            if events or not data:
                return events

    async def close(self, code: int = 1000, reason: str = "") -> None:
        with contextlib.suppress(ConnectionError):
            await self._write(self.peer.close(code, reason))
        self.writer.close()

    async def _write(self, data: bytes) -> None:
        if not data or self.writer.is_closing():
            return
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > MAX_SOCKET_BUFFER:
            await drain(self.writer)


class Waiting:
    """The connections waiting for a request, oldest first: what a full server may close
    (they hold no work, and nothing a client did not yet prove with its token)."""

    def __init__(self) -> None:
        self._writers: dict[asyncio.StreamWriter, None] = {}

    def add(self, writer: asyncio.StreamWriter) -> None:
        self._writers[writer] = None

    def discard(self, writer: asyncio.StreamWriter) -> None:
        self._writers.pop(writer, None)

    def close_oldest(self) -> bool:
        """Abort the connection that has waited longest; False when none waits."""
        for writer in self._writers:
            del self._writers[writer]
            writer.transport.abort()
            return True
        return False


async def drain(writer: asyncio.StreamWriter) -> None:
    """``writer.drain()`` within :data:`WRITE_S`; a client that does not read its answer
    in time has its connection aborted (``ConnectionError``)."""
    try:
        async with asyncio.timeout(WRITE_S):
            await writer.drain()
    except TimeoutError:
        writer.transport.abort()
        raise ConnectionAbortedError("the client did not read its answer in time") from None


Handler = Callable[[Request], Awaitable[Response]]
SocketHandler = Callable[[Request, ServerSocket], Awaitable[None]]
Gate = Callable[[Request], Response | None]


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    gate: Gate,
    handle: Handler,
    websocket: SocketHandler,
    waiting: Waiting | None = None,
) -> None:
    """Serve requests on one connection; ``gate`` refuses a request before anything else.
    While it waits for a request the connection is in ``waiting`` (see :class:`Waiting`)."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    waiting = waiting if waiting is not None else Waiting()
    try:
        while True:
            waiting.add(writer)
            try:
                request = await _read_request(conn, reader)
            finally:
                waiting.discard(writer)
            if request is None:
                return
            refusal = gate(request)
            if refusal is not None:  # answered and closed, evictable while it drains
                refusal.headers.append(("connection", "close"))
                waiting.add(writer)
                writer.write(_encode(conn, refusal))
                await drain(writer)
                return
            if request.websocket and conn.their_state is _MIGHT_SWITCH:
                await _upgrade(conn, request, reader, writer, websocket)
                return
            writer.write(_encode(conn, await handle(request)))
            await drain(writer)
            if conn.our_state is h11.MUST_CLOSE or request.websocket:
                return
            conn.start_next_cycle()
    except (h11.RemoteProtocolError, _TooLarge) as exc:
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            # h11's hint: 431 for a head over its buffer bound, else 400
            status = exc.status if isinstance(exc, _TooLarge) else exc.error_status_hint
            writer.write(_encode(conn, Response.error(status, str(exc))))
    except (ConnectionError, TimeoutError):
        pass
    finally:
        waiting.discard(writer)
        writer.close()


class _TooLarge(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
    async with asyncio.timeout(IDLE_S):  # the whole request, not each read (slowloris)
        return await _read_events(conn, reader)


async def _read_events(conn: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(READ_BYTES)
            conn.receive_data(data)
            if not data and head is None:
                return None
            continue
        if isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Request):
            size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
            if size > MAX_HEAD_BYTES:  # h11 bounds only a head still arriving
                raise _TooLarge(f"request heads are at most {MAX_HEAD_BYTES} bytes", 431)
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _TooLarge(f"request bodies are at most {MAX_BODY_BYTES} bytes", 413)
        elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
            assert head is not None
            return _request(head, bytes(body))


def _request(head: h11.Request, body: bytes) -> Request:
    target = head.target.decode("latin-1")
    path, _, query = target.partition("?")
    raw = [(bytes(k), bytes(v)) for k, v in head.headers]
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
    return Request(head.method.decode(), unquote(path), query, headers, raw, body)


def _encode(conn: h11.Connection, response: Response) -> bytes:
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *SECURITY_HEADERS,
        *response.headers,
    ]
    data = conn.send(h11.Response(status_code=response.status, headers=headers))
    return (
        (data or b"")
        + (conn.send(h11.Data(data=response.body)) or b"")
        + (conn.send(h11.EndOfMessage()) or b"")
    )


async def _upgrade(
    conn: h11.Connection,
    request: Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    websocket: SocketHandler,
) -> None:
    socket = ServerSocket(reader, writer)
    target = request.path + ("?" + request.query if request.query else "")
    socket.peer = WsPeer.server_upgraded(request.raw_headers, target)
    trailing, _ = conn.trailing_data
    events = socket.peer.feed(bytes(trailing))
    if not any(isinstance(event, WsRequest) for event in events):
        writer.write(socket.peer.take_outgoing())
        return
    writer.write(socket.peer.accept())
    socket.pending = [e for e in events if not isinstance(e, WsRequest)]
    try:
        await websocket(request, socket)
    finally:
        writer.close()


__all__ = ["Request", "Response", "ServerSocket", "Waiting", "drain", "serve_connection"]
