"""WebSocket messages over any byte stream, sans-IO (the one place wsproto is used).

Theory of operation: :class:`WsPeer` wraps a ``wsproto.WSConnection``. The caller feeds it
the bytes it read (:meth:`WsPeer.feed`) and gets whole events back; every byte the peer
must send (handshake answers, pongs, close replies, messages) is returned by the call that
produced it or collected for :meth:`WsPeer.take_outgoing`. It owns no socket and no clock,
so the daemon's ``agent.drive`` upgrade (a Unix socket), the dashboard's browser sockets
(TCP) and the terminal client all use it the same way.

Events: :class:`WsRequest` (server: the opening handshake arrived; answer
:meth:`WsPeer.accept` or :meth:`WsPeer.reject`), :class:`WsOpen` (client: accepted),
:class:`WsBinary`, :class:`WsText` (text is collected to a whole message, at most
``max_text`` characters, else the connection is closed 1009), :class:`WsClosed` (the
peer closed, or broke the protocol; the reply is already queued). Binary messages are
handed out as their frames arrive, so a large one never sits in memory whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

MAX_TEXT: Final = 65536
CLOSE_NORMAL: Final = 1000
CLOSE_POLICY: Final = 1008
CLOSE_TOO_BIG: Final = 1009


@dataclass(frozen=True, slots=True)
class WsRequest:
    target: str
    host: str
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class WsOpen:
    pass


@dataclass(frozen=True, slots=True)
class WsBinary:
    data: bytes


@dataclass(frozen=True, slots=True)
class WsText:
    text: str


@dataclass(frozen=True, slots=True)
class WsClosed:
    code: int
    reason: str


WsEvent = WsRequest | WsOpen | WsBinary | WsText | WsClosed


class WsPeer:
    """One end of one WebSocket; see the module docstring."""

    def __init__(self, *, client: bool, max_text: int = MAX_TEXT) -> None:
        role = ConnectionType.CLIENT if client else ConnectionType.SERVER
        self._ws = WSConnection(role)
        self._max_text = max_text
        self._text: list[str] = []
        self._text_size = 0
        self._out = bytearray()
        self.closed = False

    @classmethod
    def server_upgraded(cls, headers: list[tuple[bytes, bytes]], target: str) -> WsPeer:
        """A server end for a request an HTTP layer already read (the next
        :meth:`feed` yields its :class:`WsRequest`)."""
        peer = cls(client=False)
        peer._ws.initiate_upgrade_connection(headers, target)
        return peer

    @property
    def open(self) -> bool:
        return self._ws.state is ConnectionState.OPEN and not self.closed

    # -- sending ----------------------------------------------------------------------

    def handshake(
        self, host: str, target: str, headers: list[tuple[str, str]] | None = None
    ) -> bytes:
        """Client: the opening handshake."""
        extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers or []]
        return self._send(Request(host=host, target=target, extra_headers=extra))

    def accept(self) -> bytes:
        return self._send(AcceptConnection())

    def reject(self, status: int, body: bytes = b"") -> bytes:
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
        data = self._send(RejectConnection(status_code=status, headers=headers, has_body=True))
        self.closed = True
        return data + self._send(RejectData(data=body))

    def send_binary(self, data: bytes) -> bytes:
        return self._send(BytesMessage(data=data)) if self.open else b""

    def send_text(self, text: str) -> bytes:
        return self._send(TextMessage(data=text)) if self.open else b""

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> bytes:
        if not self.open:
            self.closed = True
            return b""
        self.closed = True
        return self._send(CloseConnection(code=code, reason=reason))

    def take_outgoing(self) -> bytes:
        data, self._out = bytes(self._out), bytearray()
        return data

    def _send(self, event: object) -> bytes:
        try:
            return self._ws.send(event)  # type: ignore[arg-type]
        except LocalProtocolError:
            return b""

    # -- receiving --------------------------------------------------------------------

    def feed(self, data: bytes | None) -> list[WsEvent]:
        """Events for ``data`` (``None``: the stream ended). Replies go to the outgoing
        buffer."""
        out: list[WsEvent] = []
        try:
            self._ws.receive_data(data)
            for event in self._ws.events():
                self._on_event(event, out)
        except LocalProtocolError:  # fed after the end: nothing more to say
            return out
        except RemoteProtocolError as exc:
            if exc.event_hint is not None:
                self._out += self._send(exc.event_hint)
            self.closed = True
            out.append(WsClosed(CLOSE_POLICY, str(exc)))
        return out

    def _on_event(self, event: object, out: list[WsEvent]) -> None:
        if isinstance(event, Request):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in _headers(event)}
            out.append(WsRequest(event.target, event.host, headers))
        elif isinstance(event, AcceptConnection):
            out.append(WsOpen())
        elif isinstance(event, BytesMessage):
            if event.data:
                out.append(WsBinary(bytes(event.data)))
        elif isinstance(event, TextMessage):
            self._on_text(event, out)
        elif isinstance(event, Ping):
            self._out += self._send(event.response())
        elif isinstance(event, CloseConnection):
            if self._ws.state is ConnectionState.REMOTE_CLOSING:
                self._out += self._send(event.response())
            self.closed = True
            out.append(WsClosed(event.code, event.reason or ""))
        elif isinstance(event, RejectConnection):
            self.closed = True
            out.append(WsClosed(CLOSE_POLICY, f"handshake refused ({event.status_code})"))

    def _on_text(self, event: TextMessage, out: list[WsEvent]) -> None:
        if self.closed:
            return
        self._text.append(event.data)
        self._text_size += len(event.data)
        if self._text_size > self._max_text:
            self._text, self._text_size = [], 0
            self._out += self.close(CLOSE_TOO_BIG, f"text messages are at most {self._max_text}")
            out.append(WsClosed(CLOSE_TOO_BIG, "text message too large"))
            return
        if event.message_finished:
            text = "".join(self._text)
            self._text, self._text_size = [], 0
            out.append(WsText(text))


def _headers(event: Request) -> list[tuple[bytes, bytes]]:
    return [(bytes(key), bytes(value)) for key, value in event.extra_headers]


__all__ = [
    "CLOSE_NORMAL",
    "CLOSE_POLICY",
    "CLOSE_TOO_BIG",
    "WsBinary",
    "WsClosed",
    "WsEvent",
    "WsOpen",
    "WsPeer",
    "WsRequest",
    "WsText",
]
