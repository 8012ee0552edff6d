"""The daemon's asyncio server: one Unix socket, many multiplexed connections.

Theory of operation: each accepted connection is a :class:`Connection` (an asyncio
``Protocol``) that feeds bytes to a sans-IO :class:`~tether.daemon.rpc.protocol.FrameDecoder`.
Every whole frame is either a request from the client or a response to a request the
daemon sent (``channel.deliver``). Requests are routed through :class:`MethodRegistry`
by their full method name:

- a plain function handler runs inline and is answered at once (it must not block); one
  that returns a coroutine instead of a result (it found it must wait after all, e.g. for
  a read it could not answer from memory) goes on like an ``async def`` handler;
- an ``async def`` handler runs as its own task, so many requests are in flight on one
  connection and are answered by id in completion order. Whole frames are written with
  one ``transport.write`` each, so answers never interleave.

Failures map to error codes in one place (:meth:`Connection._answer`): an unknown method
or namespace is ``unknown_method``, :class:`RpcFailure` carries its own code, any other
exception is ``internal`` and the daemon stays up (a full disk, ``ENOSPC`` or SQLite's
"database or disk is full", is said as such, with what to do). A malformed frame is answered
``malformed_frame`` (with the frame's id when it can be read, else id 0) and the
connection is closed. A frame that is not completed within ``frame_timeout_s`` of its
first byte is answered the same way, so a stalled client only ever holds its own
connection. Caps on connections and in-flight requests answer ``busy`` (a connection over
the cap with id 0, closing our side first so the client can read it).

On shutdown, in-flight async handlers are cancelled and answered ``shutting_down``.

This module knows no handler: :mod:`tether.daemon.app`, the composition root, builds the
daemon and installs ``channel.*`` and ``agent.*`` on it (:meth:`Daemon.on_start`,
:meth:`Daemon.on_shutdown` and :meth:`Daemon.count_channels` are how parts hook in).

Upgrades: an inline handler may call :meth:`Connection.upgrade` (``agent.drive`` does).
Once its answer is written, the connection stops speaking frames and every later byte
(including any the client sent right behind the request) goes to the
:class:`UpgradedProtocol` the factory returns, e.g. a WebSocket.

One method outside the spec's namespaces is served: ``daemon.status`` (no params)
returns the daemon's pid, uptime and counters. The CLI and the benchmark use it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import CoroutineType
from typing import Any, Final, Protocol, cast

import msgspec

from tether import peercred
from tether.daemon.rpc.methods import AsyncHandler, MethodRegistry, RpcFailure, SyncHandler
from tether.daemon.rpc.protocol import (
    MAX_FRAME_BYTES,
    PREFIX_BYTES,
    ErrorCode,
    FrameDecoder,
    FrameTooLarge,
    Namespace,
    ProtocolError,
    Request,
    Response,
    decode_message,
    encode_call,
    encode_failure,
    encode_ok,
    recover_id,
)
from tether.daemon.rpc.status import ServerStatus
from tether.errors import DaemonError
from tether.wire.needdata import NEED_DATA

__all__ = ["CallContext", "Connection", "ConnectionClosed", "Daemon", "ServerConfig"]

log = logging.getLogger("tether.daemon")

REFUSED_LINGER_S = 1.0  # a refused connection waits this long for its client's EOF
MAX_REFUSING = 256  # refused connections waiting at once; more are closed at once


class ConnectionClosed(DaemonError):
    """The peer went away before answering a request the daemon sent it."""


class UpgradedProtocol(Protocol):
    """What a connection becomes after :meth:`Connection.upgrade`."""

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    socket_path: Path
    max_connections: int = 512
    max_in_flight_per_connection: int = 256
    max_in_flight: int = 4096
    frame_timeout_s: float = 30.0
    deliver_timeout_s: float = 10.0
    max_channels: int = 4096
    shutdown_grace_s: float = 5.0
    max_frame_bytes: int = MAX_FRAME_BYTES
    # Pending connections the kernel queues for us (a burst of clients); asyncio's own
    # default (100) is too few: an AF_UNIX connect then fails with EAGAIN.
    listen_backlog: int = 1024


class CallContext(msgspec.Struct, frozen=True):
    """What a handler knows about its call: the daemon, the connection, the request.

    ``connection`` is ``None`` for a call made inside the process (:meth:`Daemon.answer`,
    e.g. a host link relaying another host's request); a handler that needs one (to
    stream, to upgrade, to receive pushes) takes it with :meth:`socket`. (A Struct: built
    in C, one per call.)
    """

    daemon: Daemon
    connection: Connection | None
    request: Request

    @property
    def relayed(self) -> bool:
        """A call made inside the process (another host's, relayed by the host link):
        this daemon answers it alone (its own agents), never forwarding it again."""
        return self.connection is None

    def socket(self) -> Connection:
        """The caller's socket connection, or ``invalid_params`` when it has none."""
        if self.connection is None:
            method = self.request.method
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS,
                f"{method} needs a live socket connection (it streams or upgrades); "
                "it cannot be called from another host",
            )
        return self.connection


class Connection(asyncio.Protocol):
    """One client connection: decode frames, dispatch requests, match responses."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.peer_pid: int | None = None
        self._decoder = FrameDecoder(daemon.config.max_frame_bytes)
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
        if not self.daemon._admit(self):
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
            self.daemon._refusing -= 1
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
        self.daemon._forget(self)

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
        self._stalled = loop.call_later(self.daemon.config.frame_timeout_s, self._stall)

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
        timeout = self.daemon.config.frame_timeout_s
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
            timeout = self.daemon.config.frame_timeout_s
            self._frame_timer = loop.call_later(timeout, self._frame_timed_out)

    def _frame_timed_out(self) -> None:
        self._frame_timer = None
        timeout = self.daemon.config.frame_timeout_s
        message = f"frame not completed within {timeout:g}s of its first byte"
        log.info("closing a stalled connection: %s", message)
        self._fail_and_close(0, ErrorCode.MALFORMED_FRAME, message)

    def _on_frame(self, body: bytes) -> None:
        message = decode_message(body)
        if type(message) is Request:  # the common case first
            step = self.daemon.route(message, self)
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
        self.daemon._call_started()
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.daemon._call_ended()
        if self._half_closed and not self._tasks:
            self.close()

    async def _run(self, answer: Awaitable[bytes]) -> None:
        self._write(await answer)

    def _write(self, frame: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)

    def _write_error(self, request_id: int, code: ErrorCode, message: str) -> None:
        self._write(_failure(request_id, code, message))

    def _refuse(self, code: ErrorCode, message: str) -> None:
        """Answer a connection that is not served (id 0) and close only our side at once:
        the client's first request, sent before the answer reached it, must not meet a
        closed socket (EPIPE: "connection lost", never the answer). What it sends is
        ignored; the connection closes at its EOF, or REFUSED_LINGER_S later."""
        transport = self._transport
        assert transport is not None
        self._write_error(0, code, message)
        self._closing = True
        if not transport.can_write_eof() or self.daemon._refusing >= MAX_REFUSING:
            transport.close()  # (a flood of refused clients holds no descriptors)
            return
        transport.write_eof()
        self.daemon._refusing += 1
        self._refused = True
        self._linger = asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)

    def _fail_and_close(self, request_id: int, code: ErrorCode, message: str) -> None:
        self._write_error(request_id, code, message)
        self.close()


def _call_inline(
    handler: SyncHandler[CallContext], context: CallContext
) -> bytes | Coroutine[Any, Any, Any]:
    """Run an inline handler; its answer frame (errors mapped to codes here, once), or the
    coroutine it returned to finish in a task."""
    request = context.request
    try:
        result = handler(context, request.params)
    except RpcFailure as exc:
        return _failure(request.id, exc.code, exc.message)
    except Exception as exc:
        log.exception("handler for %s failed", request.method)
        return _failure(request.id, ErrorCode.INTERNAL, _internal(exc))
    if type(result) is CoroutineType:
        return result
    return _ok(request.id, result)


async def _call_async(awaitable: Awaitable[Any], context: CallContext) -> bytes:
    """Await an async handler's call; its answer frame (cut by shutdown: ``shutting_down``)."""
    request = context.request
    try:
        result = await awaitable
    except asyncio.CancelledError:
        connection = context.connection
        if not context.daemon.stopping or (connection is not None and connection.closed):
            raise
        message = "the daemon shut down before this call finished; retry"
        return _failure(request.id, ErrorCode.SHUTTING_DOWN, message)
    except RpcFailure as exc:
        return _failure(request.id, exc.code, exc.message)
    except Exception as exc:
        log.exception("handler for %s failed", request.method)
        return _failure(request.id, ErrorCode.INTERNAL, _internal(exc))
    return _ok(request.id, result)


def _ok(request_id: int, result: Any) -> bytes:
    try:
        return encode_ok(request_id, result)
    except (FrameTooLarge, msgspec.EncodeError, TypeError) as exc:
        log.error("cannot encode the answer to request %d: %s", request_id, exc)
        return encode_failure(request_id, ErrorCode.INTERNAL, f"unencodable result: {exc}")


def _failure(request_id: int, code: ErrorCode, message: str) -> bytes:
    return encode_failure(request_id, code, _clip(message))


def _clip(message: str, limit: int = 4096) -> str:
    """Error messages quote user input; keep them far below the frame limit."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _unknown(request: Request) -> str:
    namespace = Namespace.of(request.method)
    if namespace is Namespace.UNKNOWN:
        prefix = request.method.partition(".")[0] if "." in request.method else request.method
        return f"unknown namespace {prefix!r} in method {request.method!r}"
    return f"no handler for method {request.method!r}"


_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _internal(exc: BaseException) -> str:
    if _disk_full(exc):
        return (
            f"the daemon's disk is full ({exc}); free space where its state lives "
            "(TETHER_HOME) and retry"
        )
    return f"internal error: {type(exc).__name__}: {exc}"


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in _DISK_FULL
    return type(exc).__module__ == "sqlite3" and "disk is full" in str(exc)  # SQLITE_FULL


def _no_channels() -> int:
    return 0


class Daemon:
    """The server's shared state: config, method registry, connections and counters."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.methods: MethodRegistry[CallContext] = MethodRegistry()
        self.started_at = time.time()
        self._pid = os.getpid()
        self._socket = str(config.socket_path)
        self.stopping = False
        self._count_channels: Callable[[], int] = _no_channels
        self._connections: set[Connection] = set()
        self._refusing = 0  # refused connections waiting for their client's EOF
        self._in_flight = 0
        self._quiet = asyncio.Event()  # set while no async call is in flight
        self._quiet.set()
        self._detached: set[asyncio.Task[bytes]] = set()  # async calls made in-process
        self._server: asyncio.AbstractServer | None = None
        self._stopped: asyncio.Event | None = None
        self._shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._start_hooks: list[Callable[[], Awaitable[None]]] = []
        self.methods.register("daemon.status", self._status, extension=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def on_start(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook()`` on the daemon's loop before it accepts connections.

        Clients that connect meanwhile wait in the listen queue. A failing hook is logged
        and the daemon serves anyway (it must stay reachable to be repaired).
        """
        self._start_hooks.append(hook)

    def count_channels(self, read: Callable[[], int]) -> None:
        """Report ``read()`` as ``channels`` in :meth:`statistics` (``daemon.status``)."""
        self._count_channels = read

    def on_shutdown(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook()`` during shutdown, after in-flight calls are cut."""
        self._shutdown_hooks.append(hook)

    async def serve(self, sock: socket.socket) -> None:
        """Serve on the bound, listening ``sock`` until :meth:`request_stop`."""
        loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        for hook in self._start_hooks:
            try:
                await hook()
            except Exception:
                log.exception("a start-up hook failed; serving anyway")
        # asyncio listens again with its own backlog (default 100, too few for a burst of
        # clients: an AF_UNIX connect then fails with EAGAIN, which asyncio mistakes for
        # "in progress" and the client sees ENOTCONN on its first write).
        self._server = await loop.create_unix_server(
            lambda: Connection(self), sock=sock, backlog=self.config.listen_backlog
        )
        try:
            await self._stopped.wait()
        finally:
            await self._shutdown()

    def request_stop(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    async def _shutdown(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        tasks: list[asyncio.Task[Any]] = [*self._detached]
        tasks += [task for conn in self._connections for task in conn._tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.config.shutdown_grace_s)
        for hook in self._shutdown_hooks:
            try:
                await asyncio.wait_for(hook(), self.config.shutdown_grace_s)
            except Exception:
                log.exception("shutdown hook failed")
        for conn in list(self._connections):
            conn.close()
        await asyncio.sleep(0)

    # -- dispatch: one path for every caller -------------------------------------------------

    def route(self, request: Request, connection: Connection | None) -> bytes | Awaitable[bytes]:
        """The answer frame to ``request``, or (an async handler) the awaitable making it,
        which the caller runs as a task counted in flight. Unknown methods, shutdown and
        the in-flight caps are answered here, handler failures by ``_call_*``."""
        entry = self.methods.get(request.method)
        if entry is None:
            return _failure(request.id, ErrorCode.UNKNOWN_METHOD, _unknown(request))
        if self.stopping:
            message = "the daemon is shutting down; retry shortly"
            return _failure(request.id, ErrorCode.SHUTTING_DOWN, message)
        context = CallContext(self, connection, request)
        if entry.is_async:
            handler: AsyncHandler[CallContext] = entry.handler
            awaitable: Awaitable[Any] = handler(context, request.params)
        else:
            inline: SyncHandler[CallContext] = entry.handler
            step = _call_inline(inline, context)
            if isinstance(step, bytes):
                return step
            awaitable = step  # it must wait after all
        busy = self._over_in_flight(connection)
        if busy is not None:
            if isinstance(awaitable, Coroutine):
                awaitable.close()
            return _failure(request.id, ErrorCode.BUSY, busy)
        return _call_async(awaitable, context)

    async def answer(self, request: Request) -> bytes:
        """Answer ``request`` from inside the process (a host link relaying another host's
        call): the same registry, validation, caps and error codes as a socket connection,
        without one (a verb that needs it answers ``invalid_params``). Returns the response
        body (the frame without its length prefix)."""
        step = self.route(request, None)
        if not isinstance(step, bytes):
            task = asyncio.ensure_future(step)
            self._detached.add(task)
            self._call_started()
            try:
                step = await task
            finally:
                self._detached.discard(task)
                self._call_ended()
        return step[PREFIX_BYTES:]

    # -- accounting --------------------------------------------------------------------------

    def _admit(self, conn: Connection) -> bool:
        if len(self._connections) >= self.config.max_connections:
            return False
        self._connections.add(conn)
        return True

    def _forget(self, conn: Connection) -> None:
        self._connections.discard(conn)

    def _call_started(self) -> None:
        self._in_flight += 1
        self._quiet.clear()

    def _call_ended(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._quiet.set()

    async def quiet(self, limit_s: float) -> bool:
        """Until no async call is in flight (True) or ``limit_s`` seconds passed (False):
        background work (a host link's forwarding) waits here so that it does not compete
        with a call waiting on a child (a steer waiting for its ack)."""
        if self._quiet.is_set():
            return True
        try:
            await asyncio.wait_for(self._quiet.wait(), limit_s)
        except TimeoutError:
            return False
        return True

    def _over_in_flight(self, conn: Connection | None) -> str | None:
        if conn is not None and conn.in_flight >= self.config.max_in_flight_per_connection:
            cap = self.config.max_in_flight_per_connection
            return f"too many calls in flight on this connection (cap {cap}); retry"
        if self._in_flight >= self.config.max_in_flight:
            return f"too many calls in flight (cap {self.config.max_in_flight}); retry"
        return None

    def statistics(self) -> ServerStatus:
        return ServerStatus(
            pid=self._pid,
            socket=self._socket,
            started_at=self.started_at,
            uptime_s=round(time.time() - self.started_at, 3),
            connections=len(self._connections),
            in_flight=self._in_flight,
            channels=self._count_channels(),
            methods=self.methods.methods(),
        )

    def _status(self, context: CallContext, params: Any) -> ServerStatus:
        return self.statistics()
