"""The asyncio client for the daemon socket: many calls in flight, answered by id.

Requests the daemon sends back (``channel.deliver``) are answered through
``on_request``; unset, they are answered ``unknown_method``. Errors are those of
:mod:`tether.daemon.rpc.client`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import msgspec

from tether import paths
from tether.daemon.rpc.client import (
    DaemonCallError,
    DaemonConnectionLost,
    answer_frame,
    check_server,
    connection_refusal,
    result_of,
    unavailable_hint,
)
from tether.daemon.rpc.protocol import (
    ErrorCode,
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    decode_message,
    encode_call,
)
from tether.wire.needdata import NEED_DATA

R = TypeVar("R")


class AsyncDaemonClient(asyncio.Protocol):
    """Open with :meth:`open`; ``call`` may be awaited concurrently."""

    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_id = 1
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_request: Callable[[Request], Awaitable[Any]] | None = None
        self._refusal: DaemonCallError | None = None  # see connection_refusal

    @classmethod
    async def open(cls, path: Path | None = None) -> AsyncDaemonClient:
        path = paths.socket_path() if path is None else path
        loop = asyncio.get_running_loop()
        try:
            sock = await _connected(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise unavailable_hint(path, type(exc).__name__) from None
        try:
            check_server(sock, path)  # before a single byte is sent
        except BaseException:
            sock.close()
            raise
        _, client = await loop.create_unix_connection(cls, sock=sock)
        return client

    async def call(self, method: str, params: Any = None) -> Any:
        return result_of(await self.call_response(method, params))

    async def call_as(self, method: str, params: Any, reply: type[R]) -> R:
        """:meth:`call`, its result decoded into ``reply``: the verb's reply Struct (see
        :mod:`tether.daemon.fleet.replies`); ``msgspec.ValidationError`` when it does not fit."""
        return msgspec.convert(await self.call(method, params), reply)

    async def call_response(self, method: str, params: Any = None) -> Response:
        transport = self._transport
        if self._refusal is not None:
            raise self._refusal
        if transport is None or transport.is_closing():
            raise DaemonConnectionLost("the connection is closed")
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            transport.write(encode_call(request_id, method, params))
            return await future
        finally:
            self._pending.pop(request_id, None)

    @property
    def closed(self) -> bool:
        return self._closed.done()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        await asyncio.shield(self._closed)

    async def __aenter__(self) -> AsyncDaemonClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self._transport = transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while True:
            frame = self._decoder.next_frame()
            if frame is NEED_DATA:
                return
            if isinstance(frame, ProtocolError):
                self._abort(f"unreadable frame from daemon: {frame.message}")
                return
            message = decode_message(frame)
            if isinstance(message, ProtocolError):
                self._abort(f"unreadable frame from daemon: {message.message}")
                return
            if isinstance(message, Request):
                task = asyncio.ensure_future(self._answer(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                continue
            future = self._pending.get(message.id)
            if future is not None and not future.done():
                future.set_result(message)
            elif (refusal := connection_refusal(message)) is not None:
                self._refusal = refusal  # the daemon closes next: every call gets it
                for future in self._pending.values():
                    if not future.done():
                        future.set_exception(refusal)

    def connection_lost(self, exc: Exception | None) -> None:
        error = self._refusal or DaemonConnectionLost(
            "the daemon closed the connection" if exc is None else f"connection lost: {exc}"
        )
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        if not self._closed.done():
            self._closed.set_result(None)

    # -- internals -----------------------------------------------------------------------------

    def _abort(self, reason: str) -> None:
        error = DaemonConnectionLost(reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)
        if self._transport is not None:
            self._transport.close()

    async def _answer(self, request: Request) -> None:
        handler = self.on_request
        outcome: Any
        if handler is None:
            outcome = DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"client has no {request.method}")
        else:
            try:
                outcome = await handler(request)
            except DaemonCallError as exc:
                outcome = exc
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(answer_frame(request, outcome))


async def _connected(path: Path) -> socket.socket:
    """A Unix socket connected to ``path`` (without blocking the loop)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, str(path))
    except BaseException:
        sock.close()
        raise
    return sock
