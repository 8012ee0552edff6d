"""Anthropic Messages (``POST /v1/messages``), streamed as SSE or answered whole.

A reply becomes one assistant message: a ``thinking`` block (with a placeholder
signature), a ``text`` block, then one ``tool_use`` block per tool call (its input sent
as one ``input_json_delta``), and ``message_delta`` with the stop reason (the reply's,
else ``tool_use`` when it calls tools, else ``end_turn``) and the usage. A reply's
``error`` is a 400 ``invalid_request_error`` (clients do not retry those); so is a used-up
script. ``/v1/messages/count_tokens`` answers a rough count without taking a reply, and
so is the call the Claude Agent SDK (claude-code-acp) makes after each Bash command to
ask a small model which files the command touched: it is answered "none"
(:data:`NO_PATHS`). Fired beside the agent's own next call, it would otherwise take
whichever reply the race gave it.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tether.agent.scripted import Reply
from tether.modelserver.core import Exchange, Script, default_usage, steps

__all__ = ["API", "AnthropicMessages"]

SIGNATURE: Final = "scripted-signature"
# The Claude Agent SDK's file-path extraction after each Bash call: its system prompt's
# opening, and the answer that names no file.
PATH_EXTRACTION: Final = "Extract any file paths that this command reads or modifies."
NO_PATHS: Final = (
    "<is_displaying_contents>\nfalse\n</is_displaying_contents>\n\n<filepaths>\n</filepaths>"
)
_PATHS: Final = ("/v1/messages", "/v1/messages/count_tokens")


class AnthropicMessages:
    name = "anthropic"

    def handles(self, method: str, path: str) -> bool:
        return (method == "POST" and path.rstrip("/").endswith("/v1/messages")) or (
            method == "POST" and path.rstrip("/").endswith("/v1/messages/count_tokens")
        )

    def serve(self, exchange: Exchange, script: Script) -> None:
        body = exchange.body if isinstance(exchange.body, dict) else {}
        if exchange.path.rstrip("/").endswith("count_tokens"):
            exchange.send_json(200, {"input_tokens": len(json.dumps(body)) // 4})
            return
        reply = Reply(text=(NO_PATHS,)) if _path_extraction(body) else exchange.take(script)
        if reply is None:
            _error(
                exchange, f"the model server's script is used up ({len(script.replies)} replies)"
            )
            return
        if reply.delay_ms and reply.error is not None:
            exchange.pause(reply.delay_ms)
        if reply.error is not None:
            _error(exchange, reply.error)
            return
        model = str(body.get("model") or "scripted")
        messages = body.get("messages")
        count = len(messages) if isinstance(messages, list) else 0
        if body.get("stream"):
            _stream(exchange, reply, model, count)
        else:
            exchange.send_json(200, _whole(reply, model, count, exchange.reply_number or 0))


def _path_extraction(body: dict[str, Any]) -> bool:
    """The request is the Agent SDK's file-path extraction (no tools, its system prompt)."""
    system = body.get("system")
    blocks = system if isinstance(system, list) else [{"text": system}]
    texts = (b.get("text") for b in blocks if isinstance(b, dict))
    prompt = any(isinstance(t, str) and t.startswith(PATH_EXTRACTION) for t in texts)
    return prompt and not body.get("tools")


def _error(exchange: Exchange, message: str) -> None:
    error = {"type": "invalid_request_error", "message": message}
    exchange.send_json(400, {"type": "error", "error": error})


def _stop_reason(reply: Reply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _usage(reply: Reply, count: int) -> dict[str, int]:
    tokens_in, tokens_out = default_usage(reply, count)
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    if reply.usage is not None:
        usage["cache_read_input_tokens"] = reply.usage.cache_read
        usage["cache_creation_input_tokens"] = reply.usage.cache_write
    return usage


def _whole(reply: Reply, model: str, count: int, number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.thinking:
        thinking = "".join(reply.thinking)
        content.append({"type": "thinking", "thinking": thinking, "signature": SIGNATURE})
    if reply.text:
        content.append({"type": "text", "text": "".join(reply.text)})
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return {
        "id": f"msg_scripted_{number}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(reply),
        "stop_sequence": None,
        "usage": _usage(reply, count),
    }


_EMPTY: Final = {
    "thinking": {"type": "thinking", "thinking": "", "signature": ""},
    "text": {"type": "text", "text": ""},
}


class _Blocks:
    """Opens and closes content blocks as the reply's steps arrive."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.index = -1
        self.kind: str | None = None

    def open(self, kind: str, block: dict[str, Any]) -> None:
        self.close()
        self.index += 1
        self.kind = kind
        event = {"type": "content_block_start", "index": self.index, "content_block": block}
        self.exchange.send_event(event, "content_block_start")

    def delta(self, delta: dict[str, Any]) -> None:
        event = {"type": "content_block_delta", "index": self.index, "delta": delta}
        self.exchange.send_event(event, "content_block_delta")

    def close(self) -> None:
        if self.kind is None:
            return
        if self.kind == "thinking":
            self.delta({"type": "signature_delta", "signature": SIGNATURE})
        stop = {"type": "content_block_stop", "index": self.index}
        self.exchange.send_event(stop, "content_block_stop")
        self.kind = None


def _stream(exchange: Exchange, reply: Reply, model: str, count: int) -> None:
    usage = _usage(reply, count)
    exchange.start_sse()
    message = _whole(Reply(), model, count, exchange.reply_number or 0)
    message["stop_reason"] = None
    message["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    exchange.send_event({"type": "message_start", "message": message}, "message_start")
    blocks = _Blocks(exchange)
    for step in steps(reply):
        if exchange.gone:
            return
        if step.kind == "pause":
            exchange.pause(step.value)
            continue
        if blocks.kind != step.kind:
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            blocks.open(
                step.kind, empty if step.kind == "thinking" else {"type": "text", "text": ""}
            )
        key = "thinking" if step.kind == "thinking" else "text"
        blocks.delta({"type": f"{key}_delta", key: step.value})
    for call in reply.tool_calls:
        blocks.open("tool_use", {"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
        blocks.delta({"type": "input_json_delta", "partial_json": json.dumps(call.arguments)})
    blocks.close()
    delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
    exchange.send_event({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta")
    exchange.send_event({"type": "message_stop"}, "message_stop")


API: Final = AnthropicMessages()
