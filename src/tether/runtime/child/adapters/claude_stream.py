"""Claude Code's stream-json lines in the wire's display vocabulary (pure; no I/O).

:class:`ModelCall` follows one model call's ``stream_event`` lines (the Anthropic
Messages stream events Claude Code forwards with ``--include-partial-messages``) and
returns the display events the built-in agent would emit for it: deltas as they come,
then at ``message_stop`` the whole text / thinking blocks (``final?`` unless the call
asked for tools), ``assistant-stream-end``, ``llm-end`` with the stop reason and usage,
and one ``tool-call`` per ``tool_use`` block. :func:`tool_results` maps a ``user``
line's ``tool_result`` blocks; :func:`usage_of` maps Anthropic usage to the wire's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tether import jsondepth

__all__ = ["ModelCall", "tool_results", "usage_of"]

_USAGE_KEYS: Final = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_input_tokens": "cache-read",
    "cache_creation_input_tokens": "cache-write",
}
_DELTAS: Final = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking")}


def usage_of(raw: Any) -> dict[str, int]:
    """Anthropic usage (``input_tokens``, ...) as the wire's usage keys."""
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for key, wire in _USAGE_KEYS.items():
        count = raw.get(key)
        if type(count) is int and count > 0:
            out[wire] = count
    return out


@dataclass
class _Block:
    kind: str  # text | thinking | tool_use | another block type (ignored)
    parts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""


@dataclass
class ModelCall:
    """One model call as its stream events arrive; see the module docstring."""

    usage: dict[str, int] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    done: bool = False

    @classmethod
    def start(cls, event: Mapping[str, Any]) -> ModelCall:
        message = event.get("message")
        usage = usage_of(message.get("usage")) if isinstance(message, Mapping) else {}
        return cls(usage=usage)

    @property
    def text(self) -> str:
        return "".join("".join(b.parts) for b in self._ordered() if b.kind == "text")

    @property
    def tool_names(self) -> dict[str, str]:
        return {b.id: b.name for b in self._ordered() if b.kind == "tool_use" and b.id}

    def feed(self, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        index = event.get("index")
        if kind == "content_block_start" and type(index) is int:
            self._open(index, event.get("content_block"))
        elif kind == "content_block_delta" and type(index) is int:
            return self._delta(index, event.get("delta"))
        elif kind == "message_delta":
            self._finish(event)
        elif kind == "message_stop":
            self.done = True
            return self._closing()
        return []

    def salvage(self) -> list[dict[str, Any]]:
        """An interrupted call's closing events: the text so far, not final."""
        out: list[dict[str, Any]] = []
        for index, block in sorted(self.blocks.items()):
            if block.kind in ("text", "thinking") and block.parts:
                text = "".join(block.parts)
                out.append(_whole(block.kind, index, text, final=False))
        out.append({"type": "assistant-stream-end", "final?": False})
        out.append(self._llm_end("aborted"))
        self.done = True
        return out

    def _ordered(self) -> list[_Block]:
        return [block for _, block in sorted(self.blocks.items())]

    def _open(self, index: int, raw: Any) -> None:
        block = raw if isinstance(raw, Mapping) else {}
        kind = block.get("type")
        self.blocks[index] = _Block(
            kind=kind if isinstance(kind, str) else "?",
            id=str(block.get("id") or ""),
            name=str(block.get("name") or "tool"),
        )

    def _delta(self, index: int, raw: Any) -> list[dict[str, Any]]:
        block = self.blocks.get(index)
        if block is None or not isinstance(raw, Mapping):
            return []
        kind = raw.get("type")
        if kind == "input_json_delta" and isinstance(raw.get("partial_json"), str):
            block.parts.append(raw["partial_json"])
            return []
        if kind not in _DELTAS:
            return []  # signature_delta and kinds this side does not know
        wire, key = _DELTAS[kind]
        piece = raw.get(key)
        if not isinstance(piece, str) or not piece:
            return []
        block.parts.append(piece)
        return [{"type": f"assistant-{wire}-delta", "content-index": index, "delta": piece}]

    def _finish(self, event: Mapping[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
            self.stop_reason = delta["stop_reason"]
        self.usage.update(usage_of(event.get("usage")))

    def _closing(self) -> list[dict[str, Any]]:
        from tether.agent.loop import wire_stop_reason

        calls = [b for b in self._ordered() if b.kind == "tool_use"]
        final = not calls
        out: list[dict[str, Any]] = []
        for index, block in sorted(self.blocks.items()):
            if block.kind in ("text", "thinking"):
                out.append(_whole(block.kind, index, "".join(block.parts), final=final))
        out.append({"type": "assistant-stream-end", "final?": final})
        out.append(self._llm_end(wire_stop_reason(self.stop_reason or "end_turn")))
        for block in calls:
            out.append(
                {
                    "type": "tool-call",
                    "name": block.name,
                    "id": block.id,
                    "arguments": _arguments("".join(block.parts)),
                }
            )
        return out

    def _llm_end(self, stop: str) -> dict[str, Any]:
        return {
            "type": "llm-end",
            "stop-reason": stop,
            "usage": {"input": 0, "output": 0} | self.usage,
        }


def _whole(kind: str, index: int, text: str, *, final: bool) -> dict[str, Any]:
    return {"type": f"assistant-{kind}", "final?": final, "content-index": index, "text": text}


def _arguments(raw: str) -> Any:
    if not raw:
        return {}
    try:
        return jsondepth.loads(raw)
    except ValueError:
        return raw


def tool_results(line: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """A ``user`` line's ``tool_result`` blocks as ``tool-result`` events."""
    message = line.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return []
    out = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "tool_result":
            continue
        call_id = str(block.get("tool_use_id") or "")
        event: dict[str, Any] = {
            "type": "tool-result",
            "name": names.get(call_id, "tool"),
            "is-error?": bool(block.get("is_error")),
            "result": {"content": _text_of(block.get("content"))},
        }
        if call_id:
            event["id"] = event["tool-call-id"] = call_id
        out.append(event)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return "" if content is None else json.dumps(content)[:4096]
