"""The ``anthropic`` provider: the Messages API (``POST /v1/messages``) with streaming.

Request: ``x-api-key`` from ``$ANTHROPIC_API_KEY`` (or the variable named by option
``api_key_env``; not needed when ``base_url`` is on this machine: localhost, 127.0.0.0/8,
``::1``), ``anthropic-version: 2023-06-01``, body ``{model, max_tokens, system?,
messages, tools?, tool_choice?, thinking?, stream: true}``. The conversation maps as:

- :class:`UserTurn` -> a ``user`` message with one ``text`` block;
- :class:`AssistantTurn` -> an ``assistant`` message: ``text`` blocks (empty ones are
  dropped, the API rejects them), ``thinking`` blocks echoed with their ``signature``
  (unsigned thinking, e.g. from another provider, cannot be sent back and is dropped),
  ``redacted_thinking`` blocks (kept as a ThinkingBlock whose signature is
  ``REDACTED_PREFIX + data``), ``tool_use`` blocks with ``input``;
- :class:`ToolOutcome` -> a ``tool_result`` block ``{tool_use_id, content, is_error?}`` in a
  ``user`` message; adjacent user-side items merge into one message.

Extended thinking is ``thinking: {type: enabled, budget_tokens}`` from
``request.thinking_budget`` or option ``thinking_budget``; when the budget is not below
``max_tokens``, ``max_tokens`` becomes ``budget + max_tokens`` so the answer keeps its room.

Response: the SSE events ``message_start`` (usage), ``content_block_start`` (text,
thinking, redacted_thinking, tool_use), ``content_block_delta`` (``text_delta``,
``thinking_delta``, ``signature_delta``, ``input_json_delta``), ``content_block_stop``,
``message_delta`` (stop_reason, cumulative usage), ``message_stop``, ``ping`` and
``error``; unknown event and block types are ignored, as the API's versioning policy asks.
Tool input JSON is accumulated and parsed once at ``content_block_stop``; input that is not
a JSON object yields an :class:`~tether.agent.providers.InvalidToolUse`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import msgspec

from tether.agent.provider import (
    AssistantTurn,
    BlockEnd,
    ConversationItem,
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolOutcome,
    ToolUse,
    Usage,
)
from tether.agent.providers import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_RETRY_DELAY_S,
    MAX_RESPONSE_CHARS,
    HTTPCall,
    Options,
    decode_json,
    error_fields,
    int_field,
    is_loopback_url,
    make_client,
    parse_tool_arguments,
    stream_sse,
)
from tether.agent.providers.sse import SSEEvent

API_VERSION: Final = "2023-06-01"
DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
DEFAULT_MODEL: Final = "claude-sonnet-4-5"
REDACTED_PREFIX: Final = "redacted:"  # never a prefix of a real (base64) signature
_RETRYABLE_KINDS: Final = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
_KNOWN_OPTIONS: Final = frozenset(
    {
        "base_url",
        "api_key_env",
        "thinking_budget",
        "anthropic_beta",
        "max_retries",
        "retry_delay",
        "connect_timeout",
        "read_timeout",
    }
)


class AnthropicProvider:
    """Options: ``base_url`` (else ``$ANTHROPIC_BASE_URL``), ``api_key_env``,
    ``thinking_budget`` (tokens, or ``off``), ``anthropic_beta`` (header value),
    ``max_retries`` (2), ``retry_delay`` (0.5 s base), ``connect_timeout`` (10 s),
    ``read_timeout`` (300 s)."""

    name = "anthropic"

    def __init__(
        self,
        *,
        model: str = "",
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        opts = Options(self.name, options, _KNOWN_OPTIONS)
        self.model = model or DEFAULT_MODEL
        base = opts.text("base_url") or env.get("ANTHROPIC_BASE_URL", "") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/v1/messages"
        self._key_env = opts.text("api_key_env", "ANTHROPIC_API_KEY")
        self._api_key = env.get(self._key_env, "")
        self._beta = opts.text("anthropic_beta")
        self.thinking_budget = opts.integer("thinking_budget", None, minimum=1)
        self._max_retries = int(opts.integer("max_retries", DEFAULT_MAX_RETRIES) or 0)
        self._retry_delay = opts.number("retry_delay", DEFAULT_RETRY_DELAY_S)
        self._connect = opts.number("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S, minimum=0.001)
        self._read = opts.number("read_timeout", DEFAULT_READ_TIMEOUT_S, minimum=0.001)
        self._config_error = opts.error
        self._client: httpx.AsyncClient | None = None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        if self._config_error is not None:
            raise self._config_error
        if not self._api_key and not is_loopback_url(self.url):
            raise ProviderError(
                f"anthropic: ${self._key_env} is not set; export your Anthropic API key"
            )
        if self._client is None:
            self._client = make_client(self._connect, self._read)
        body = request_body(request, default_model=self.model, thinking=self.thinking_budget)
        call = HTTPCall(
            provider=self.name,
            url=self.url,
            headers=self._headers(),
            body=msgspec.json.encode(body),
            key_hint=f"${self._key_env}",
            max_retries=self._max_retries,
            retry_delay=self._retry_delay,
        )
        async with aclosing(stream_sse(self._client, call, AnthropicStreamParser)) as events:
            async for event in events:
                yield event

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _headers(self) -> dict[str, str]:
        headers = {
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        if self._beta:
            headers["anthropic-beta"] = self._beta
        return headers


# --- request ---------------------------------------------------------------------------


def request_body(
    request: ModelRequest, *, default_model: str = DEFAULT_MODEL, thinking: int | None = None
) -> dict[str, Any]:
    """The Messages API request body for ``request`` (``stream: true``)."""
    budget = request.thinking_budget if request.thinking_budget is not None else thinking
    max_tokens = request.max_tokens
    body: dict[str, Any] = {"model": request.model or default_model, "max_tokens": max_tokens}
    if request.system:
        body["system"] = request.system
    body["messages"] = map_messages(request.messages)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        body["tool_choice"] = {"type": request.tool_choice}
    if budget:
        if budget >= max_tokens:
            body["max_tokens"] = budget + max_tokens
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    body["stream"] = True
    return body


def map_messages(items: tuple[ConversationItem, ...]) -> list[dict[str, Any]]:
    """Provider-neutral conversation -> Messages API ``messages``, same-role runs merged."""
    messages: list[dict[str, Any]] = []
    for item in items:
        role, blocks = _map_item(item)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    return messages


def _map_item(item: ConversationItem) -> tuple[str, list[dict[str, Any]]]:
    if isinstance(item, ToolOutcome):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": item.tool_call_id,
            "content": item.content,
        }
        if item.is_error:
            result["is_error"] = True
        return "user", [result]
    if isinstance(item, AssistantTurn):
        return "assistant", [b for b in map(_map_block, item.blocks) if b is not None]
    return "user", [{"type": "text", "text": item.text}] if item.text else []


def _map_block(block: TextBlock | ThinkingBlock | ToolUse) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ThinkingBlock):
        if not block.signature:
            return None
        if block.signature.startswith(REDACTED_PREFIX):
            return {"type": "redacted_thinking", "data": block.signature[len(REDACTED_PREFIX) :]}
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}


# --- response --------------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    kind: str  # text | thinking | redacted | tool_use | other
    parts: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    initial_input: dict[str, Any] = field(default_factory=dict)


class AnthropicStreamParser:
    """Sans-IO: Messages API SSE events in, :class:`StreamEvent` values out."""

    def __init__(self) -> None:
        self.done = False
        self._blocks: dict[int, _Block] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason = ""
        self._chars = 0

    def receive(self, event: SSEEvent) -> list[StreamEvent]:
        payload = decode_json(event.data)
        if not isinstance(payload, dict):
            raise ProviderError(
                f"anthropic: malformed stream event {event.event!r}: not a JSON object"
            )
        kind = payload.get("type", event.event)
        handler = _HANDLERS.get(kind if isinstance(kind, str) else "")
        return handler(self, payload) if handler is not None else []

    def end_of_stream(self) -> list[StreamEvent]:
        if self.done:
            return []
        raise ProviderError(
            "anthropic: the connection closed before the response was complete"
            " (no message_stop); try again",
            retryable=True,
        )

    # handlers, one per event type

    def _message_start(self, payload: dict[str, Any]) -> list[StreamEvent]:
        message = payload.get("message")
        if isinstance(message, dict):
            self._take_usage(message.get("usage"))
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[StreamEvent]:
        index, block = _index(payload), payload.get("content_block")
        if index is None or not isinstance(block, dict):
            raise ProviderError("anthropic: malformed content_block_start event")
        kind = block.get("type")
        state = _Block("other")
        if kind in {"text", "thinking"}:
            state = _Block(kind)
            initial = block.get(kind)
            if isinstance(initial, str) and initial:
                return self._add_text(index, state, initial)
        elif kind == "redacted_thinking":
            data = block.get("data")
            state = _Block("redacted", signature=[data if isinstance(data, str) else ""])
        elif kind == "tool_use":
            initial_input = block.get("input")
            state = _Block(
                "tool_use",
                call_id=str(block.get("id", "")),
                name=str(block.get("name", "")),
                initial_input=initial_input if isinstance(initial_input, dict) else {},
            )
        self._blocks[index] = state
        return []

    def _block_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
        index, delta = _index(payload), payload.get("delta")
        if index is None or not isinstance(delta, dict):
            raise ProviderError("anthropic: malformed content_block_delta event")
        block = self._blocks.get(index)
        if block is None:
            raise ProviderError(f"anthropic: content_block_delta for unknown block {index}")
        kind = delta.get("type")
        key = _DELTA_KEYS.get(kind if isinstance(kind, str) else "")
        value = delta.get(key) if key else None
        if not isinstance(value, str):
            return []
        if kind == "signature_delta":
            block.signature.append(value)
            return []
        if kind == "input_json_delta":
            self._count(value)
            block.parts.append(value)
            return []
        return self._add_text(index, block, value)

    def _block_stop(self, payload: dict[str, Any]) -> list[StreamEvent]:
        index = _index(payload)
        block = self._blocks.pop(index, None) if index is not None else None
        return _finish_block(index or 0, block) if block is not None else []

    def _message_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
        delta = payload.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self._stop_reason = delta["stop_reason"]
        self._take_usage(payload.get("usage"))
        return []

    def _message_stop(self, payload: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for index in sorted(self._blocks):  # blocks the server never closed
            out += _finish_block(index, self._blocks.pop(index))
        self.done = True
        out.append(Finished(self._stop_reason or "end_turn", self._usage_value()))
        return out

    def _error(self, payload: dict[str, Any]) -> list[StreamEvent]:
        kind, message = error_fields(payload)
        retryable = kind in _RETRYABLE_KINDS
        hint = "; try again later" if retryable else ""
        raise ProviderError(
            f"anthropic: the API reported {kind or 'an error'} mid-stream:"
            f" {message or '(no message)'}{hint}",
            retryable=retryable,
        )

    def _ignore(self, payload: dict[str, Any]) -> list[StreamEvent]:
        return []

    # helpers

    def _add_text(self, index: int, block: _Block, text: str) -> list[StreamEvent]:
        self._blocks[index] = block
        self._count(text)
        if block.kind == "text":
            block.parts.append(text)
            return [TextDelta(index, text)]
        if block.kind == "thinking":
            block.parts.append(text)
            return [ThinkingDelta(index, text)]
        return []

    def _count(self, text: str) -> None:
        self._chars += len(text)
        if self._chars > MAX_RESPONSE_CHARS:
            raise ProviderError(
                f"anthropic: the response exceeded {MAX_RESPONSE_CHARS} characters; stopped"
            )

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        for key in _USAGE_KEYS:
            if key in usage:  # message_delta counts are cumulative: the latest value wins
                self._usage[key] = int_field(usage, key)

    def _usage_value(self) -> Usage:
        return Usage(*(self._usage.get(key, 0) for key in _USAGE_KEYS))


_USAGE_KEYS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
_DELTA_KEYS: Final = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
    "input_json_delta": "partial_json",
}
_HANDLERS: Final = {
    "message_start": AnthropicStreamParser._message_start,
    "content_block_start": AnthropicStreamParser._block_start,
    "content_block_delta": AnthropicStreamParser._block_delta,
    "content_block_stop": AnthropicStreamParser._block_stop,
    "message_delta": AnthropicStreamParser._message_delta,
    "message_stop": AnthropicStreamParser._message_stop,
    "error": AnthropicStreamParser._error,
    "ping": AnthropicStreamParser._ignore,
}


def _index(payload: dict[str, Any]) -> int | None:
    index = payload.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else None


def _finish_block(index: int, block: _Block) -> list[StreamEvent]:
    if block.kind == "text":
        return [BlockEnd(index, TextBlock("".join(block.parts)))]
    if block.kind == "thinking":
        signature = "".join(block.signature) or None
        return [BlockEnd(index, ThinkingBlock("".join(block.parts), signature))]
    if block.kind == "redacted":
        return [BlockEnd(index, ThinkingBlock("", REDACTED_PREFIX + "".join(block.signature)))]
    if block.kind == "tool_use":
        if not block.parts:
            return [ToolUse(block.call_id, block.name, block.initial_input)]
        return [parse_tool_arguments(block.call_id, block.name, "".join(block.parts))]
    return []
