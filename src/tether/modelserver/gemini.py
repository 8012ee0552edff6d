"""Gemini ``models/M:streamGenerateContent`` (SSE) and ``models/M:generateContent``.

A reply becomes ``GenerateContentResponse`` chunks: one per thinking chunk (a part with
``thought: true``), one per text chunk, then one with a ``functionCall`` part per tool
call, and a last chunk with ``finishReason`` (``STOP``, or the reply's ``stop_reason``
upper-cased; Gemini has no tool-use stop reason) and ``usageMetadata``. A call asking
for JSON output (``responseMimeType: application/json`` with a schema: Gemini CLI's model
router) is answered with :func:`~tether.modelserver.core.schema_instance` and takes no
reply. A reply's
``error`` is a 400 ``INVALID_ARGUMENT``; so is a used-up script. ``:countTokens`` answers
a rough count without taking a reply.
"""

from __future__ import annotations

import json
from typing import Any, Final

from tether.agent.provider import Usage
from tether.agent.scripted import Reply
from tether.modelserver.core import Exchange, Script, default_usage, schema_instance, steps

__all__ = ["API", "GeminiGenerateContent"]

_ACTIONS: Final = (":streamGenerateContent", ":generateContent", ":countTokens")


class GeminiGenerateContent:
    name = "gemini"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and "/models/" in path and path.endswith(_ACTIONS)

    def serve(self, exchange: Exchange, script: Script) -> None:
        body = exchange.body if isinstance(exchange.body, dict) else {}
        if exchange.path.endswith(":countTokens"):
            exchange.send_json(200, {"totalTokens": len(json.dumps(body)) // 4})
            return
        config = body.get("generationConfig")
        schema = _json_schema(config if isinstance(config, dict) else {})
        if schema is not None:
            exchange.send_json(200, _structured(schema, exchange.path))
            return
        reply = exchange.take(script)
        if reply is None:
            _error(
                exchange, f"the model server's script is used up ({len(script.replies)} replies)"
            )
            return
        if reply.error is not None:
            exchange.pause(reply.delay_ms)
            _error(exchange, reply.error)
            return
        contents = body.get("contents")
        count = len(contents) if isinstance(contents, list) else 0
        model = exchange.path.rsplit("/", 1)[-1].split(":", 1)[0]
        if exchange.path.endswith(":streamGenerateContent"):
            _stream(exchange, reply, model, count)
        else:
            exchange.send_json(200, _whole(reply, model, count))


def _json_schema(config: dict[str, Any]) -> Any:
    """The schema of a structured-output call (a CLI's internal one), else None."""
    if config.get("responseMimeType") != "application/json":
        return None
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    return schema if isinstance(schema, dict) else None


def _structured(schema: Any, path: str) -> dict[str, Any]:
    text = json.dumps(schema_instance(schema))
    model = path.rsplit("/", 1)[-1].split(":", 1)[0]
    reply = Reply(text=(text,), usage=Usage(input=1, output=1))
    return _whole(reply, model, 0)


def _error(exchange: Exchange, message: str) -> None:
    error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
    exchange.send_json(400, {"error": error})


def _chunk(parts: list[dict[str, Any]], model: str) -> dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
    return {"candidates": [candidate], "modelVersion": model}


def _finish(reply: Reply, model: str, count: int, parts: list[dict[str, Any]]) -> dict[str, Any]:
    tokens_in, tokens_out = default_usage(reply, count)
    chunk = _chunk(parts, model)
    chunk["candidates"][0]["finishReason"] = (reply.stop_reason or "STOP").upper()
    chunk["usageMetadata"] = {
        "promptTokenCount": tokens_in,
        "candidatesTokenCount": tokens_out,
        "totalTokenCount": tokens_in + tokens_out,
    }
    return chunk


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"functionCall": {"id": call.id, "name": call.name, "args": call.arguments}}
        for call in reply.tool_calls
    ]


def _whole(reply: Reply, model: str, count: int) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if reply.thinking:
        parts.append({"text": "".join(reply.thinking), "thought": True})
    if reply.text:
        parts.append({"text": "".join(reply.text)})
    return _finish(reply, model, count, parts + _calls(reply))


def _stream(exchange: Exchange, reply: Reply, model: str, count: int) -> None:
    exchange.start_sse()
    for step in steps(reply):
        if exchange.gone:
            return
        if step.kind == "pause":
            exchange.pause(step.value)
        elif step.kind == "thinking":
            exchange.send_event(_chunk([{"text": step.value, "thought": True}], model))
        else:
            exchange.send_event(_chunk([{"text": step.value}], model))
    exchange.send_event(_finish(reply, model, count, _calls(reply)))


API: Final = GeminiGenerateContent()
