"""OpenAI Chat Completions, streamed: a scripted reply as ``chat.completion.chunk`` SSE.

Theory of operation: :func:`chunks` turns one :class:`~tether.agent.scripted.Reply` into
the JSON chunk objects an OpenAI-compatible server streams for ``POST
/v1/chat/completions`` with ``stream: true``, one list item per scripted chunk so the
server can wait ``chunk_ms`` between them:

1. a first chunk with ``delta.role = "assistant"``;
2. thinking chunks as ``delta.reasoning_content`` (what DeepSeek, vLLM and llama.cpp
   send; OpenAI clients that know reasoning read it);
3. text chunks as ``delta.content``;
4. each tool call as one ``delta.tool_calls`` fragment ``{index, id, type: "function",
   function: {name, arguments}}`` with the arguments as JSON text;
5. a chunk with ``finish_reason`` (``stop``, ``tool_calls``, ``length``, ...) and an
   empty delta;
6. the usage chunk (``choices: []``, ``usage: {prompt_tokens, completion_tokens,
   total_tokens, prompt_tokens_details: {cached_tokens}}``), sent whether or not the
   client asked for ``stream_options.include_usage`` (clients ignore what they did not
   ask for).

:func:`sse` frames a chunk as ``data: JSON`` + blank line; :data:`DONE` ends the stream.
:func:`error_body` is the JSON body of an error reply (``{"error": {message, type,
code}}``), for a scripted ``error``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tether.agent.provider import Usage
from tether.agent.scripted import Reply

__all__ = [
    "DONE",
    "FINISH_REASONS",
    "chunks",
    "error_body",
    "finish_reason",
    "sse",
    "usage_object",
]

DONE: Final = b"data: [DONE]\n\n"
# The scripted (Anthropic-style) stop reasons in Chat Completions' words.
FINISH_REASONS: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def sse(chunk: dict[str, Any]) -> bytes:
    """One chunk as an SSE ``data:`` event."""
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def usage_object(usage: Usage) -> dict[str, Any]:
    """Chat Completions usage: cached input counts inside ``prompt_tokens``."""
    prompt = usage.input + usage.cache_read + usage.cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read},
    }


def chunks(
    reply: Reply, usage: Usage, *, model: str, response_id: str, created: int
) -> list[dict[str, Any]]:
    """The reply's chunk objects, in order (see the module docstring)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {**base, "choices": [choice]}

    base = {"id": response_id, "object": "chat.completion.chunk", "created": created}
    base["model"] = model
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": piece}) for piece in reply.thinking]
    out += [chunk({"content": piece}) for piece in reply.text]
    for index, call in enumerate(reply.tool_calls):
        function = {"name": call.name, "arguments": json.dumps(call.arguments)}
        fragment = {"index": index, "id": call.id, "type": "function", "function": function}
        out.append(chunk({"tool_calls": [fragment]}))
    out.append(chunk({}, finish_reason(reply)))
    out.append({**base, "choices": [], "usage": usage_object(usage)})
    return out


def finish_reason(reply: Reply) -> str:
    """The reply's stop reason in Chat Completions' words."""
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return FINISH_REASONS.get(stop, stop)


def error_body(message: str, *, kind: str = "server_error") -> dict[str, Any]:
    """An OpenAI error reply's JSON body."""
    return {"error": {"message": message, "type": kind, "code": kind}}
