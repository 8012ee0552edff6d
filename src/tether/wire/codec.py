"""Decode, validate and encode wire lines. Nothing here raises on bad input.

Theory of operation: a line is checked in the spec's order, one rejection code per
stage: size (``too-large``), JSON (``malformed``), envelope (``invalid``, or the fatal
``version-mismatch``), type for this direction (``unknown-type``), payload
(``invalid-payload``). Ordering (``out-of-order``) belongs to :class:`Receiver`.

Valid lines take the fast path: one msgspec decode straight into the tagged union of
Structs for the direction. Only when that fails does the slow path run: a generic
JSON decode (which also accepts ``1e400`` as infinity, so that such a ``seq`` is an
invalid envelope rather than malformed JSON) and the staged checks of
:mod:`tether.wire.schema`, which name the stage and every failing field.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any, Final, Union

import msgspec

from tether import jsondepth
from tether.wire import schema
from tether.wire.limits import MAX_LINE_BYTES, MAX_SAFE_INTEGER, VERSION
from tether.wire.messages import (
    CONTROL_TYPES,
    CONTROLS,
    EVENT_TYPES,
    EVENTS,
    AnyControl,
    AnyEvent,
    AnyMessage,
    Message,
)


class Direction(enum.StrEnum):
    """Which way a line travels: ``event`` (child to parent) or ``control`` (parent to child)."""

    EVENT = "event"
    CONTROL = "control"


class Code(enum.StrEnum):
    """The seven rejection codes."""

    TOO_LARGE = "too-large"
    MALFORMED = "malformed"
    INVALID = "invalid"
    VERSION_MISMATCH = "version-mismatch"
    UNKNOWN_TYPE = "unknown-type"
    INVALID_PAYLOAD = "invalid-payload"
    OUT_OF_ORDER = "out-of-order"


class FieldError(msgspec.Struct, frozen=True):
    """One schema error: the field's path and what is wrong with it."""

    field: str
    message: str


class Rejection(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why a line or message was refused.

    ``seq`` is set only when the line carried a safe integer seq >= 1 (so an ack can name
    it); ``type`` and ``run`` only when they were strings. ``fatal`` is true only for a
    version mismatch: the receiver must stop the channel.
    """

    code: Code
    reason: str
    fatal: bool = False
    seq: int | None = None
    type: str | None = None
    run: str | None = None
    errors: tuple[FieldError, ...] = ()


_TABLES: dict[str, dict[str, type[Message]]] = {
    "event": dict(EVENT_TYPES),
    "control": dict(CONTROL_TYPES),
}
# The fast decoders are built on first use: a child writes `ready` before it needs one.
# Keyed by plain strings (a StrEnum hashes like its value): no enum call per line.
_FAST_BY_NAME: dict[str, msgspec.json.Decoder[Any]] = {}
# Their bound ``decode`` methods, for the first try (one look-up, no method binding).
_FAST_DECODE: dict[str, Callable[[bytes], Any]] = {}
_BY_CLASS: dict[type[Message], msgspec.json.Decoder[Any]] = {}
_UNIONS: dict[str, tuple[type[Message], ...]] = {"event": EVENTS, "control": CONTROLS}


def _fast_decoder(direction: str) -> msgspec.json.Decoder[Any] | None:
    members = _UNIONS.get(direction)
    if members is None:
        return None
    decoder = msgspec.json.Decoder(Union[members])  # noqa: UP007
    _FAST_BY_NAME[direction] = decoder
    _FAST_DECODE[direction] = decoder.decode
    return decoder


def prime() -> None:
    """Build both directions' decoders now (msgspec reads every message class's fields on
    first use, evaluating their annotations): a process that forks many children (the fork
    server's template) does it once for all of them instead of each child on its first
    line of each type."""
    for direction in _UNIONS:
        if direction not in _FAST_BY_NAME:
            _fast_decoder(direction)


def _class_decoder(cls: type[Message]) -> msgspec.json.Decoder[Any]:
    decoder = _BY_CLASS.get(cls)
    if decoder is None:
        decoder = _BY_CLASS[cls] = msgspec.json.Decoder(cls)
    return decoder


_GENERIC = msgspec.json.Decoder(float_hook=float)
_ENCODER = msgspec.json.Encoder()
_DECODE_ERRORS = (msgspec.DecodeError, UnicodeError)
_SHALLOW_BELOW: Final = jsondepth.SHALLOW_BELOW
_few_openers: Final = jsondepth.few_openers
_OPEN_ARRAY: Final = ord("[")
_OPEN_OBJECT: Final = ord("{")
_NO_STACK: Final = "malformed JSON: nested deeper than the caller's stack allows"


def decode(line: bytes | bytearray | memoryview | str, direction: str) -> AnyMessage | Rejection:
    """Decode one line (without its newline) for ``direction``: a message or a rejection."""
    # First try, for byte lines (what files and sockets hand out): valid JSON shorter
    # than SHALLOW_BELOW bytes, or with at most MAX_JSON_DEPTH opening brackets (found by
    # memchr jumps), cannot nest deeper than the limit, so what the typed decode accepts
    # is exactly what the checked path would; what it refuses, the staged checks explain.
    # (A line with no array and one object, most lines, is told here by two memchr, the
    # test few_openers starts with, without the call.) A direction whose decoder is not
    # built yet (KeyError) or a caller's stack near its recursion limit takes the checked
    # path, which scans before it decodes.
    try:
        if type(line) is bytes and (
            len(line) < _SHALLOW_BELOW
            or (
                len(line) < MAX_LINE_BYTES
                and (
                    (_OPEN_ARRAY not in line and _OPEN_OBJECT not in line[1:]) or _few_openers(line)
                )
            )
        ):
            return _FAST_DECODE[direction](line)  # type: ignore[no-any-return]
    except msgspec.DecodeError:
        return _refused(line, direction)
    except (KeyError, RecursionError):
        pass
    return _decode_checked(line, direction)


def _decode_checked(
    line: bytes | bytearray | memoryview | str, direction: str
) -> AnyMessage | Rejection:
    fast = _FAST_BY_NAME.get(direction) or _fast_decoder(direction)
    if fast is None:
        return Rejection(code=Code.INVALID, reason=f"unknown direction: {direction}")
    size = len(line) if type(line) is bytes else _size(line)
    if size is None:
        return Rejection(code=Code.MALFORMED, reason="line must be bytes or str")
    if size >= MAX_LINE_BYTES:
        return Rejection(code=Code.TOO_LARGE, reason=f"line exceeds {MAX_LINE_BYTES} bytes")
    try:
        message: AnyMessage = jsondepth.decode(fast, line)
    except jsondepth.TooDeep as exc:
        return Rejection(code=Code.MALFORMED, reason=f"malformed JSON: {exc}")
    except _DECODE_ERRORS:
        return _explain(line, direction)
    except RecursionError:
        return Rejection(code=Code.MALFORMED, reason=_NO_STACK)
    return message


def decode_event(line: bytes | str) -> AnyEvent | Rejection:
    """:func:`decode` for child-to-parent lines."""
    return decode(line, Direction.EVENT)  # type: ignore[return-value]


def decode_control(line: bytes | str) -> AnyControl | Rejection:
    """:func:`decode` for parent-to-child lines."""
    return decode(line, Direction.CONTROL)  # type: ignore[return-value]


def validate(obj: object, direction: str) -> AnyMessage | Rejection:
    """Validate a decoded JSON value (a dict) or a message Struct for ``direction``."""
    if direction not in _TABLES:
        return Rejection(code=Code.INVALID, reason=f"unknown direction: {direction}")
    direction = str(direction)
    if isinstance(obj, msgspec.Struct):
        try:
            obj = msgspec.to_builtins(obj)
        except (TypeError, ValueError) as exc:
            return Rejection(code=Code.INVALID, reason=f"message cannot be encoded: {exc}")
    if not isinstance(obj, dict):
        return Rejection(code=Code.INVALID, reason="message must be a JSON object")
    # First try: the message type's own Struct (the schema) converts a valid object in one
    # native call; what it refuses (or an integral float where an integer is due, which
    # the schema accepts) takes the staged checks, which explain or accept it.
    kind = obj.get("type")
    cls = _TABLES[direction].get(kind) if type(kind) is str else None
    if cls is not None:
        try:
            message: AnyMessage = msgspec.convert(obj, cls)  # type: ignore[assignment]
        except (msgspec.ValidationError, ValueError, TypeError):
            pass
        else:
            return message
    return _validate_object(obj, direction)


def encode(message: Message) -> bytes | Rejection:
    """Encode a message as one line without its newline, or say why it cannot be sent.

    The line is decoded again before it is returned, so what a sender writes is exactly
    what a receiver accepts (Structs built in Python are not type-checked on creation).
    """
    try:
        line = _ENCODER.encode(message)
    except (TypeError, ValueError, OverflowError, UnicodeError) as exc:
        return Rejection(code=Code.INVALID, reason=f"message cannot be encoded: {exc}")
    if len(line) >= MAX_LINE_BYTES:
        return _rejection(
            Code.TOO_LARGE,
            f"encoded line exceeds {MAX_LINE_BYTES} bytes",
            msgspec.structs.asdict(message) | {"type": type(message).__struct_config__.tag},
        )
    try:
        decoder = _BY_CLASS.get(type(message)) or _class_decoder(type(message))
        if len(line) < _SHALLOW_BELOW:  # cannot nest too deep: no depth scan (see decode)
            decoder.decode(line)
        else:
            jsondepth.decode(decoder, line)
    except _DECODE_ERRORS:
        check = decode(line, message.direction)
        return check if isinstance(check, Rejection) else line
    return line


def rejection_ack(rejection: Rejection) -> dict[str, Any]:
    """The ``control-ack`` fields answering a rejected control line (pass to a Sender)."""
    fields: dict[str, Any] = {"status": "rejected", "reason": rejection.reason}
    if rejection.seq is not None:
        fields["ref"] = rejection.seq
    return fields


def extra_fields(line: bytes | str, direction: str) -> dict[str, Any]:
    """The members of a valid line that its message type does not define (else ``{}``)."""
    message = decode(line, direction)
    if isinstance(message, Rejection):
        return {}
    known = {"v", "seq", "type", "run"} | {r.name for r in schema.rules_for(type(message))}
    obj = _GENERIC.decode(line)
    return {k: v for k, v in obj.items() if k not in known}


# --- the slow path ------------------------------------------------------------------------


def _size(line: object) -> int | None:
    if isinstance(line, bytes | bytearray):
        return len(line)
    if isinstance(line, memoryview):
        return line.nbytes
    if isinstance(line, str):
        if len(line) * 4 < MAX_LINE_BYTES or len(line) >= MAX_LINE_BYTES:
            return len(line)
        return len(line.encode("utf-8", "surrogatepass"))
    return None


def _refused(line: bytes | bytearray | memoryview | str, direction: str) -> AnyMessage | Rejection:
    """Why the first try refused a short line: the depth check, then the staged checks."""
    try:
        jsondepth.check_depth(line)
    except jsondepth.TooDeep as exc:
        return Rejection(code=Code.MALFORMED, reason=f"malformed JSON: {exc}")
    return _explain(line, direction)


def _explain(line: bytes | bytearray | memoryview | str, direction: str) -> AnyMessage | Rejection:
    # Callers checked the depth before the fast decode refused the line.
    try:
        obj = _GENERIC.decode(line)
    except _DECODE_ERRORS as exc:
        return Rejection(code=Code.MALFORMED, reason=f"malformed JSON: {exc}")
    except RecursionError:
        return Rejection(code=Code.MALFORMED, reason=_NO_STACK)
    if not isinstance(obj, dict):
        return Rejection(code=Code.MALFORMED, reason="decoded JSON is not an object")
    # The fast path refused the line; the staged checks say why, or accept what it
    # cannot express (integral floats such as 1.0 where an integer is due).
    return _validate_object(obj, direction)


def _validate_object(obj: dict[str, Any], direction: str) -> AnyMessage | Rejection:
    version = obj.get("v")
    if version is None:
        return _rejection(Code.INVALID, "v is required", obj)
    if not (version == VERSION and (type(version) is int or schema.is_integer(version))):
        shown = _json_text(version)
        reason = f"wire version {shown} is not supported; expected {VERSION}"
        return _rejection(Code.VERSION_MISMATCH, reason, obj)
    kind, seq = obj.get("type"), obj.get("seq")
    if not (type(seq) is int and 1 <= seq <= MAX_SAFE_INTEGER) or type(kind) is not str:
        errors = _envelope_errors(obj)
        if errors:
            return _rejection(Code.INVALID, _join(errors), obj, errors)
    elif type(obj.get("run")) is not str:
        errors = _envelope_errors(obj)
        return _rejection(Code.INVALID, _join(errors), obj, errors)
    cls = _TABLES[direction].get(str(kind))
    if cls is None:
        return _rejection(Code.UNKNOWN_TYPE, _unknown_type_reason(str(kind), direction), obj)
    errors = schema.check_payload(cls, obj)
    if errors:
        return _rejection(Code.INVALID_PAYLOAD, _join(errors), obj, errors)
    try:
        message: AnyMessage = msgspec.convert(schema.integral_copy(cls, obj), cls)  # type: ignore[assignment]
    except msgspec.ValidationError as exc:
        return _rejection(Code.INVALID_PAYLOAD, str(exc), obj)
    return message


_SEQ_NOT_INTEGER: Final = ("seq", "must be a positive integer")
_SEQ_OUT_OF_RANGE: Final = ("seq", f"must be between 1 and {MAX_SAFE_INTEGER}")


def _envelope_errors(obj: dict[str, Any]) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    if "seq" not in obj:
        errors.append(("seq", "is required"))
    else:
        seq = obj["seq"]
        if not (type(seq) is int or schema.is_integer(seq)):
            errors.append(_SEQ_NOT_INTEGER)
        elif not 1 <= seq <= MAX_SAFE_INTEGER:
            errors.append(_SEQ_OUT_OF_RANGE)
    for key in ("type", "run"):
        if key not in obj:
            errors.append((key, "is required"))
        elif not isinstance(obj[key], str):
            errors.append((key, "must be a string"))
    return errors


def _unknown_type_reason(kind: str, direction: str) -> str:
    other = "control" if direction == "event" else "event"
    if kind in _TABLES[other]:
        article = "an" if direction == "event" else "a"
        return f"{kind} is not {article} {direction} message"
    return f"unknown {direction} type: {kind}"


def _rejection(
    code: Code, reason: str, obj: dict[str, Any], errors: list[tuple[str, str]] | None = None
) -> Rejection:
    seq = obj.get("seq")
    if not (type(seq) is int and 1 <= seq <= MAX_SAFE_INTEGER):
        seq = schema.safe_int(seq)
        seq = seq if seq is not None and seq >= 1 else None
    kind, run = obj.get("type"), obj.get("run")
    return Rejection(
        code=code,
        reason=reason,
        fatal=code == "version-mismatch",
        seq=seq,
        type=kind if type(kind) is str else None,
        run=run if type(run) is str else None,
        errors=tuple([FieldError(*error) for error in errors]) if errors else (),
    )


def _join(errors: list[tuple[str, str]]) -> str:
    if len(errors) == 1:
        return f"{errors[0][0]} {errors[0][1]}"
    return "; ".join([f"{f} {m}" for f, m in errors])


def _json_text(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, UnicodeError):
        return repr(value)
