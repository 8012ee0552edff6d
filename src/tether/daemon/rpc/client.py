"""The blocking client for the daemon socket (the CLI); :mod:`tether.daemon.rpc.aclient` is the
asyncio one. It imports no asyncio, so the CLI starts fast.

Both speak the same protocol as the server, including the reverse direction: the daemon
may send the client a request (``channel.deliver``) on the same connection, which the
client answers through its ``on_request`` callback (unset: ``unknown_method``).

Errors, as a tree::

    DaemonClientError         base for everything below
    +-- DaemonUnavailable     no daemon answers on the socket (message carries a hint)
    +-- UntrustedDaemon       what answers runs as another user: nothing was sent to it
    +-- DaemonCallError       the daemon answered an error: .code (ErrorCode), .exit_code
    +-- DaemonConnectionLost  the connection closed or sent an unreadable frame
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

import msgspec

from tether import exits, paths, peercred
from tether.daemon.rpc.protocol import (
    ErrorCode,
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    RpcError,
    decode_message,
    encode_call,
    encode_response,
)
from tether.errors import DaemonError
from tether.wire.needdata import NEED_DATA

R = TypeVar("R")

_RECV_BYTES: Final = 65536


class DaemonClientError(DaemonError):
    exit_code = exits.FAILED


class DaemonUnavailable(DaemonClientError):
    # not an ErrorCode: there was no answer; 3, as `tether daemon status` says "not running"
    exit_code = exits.CANCELLED


class UntrustedDaemon(DaemonClientError):
    """The socket's server runs as another uid (``SO_PEERCRED``); no request was sent."""

    exit_code = exits.USAGE


def check_server(sock: socket.socket, path: Path) -> None:
    """Refuse a server of another uid before anything is sent (it may be an impostor)."""
    try:
        cred = peercred.peer_cred(sock)
    except OSError as exc:
        raise UntrustedDaemon(
            f"cannot tell who serves {path} ({exc.strerror}); not talking to it"
        ) from None
    if cred.uid != os.geteuid():
        raise UntrustedDaemon(
            f"the process serving {path} (pid {cred.pid}) runs as uid {cred.uid}, not as you "
            f"(uid {os.geteuid()}): refusing to send it anything; check who owns "
            f"{path.parent} and point TETHER_SOCKET or XDG_RUNTIME_DIR at a private directory"
        )


class DaemonConnectionLost(DaemonClientError):
    exit_code = ErrorCode.SHUTTING_DOWN.exit_code


class DaemonCallError(DaemonClientError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return self.code.exit_code


def unavailable_hint(path: Path, detail: str) -> DaemonUnavailable:
    return DaemonUnavailable(
        f"the tether daemon is not running at {path} ({detail}); "
        "start it with 'tether daemon start' (or 'tether daemon --foreground')"
    )


def result_of(response: Response) -> Any:
    """The response's result, or raise :class:`DaemonCallError` for its error."""
    if isinstance(response.error, RpcError):
        raise DaemonCallError(response.error.code, response.error.message)
    return response.result


def connection_refusal(response: Response) -> DaemonCallError | None:
    """The error of a response with id 0: the daemon's answer to the connection as a
    whole (``busy``: too many connections; ``malformed_frame``), sent before it closes it.
    Clients number their calls from 1, so it answers every call in flight."""
    if response.id == 0 and isinstance(response.error, RpcError):
        return DaemonCallError(response.error.code, response.error.message)
    return None


def answer_frame(request: Request, outcome: Any) -> bytes:
    if isinstance(outcome, DaemonCallError):
        return encode_response(Response.fail(request.id, outcome.code, outcome.message))
    return encode_response(Response.ok(request.id, outcome))


class DaemonClient:
    """A blocking connection to the daemon; ``call`` one request at a time."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self._sock = sock
        self.path = path
        self._decoder = FrameDecoder()
        self._next_id = 1
        self.on_request: Callable[[Request], Any] | None = None

    @classmethod
    def connect(cls, path: Path | None = None, *, timeout: float | None = 5.0) -> DaemonClient:
        path = paths.socket_path() if path is None else path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except FileNotFoundError:
            sock.close()
            raise unavailable_hint(path, "no socket") from None
        except (TimeoutError, ConnectionRefusedError) as exc:
            sock.close()
            raise unavailable_hint(path, type(exc).__name__) from None
        except OSError as exc:
            sock.close()
            raise unavailable_hint(path, exc.strerror or str(exc)) from None
        try:
            check_server(sock, path)
        except UntrustedDaemon:
            sock.close()
            raise
        return cls(sock, path)

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def take_socket(self) -> tuple[socket.socket, bytes]:
        """The socket and any bytes read past the last frame, for a connection that stops
        speaking frames (``agent.drive``); this client must not be used afterwards."""
        return self._sock, self._decoder.take_buffered()

    def call(self, method: str, params: Any = None) -> Any:
        """Send one request and return its result, raising :class:`DaemonCallError`."""
        request_id = self._next_id
        self._next_id += 1
        self._sock.sendall(encode_call(request_id, method, params))
        while True:
            message = self.receive()
            if isinstance(message, Response):
                if message.id == request_id:
                    return result_of(message)
                refusal = connection_refusal(message)
                if refusal is not None:
                    raise refusal
                continue
            self._serve_one(message)

    def call_as(self, method: str, params: Any, reply: type[R]) -> R:
        """:meth:`call`, its result decoded into ``reply``: the verb's reply Struct (see
        :mod:`tether.daemon.fleet.replies`); ``msgspec.ValidationError`` when it does not fit."""
        return msgspec.convert(self.call(method, params), reply)

    def receive(self) -> Request | Response:
        """The next message from the daemon (blocking)."""
        while True:
            frame = self._decoder.next_frame()
            if isinstance(frame, bytes):
                message = decode_message(frame)
                if isinstance(message, ProtocolError):
                    raise DaemonConnectionLost(f"unreadable frame from daemon: {message.message}")
                return message
            if isinstance(frame, ProtocolError):
                raise DaemonConnectionLost(f"unreadable frame from daemon: {frame.message}")
            assert frame is NEED_DATA
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                raise DaemonConnectionLost("the daemon closed the connection")
            self._decoder.feed(data)

    def serve_forever(self) -> None:
        """Answer the daemon's requests with ``on_request`` until the connection closes."""
        while True:
            message = self.receive()
            if isinstance(message, Request):
                self._serve_one(message)

    def _serve_one(self, request: Request) -> None:
        handler = self.on_request
        outcome: Any
        if handler is None:
            outcome = DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"client has no {request.method}")
        else:
            try:
                outcome = handler(request)
            except DaemonCallError as exc:
                outcome = exc
        self._sock.sendall(answer_frame(request, outcome))
