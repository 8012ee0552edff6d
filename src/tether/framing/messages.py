"""The message kinds bash-agent frames carry, as typed values, and their conversions.

Theory of operation
-------------------
Field 0 of a frame names the kind; the fields after it are laid out per kind:

============== =====================================================================
TEXT, THINKING chunk
TOOL_CALL      name, id, input JSON, then the input's top-level members as key, value
TOOL_RESULT    tool_use_id, tool_name, output, then extra key, value pairs (``checklist``,
               ``summary``: bash-agent forwards them from a TodoWrite call)
USAGE          input_tokens, output_tokens, cache_read_input_tokens,
               cache_creation_input_tokens
STOP           reason (end_turn, tool_use, max_tokens, interrupted, ...)
CONTEXT_UPDATE kind, trigger
ERROR          message
RETRY          (none)
SUB_AGENT_RESULT session_id, status (ok/failed), input_tokens, output_tokens, thinking, text
USER_INPUT     id (``0``), text: an input on bash-agent's input pipe
USER_MESSAGE   text: the user's message, as bash-agent's replay shows it
SESSION_END    code (``0``): the interactive session ends
IMAGE_DESCRIBE images (``[Image #1] ...``), description
AGENT_RESULT   session_id, status, thinking, text, input_tokens, output_tokens,
               cache_read_input_tokens, cache_creation_input_tokens, requests: a finished
               sub-agent's answer on its parent's input pipe
============== =====================================================================

AGENT_RESULT is not in the message spec's list (a display kind): it is what bash-agent's
sub-agents send back (``send_sub_result.awk``), and the parent turns it into the
SUB_AGENT_RESULT its display shows (plus ``usage {kind: "sub_agent"}``,
``sub_agent_result`` and ``sub_agent_end`` records). tether decodes it (its reader needs
the four text fields, as bash-agent's does under ``set -u``; missing counts read as 0),
writes it back as it came, and shows it as that SUB_AGENT_RESULT.

Decoding is total: :func:`from_fields` returns a message or a
:class:`~tether.framing.resp.FrameRejection` (codes ``empty-frame``, ``unknown-type``,
``invalid-payload``), never raises. It accepts what bash-agent's own reader accepts
(REFERENCE-FACTS §2): fields are UTF-8, with invalid bytes replaced by U+FFFD (tool output
may be binary; it is shown, not dropped); token counts are decimal digits, and an empty,
``null`` or missing field counts as 0 (an older writer sends a 3-field USAGE); TEXT,
THINKING, STOP, USER_INPUT and SESSION_END may come without their field (it reads as
empty); a USER_INPUT with one field carries the text in it. Fields past the layout are
ignored (newer writers may add some), except TOOL_RESULT's extra pairs and TOOL_CALL's
members, which are kept and written back as they came (an odd last member included).

Wire display events (:func:`to_wire_events`, :func:`from_wire_event`) are dicts with the
Fen wire's kebab-case keys, without the envelope (``v``, ``seq``, ``run``), which the sender
adds. USAGE and STOP each become an ``llm-end`` carrying their half. The stream-json shapes
live in :mod:`tether.framing.stream_json`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeAlias

import msgspec

from tether import jsondepth
from tether.framing.resp import FrameRejection, encode_frame
from tether.wire.limits import SUMMARY_BYTES
from tether.wire.text import first_line_summary

# FrameRejection codes of this layer.
EMPTY_FRAME: Final = "empty-frame"
MALFORMED: Final = "malformed"
UNKNOWN_TYPE: Final = "unknown-type"
INVALID_PAYLOAD: Final = "invalid-payload"


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    KIND: ClassVar[str] = ""


class Text(_Message, frozen=True, kw_only=True):
    """A chunk of the assistant's streamed answer."""

    KIND: ClassVar[str] = "TEXT"
    chunk: str


class Thinking(_Message, frozen=True, kw_only=True):
    """A chunk of the assistant's streamed reasoning."""

    KIND: ClassVar[str] = "THINKING"
    chunk: str


class ToolCall(_Message, frozen=True, kw_only=True):
    """A tool call: ``input`` is the JSON text; ``members`` its top-level members flattened.

    ``extra`` holds a dangling last member key (a writer that sent an odd count), so the
    frame is written back as it came.
    """

    KIND: ClassVar[str] = "TOOL_CALL"
    name: str
    id: str
    input: str
    members: tuple[tuple[str, str], ...] = ()
    extra: tuple[str, ...] = ()

    @classmethod
    def from_input(cls, name: str, id: str, arguments: Any) -> ToolCall:
        """Build from decoded arguments: string members stay raw, others become JSON."""
        members: tuple[tuple[str, str], ...] = ()
        if isinstance(arguments, Mapping):
            members = tuple((str(k), _member_text(v)) for k, v in arguments.items())
        return cls(name=name, id=id, input=_json_text(arguments), members=members)

    @classmethod
    def from_json_text(cls, name: str, id: str, text: str) -> ToolCall:
        """Build from the model's JSON text, kept as received (``1.50`` stays ``1.50``).

        Members are flattened as bash-agent does: strings decoded, other values as their
        JSON text. Text that is not a JSON object has no members.
        """
        try:
            jsondepth.check_depth(text)
            raw = _RAW_OBJECT(text)
        except msgspec.DecodeError:
            return cls(name=name, id=id, input=text)
        members = tuple((key, _raw_member(value)) for key, value in raw.items())
        return cls(name=name, id=id, input=text, members=members)

    def arguments(self) -> Any:
        """``input`` decoded; the raw text when it is not valid JSON."""
        try:
            return jsondepth.decode_any(self.input)
        except msgspec.DecodeError:
            return self.input


class ToolResult(_Message, frozen=True, kw_only=True):
    """What a tool returned."""

    KIND: ClassVar[str] = "TOOL_RESULT"
    tool_use_id: str
    tool_name: str
    output: str
    extra: tuple[str, ...] = ()  # the fields after output, as written (key, value pairs)

    def pairs(self) -> dict[str, str]:
        """The extra fields as key -> value (a dangling last key is left out)."""
        return dict(zip(self.extra[::2], self.extra[1::2], strict=False))


class Usage(_Message, frozen=True, kw_only=True):
    """Token usage. ``kind`` (``agent``, or ``sub_agent`` with ``sub_session_id``) exists only
    in stream-json; frames do not carry it."""

    KIND: ClassVar[str] = "USAGE"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    kind: str = "agent"
    sub_session_id: str = ""


class SubAgentResult(_Message, frozen=True, kw_only=True):
    """A finished sub-agent's answer."""

    KIND: ClassVar[str] = "SUB_AGENT_RESULT"
    session_id: str
    status: str
    input_tokens: int = 0
    output_tokens: int = 0
    thinking: str = ""
    text: str = ""


class AgentResult(_Message, frozen=True, kw_only=True):
    """A sub-agent's answer on its parent's input pipe (see the module docstring)."""

    KIND: ClassVar[str] = "AGENT_RESULT"
    session_id: str
    status: str
    thinking: str = ""
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    requests: int = 0

    def sub_agent_result(self) -> SubAgentResult:
        """The SUB_AGENT_RESULT bash-agent's parent shows for it."""
        return SubAgentResult(
            session_id=self.session_id,
            status=self.status,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            thinking=self.thinking,
            text=self.text,
        )


class Stop(_Message, frozen=True, kw_only=True):
    """Why the model stopped (end_turn, tool_use, max_tokens, interrupted, ...)."""

    KIND: ClassVar[str] = "STOP"
    reason: str


class ContextUpdate(_Message, frozen=True, kw_only=True):
    """The context changed, e.g. kind ``compact`` triggered ``auto``."""

    KIND: ClassVar[str] = "CONTEXT_UPDATE"
    kind: str
    trigger: str


class Error(_Message, frozen=True, kw_only=True):
    """An error to show the user."""

    KIND: ClassVar[str] = "ERROR"
    message: str


class Retry(_Message, frozen=True, kw_only=True):
    """The request is being retried."""

    KIND: ClassVar[str] = "RETRY"


class UserInputFrame(_Message, frozen=True, kw_only=True):
    """An input for the agent loop (bash-agent's input pipe: ``USER_INPUT 0 text``)."""

    KIND: ClassVar[str] = "USER_INPUT"
    id: str = "0"
    text: str = ""


class UserMessage(_Message, frozen=True, kw_only=True):
    """The user's message as a display frame (bash-agent's replay starts with one)."""

    KIND: ClassVar[str] = "USER_MESSAGE"
    text: str


class SessionEnd(_Message, frozen=True, kw_only=True):
    """The interactive session ends (``code`` is ``0``)."""

    KIND: ClassVar[str] = "SESSION_END"
    code: str = "0"


class ImageDescribe(_Message, frozen=True, kw_only=True):
    """Pasted images (``[Image #1]``) and the text a vision model read from them."""

    KIND: ClassVar[str] = "IMAGE_DESCRIBE"
    images: str
    description: str = ""


Message: TypeAlias = (
    Text
    | Thinking
    | ToolCall
    | ToolResult
    | Usage
    | SubAgentResult
    | Stop
    | ContextUpdate
    | Error
    | Retry
    | UserInputFrame
    | UserMessage
    | SessionEnd
    | ImageDescribe
    | AgentResult
)

# Fields each kind needs after the type, in frame order.
_LAYOUT: Final[dict[str, tuple[str, ...]]] = {
    "TEXT": ("chunk",),
    "THINKING": ("chunk",),
    "TOOL_CALL": ("name", "id", "input"),
    "TOOL_RESULT": ("tool_use_id", "tool_name", "output"),
    "USAGE": (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ),
    "SUB_AGENT_RESULT": (
        "session_id",
        "status",
        "input_tokens",
        "output_tokens",
        "thinking",
        "text",
    ),
    "STOP": ("reason",),
    "CONTEXT_UPDATE": ("kind", "trigger"),
    "ERROR": ("message",),
    "RETRY": (),
    "USER_INPUT": ("id", "text"),
    "USER_MESSAGE": ("text",),
    "SESSION_END": ("code",),
    "IMAGE_DESCRIBE": ("images", "description"),
    "AGENT_RESULT": (
        "session_id",
        "status",
        "thinking",
        "text",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "requests",
    ),
}
# How many of the layout's fields a frame must carry; missing later ones read as empty
# (bash-agent's reader tolerates them; see the module docstring).
_REQUIRED: Final[dict[str, int]] = {
    "TEXT": 0,
    "THINKING": 0,
    "STOP": 0,
    "USAGE": 0,
    "USER_INPUT": 0,
    "SESSION_END": 0,
    "IMAGE_DESCRIBE": 1,
    "AGENT_RESULT": 4,
}
# Kinds whose fields after the layout are kept (written back as they came).
_KEEPS_EXTRA: Final = frozenset({"TOOL_CALL", "TOOL_RESULT"})
_CLASSES: Final[dict[str, type[Message]]] = {
    cls.KIND: cls
    for cls in (
        Text,
        Thinking,
        ToolCall,
        ToolResult,
        Usage,
        SubAgentResult,
        Stop,
        ContextUpdate,
        Error,
        Retry,
        UserInputFrame,
        UserMessage,
        SessionEnd,
        ImageDescribe,
        AgentResult,
    )
}
_INT_FIELDS: Final = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "requests",
    }
)


class _Invalid(Exception):
    """A field that does not fit its layout (internal: becomes a FrameRejection)."""


# -- frames ----------------------------------------------------------------------------------


def from_fields(fields: Sequence[bytes]) -> Message | FrameRejection:
    """Decode a frame's fields (field 0 is the type) into a message, or reject them."""
    if not fields:
        return FrameRejection(EMPTY_FRAME, "a frame needs at least the message type field")
    name = fields[0].decode("ascii", "replace")
    cls = _CLASSES.get(name)
    if cls is None:
        return FrameRejection(UNKNOWN_TYPE, f"unknown message type {name[:40]!r}")
    layout = _LAYOUT[name]
    required = _REQUIRED.get(name, len(layout))
    if len(fields) - 1 < required:
        need = ", ".join(layout[:required])
        reason = f"{name} needs {required} fields after the type ({need}), got {len(fields) - 1}"
        return FrameRejection(INVALID_PAYLOAD, reason)
    if name == "USER_INPUT" and len(fields) == 2:
        fields = [fields[0], b"", fields[1]]  # one field: it is the text
    try:
        values: dict[str, Any] = {
            key: _field_value(key, raw) for key, raw in zip(layout, fields[1:], strict=False)
        }
        values.update(_missing(layout[len(fields) - 1 :]))
        if name in _KEEPS_EXTRA:
            values.update(_extra(cls, fields[1 + len(layout) :]))
    except _Invalid as exc:
        return FrameRejection(INVALID_PAYLOAD, f"{name}: {exc}")
    return cls(**values)


def to_fields(message: Message) -> list[bytes]:
    """The frame fields of a message, type first."""
    fields = [message.KIND.encode()]
    for key in _LAYOUT[message.KIND]:
        value = getattr(message, key)
        fields.append(str(value).encode() if isinstance(value, int) else value.encode())
    if isinstance(message, ToolCall):
        for key, value in message.members:
            fields += (key.encode(), value.encode())
    if isinstance(message, ToolCall | ToolResult):
        fields += (item.encode() for item in message.extra)
    return fields


def to_frame(message: Message) -> bytes:
    """The message as one frame, ready for a single write."""
    return encode_frame(to_fields(message))


def _field_value(key: str, raw: bytes) -> str | int:
    if key not in _INT_FIELDS:
        return raw.decode("utf-8", "replace")
    if raw in (b"", b"null"):
        return 0
    if not raw.isdigit() or len(raw) > 20:
        raise _Invalid(f"{key} must be a count of tokens, not {raw[:40]!r}")
    return int(raw)


def _missing(keys: Sequence[str]) -> dict[str, str | int]:
    """Values for the layout fields a lenient frame left out."""
    return {key: 0 if key in _INT_FIELDS else "" for key in keys}


def _extra(cls: type[Message], raw: Sequence[bytes]) -> dict[str, Any]:
    """TOOL_CALL's members (pairs, a dangling key apart) or TOOL_RESULT's extra fields."""
    text = tuple(item.decode("utf-8", "replace") for item in raw)
    if cls is ToolResult:
        return {"extra": text}
    even = len(text) - len(text) % 2
    pairs = tuple(zip(text[:even:2], text[1:even:2], strict=True))
    return {"members": pairs, "extra": text[even:]}


# -- wire display events ---------------------------------------------------------------------


def to_wire_events(message: Message) -> list[dict[str, Any]]:
    """The wire display events (envelope-less dicts) that show a message."""
    match message:
        case Text(chunk=chunk):
            return [{"type": "assistant-text-delta", "delta": chunk}]
        case Thinking(chunk=chunk):
            return [{"type": "assistant-thinking-delta", "delta": chunk}]
        case ToolCall():
            event = {"type": "tool-call", "name": message.name, "arguments": message.arguments()}
            return [event | ({"id": message.id} if message.id else {})]
        case ToolResult():
            ids = {"id": message.tool_use_id, "tool-call-id": message.tool_use_id}
            return [
                {"type": "tool-result", "name": message.tool_name, "is-error?": False}
                | (ids if message.tool_use_id else {})
                | {"result": message.output}
            ]
        case Usage():
            return [{"type": "llm-end", "usage": _wire_usage(message)}]
        case Stop(reason=reason):
            return [{"type": "llm-end", "stop-reason": reason}]
        case Error(message=text):
            return [{"type": "error", "error": text, "source": "agent"}]
        case SubAgentResult():
            return [_sub_agent_info(message)]
        case AgentResult():
            return [_sub_agent_info(message.sub_agent_result())]
        case ContextUpdate(kind=kind, trigger=trigger):
            summary = f"context {kind}" + (f" ({trigger})" if trigger else "")
            return [{"type": "info", "summary": _summary(summary)}]
        case Retry():
            return [{"type": "info", "summary": "retrying the request"}]
        case _:
            return _session_wire_events(message)


def _session_wire_events(message: Message) -> list[dict[str, Any]]:
    """The frames of bash-agent's session loop (input, replayed message, images, end)."""
    match message:
        case UserInputFrame(text=text) | UserMessage(text=text):
            return [{"type": "user", "text": text}]
        case ImageDescribe(images=images, description=description):
            return [{"type": "info", "summary": _summary(f"{images}: {description}")}]
    return []


def from_wire_event(event: Any, *, streamed: bool = True) -> list[Message]:
    """The messages a wire display event carries; ``[]`` for anything else (total).

    With ``streamed`` (the default), whole ``assistant-text`` / ``assistant-thinking``
    events are skipped because their deltas already carried the text; pass ``False`` for a
    source that does not stream deltas.
    """
    if not isinstance(event, Mapping):
        return []
    kind = event.get("type")
    try:
        if kind in ("assistant-text", "assistant-thinking") and streamed:
            return []
        decode = _FROM_WIRE.get(kind) if isinstance(kind, str) else None
        return decode(event) if decode is not None else []
    except _Invalid:
        return []


def _wire_usage(usage: Usage) -> dict[str, int]:
    return {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache-read": usage.cache_read_input_tokens,
        "cache-write": usage.cache_creation_input_tokens,
    }


# Usage spellings accepted from the wire, first match wins.
_USAGE_KEYS: Final = {
    "input_tokens": ("input", "input_tokens", "input-tokens", "inputTokens"),
    "output_tokens": ("output", "output_tokens", "output-tokens", "outputTokens"),
    "cache_read_input_tokens": ("cache-read", "cache_read_input_tokens", "cacheRead"),
    "cache_creation_input_tokens": ("cache-write", "cache_creation_input_tokens", "cacheWrite"),
}


def _usage_from_wire(usage: Mapping[str, Any]) -> Usage:
    values: dict[str, Any] = {}
    for field, spellings in _USAGE_KEYS.items():
        for key in spellings:
            value = usage.get(key)
            if type(value) is int and value >= 0:
                values[field] = value
                break
    return Usage(**values)


def _llm_end(event: Mapping[str, Any]) -> list[Message]:
    out: list[Message] = []
    usage = event.get("usage")
    if isinstance(usage, Mapping):
        out.append(_usage_from_wire(usage))
    reason = event.get("stop-reason")
    if isinstance(reason, str):
        out.append(Stop(reason=reason))
    return out


def _tool_result(event: Mapping[str, Any]) -> list[Message]:
    call_id = event.get("tool-call-id", event.get("id", ""))
    output = event.get("result", "")
    return [
        ToolResult(
            tool_use_id=call_id if isinstance(call_id, str) else "",
            tool_name=_str(event, "name"),
            output=_content(output),
        )
    ]


def _tool_call(event: Mapping[str, Any]) -> list[Message]:
    call_id = event.get("id", "")
    arguments = event.get("arguments", {})
    name = _str(event, "name")
    return [ToolCall.from_input(name, call_id if isinstance(call_id, str) else "", arguments)]


_FROM_WIRE: Final[dict[str, Callable[[Mapping[str, Any]], list[Message]]]] = {
    "assistant-text-delta": lambda e: [Text(chunk=_str(e, "delta"))],
    "assistant-thinking-delta": lambda e: [Thinking(chunk=_str(e, "delta"))],
    "assistant-text": lambda e: [Text(chunk=_str(e, "text"))],
    "assistant-thinking": lambda e: [Thinking(chunk=_str(e, "text"))],
    "tool-call": _tool_call,
    "tool-result": _tool_result,
    "llm-end": _llm_end,
    "error": lambda e: [Error(message=_str(e, "error"))],
}


def _sub_agent_info(result: SubAgentResult) -> dict[str, Any]:
    first = result.text.strip().split("\n", 1)[0] if result.text.strip() else "(no text)"
    event: dict[str, Any] = {
        "type": "info",
        "summary": _summary(f"sub-agent {result.session_id} {result.status}: {first}"),
        "session-id": result.session_id,
        "status": result.status,
        "text": result.text,
        "usage": {"input": result.input_tokens, "output": result.output_tokens},
    }
    if result.thinking:
        event["thinking"] = result.thinking
    return event


# -- helpers ---------------------------------------------------------------------------------


def _str(obj: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise _Invalid(f"{key} must be a string")
    return value


def _count(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key, 0)
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise _Invalid(f"{key} must be a non-negative integer")
    return value


def _content(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


_RAW_OBJECT: Final = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_RAW_STR: Final = msgspec.json.Decoder(str).decode


def _raw_member(value: msgspec.Raw) -> str:
    """A flattened member: a JSON string decoded, any other value as its JSON text."""
    text = bytes(value)
    if text.startswith(b'"'):
        return _RAW_STR(text)
    return text.decode("utf-8", "replace").strip()


def _summary(text: str) -> str:
    """The wire's ``summary``: the first line, cut at a character boundary."""
    return first_line_summary(text, SUMMARY_BYTES)


def _json_text(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, OverflowError):  # not JSON-able: keep its text
        return str(value)


def _member_text(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)
