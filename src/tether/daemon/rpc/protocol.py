"""The daemon's socket protocol, sans-IO.

Theory of operation: a frame is a 4-byte little-endian u32 length followed by that
many bytes of UTF-8 JSON. :class:`FrameDecoder` is fed bytes as they arrive and hands
out one of three things per call: a frame body (``bytes``), a :class:`ProtocolError`
value, or :data:`NEED_DATA`. The length prefix is checked the moment its four bytes
are buffered, before any of the body is kept, so a hostile prefix such as
``0xFFFFFFFF`` never drives an allocation. After an error the decoder is dead: it
keeps returning the same error and drops further input.

Bodies decode into :class:`Request` (``{id, method, params}``) or the flat
:class:`Response` (``{id, result}`` or ``{id, error: {code, message}}``). The decode
functions are total: they return a value or a :class:`ProtocolError`, never raise.
Absent and ``null`` are told apart with ``msgspec.UNSET`` defaults, so
``{"id": 1, "result": null}`` is a valid success while ``{"id": 1}`` is rejected.

Errors, as a tree::

    ProtocolError        a value (not an exception): io | frame_too_large | json | unexpected_eof
    FrameTooLarge        ValueError raised by encode_* for a caller's oversized body (a bug)

This module must stay cheap to import: no asyncio, no sockets, no clock.
"""

from __future__ import annotations

import enum
import re
import struct
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from tether import exits, jsondepth
from tether.errors import DaemonError
from tether.wire.needdata import NEED_DATA, NeedData

__all__ = [
    "MAX_FRAME_BYTES",
    "NEED_DATA",
    "PREFIX_BYTES",
    "ErrorCode",
    "FrameDecoder",
    "FrameTooLarge",
    "Namespace",
    "NeedData",
    "ProtocolError",
    "ProtocolErrorKind",
    "Request",
    "Response",
    "RpcError",
    "decode_message",
    "decode_request",
    "decode_response",
    "encode_frame",
    "encode_request",
    "encode_response",
]

MAX_FRAME_BYTES: Final = 16_777_216
"""Largest frame body accepted or written; exactly 16 MiB is allowed."""

PREFIX_BYTES: Final = 4
MAX_ID: Final = 2**64 - 1
# The length prefix read at an offset (``_prefix(buffer, offset)[0]``) and written: cheaper
# than ``int.from_bytes`` of a slice and ``int.to_bytes`` (no slice, no argument parsing).
_prefix: Final = struct.Struct("<I").unpack_from
_pack_prefix: Final = struct.Struct("<I").pack

U64 = Annotated[int, msgspec.Meta(ge=0)]  # msgspec caps ints at u64 itself


class ErrorCode(enum.StrEnum):
    """Stable machine-readable error codes; the wire value is the snake_case string."""

    MALFORMED_FRAME = "malformed_frame"
    UNKNOWN_METHOD = "unknown_method"
    INVALID_PARAMS = "invalid_params"
    AGENT_NOT_FOUND = "agent_not_found"
    AGENT_EXISTS = "agent_exists"
    INVALID_STATUS = "invalid_status"
    CHANNEL_UNKNOWN = "channel_unknown"
    SPAWN_FAILED = "spawn_failed"
    LOCK_TIMEOUT = "lock_timeout"
    BUSY = "busy"
    INTERNAL = "internal"
    SHUTTING_DOWN = "shutting_down"

    @property
    def exit_code(self) -> int:
        """The CLI's exit status for this error (:mod:`tether.exits`); the code itself is
        printed, and in ``--json`` output it is the ``error.code`` key."""
        return _EXIT_CODES[self]


# The reference client (fno-agents) exits 13/14/15/18/19/1 for these (REFERENCE-FACTS §3):
# the spec leaves that mapping to each client, and tether's commands exit only with
# 0/2/3/4/5. What the numbers told a script, the error code (snake_case, on stderr and in
# --json) tells it exactly.
_EXIT_CODES: Final[dict[ErrorCode, int]] = {
    ErrorCode.MALFORMED_FRAME: exits.USAGE,
    ErrorCode.UNKNOWN_METHOD: exits.USAGE,
    ErrorCode.INVALID_PARAMS: exits.USAGE,
    ErrorCode.AGENT_NOT_FOUND: exits.USAGE,
    ErrorCode.AGENT_EXISTS: exits.USAGE,
    ErrorCode.INVALID_STATUS: exits.USAGE,
    ErrorCode.CHANNEL_UNKNOWN: exits.USAGE,
    ErrorCode.SPAWN_FAILED: exits.FAILED,
    ErrorCode.LOCK_TIMEOUT: exits.TIMED_OUT,
    ErrorCode.BUSY: exits.FAILED,
    ErrorCode.INTERNAL: exits.FAILED,
    ErrorCode.SHUTTING_DOWN: exits.CANCELLED,
}


class Namespace(enum.StrEnum):
    """A method's namespace: the part before the first dot."""

    AGENT = "agent"
    CHANNEL = "channel"
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, method: str) -> Namespace:
        """Classify ``method``; no dot or an unlisted prefix is ``UNKNOWN``."""
        prefix, dot, _ = method.partition(".")
        if not dot:
            return cls.UNKNOWN
        return _KNOWN_NAMESPACES.get(prefix, cls.UNKNOWN)


_KNOWN_NAMESPACES: Final = {"agent": Namespace.AGENT, "channel": Namespace.CHANNEL}


class ProtocolErrorKind(enum.StrEnum):
    IO = "io"
    FRAME_TOO_LARGE = "frame_too_large"
    JSON = "json"
    UNEXPECTED_EOF = "unexpected_eof"


class ProtocolError(msgspec.Struct, frozen=True, kw_only=True):
    """A wire or transport failure, returned as a value. Every kind maps to ``malformed_frame``
    except ``io`` and ``unexpected_eof``, which close the connection without an answer."""

    kind: ProtocolErrorKind
    message: str
    size: int | None = None

    @property
    def code(self) -> ErrorCode:
        return ErrorCode.MALFORMED_FRAME

    @classmethod
    def frame_too_large(cls, size: int) -> ProtocolError:
        message = f"frame exceeds max size: {size} > {MAX_FRAME_BYTES}"
        return cls(kind=ProtocolErrorKind.FRAME_TOO_LARGE, message=message, size=size)

    @classmethod
    def json(cls, detail: str) -> ProtocolError:
        return cls(kind=ProtocolErrorKind.JSON, message=f"malformed json frame: {detail}")

    @classmethod
    def unexpected_eof(cls) -> ProtocolError:
        message = "connection closed before a full frame was read"
        return cls(kind=ProtocolErrorKind.UNEXPECTED_EOF, message=message)

    @classmethod
    def io(cls, detail: str) -> ProtocolError:
        return cls(kind=ProtocolErrorKind.IO, message=f"i/o error: {detail}")


class FrameTooLarge(DaemonError, ValueError):
    """Raised by the encoders when a caller hands them a body over ``MAX_FRAME_BYTES``."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame exceeds max size: {size} > {MAX_FRAME_BYTES}")
        self.size = size


class FrameDecoder:
    """Incremental u32-LE length-prefixed frame reader.

    ``feed`` never raises and never keeps a byte of a body whose prefix is over the
    limit. Memory held is at most one frame (<= ``max_frame_bytes``) plus the last
    chunk fed.
    """

    __slots__ = ("_buf", "_error", "_max", "_pos")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max = max_frame_bytes
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet handed out as frames."""
        return len(self._buf) - self._pos

    @property
    def error(self) -> ProtocolError | None:
        return self._error

    def feed(self, data: bytes) -> None:
        if self._error is not None or not data:
            return
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        if len(self._buf) < PREFIX_BYTES:
            # Keep the prefix first and check it before buffering any of the body.
            take = PREFIX_BYTES - len(self._buf)
            self._buf += data[:take]
            data = data[take:]
            if len(self._buf) < PREFIX_BYTES:
                return
            size = _prefix(self._buf)[0]
            if size > self._max:
                self._fail(ProtocolError.frame_too_large(size))
                return
        self._buf += data

    def next_frame(self) -> bytes | ProtocolError | NeedData:
        if self._error is not None:
            return self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < PREFIX_BYTES:
            return NEED_DATA
        size = _prefix(buf, pos)[0]
        if size > self._max:
            return self._fail(ProtocolError.frame_too_large(size))
        end = pos + PREFIX_BYTES + size
        if len(buf) < end:
            return NEED_DATA
        frame = bytes(buf[pos + PREFIX_BYTES : end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        else:
            self._pos = end
        return frame

    def single(self, data: bytes) -> bytes | None:
        """The fast path for the common read: when nothing is buffered and ``data`` is
        exactly one whole frame within the limit, its body (nothing is kept); else
        ``None``, and nothing changed (``feed`` it as usual)."""
        if self._pos or self._buf or self._error is not None:
            return None
        size = len(data) - PREFIX_BYTES
        if size < 0 or size > self._max or _prefix(data)[0] != size:
            return None
        return data[PREFIX_BYTES:]

    def take_buffered(self) -> bytes:
        """Hand out, and forget, the bytes received after the last whole frame (for a
        connection that stops speaking frames, such as an ``agent.drive`` upgrade)."""
        rest = bytes(self._buf[self._pos :]) if self._error is None else b""
        self._buf = bytearray()
        self._pos = 0
        return rest

    def eof(self) -> ProtocolError | None:
        """The peer closed: ``None`` for a clean close between frames, else the error."""
        if self._error is not None:
            return self._error
        if self.buffered:
            return self._fail(ProtocolError.unexpected_eof())
        return None

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        self._buf = bytearray()
        self._pos = 0
        return error


def encode_frame(body: bytes) -> bytes:
    """Prefix ``body`` with its length; refuses a body over ``MAX_FRAME_BYTES``."""
    size = len(body)
    if size > MAX_FRAME_BYTES:
        raise FrameTooLarge(size)
    return _pack_prefix(size) + body


# -- messages --------------------------------------------------------------------------------


class RpcError(msgspec.Struct, frozen=True):
    """The structured error in a failed :class:`Response`."""

    code: ErrorCode
    message: str


class Request(msgspec.Struct, frozen=True):
    """A call: ``method`` is ``<namespace>.<verb>``; ``params`` is ``null`` when absent.

    The id's u64 bound is checked where frames are read (:func:`decode_request`,
    :func:`decode_message`), not on every construction: no Python runs per decoded call.
    """

    id: U64
    method: str
    params: Any = None

    @property
    def namespace(self) -> Namespace:
        return Namespace.of(self.method)


class Response(msgspec.Struct, frozen=True, omit_defaults=True):
    """A flat response carrying exactly one of ``result`` / ``error``.

    Build with :meth:`ok` or :meth:`fail`; ``Response.ok(id, None)`` encodes
    ``"result": null``. Constructing one with both or neither raises ``ValueError``.
    """

    id: U64
    result: Any = UNSET
    error: RpcError | UnsetType = UNSET

    def __post_init__(self) -> None:
        if (self.result is UNSET) == (self.error is UNSET):
            raise ValueError(_one_of_message(self.result is UNSET))
        _check_id(self.id)

    @classmethod
    def ok(cls, id: int, result: Any) -> Response:
        return cls(id=id, result=result)

    @classmethod
    def fail(cls, id: int, code: ErrorCode, message: str) -> Response:
        return cls(id=id, error=RpcError(code, message))

    @property
    def is_error(self) -> bool:
        return self.error is not UNSET


class _Frame(msgspec.Struct, frozen=True):
    """Either direction's envelope, for peers that both call and answer on one connection."""

    id: U64
    method: str | UnsetType = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: RpcError | UnsetType = UNSET


def _id_too_large(id: int) -> ProtocolError:
    return ProtocolError.json(f"id {id} does not fit in a u64")


def _check_id(id: int) -> None:
    if id > MAX_ID:
        raise ValueError(f"id {id} does not fit in a u64")


def _one_of_message(neither: bool) -> str:
    if neither:
        return "response carries neither result nor error"
    return "response carries both result and error"


_REQUEST_DECODER: Final = msgspec.json.Decoder(Request)
_RESPONSE_DECODER: Final = msgspec.json.Decoder(Response)
_FRAME_DECODER: Final = msgspec.json.Decoder(_Frame)
_ENCODER: Final = msgspec.json.Encoder()


def decode_request(body: bytes) -> Request | ProtocolError:
    try:
        request = jsondepth.decode(_REQUEST_DECODER, body)
    except msgspec.DecodeError as exc:
        return ProtocolError.json(str(exc))
    return request if request.id <= MAX_ID else _id_too_large(request.id)


def decode_response(body: bytes) -> Response | ProtocolError:
    try:
        return jsondepth.decode(_RESPONSE_DECODER, body)
    except msgspec.DecodeError as exc:
        return ProtocolError.json(str(exc))


def decode_message(body: bytes) -> Request | Response | ProtocolError:
    """Decode a frame from a peer that may send requests and responses on one connection.

    A frame with ``method`` is a request; otherwise it must be a valid response. A body
    that names ``method`` is tried as a request first (a daemon's common case); one that
    does not skips that try (a client's: a large answer is not parsed twice).
    """
    try:
        if len(body) > jsondepth.MAX_JSON_DEPTH:  # a shorter body cannot nest deeper
            jsondepth.check_depth(body)
        # find, not ``in``: bytes.__contains__ first tries its operand as an int (a TypeError)
        if body.find(b'"method"') >= 0:
            request = _REQUEST_DECODER.decode(body)
            return request if request.id <= MAX_ID else _id_too_large(request.id)
    except jsondepth.TooDeep as exc:
        return ProtocolError.json(str(exc))
    except msgspec.DecodeError:
        pass
    try:
        frame = _FRAME_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        return ProtocolError.json(str(exc))
    if frame.id > MAX_ID:
        return _id_too_large(frame.id)
    if frame.method is not UNSET:
        params = None if frame.params is UNSET else frame.params
        return Request(frame.id, frame.method, params)
    if (frame.result is UNSET) == (frame.error is UNSET):
        return ProtocolError.json(_one_of_message(frame.result is UNSET))
    return Response(id=frame.id, result=frame.result, error=frame.error)


class _IdOnly(msgspec.Struct):
    id: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]


_ID_DECODER: Final = msgspec.json.Decoder(_IdOnly)
_LEADING_ID: Final = re.compile(rb'\s*\{\s*"id"\s*:\s*(\d{1,19})\s*[,}]')


def recover_id(body: bytes) -> int:
    """Best effort: the ``id`` of an otherwise malformed frame, or 0 when unreadable.

    A frame nested too deep to decode still names its id when ``id`` is its first key.
    """
    try:
        return jsondepth.decode(_ID_DECODER, body).id
    except jsondepth.TooDeep:
        leading = _LEADING_ID.match(body)
        return int(leading[1]) if leading and int(leading[1]) <= 2**63 - 1 else 0
    except msgspec.DecodeError:
        return 0


def encode_request(request: Request) -> bytes:
    """One whole frame for ``request``; raises :class:`FrameTooLarge` for an oversized body."""
    return encode_frame(_ENCODER.encode(request))


def encode_response(response: Response) -> bytes:
    """One whole frame for ``response``; raises :class:`FrameTooLarge` for an oversized body."""
    return encode_frame(_ENCODER.encode(response))


class _Ok(msgspec.Struct, frozen=True):
    id: int
    result: Any


class _Failed(msgspec.Struct, frozen=True):
    id: int
    error: RpcError


def encode_ok(id: int, result: Any) -> bytes:
    """One whole frame ``{id, result}`` (the hot path: no intermediate :class:`Response`;
    :func:`encode_frame` inline)."""
    body = _ENCODER.encode(_Ok(id, result))
    size = len(body)
    if size > MAX_FRAME_BYTES:
        raise FrameTooLarge(size)
    return _pack_prefix(size) + body


def encode_failure(id: int, code: ErrorCode, message: str) -> bytes:
    """One whole frame ``{id, error: {code, message}}``."""
    return encode_frame(_ENCODER.encode(_Failed(id, RpcError(code, message))))


def encode_call(id: int, method: str, params: Any = None) -> bytes:
    """Shortcut for ``encode_request(Request(id, method, params))``."""
    return encode_frame(_ENCODER.encode(Request(id, method, params)))
