"""The stream-json renderer: one JSON object per display message, one per line, on stdout.

The objects are bash-agent's (REFERENCE-FACTS §2), made by
``tether.framing.stream_json.to_stream_json`` (records such as ``session_start`` are
written back as read); injected input is ``{"type": "user_input", "content": ...}``
(bash-agent's events.jsonl records ``user_input``). Nested runs (depth >= 1)
show up only as their ``sub_agent_result``, as in bash-agent. Lines carry no raw control
characters (JSON escapes C0; DEL and C1 are escaped here too), so they are safe on a
terminal. Notices and the inbox messages that need a person (clarification, approval
request) go to stderr as plain lines; status and progress are not shown. ``final`` adds
nothing: the answer is already in the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, TextIO

import msgspec

from tether.display.boundary import Item, Notice, UserInput
from tether.display.sanitize import escape_c1_json, sanitize
from tether.display.sinks import flush_quietly, safe_write
from tether.framing import messages as kinds
from tether.framing.stream_json import to_stream_json

if TYPE_CHECKING:
    from tether.wire import AnyEvent

_ENCODE: Final = msgspec.json.Encoder().encode
_PROMINENT: Final = {
    "clarification": ("q", "asks"),
    "approval_request": ("reason", "asks for approval"),
}


def encode_line(obj: object) -> str:
    """One JSON line (with its newline), safe to show on a terminal."""
    try:
        text = _ENCODE(obj).decode()
    except (TypeError, ValueError, OverflowError):
        text = _ENCODE(msgspec.to_builtins(obj, str_keys=True, enc_hook=repr)).decode()
    return escape_c1_json(text) + "\n"


class SideLines:
    """Human-facing lines on stderr for the machine outputs (stream-json, wire)."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self._out = stdout
        self._err = stderr

    def _emit(self, line: str) -> None:
        safe_write(self._out, line)
        flush_quietly(self._out)

    def notice(self, text: str, *, level: str) -> None:
        safe_write(self._err, f"tether: {level}: {sanitize(text)}\n")
        flush_quietly(self._err)

    def status(self, *, state: str, elapsed_s: float, note: str | None) -> None:
        pass

    def inbox(self, message: Mapping[str, Any], *, run: str, depth: int) -> None:
        kind = message.get("type")
        prominent = _PROMINENT.get(kind) if isinstance(kind, str) else None
        if prominent is not None:
            key, verb = prominent
            body = message.get(key, "")
            text = body if isinstance(body, str) else encode_line(body).rstrip("\n")
            self.notice(f"{run} {verb}: {text}", level="warning")

    def final(
        self,
        *,
        status: str,
        final_text: str,
        usage: Mapping[str, object] | None,
        truncated: bool,
        elapsed_s: float,
    ) -> None:
        flush_quietly(self._out)

    def close(self) -> None:
        flush_quietly(self._out)
        flush_quietly(self._err)


class StreamJsonRenderer(SideLines):
    """Display messages as stream-json lines; see the module docstring."""

    def raw(self, event: AnyEvent, raw: bytes | None, *, run: str, depth: int) -> bool:
        return False

    def item(self, item: Item, *, run: str, depth: int) -> None:
        if isinstance(item, Notice):
            self.notice(item.text, level=item.level)
        elif depth > 0 and not isinstance(item, kinds.SubAgentResult | kinds.AgentResult):
            return
        elif isinstance(item, UserInput):
            self._emit(encode_line({"type": "user_input", "content": item.text}))
        else:
            obj = to_stream_json(item)
            if obj is not None:
                self._emit(encode_line(obj))
