"""The daemon's asyncio server: one Unix socket, many multiplexed connections.

Theory of operation: each accepted connection is a
:class:`~tether.daemon.rpc.connection.Connection`, which hands every whole request to
:meth:`Daemon.route`. Requests are routed through :class:`MethodRegistry` by their full
method name:

- a plain function handler runs inline and is answered at once (it must not block); one
  that returns a coroutine instead of a result (it found it must wait after all, e.g. for
  a read it could not answer from memory) goes on like an ``async def`` handler;
- an ``async def`` handler runs as its own task, so many requests are in flight on one
  connection and are answered by id in completion order.

Failures map to error codes in one place (:func:`_call_inline`, :func:`_call_async`,
:mod:`tether.daemon.rpc.answers`): an unknown method or namespace is ``unknown_method``,
:class:`RpcFailure` carries its own code, any other exception is ``internal`` and the
daemon stays up (a full disk, ``ENOSPC`` or SQLite's "database or disk is full", is said
as such, with what to do). Caps on connections and in-flight requests answer ``busy``.
On shutdown, in-flight async handlers are cancelled and answered ``shutting_down``.

This module knows no handler: :mod:`tether.daemon.app`, the composition root, builds the
daemon and installs ``channel.*`` and ``agent.*`` on it (:meth:`Daemon.on_start`,
:meth:`Daemon.on_shutdown` and :meth:`Daemon.count_channels` are how parts hook in).

One method outside the spec's namespaces is served: ``daemon.status`` (no params)
returns the daemon's pid, uptime and counters (:class:`ServerStatus`). The CLI and the
benchmark use it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, Final

import msgspec

from tether.daemon.rpc.answers import failure, internal, ok, unknown
from tether.daemon.rpc.config import ServerConfig
from tether.daemon.rpc.connection import Connection
from tether.daemon.rpc.methods import AsyncHandler, MethodRegistry, RpcFailure, SyncHandler
from tether.daemon.rpc.protocol import PREFIX_BYTES, ErrorCode, Request
from tether.daemon.rpc.status import ServerStatus

__all__ = ["CallContext", "Daemon"]

log = logging.getLogger("tether.daemon")

MAX_REFUSING: Final = 256  # refused connections waiting at once; more are closed at once


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


def _call_inline(
    handler: SyncHandler[CallContext], context: CallContext
) -> bytes | Coroutine[Any, Any, Any]:
    """Run an inline handler; its answer frame (errors mapped to codes here, once), or the
    coroutine it returned to finish in a task."""
    request = context.request
    try:
        result = handler(context, request.params)
    except RpcFailure as exc:
        return failure(request.id, exc.code, exc.message)
    except Exception as exc:
        log.exception("handler for %s failed", request.method)
        return failure(request.id, ErrorCode.INTERNAL, internal(exc))
    if type(result) is CoroutineType:
        return result
    return ok(request.id, result)


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
        return failure(request.id, ErrorCode.SHUTTING_DOWN, message)
    except RpcFailure as exc:
        return failure(request.id, exc.code, exc.message)
    except Exception as exc:
        log.exception("handler for %s failed", request.method)
        return failure(request.id, ErrorCode.INTERNAL, internal(exc))
    return ok(request.id, result)


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
        tasks += [task for conn in self._connections for task in conn.calls]
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
            return failure(request.id, ErrorCode.UNKNOWN_METHOD, unknown(request))
        if self.stopping:
            message = "the daemon is shutting down; retry shortly"
            return failure(request.id, ErrorCode.SHUTTING_DOWN, message)
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
            return failure(request.id, ErrorCode.BUSY, busy)
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
            self.call_started()
            try:
                step = await task
            finally:
                self._detached.discard(task)
                self.call_ended()
        return step[PREFIX_BYTES:]

    # -- accounting --------------------------------------------------------------------------

    def admit(self, conn: Connection) -> bool:
        if len(self._connections) >= self.config.max_connections:
            return False
        self._connections.add(conn)
        return True

    def forget(self, conn: Connection) -> None:
        self._connections.discard(conn)

    def start_refusing(self) -> bool:
        if self._refusing >= MAX_REFUSING:
            return False
        self._refusing += 1
        return True

    def stop_refusing(self) -> None:
        self._refusing -= 1

    def call_started(self) -> None:
        self._in_flight += 1
        self._quiet.clear()

    def call_ended(self) -> None:
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
