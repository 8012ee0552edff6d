"""The method registry: handlers keyed by full method name, and how they fail.

A handler is ``handler(context, params) -> result``; the server decides what the context
is (:class:`tether.daemon.rpc.server.CallContext`), so this module never imports it. A plain
function runs inline on the event loop and must not block; an ``async def`` runs as its
own task (it may wait, and it is cancelled on shutdown). Raise :class:`RpcFailure` to
answer a specific error code; :func:`decode_params` turns bad params into
``invalid_params``. Any other exception is answered ``internal``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from tether.daemon.rpc.protocol import ErrorCode, Namespace
from tether.errors import DaemonError

T = TypeVar("T")
C = TypeVar("C")  # what a handler is given about its call
SyncHandler = Callable[[C, Any], Any]
AsyncHandler = Callable[[C, Any], Awaitable[Any]]
Handler = SyncHandler[C] | AsyncHandler[C]


class RpcFailure(DaemonError):
    """Raised by a handler to answer with a specific error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid_status(message: str) -> RpcFailure:
    """The failure for a call the agent's current status does not allow."""
    return RpcFailure(ErrorCode.INVALID_STATUS, message)


def decode_params(params: Any, kind: type[T]) -> T:
    """Convert ``params`` to ``kind`` (a msgspec Struct) or raise ``invalid_params``."""
    try:
        return msgspec.convert({} if params is None else params, kind)
    except msgspec.ValidationError as exc:
        raise RpcFailure(ErrorCode.INVALID_PARAMS, f"invalid params: {exc}") from None


@dataclass(frozen=True, slots=True)
class _Entry(Generic[C]):
    handler: Handler[C]
    is_async: bool


class MethodRegistry(Generic[C]):
    """Handlers keyed by full method name (``agent.spawn``, ``channel.push_to_channel``)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry[C]] = {}
        self._sorted: list[str] = []
        # ``get(method)``: the entry, or None (the dict's own get: no Python frame a call)
        self.get: Callable[[str], _Entry[C] | None] = self._entries.get

    def register(self, method: str, handler: Handler[C], *, extension: bool = False) -> None:
        """Add ``handler`` for ``method``. Methods outside the spec's namespaces need
        ``extension=True``; registering a method twice is a bug and raises."""
        if method in self._entries:
            raise ValueError(f"method {method!r} is already registered")
        if not extension and Namespace.of(method) is Namespace.UNKNOWN:
            raise ValueError(f"method {method!r} is not in a known namespace")
        is_async = inspect.iscoroutinefunction(handler)
        self._entries[method] = _Entry(handler, is_async)
        self._sorted = sorted(self._entries)

    def methods(self) -> list[str]:
        return list(self._sorted)
