"""bash-agent's stream-json / events.jsonl objects, both ways.

Theory of operation
-------------------
bash-agent (``--output-format stream-json``) writes one JSON object per line; its
``events.jsonl`` holds the same lines. Most of them are a frame kind of
:mod:`tether.framing.messages` in another shape (``text{content}``,
``tool_call{name,id,input}``, ``usage{..., kind}``, ``user_input{content}``, ...); four are
records of the session that no frame carries (:data:`Record`): ``session_start`` (the first
line of every new session), ``session_fork``, ``sub_agent_start`` and ``sub_agent_end``.
:func:`from_stream_json` turns an object into a message or a record, or a
:class:`~tether.framing.resp.FrameRejection`; :func:`to_stream_json` writes either back.

Two things make a line more than its decoded object:

- ``tool_call.input`` is the model's JSON text as received. :func:`decode_line` keeps it
  raw (``1.50`` stays ``1.50``, key order and spacing stay), and :func:`to_stream_json`
  writes the text back as it is whenever it is JSON that fits on one line.
- bash-agent prints some values with ``printf %s`` unquoted, so an empty value leaves a
  line such as ``{"type":"sub_agent_start",...,"fork":}``. A line that fails to decode is
  read once more with each such empty value as ``null``; if that fails too it is
  ``malformed``.

TOOL_RESULT's extra pairs (``checklist``, ``summary``) travel as extra string members of
``tool_result``, after the known ones. AGENT_RESULT has no object of its own: it is
written as the ``sub_agent_result`` bash-agent records for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, TypeAlias

import msgspec

from tether import jsondepth
from tether.framing.messages import (
    INVALID_PAYLOAD,
    MALFORMED,
    UNKNOWN_TYPE,
    AgentResult,
    ContextUpdate,
    Error,
    ImageDescribe,
    Message,
    Retry,
    Stop,
    SubAgentResult,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
    UserInputFrame,
    UserMessage,
    _count,
    _Invalid,
    _str,
)
from tether.framing.messages import _content as content_text
from tether.framing.resp import FrameRejection

__all__ = [
    "Entry",
    "Record",
    "SessionFork",
    "SessionStart",
    "SubAgentEnd",
    "SubAgentStart",
    "decode_line",
    "from_stream_json",
    "to_stream_json",
]


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = ""


class SessionStart(_Record, frozen=True, kw_only=True):
    """A new session began (the first line of every new bash-agent session)."""

    TYPE: ClassVar[str] = "session_start"
    session_id: str


class SessionFork(_Record, frozen=True, kw_only=True):
    """A session forked from another (``--fork``)."""

    TYPE: ClassVar[str] = "session_fork"
    session_id: str
    source_session_id: str = ""


class SubAgentStart(_Record, frozen=True, kw_only=True):
    """A sub-agent was launched (``fork`` as written: ``true``, ``false`` or null)."""

    TYPE: ClassVar[str] = "sub_agent_start"
    session_id: str
    timestamp: str = ""
    prompt: str = ""
    description: str = ""
    fork: Any = None


class SubAgentEnd(_Record, frozen=True, kw_only=True):
    """A sub-agent's result was taken in."""

    TYPE: ClassVar[str] = "sub_agent_end"
    session_id: str
    timestamp: str = ""
    status: str = ""


Record: TypeAlias = SessionStart | SessionFork | SubAgentStart | SubAgentEnd
Entry: TypeAlias = "Message | Record"

_TOOL_RESULT_KEYS: Final = frozenset({"type", "tool_use_id", "name", "content"})
_DECODE_RAW: Final = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_DECODE: Final = msgspec.json.Decoder().decode
# An unquoted empty value (`"key":}` / `"key":,`), as bash's printf %s leaves it.
_EMPTY_VALUE: Final = re.compile(rb'(":)\s*(?=[,}])')


# -- lines ------------------------------------------------------------------------------------


def decode_line(data: bytes) -> dict[str, Any] | FrameRejection:
    """One line as an object whose ``input`` member stays raw JSON text; never raises."""
    obj = _decode_object(data)
    if obj is None and _EMPTY_VALUE.search(data):
        obj = _decode_object(_EMPTY_VALUE.sub(rb"\1null", data))
    if obj is None:
        return FrameRejection(MALFORMED, "not a JSON object")
    return obj


def _decode_object(data: bytes) -> dict[str, Any] | None:
    try:
        jsondepth.check_depth(data)
        raw = _DECODE_RAW(data)
        return {key: value if key == "input" else _DECODE(value) for key, value in raw.items()}
    except (msgspec.DecodeError, RecursionError):
        return None


# -- objects ------------------------------------------------------------------------------------


def to_stream_json(entry: Entry) -> dict[str, Any] | None:
    """The stream-json object of a message or record; None for SESSION_END (it has none)."""
    if isinstance(entry, _Record):
        return {"type": entry.TYPE, **msgspec.structs.asdict(entry)}
    match entry:
        case Text(chunk=chunk):
            return {"type": "text", "content": chunk}
        case Thinking(chunk=chunk):
            return {"type": "thinking", "content": chunk}
        case ToolCall():
            return {"type": "tool_call", "name": entry.name, "id": entry.id, "input": _input(entry)}
        case ToolResult():
            return _tool_result(entry)
        case Usage():
            return _usage(entry)
        case SubAgentResult():
            return {"type": "sub_agent_result", **msgspec.structs.asdict(entry)}
        case AgentResult():  # it has no object: bash-agent records this one for it
            return {"type": "sub_agent_result", **msgspec.structs.asdict(entry.sub_agent_result())}
        case Stop(reason=reason):
            return {"type": "stop", "reason": reason}
        case ContextUpdate(kind=kind, trigger=trigger):
            return {"type": "context_update", "kind": kind, "trigger": trigger}
        case Error(message=text):
            return {"type": "error", "message": text}
        case Retry():
            return {"type": "retry"}
    return _session_object(entry)


def _session_object(entry: Message) -> dict[str, Any] | None:
    """The objects of bash-agent's session loop (input, replayed message, images)."""
    match entry:
        case UserInputFrame(text=text):
            return {"type": "user_input", "content": text}
        case UserMessage(text=text):
            return {"type": "user_message", "content": text}
        case ImageDescribe(images=images, description=description):
            return {"type": "image_describe", "images": images, "content": description}
    return None  # SESSION_END


def from_stream_json(obj: Any) -> Entry | FrameRejection:
    """Decode a stream-json object into a message or a record, or reject it."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("type"), str):
        return FrameRejection(MALFORMED, "a stream-json message is an object with a string 'type'")
    kind: str = obj["type"]
    decode = _FROM_STREAM_JSON.get(kind)
    if decode is None:
        return FrameRejection(UNKNOWN_TYPE, f"{kind[:40]!r} is not a stream-json kind")
    try:
        return decode(obj)
    except _Invalid as exc:
        return FrameRejection(INVALID_PAYLOAD, f"{kind}: {exc}")


def _input(call: ToolCall) -> Any:
    """The call's input as written: its own JSON text when that fits a line, else decoded."""
    text = call.input
    if "\n" not in text and "\r" not in text:
        try:
            jsondepth.check_depth(text)
            _DECODE(text)
        except msgspec.DecodeError:
            pass
        else:
            return msgspec.Raw(text.encode())
    return call.arguments()


def _tool_result(result: ToolResult) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": result.tool_use_id,
        "name": result.tool_name,
        "content": result.output,
    }
    for key, value in result.pairs().items():
        obj.setdefault(key, value)
    return obj


def _usage(usage: Usage) -> dict[str, Any]:
    obj = {"type": "usage", **msgspec.structs.asdict(usage)}
    if not usage.sub_session_id:
        del obj["sub_session_id"]
    return obj


def _tool_call(obj: Mapping[str, Any]) -> ToolCall:
    name, call_id, given = _str(obj, "name"), _str(obj, "id", ""), obj.get("input", {})
    if isinstance(given, msgspec.Raw):
        return ToolCall.from_json_text(name, call_id, bytes(given).decode("utf-8", "replace"))
    return ToolCall.from_input(name, call_id, given)


def _tool_result_of(obj: Mapping[str, Any]) -> ToolResult:
    extra: list[str] = []
    for key, value in obj.items():
        if key not in _TOOL_RESULT_KEYS and isinstance(value, str):
            extra += (key, value)
    return ToolResult(
        tool_use_id=_str(obj, "tool_use_id", ""),
        tool_name=_str(obj, "name", ""),
        output=content_text(obj.get("content", "")),
        extra=tuple(extra),
    )


_FROM_STREAM_JSON: Final[dict[str, Callable[[Mapping[str, Any]], Entry]]] = {
    "text": lambda o: Text(chunk=_str(o, "content")),
    "thinking": lambda o: Thinking(chunk=_str(o, "content")),
    "tool_call": _tool_call,
    "tool_result": _tool_result_of,
    "usage": lambda o: Usage(
        input_tokens=_count(o, "input_tokens"),
        output_tokens=_count(o, "output_tokens"),
        cache_read_input_tokens=_count(o, "cache_read_input_tokens"),
        cache_creation_input_tokens=_count(o, "cache_creation_input_tokens"),
        kind=_str(o, "kind", "agent"),
        sub_session_id=_str(o, "sub_session_id", ""),
    ),
    "sub_agent_result": lambda o: SubAgentResult(
        session_id=_str(o, "session_id", ""),
        status=_str(o, "status"),
        input_tokens=_count(o, "input_tokens"),
        output_tokens=_count(o, "output_tokens"),
        thinking=_str(o, "thinking", ""),
        text=_str(o, "text", ""),
    ),
    "stop": lambda o: Stop(reason=_str(o, "reason")),
    "context_update": lambda o: ContextUpdate(kind=_str(o, "kind"), trigger=_str(o, "trigger", "")),
    "error": lambda o: Error(message=_str(o, "message")),
    "retry": lambda o: Retry(),
    "user_input": lambda o: UserInputFrame(text=_str(o, "content", "")),
    "user_message": lambda o: UserMessage(text=_str(o, "content", "")),
    "image_describe": lambda o: ImageDescribe(
        images=_str(o, "images", ""), description=_str(o, "content", "")
    ),
    "session_start": lambda o: SessionStart(session_id=_str(o, "session_id", "")),
    "session_fork": lambda o: SessionFork(
        session_id=_str(o, "session_id", ""), source_session_id=_str(o, "source_session_id", "")
    ),
    "sub_agent_start": lambda o: SubAgentStart(
        session_id=_str(o, "session_id", ""),
        timestamp=_str(o, "timestamp", ""),
        prompt=_str(o, "prompt", ""),
        description=_str(o, "description", ""),
        fork=o.get("fork"),
    ),
    "sub_agent_end": lambda o: SubAgentEnd(
        session_id=_str(o, "session_id", ""),
        timestamp=_str(o, "timestamp", ""),
        status=_str(o, "status", ""),
    ),
}
