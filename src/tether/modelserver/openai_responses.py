"""OpenAI Responses, streamed: a scripted reply as ``response.*`` SSE events.

Theory of operation: :func:`events` turns one :class:`~tether.agent.scripted.Reply` into
the typed event objects ``POST /v1/responses`` streams (what Codex reads with
``wire_api = "responses"``), grouped one list item per scripted chunk so the server can
wait ``chunk_ms`` between them. Every event carries ``type`` and a running
``sequence_number``; :func:`sse` frames it with its ``event:`` line.

Order: ``response.created``, ``response.in_progress``; then one output item per part of
the reply, each ``response.output_item.added`` ... ``response.output_item.done``:

- thinking: a ``reasoning`` item with ``response.reasoning_summary_part.added``,
  ``response.reasoning_summary_text.delta`` per chunk and the ``.done`` events;
- text: a ``message`` item (``role: assistant``) with ``response.content_part.added``,
  ``response.output_text.delta`` per chunk, ``response.output_text.done`` and
  ``response.content_part.done``;
- each tool call: a ``function_call`` item ``{call_id, name, arguments}`` with one
  ``response.function_call_arguments.delta`` and ``.done``;

and last ``response.completed`` (``status: completed``, or ``incomplete`` with
``incomplete_details.reason = "max_output_tokens"`` for a ``max_tokens`` stop) whose
``response`` holds the whole ``output`` and the ``usage`` (``input_tokens`` including
``input_tokens_details.cached_tokens``, ``output_tokens``, ``total_tokens``).

:func:`failed` is the ``response.failed`` event for a scripted ``error`` (Codex treats
an HTTP error status as retryable and would retry it several times first).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from tether.agent.provider import ToolUse, Usage
from tether.agent.scripted import Reply

__all__ = ["events", "failed", "sse", "usage_object"]

_INCOMPLETE: Final[dict[str, str]] = {"max_tokens": "max_output_tokens"}


def sse(event: dict[str, Any]) -> bytes:
    """One event as SSE: its ``event:`` line (the type) and ``data:`` (the JSON)."""
    data = json.dumps(event, separators=(",", ":")).encode()
    return b"event: " + str(event.get("type", "message")).encode() + b"\ndata: " + data + b"\n\n"


def usage_object(usage: Usage) -> dict[str, Any]:
    """Responses usage: cached input counts inside ``input_tokens``."""
    total_input = usage.input + usage.cache_read + usage.cache_write
    return {
        "input_tokens": total_input,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total_input + usage.output,
    }


class _Stream:
    """Numbers events and keeps the finished output items."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.seq = 0
        self.output: list[dict[str, Any]] = []

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq, **fields}

    def item_added(self, item: dict[str, Any]) -> dict[str, Any]:
        return self.event("response.output_item.added", output_index=len(self.output), item=item)

    def item_done(self, item: dict[str, Any]) -> dict[str, Any]:
        done = self.event("response.output_item.done", output_index=len(self.output), item=item)
        self.output.append(item)
        return done


def events(
    reply: Reply, usage: Usage, *, model: str, response_id: str, created: int
) -> list[list[dict[str, Any]]]:
    """The reply's events, grouped per scripted chunk (see the module docstring)."""
    response = {"id": response_id, "object": "response", "created_at": created, "model": model}
    stream = _Stream(response)
    opening = {**response, "status": "in_progress", "output": []}
    groups = [
        [
            stream.event("response.created", response=opening),
            stream.event("response.in_progress", response=opening),
        ]
    ]
    if reply.thinking:
        groups += list(_reasoning(stream, reply.thinking, f"rs_{response_id}"))
    if reply.text:
        groups += list(_message(stream, reply.text, f"msg_{response_id}"))
    for n, call in enumerate(reply.tool_calls):
        groups.append(_function_call(stream, call, f"fc_{response_id}_{n}"))
    groups.append([_completed(stream, reply, usage)])
    return groups


def _reasoning(stream: _Stream, pieces: tuple[str, ...], item_id: str) -> Iterator[list[Any]]:
    text = "".join(pieces)
    at = {"item_id": item_id, "output_index": len(stream.output), "summary_index": 0}
    yield [
        stream.item_added({"id": item_id, "type": "reasoning", "summary": []}),
        stream.event(
            "response.reasoning_summary_part.added",
            **at,
            part={"type": "summary_text", "text": ""},
        ),
    ]
    for piece in pieces:
        yield [stream.event("response.reasoning_summary_text.delta", **at, delta=piece)]
    part = {"type": "summary_text", "text": text}
    item = {"id": item_id, "type": "reasoning", "summary": [part]}
    yield [
        stream.event("response.reasoning_summary_text.done", **at, text=text),
        stream.event("response.reasoning_summary_part.done", **at, part=part),
        stream.item_done(item),
    ]


def _message(stream: _Stream, pieces: tuple[str, ...], item_id: str) -> Iterator[list[Any]]:
    text = "".join(pieces)
    at = {"item_id": item_id, "output_index": len(stream.output), "content_index": 0}
    empty = {"type": "output_text", "text": "", "annotations": []}
    opening = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
    yield [
        stream.item_added({**opening, "content": []}),
        stream.event("response.content_part.added", **at, part=empty),
    ]
    for piece in pieces:
        yield [stream.event("response.output_text.delta", **at, delta=piece, logprobs=[])]
    part = {**empty, "text": text}
    yield [
        stream.event("response.output_text.done", **at, text=text, logprobs=[]),
        stream.event("response.content_part.done", **at, part=part),
        stream.item_done({**opening, "status": "completed", "content": [part]}),
    ]


def _function_call(stream: _Stream, call: ToolUse, item_id: str) -> list[dict[str, Any]]:
    arguments = json.dumps(call.arguments)
    item = {"id": item_id, "type": "function_call", "call_id": call.id, "name": call.name}
    at = {"item_id": item_id, "output_index": len(stream.output)}
    return [
        stream.item_added({**item, "arguments": "", "status": "in_progress"}),
        stream.event("response.function_call_arguments.delta", **at, delta=arguments),
        stream.event("response.function_call_arguments.done", **at, arguments=arguments),
        stream.item_done({**item, "arguments": arguments, "status": "completed"}),
    ]


def _completed(stream: _Stream, reply: Reply, usage: Usage) -> dict[str, Any]:
    incomplete = _INCOMPLETE.get(reply.stop_reason or "")
    final: dict[str, Any] = {**stream.response, "output": stream.output}
    final["usage"] = usage_object(usage)
    if incomplete:
        final |= {"status": "incomplete", "incomplete_details": {"reason": incomplete}}
        return stream.event("response.incomplete", response=final)
    return stream.event("response.completed", response={**final, "status": "completed"})


def failed(message: str, *, model: str, response_id: str, created: int) -> list[dict[str, Any]]:
    """The events of a response that failed (a scripted ``error``)."""
    response = {"id": response_id, "object": "response", "created_at": created, "model": model}
    stream = _Stream(response)
    error = {"code": "server_error", "message": message}
    return [
        stream.event("response.created", response={**response, "status": "in_progress"}),
        stream.event("response.failed", response={**response, "status": "failed", "error": error}),
    ]
