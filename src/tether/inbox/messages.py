"""Inbox messages: the five typed kinds, everything else kept as-is, and rejections.

An inbox line is one JSON object. ``parse_line`` is total: it returns a typed
message, an :class:`OtherMessage` (any other JSON object, kept with its
``type``), or an :class:`InboxRejection`, checked in a fixed order, one code
per stage: size (``too_long``), JSON (``empty``, ``not_utf8``, ``not_json``, which includes
nesting deeper than :data:`tether.jsondepth.MAX_JSON_DEPTH`),
object (``not_object``), UTF-8 of skipped keys (``not_utf8``), payload
(``bad_payload``: a known type whose text field is missing or not a string).
It never raises.

:func:`classify` is the drain's fast path: the same checks without building
Structs, returning ``(type, rejection)``.
"""

from __future__ import annotations

import enum
from operator import attrgetter
from typing import Any, Final

import msgspec

from tether import jsondepth

__all__ = [
    "KNOWN_TYPES",
    "MAX_MESSAGE_BYTES",
    "ApprovalRequest",
    "Clarification",
    "Done",
    "InboxMessage",
    "InboxRejection",
    "OtherMessage",
    "Progress",
    "RejectCode",
    "ResultPartial",
    "TypedMessage",
    "classify",
    "decode_body",
    "parse_line",
    "raw_text",
]

MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
"""The longest accepted line, newline excluded (OpenOPC's message cap)."""


class Progress(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="progress"):
    text: str


class Clarification(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="clarification"
):
    q: str


class ResultPartial(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="result_partial"
):
    note: str


class Done(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="done"):
    summary: str


class ApprovalRequest(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="approval_request"
):
    reason: str


class OtherMessage(msgspec.Struct, frozen=True, kw_only=True):
    """Any other JSON object, kept as-is. ``type`` is None when absent or not a string."""

    type: str | None
    body: dict[str, Any]


TypedMessage = Progress | Clarification | ResultPartial | Done | ApprovalRequest
InboxMessage = TypedMessage | OtherMessage


class RejectCode(enum.StrEnum):
    TOO_LONG = "too_long"
    EMPTY = "empty"
    NOT_UTF8 = "not_utf8"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    BAD_PAYLOAD = "bad_payload"


class InboxRejection(msgspec.Struct, frozen=True, kw_only=True):
    """A complete line that is not an acceptable message; kept, never dropped."""

    code: RejectCode
    reason: str
    raw: str


# type -> (Struct, the one required text field)
_TYPED: Final[dict[str, tuple[type[TypedMessage], str]]] = {
    "progress": (Progress, "text"),
    "clarification": (Clarification, "q"),
    "result_partial": (ResultPartial, "note"),
    "done": (Done, "summary"),
    "approval_request": (ApprovalRequest, "reason"),
}
KNOWN_TYPES: Final = frozenset(_TYPED)


class _Probe(msgspec.Struct, gc=False):
    """Only the keys the typed kinds need; every other key is skipped unbuilt.

    Untracked by the garbage collector (one per line; it holds only freshly decoded
    values, which cannot refer back to it, so it is never part of a cycle).
    """

    type: Any = None
    text: Any = msgspec.UNSET
    q: Any = msgspec.UNSET
    note: Any = msgspec.UNSET
    summary: Any = msgspec.UNSET
    reason: Any = msgspec.UNSET


_probe_decoder: Final = msgspec.json.Decoder(_Probe)
_REQUIRED: Final = {kind: attrgetter(name) for kind, (_, name) in _TYPED.items()}
_object_decoder: Final = msgspec.json.Decoder(dict[str, Any])
_SHALLOW_BELOW: Final = jsondepth.SHALLOW_BELOW
_few_openers: Final = jsondepth.few_openers


def raw_text(line: bytes) -> str:
    """A line as text for the record: invalid UTF-8 shown as ``\\xNN`` escapes."""
    return line.decode("utf-8", "backslashreplace")


def classify(line: bytes) -> tuple[str | None, str | None, RejectCode | None, str | None]:
    """Check one line (no newline, at most :data:`MAX_MESSAGE_BYTES`), without building it.

    Returns ``(body, type, None, None)`` for an accepted object (``body`` is the
    line as text, surrounding whitespace removed; ``type`` None when it has no
    string ``type``), or ``(None, None, code, reason)`` for a rejection. This is
    the drain's hot path: one msgspec pass that builds only the probed keys.
    """
    try:
        # Valid JSON this short, or with this few brackets, is shallow enough: the probe
        # decodes it without the full depth scan (what it refuses, _undecodable explains).
        if len(line) < _SHALLOW_BELOW or _few_openers(line):
            probe = _probe_decoder.decode(line)
        else:
            probe = jsondepth.decode(_probe_decoder, line)
        body = line.decode("utf-8")  # msgspec does not check keys it skips
    except msgspec.ValidationError as exc:
        return None, None, RejectCode.NOT_OBJECT, str(exc)
    except msgspec.DecodeError as exc:
        return _undecodable(line, exc)
    except UnicodeDecodeError as exc:
        return None, None, RejectCode.NOT_UTF8, str(exc)
    except RecursionError:
        return None, None, RejectCode.NOT_JSON, "nested deeper than the caller's stack allows"
    kind = probe.type
    if type(kind) is not str:
        return body.strip(), None, None, None
    get = _REQUIRED.get(kind)
    if get is not None and type(get(probe)) is not str:
        return None, None, RejectCode.BAD_PAYLOAD, _payload_problem(probe, kind)
    return body.strip(), kind, None, None


def _undecodable(line: bytes, exc: msgspec.DecodeError) -> tuple[None, None, RejectCode, str]:
    if not line.strip():
        return None, None, RejectCode.EMPTY, "empty line"
    try:
        jsondepth.check_depth(line)  # the reason the checked path would have given
    except jsondepth.TooDeep as deep:
        exc = deep
    code = RejectCode.NOT_UTF8 if "UTF-8" in str(exc) else RejectCode.NOT_JSON
    return None, None, code, str(exc)


def _payload_problem(probe: _Probe, kind: str) -> str:
    name = _TYPED[kind][1]
    what = "missing" if getattr(probe, name) is msgspec.UNSET else "not a string"
    return f"{kind}: field {name!r} is {what}"


def parse_line(line: bytes) -> InboxMessage | InboxRejection:
    """Decode one inbox line (one trailing newline is ignored). Never raises."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > MAX_MESSAGE_BYTES:
        too_long = f"line of {len(line)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
        return InboxRejection(code=RejectCode.TOO_LONG, reason=too_long, raw=raw_text(line[:4096]))
    body, kind, code, reason = classify(line)
    if code is not None or body is None:
        code = code or RejectCode.NOT_JSON
        why = reason or code.value
        return InboxRejection(code=code, reason=why, raw=raw_text(line))
    return decode_body(body, kind)


def decode_body(body: str, kind: str | None) -> InboxMessage:
    """Rebuild the message from a body that :func:`classify` accepted. Never raises.

    JSON that is valid but beyond msgspec's range (``1e999``) goes through the
    stdlib parser; a body that is not an object at all (a corrupted row) comes
    back as an empty :class:`OtherMessage` of its type.
    """
    obj: Any
    try:
        obj = jsondepth.decode(_object_decoder, body)
    except msgspec.MsgspecError:
        try:
            obj = jsondepth.loads(body)
        except ValueError:
            obj = None
    if not isinstance(obj, dict):
        return OtherMessage(type=kind, body={})
    typed = _TYPED.get(kind) if kind is not None else None
    value = obj.get(typed[1]) if typed is not None else None
    if typed is None or not isinstance(value, str):
        return OtherMessage(type=kind, body=obj)
    return typed[0](**{typed[1]: value})
