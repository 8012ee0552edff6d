"""One client connection of the daemon's socket: frames in, requests routed, answers out.

Theory of operation: a :class:`Connection` is an asyncio ``Protocol`` that feeds bytes to
a sans-IO :class:`~tether.daemon.rpc.protocol.FrameDecoder`. Every whole frame is either a
request from the client (handed to its :class:`Host`, the server, which answers it at once
or with an awaitable run here as a task) or a response to a request the daemon sent
(``channel.deliver``, matched by id). Whole frames are written with one
``transport.write`` each, so answers never interleave.

Bounds it keeps on its own: a frame not completed within ``frame_timeout_s`` of its first
byte is answered ``malformed_frame`` and the connection closed; a client whose answers pile
up unread stops being read, and is cut off after ``frame_timeout_s`` of reading nothing; a
connection from another user is aborted before a byte is read. A refused connection (over
the server's cap) is answered ``busy`` with id 0 and lingers ``REFUSED_LINGER_S`` for its
client's EOF, so the client can read why.

Upgrades: an inline handler may call :meth:`Connection.upgrade` (``agent.drive`` does).
Once its answer is written, the connection stops speaking frames and every later byte
(including any the client sent right behind the request) goes to the
:class:`UpgradedProtocol` the factory returns, e.g. a WebSocket.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from tether import peercred
from tether.daemon.rpc.answers import failure
from tether.daemon.rpc.config import ServerConfig
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import (
    ErrorCode,
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    decode_message,
    encode_call,
    recover_id,
)
from tether.errors import DaemonError
from tether.wire.needdata import NEED_DATA

__all__ = ["REFUSED_LINGER_S", "Connection", "ConnectionClosed", "Host", "UpgradedProtocol"]

log = logging.getLogger("tether.daemon")

REFUSED_LINGER_S = 1.0  # a refused connection waits this long for its client's EOF


class ConnectionClosed(DaemonError):
    """The peer went away before answering a request the daemon sent it."""


class UpgradedProtocol(Protocol):
    """What a connection becomes after :meth:`Connection.upgrade`."""

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class Host(Protocol):
    """What a connection needs of its server (:class:`~tether.daemon.rpc.server.Daemon`)."""

    @property
    def config(self) -> ServerConfig: ...

    def route(self, request: Request, connection: Connection | None) -> bytes | Awaitable[bytes]:
        """The answer frame to ``request``, or the awaitable making it."""
        ...

    def admit(self, connection: Connection) -> bool:
        """Take ``connection`` in (False: over the cap; it is refused)."""
        ...

    def forget(self, connection: Connection) -> None: ...

    def call_started(self) -> None: ...

    def call_ended(self) -> None: ...

    def start_refusing(self) -> bool:
        """Count one more refused connection lingering for its client's EOF (False: too
        many linger already; close it at once)."""
        ...

    def stop_refusing(self) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: decode frames, dispatch requests, match responses."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.peer_pid: int | None = None
        self._decoder = FrameDecoder(host.config.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._next_id = 1
        self._closing = False
        self._half_closed = False
        self._frame_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None  # a refused connection's (_refuse)
        self._refused = False
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._hangup_callbacks: list[Callable[[Connection], None]] = []
        self._upgrade: Callable[[asyncio.Transport], UpgradedProtocol] | None = None
        self._upgraded: UpgradedProtocol | None = None
        self._paused = False  # our answers wait unread: no more frames are taken up
        self._stalled: asyncio.TimerHandle | None = None  # ends a client that never reads

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        self._transport = transport = cast(asyncio.Transport, transport)
        if not self._peer_allowed(transport):
            self._closing = True
            transport.abort()
            return
        if not self.host.admit(self):
            self._refuse(ErrorCode.BUSY, "too many connections; retry later")

    def data_received(self, data: bytes) -> None:
        if self._upgraded is not None:
            self._upgraded.data_received(data)
            return
        if self._closing:
            return
        decoder = self._decoder
        single = decoder.single(data)
        if single is not None:  # one whole frame in one read: the common case
            self._on_frame(single)
            if self._upgrade is not None and not self._closing:
                self._switch(self._upgrade)
            elif self._frame_timer is not None:
                self._arm_frame_timer(restart=True)
            return
        decoder.feed(data)
        self._take_frames()

    def _take_frames(self) -> None:
        """Answer the whole frames buffered, until our answers pile up unread (see
        :meth:`pause_writing`): then the rest waits in the decoder, reading paused."""
        decoder = self._decoder
        completed = False
        while not self._closing and not self._paused:
            frame = decoder.next_frame()
            if frame is NEED_DATA:
                break
            if isinstance(frame, ProtocolError):
                self._fail_and_close(0, ErrorCode.MALFORMED_FRAME, frame.message)
                return
            completed = True
            self._on_frame(frame)
            if self._upgrade is not None and not self._closing:
                self._switch(self._upgrade)
                return
        if self._paused:
            return  # (the write deadline runs instead of the frame timer)
        if decoder.buffered or self._frame_timer is not None:
            self._arm_frame_timer(restart=completed)

    def eof_received(self) -> bool | None:
        """The client half-closed: answer what is in flight, then close."""
        if self._upgraded is not None:
            return self._upgraded.eof_received()
        error = self._decoder.eof()
        if error is not None:
            log.info("connection closed mid-frame: %s", error.message)
            return None
        self._half_closed = True
        for future in self._pending.values():  # it can no longer answer our requests
            if not future.done():
                future.set_exception(ConnectionClosed("the client closed its side"))
        self._hang_up()
        return True if self._tasks else None

    def _hang_up(self) -> None:
        """The client can answer no more of our requests: what waits on it must stop."""
        callbacks, self._hangup_callbacks = self._hangup_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("connection hang-up callback failed")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._frame_timer is not None:
            self._frame_timer.cancel()
        if self._stalled is not None:
            self._stalled.cancel()
        if self._linger is not None:
            self._linger.cancel()
        if self._refused:
            self.host.stop_refusing()
        for task in self._tasks:
            task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed("connection closed"))
        self._pending.clear()
        self._hang_up()
        for callback in self._close_callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("connection close callback failed")
        self._close_callbacks.clear()
        if self._upgraded is not None:
            self._upgraded.connection_lost(exc)
        self.host.forget(self)

    def pause_writing(self) -> None:
        """Our answers wait unread past the transport's high-water mark: take up no more
        frames (a client that pipelines requests and never reads held every answer of a
        whole read in memory: ~80 MB per client for 4,000 ``agent.list`` calls of 30
        agents) and read no more; a client that still reads nothing after
        ``frame_timeout_s`` is cut off, freeing its slot and its answers."""
        if self._transport is None or self._closing:
            return
        self._transport.pause_reading()
        if self._upgraded is not None:
            return  # (what it became bounds its own writes)
        self._paused = True
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        loop = asyncio.get_running_loop()
        self._stalled = loop.call_later(self.host.config.frame_timeout_s, self._stall)

    def resume_writing(self) -> None:
        self._paused = False
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        if self._transport is None or self._closing:
            return
        self._transport.resume_reading()
        if self._upgraded is None:
            self._take_frames()

    def _stall(self) -> None:
        self._stalled = None
        timeout = self.host.config.frame_timeout_s
        log.info("closing a connection that read none of its answers in %gs", timeout)
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    # -- public API for handlers -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    @property
    def calls(self) -> tuple[asyncio.Task[None], ...]:
        """The calls being answered (the server cuts them at shutdown)."""
        return tuple(self._tasks)

    def add_close_callback(self, callback: Callable[[Connection], None]) -> None:
        """Run ``callback(connection)`` once when the connection goes away."""
        if self._closing:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    def add_hangup_callback(self, callback: Callable[[Connection], None]) -> None:
        """Run ``callback(connection)`` once when the client can answer no more of our
        requests: it half-closed (EOF) or the connection went away. A handler that waits
        on the client (a stream it must acknowledge) stops then, instead of holding the
        connection open for ever."""
        if self._closing or self._half_closed:
            callback(self)
        else:
            self._hangup_callbacks.append(callback)

    async def call(self, method: str, params: Any) -> Response:
        """Send a request to the client and wait for its response (bound it with
        ``asyncio.timeout``). Raises :class:`ConnectionClosed` if the connection goes away
        first, or has (half-)closed already: the client could never answer.
        """
        if self._closing or self._half_closed or self._transport is None:
            raise ConnectionClosed("connection closed")
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._transport.write(encode_call(request_id, method, params))
            return await future
        finally:
            self._pending.pop(request_id, None)

    def upgrade(self, factory: Callable[[asyncio.Transport], UpgradedProtocol]) -> None:
        """From an inline handler: once its answer is written, hand this connection's
        bytes to ``factory(transport)``. Refused (``RpcFailure``) while other calls on the
        connection are in flight, since their answers could no longer be sent."""
        if self._tasks or self._pending:
            raise RpcFailure(
                ErrorCode.INVALID_STATUS,
                "this connection has calls in flight; upgrade a connection of its own",
            )
        self._upgrade = factory

    def _switch(self, factory: Callable[[asyncio.Transport], UpgradedProtocol]) -> None:
        assert self._transport is not None
        self._upgrade = None
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        rest = self._decoder.take_buffered()
        self._upgraded = upgraded = factory(self._transport)
        if rest:
            upgraded.data_received(rest)

    def close(self) -> None:
        """Flush what is written and close."""
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    # -- internals ---------------------------------------------------------------------------

    def _peer_allowed(self, transport: asyncio.Transport) -> bool:
        sock = transport.get_extra_info("socket")
        try:
            pid, uid, _gid = peercred.peer_cred(sock)
        except (OSError, AttributeError) as exc:
            log.warning("refusing a connection whose credentials cannot be read: %s", exc)
            return False
        if uid != os.geteuid():
            log.warning("refusing a connection from uid %d (pid %d)", uid, pid)
            return False
        self.peer_pid = pid
        return True

    def _arm_frame_timer(self, *, restart: bool) -> None:
        partial = self._decoder.buffered > 0 and not self._closing
        timer = self._frame_timer
        if timer is not None and (restart or not partial):
            timer.cancel()
            self._frame_timer = timer = None
        if partial and timer is None:
            loop = asyncio.get_running_loop()
            timeout = self.host.config.frame_timeout_s
            self._frame_timer = loop.call_later(timeout, self._frame_timed_out)

    def _frame_timed_out(self) -> None:
        self._frame_timer = None
        timeout = self.host.config.frame_timeout_s
        message = f"frame not completed within {timeout:g}s of its first byte"
        log.info("closing a stalled connection: %s", message)
        self._fail_and_close(0, ErrorCode.MALFORMED_FRAME, message)

    def _on_frame(self, body: bytes) -> None:
        message = decode_message(body)
        if type(message) is Request:  # the common case first
            step = self.host.route(message, self)
            if type(step) is bytes:
                self._write(step)
            else:
                self._start(cast(Awaitable[bytes], step))
        elif isinstance(message, ProtocolError):
            self._fail_and_close(recover_id(body), ErrorCode.MALFORMED_FRAME, message.message)
        else:
            response = cast(Response, message)  # (a Request subclass is never decoded)
            future = self._pending.get(response.id)
            if future is not None and not future.done():
                future.set_result(response)
            else:
                log.debug("dropping a response to unknown id %d", response.id)

    def _start(self, answer: Awaitable[bytes]) -> None:
        task = asyncio.ensure_future(self._run(answer))
        self._tasks.add(task)
        self.host.call_started()
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.host.call_ended()
        if self._half_closed and not self._tasks:
            self.close()

    async def _run(self, answer: Awaitable[bytes]) -> None:
        self._write(await answer)

    def _write(self, frame: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)

    def _write_error(self, request_id: int, code: ErrorCode, message: str) -> None:
        self._write(failure(request_id, code, message))

    def _refuse(self, code: ErrorCode, message: str) -> None:
        """Answer a connection that is not served (id 0) and close only our side at once:
        the client's first request, sent before the answer reached it, must not meet a
        closed socket (EPIPE: "connection lost", never the answer). What it sends is
        ignored; the connection closes at its EOF, or REFUSED_LINGER_S later."""
        transport = self._transport
        assert transport is not None
        self._write_error(0, code, message)
        self._closing = True
        if not transport.can_write_eof() or not self.host.start_refusing():
            transport.close()  # (a flood of refused clients holds no descriptors)
            return
        transport.write_eof()
        self._refused = True
        self._linger = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)

    def _fail_and_close(self, request_id: int, code: ErrorCode, message: str) -> None:
        self._write_error(request_id, code, message)
        self.close()
