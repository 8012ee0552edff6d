"""OpenAI Chat Completions (``POST .../chat/completions``), streamed as SSE or whole.

A reply becomes ``chat.completion.chunk`` objects (``data: JSON`` events), one per
scripted chunk so the reply's ``chunk_ms`` pauses fall between them:

1. a first chunk with ``delta: {role: "assistant", content: ""}``;
2. thinking chunks as ``delta.reasoning_content`` (what DeepSeek, vLLM and llama.cpp
   send, and what OpenAI-compatible clients such as pi read as thinking);
3. text chunks as ``delta.content``;
4. each tool call as one ``delta.tool_calls`` fragment ``{index, id, type: "function",
   function: {name, arguments}}`` with the arguments as JSON text;
5. a chunk with ``finish_reason`` (``stop``, ``tool_calls``, ``length``, ...);
6. the usage chunk (``choices: []``, ``usage: {prompt_tokens, completion_tokens,
   total_tokens, prompt_tokens_details: {cached_tokens}}``), sent whether or not the
   client asked for ``stream_options.include_usage``; then ``data: [DONE]``.

Without ``stream: true`` the answer is one ``chat.completion`` object. A reply's
``error`` is a 400 ``invalid_request_error`` (clients do not retry those); so is a used-up
script.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tether.agent.scripted import Reply
from tether.modelserver.core import Exchange, Script, default_usage, steps

__all__ = ["API", "FINISH_REASONS", "OpenAIChat", "finish_reason", "usage_object"]

# The scripted (Anthropic-style) stop reasons in Chat Completions' words.
FINISH_REASONS: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


class OpenAIChat:
    name = "openai-chat"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/chat/completions")

    def serve(self, exchange: Exchange, script: Script) -> None:
        body = exchange.body if isinstance(exchange.body, dict) else {}
        reply = exchange.take(script)
        if reply is None:
            error(exchange, script.used_up())
            return
        if reply.error is not None:
            exchange.pause(reply.delay_ms)
            error(exchange, reply.error)
            return
        model = str(body.get("model") or "scripted")
        messages = body.get("messages")
        usage = usage_object(reply, len(messages) if isinstance(messages, list) else 0)
        ident = f"chatcmpl-scripted-{exchange.reply_number or 0}"
        if body.get("stream"):
            _stream(exchange, reply, _Chunks(ident, model), usage)
        else:
            exchange.pause(reply.delay_ms)
            exchange.send_json(200, _whole(reply, ident, model, usage))


def error(exchange: Exchange, message: str) -> None:
    """An OpenAI error reply (400, not retried by clients)."""
    body = {"message": message, "type": "invalid_request_error", "code": None, "param": None}
    exchange.send_json(400, {"error": body})


def finish_reason(reply: Reply) -> str:
    """The reply's stop reason in Chat Completions' words."""
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return FINISH_REASONS.get(stop, stop)


def usage_object(reply: Reply, messages: int) -> dict[str, Any]:
    """Chat Completions usage: cached input counts inside ``prompt_tokens``."""
    tokens_in, tokens_out = default_usage(reply, messages)
    cached = reply.usage.cache_read if reply.usage is not None else 0
    prompt = tokens_in + cached
    return {
        "prompt_tokens": prompt,
        "completion_tokens": tokens_out,
        "total_tokens": prompt + tokens_out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _tool_calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for index, call in enumerate(reply.tool_calls)
    ]


def _whole(reply: Reply, ident: str, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.text) or None}
    if reply.thinking:
        message["reasoning_content"] = "".join(reply.thinking)
    calls = _tool_calls(reply)
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    choice = {"index": 0, "message": message, "finish_reason": finish_reason(reply)}
    return {
        "id": ident,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [choice],
        "usage": usage,
    }


class _Chunks:
    def __init__(self, ident: str, model: str) -> None:
        self.base = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model}

    def choice(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


_DELTA_KEYS: Final = {"thinking": "reasoning_content", "text": "content"}


def _stream(exchange: Exchange, reply: Reply, chunks: _Chunks, usage: dict[str, Any]) -> None:
    exchange.start_sse()
    exchange.send_event(chunks.choice({"role": "assistant", "content": ""}))
    for step in steps(reply):
        if exchange.gone:
            return
        if step.kind == "pause":
            exchange.pause(step.value)
        else:
            exchange.send_event(chunks.choice({_DELTA_KEYS[step.kind]: step.value}))
    for call in _tool_calls(reply):
        exchange.send_event(chunks.choice({"tool_calls": [call]}))
    exchange.send_event(chunks.choice({}, finish_reason(reply)))
    exchange.send_event({**chunks.base, "choices": [], "usage": usage})
    exchange.send_event("[DONE]")


API: Final = OpenAIChat()
