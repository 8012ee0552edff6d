"""Answer frames: a result or an error code, encoded once; an exception said as the
error a client can act on (a full disk named as such). Pure functions over
:mod:`tether.daemon.rpc.protocol`."""

from __future__ import annotations

import errno
import logging
from typing import Any, Final

import msgspec

from tether.daemon.rpc.protocol import (
    ErrorCode,
    FrameTooLarge,
    Namespace,
    Request,
    encode_failure,
    encode_ok,
)

__all__ = ["failure", "internal", "ok", "unknown"]

log = logging.getLogger("tether.daemon")


def ok(request_id: int, result: Any) -> bytes:
    try:
        return encode_ok(request_id, result)
    except (FrameTooLarge, msgspec.EncodeError, TypeError) as exc:
        log.error("cannot encode the answer to request %d: %s", request_id, exc)
        return encode_failure(request_id, ErrorCode.INTERNAL, f"unencodable result: {exc}")


def failure(request_id: int, code: ErrorCode, message: str) -> bytes:
    return encode_failure(request_id, code, _clip(message))


def _clip(message: str, limit: int = 4096) -> str:
    """Error messages quote user input; keep them far below the frame limit."""
    return message if len(message) <= limit else message[: limit - 3] + "..."


def unknown(request: Request) -> str:
    namespace = Namespace.of(request.method)
    if namespace is Namespace.UNKNOWN:
        prefix = request.method.partition(".")[0] if "." in request.method else request.method
        return f"unknown namespace {prefix!r} in method {request.method!r}"
    return f"no handler for method {request.method!r}"


_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def internal(exc: BaseException) -> str:
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
