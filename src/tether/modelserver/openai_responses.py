"""OpenAI Responses (``POST .../responses``): what Codex reads with ``wire_api = "responses"``.

A reply streams as typed ``response.*`` events (an ``event:`` line with the type and a
``data:`` line with the JSON, each carrying a running ``sequence_number``), one delta
per scripted chunk so the reply's ``chunk_ms`` pauses fall between them:

``response.created``, ``response.in_progress``; then one output item per part of the
reply, each ``response.output_item.added`` ... ``response.output_item.done``:

- thinking: a ``reasoning`` item with ``response.reasoning_summary_part.added``, one
  ``response.reasoning_summary_text.delta`` per chunk and the ``.done`` events;
- text: a ``message`` item (``role: assistant``) with ``response.content_part.added``,
  one ``response.output_text.delta`` per chunk, ``response.output_text.done`` and
  ``response.content_part.done``;
- each tool call: a ``function_call`` item ``{call_id, name, arguments}`` with one
  ``response.function_call_arguments.delta`` and ``.done``;

and last ``response.completed`` (or ``response.incomplete`` with ``incomplete_details:
{reason: "max_output_tokens"}`` for a ``max_tokens`` stop) whose ``response`` holds the
whole ``output`` and the ``usage`` (``input_tokens`` including
``input_tokens_details.cached_tokens``, ``output_tokens``, ``total_tokens``). Without
``stream: true`` the answer is that final response object.

A reply's ``error`` (and a used-up script) is a ``response.failed`` event in a 200
stream: Codex retries an HTTP error status several times before giving up, which would
consume later replies of the script.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tether.agent.scripted import Reply
from tether.modelserver.core import Exchange, Script, default_usage, steps

__all__ = ["API", "OpenAIResponses", "usage_object"]


class OpenAIResponses:
    name = "openai-responses"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/responses")

    def serve(self, exchange: Exchange, script: Script) -> None:
        body = exchange.body if isinstance(exchange.body, dict) else {}
        model = str(body.get("model") or "scripted")
        reply = exchange.take(script)
        tag = str(exchange.reply_number or 0)
        response = {"id": f"resp_scripted_{tag}", "object": "response", "model": model}
        stream = _Stream(exchange, response, tag)
        if reply is None:
            stream.failed(script.used_up())
            return
        if reply.error is not None:
            exchange.pause(reply.delay_ms)
            stream.failed(reply.error)
            return
        items = body.get("input")
        usage = usage_object(reply, len(items) if isinstance(items, list) else 0)
        if body.get("stream", True) is False:
            exchange.pause(reply.delay_ms)
            exchange.send_json(200, _final(stream.response, _output(reply, tag), reply, usage))
            return
        stream.run(reply, usage)


def usage_object(reply: Reply, items: int) -> dict[str, Any]:
    """Responses usage: cached input counts inside ``input_tokens``."""
    tokens_in, tokens_out = default_usage(reply, items)
    cached = reply.usage.cache_read if reply.usage is not None else 0
    return {
        "input_tokens": tokens_in + cached,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + cached + tokens_out,
    }


def _reasoning_item(ident: str, text: str | None) -> dict[str, Any]:
    summary = [] if text is None else [{"type": "summary_text", "text": text}]
    return {"id": ident, "type": "reasoning", "summary": summary}


def _message_item(ident: str, text: str | None) -> dict[str, Any]:
    done = text is not None
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "output_text", "text": text, "annotations": []})
    status = "completed" if done else "in_progress"
    return {
        "id": ident,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _call_items(reply: Reply, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"fc_{tag}_{n}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.arguments),
        }
        for n, call in enumerate(reply.tool_calls)
    ]


def _output(reply: Reply, tag: str) -> list[dict[str, Any]]:
    out = []
    if reply.thinking:
        out.append(_reasoning_item(f"rs_{tag}_0", "".join(reply.thinking)))
    if reply.text:
        out.append(_message_item(f"msg_{tag}_1", "".join(reply.text)))
    return out + _call_items(reply, tag)


def _final(
    response: dict[str, Any], output: list[dict[str, Any]], reply: Reply, usage: dict[str, Any]
) -> dict[str, Any]:
    final = {**response, "status": "completed", "output": output, "usage": usage}
    if reply.stop_reason == "max_tokens":
        final |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    return final


class _Stream:
    """Numbers the events of one response and keeps its finished output items."""

    def __init__(self, exchange: Exchange, response: dict[str, Any], tag: str) -> None:
        self.exchange = exchange
        self.tag = tag  # makes item ids unique across the responses of a conversation
        self.response = {**response, "created_at": 0}
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self.open: tuple[str, str, dict[str, Any]] | None = None  # kind, item id, where

    def send(self, kind: str, **fields: Any) -> None:
        self.seq += 1
        self.exchange.send_event({"type": kind, "sequence_number": self.seq, **fields}, kind)

    def begin(self) -> None:
        self.exchange.start_sse()
        opening = {**self.response, "status": "in_progress", "output": []}
        self.send("response.created", response=opening)
        self.send("response.in_progress", response=opening)

    def failed(self, message: str) -> None:
        self.begin()
        error = {"code": "server_error", "message": message}
        self.send("response.failed", response={**self.response, "status": "failed", "error": error})

    def run(self, reply: Reply, usage: dict[str, Any]) -> None:
        self.begin()
        parts: list[str] = []
        for step in steps(reply):
            if self.exchange.gone:
                return
            if step.kind == "pause":
                self.exchange.pause(step.value)
                continue
            if self.open is None or self.open[0] != step.kind:
                self.close(parts)
                parts = []
                self.start(step.kind)
            parts.append(step.value)
            self.delta(step.value)
        self.close(parts)
        for item in _call_items(reply, self.tag):
            self.function_call(item)
        kind = "response.completed"
        final = _final(self.response, self.output, reply, usage)
        if final["status"] == "incomplete":
            kind = "response.incomplete"
        self.send(kind, response=final)

    def start(self, kind: str) -> None:
        index = len(self.output)
        if kind == "thinking":
            ident = f"rs_{self.tag}_{index}"
            where = {"item_id": ident, "output_index": index, "summary_index": 0}
            self.send(
                "response.output_item.added", output_index=index, item=_reasoning_item(ident, None)
            )
            part: dict[str, Any] = {"type": "summary_text", "text": ""}
            self.send("response.reasoning_summary_part.added", **where, part=part)
        else:
            ident = f"msg_{self.tag}_{index}"
            where = {"item_id": ident, "output_index": index, "content_index": 0}
            self.send(
                "response.output_item.added", output_index=index, item=_message_item(ident, None)
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            self.send("response.content_part.added", **where, part=part)
        self.open = (kind, ident, where)

    def delta(self, text: str) -> None:
        assert self.open is not None
        kind, _, where = self.open
        if kind == "thinking":
            self.send("response.reasoning_summary_text.delta", **where, delta=text)
        else:
            self.send("response.output_text.delta", **where, delta=text, logprobs=[])

    def close(self, parts: list[str]) -> None:
        if self.open is None:
            return
        kind, ident, where = self.open
        self.open = None
        text = "".join(parts)
        index = where["output_index"]
        if kind == "thinking":
            part: dict[str, Any] = {"type": "summary_text", "text": text}
            self.send("response.reasoning_summary_text.done", **where, text=text)
            self.send("response.reasoning_summary_part.done", **where, part=part)
            item = _reasoning_item(ident, text)
        else:
            part = {"type": "output_text", "text": text, "annotations": []}
            self.send("response.output_text.done", **where, text=text, logprobs=[])
            self.send("response.content_part.done", **where, part=part)
            item = _message_item(ident, text)
        self.send("response.output_item.done", output_index=index, item=item)
        self.output.append(item)

    def function_call(self, item: dict[str, Any]) -> None:
        index = len(self.output)
        added = {**item, "arguments": "", "status": "in_progress"}
        where = {"item_id": item["id"], "output_index": index}
        self.send("response.output_item.added", output_index=index, item=added)
        self.send("response.function_call_arguments.delta", **where, delta=item["arguments"])
        self.send("response.function_call_arguments.done", **where, arguments=item["arguments"])
        self.send("response.output_item.done", output_index=index, item=item)
        self.output.append(item)


API: Final = OpenAIResponses()
