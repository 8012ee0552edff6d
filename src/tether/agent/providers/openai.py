"""The ``openai`` provider: Chat Completions (``POST {base_url}/chat/completions``) streaming.

Any OpenAI-compatible server works: set option ``base_url`` (or ``$OPENAI_BASE_URL``), e.g.
``http://localhost:11434/v1`` for Ollama, ``http://localhost:8000/v1`` for vLLM or
``http://localhost:8080/v1`` for a llama.cpp server. ``$OPENAI_API_KEY`` (or the variable
named by option ``api_key_env``) becomes ``Authorization: Bearer``; local servers need none.

Request body: ``{model, messages, stream: true, stream_options: {include_usage: true},
<max_tokens_field>: N, tools?, tool_choice?, reasoning_effort?}``. ``max_tokens_field``
defaults to ``max_completion_tokens`` for api.openai.com (its reasoning models refuse
``max_tokens``) and ``max_tokens`` elsewhere (what local servers understand). Messages:
``system`` first when given; :class:`UserTurn` -> ``user``; :class:`AssistantTurn` ->
``assistant`` with the text joined and ``tool_calls`` ``[{id, type: function, function:
{name, arguments: JSON text}}]`` (thinking blocks are not sent back); :class:`ToolOutcome`
-> ``{role: tool, tool_call_id, content}``, content prefixed ``Error: `` when ``is_error``
(the API has no error flag). ``request.thinking_budget`` has no Chat Completions
equivalent and is ignored; use option ``reasoning_effort``.

Response chunks: ``choices[0].delta.content`` -> TextDelta; ``delta.reasoning_content`` or
``delta.reasoning`` (sent by vLLM, llama.cpp, DeepSeek and others) -> ThinkingDelta; a new
block index opens whenever the kind changes. ``delta.tool_calls[]`` fragments are keyed by
``index`` (id and name arrive first, ``arguments`` in pieces) and parsed once the choice
finishes. ``finish_reason`` maps ``stop`` -> ``end_turn``, ``length`` -> ``max_tokens``,
``tool_calls``/``function_call`` -> ``tool_use``, ``content_filter`` -> ``refusal``. Usage
comes from the chunk carrying ``usage`` (the last one, ``choices: []``, with
``include_usage``); ``input`` excludes ``prompt_tokens_details.cached_tokens``, which is
reported as ``cache_read``. ``data: [DONE]`` ends the stream; a stream that ends after
a ``finish_reason`` without ``[DONE]`` is accepted, one that ends before is an error.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

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
    make_client,
    parse_tool_arguments,
    stream_sse,
)
from tether.agent.providers.sse import SSEEvent

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
FINISH_REASONS: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_KNOWN_OPTIONS: Final = frozenset(
    {
        "base_url",
        "api_key_env",
        "max_tokens_field",
        "include_usage",
        "reasoning_effort",
        "max_retries",
        "retry_delay",
        "connect_timeout",
        "read_timeout",
    }
)


class OpenAIProvider:
    """Options: ``base_url``, ``api_key_env``, ``max_tokens_field``, ``include_usage``
    (true), ``reasoning_effort``, ``max_retries`` (2), ``retry_delay`` (0.5 s base),
    ``connect_timeout`` (10 s), ``read_timeout`` (300 s)."""

    name = "openai"

    def __init__(
        self,
        *,
        model: str = "",
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if env is None else env
        opts = Options(self.name, options, _KNOWN_OPTIONS)
        self.model = model
        base = opts.text("base_url") or env.get("OPENAI_BASE_URL", "") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/chat/completions"
        self._key_env = opts.text("api_key_env", "OPENAI_API_KEY")
        self._api_key = env.get(self._key_env, "")
        default_field = "max_completion_tokens" if _is_official(base) else "max_tokens"
        self.max_tokens_field = opts.text("max_tokens_field", default_field)
        self._include_usage = opts.flag("include_usage", True)
        self._effort = opts.text("reasoning_effort")
        self._max_retries = int(opts.integer("max_retries", DEFAULT_MAX_RETRIES) or 0)
        self._retry_delay = opts.number("retry_delay", DEFAULT_RETRY_DELAY_S)
        self._connect = opts.number("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S, minimum=0.001)
        self._read = opts.number("read_timeout", DEFAULT_READ_TIMEOUT_S, minimum=0.001)
        self._config_error = opts.error
        self._client: httpx.AsyncClient | None = None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        if self._config_error is not None:
            raise self._config_error
        if not (request.model or self.model):
            raise ProviderError("openai: no model given; pass --model NAME")
        if self._client is None:
            self._client = make_client(self._connect, self._read)
        body = request_body(
            request,
            default_model=self.model,
            max_tokens_field=self.max_tokens_field,
            include_usage=self._include_usage,
            reasoning_effort=self._effort,
        )
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        call = HTTPCall(
            provider=self.name,
            url=self.url,
            headers=headers,
            body=msgspec.json.encode(body),
            key_hint=f"${self._key_env}",
            max_retries=self._max_retries,
            retry_delay=self._retry_delay,
        )
        async with aclosing(stream_sse(self._client, call, OpenAIStreamParser)) as events:
            async for event in events:
                yield event

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


# --- request ---------------------------------------------------------------------------


def request_body(
    request: ModelRequest,
    *,
    default_model: str = "",
    max_tokens_field: str = "max_tokens",
    include_usage: bool = True,
    reasoning_effort: str = "",
) -> dict[str, Any]:
    """The Chat Completions request body for ``request`` (``stream: true``)."""
    body: dict[str, Any] = {
        "model": request.model or default_model,
        "messages": map_messages(request.system, request.messages),
        "stream": True,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    body[max_tokens_field] = request.max_tokens
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
        body["tool_choice"] = request.tool_choice
    if reasoning_effort:
        body["reasoning_effort"] = reasoning_effort
    return body


def map_messages(system: str, items: tuple[ConversationItem, ...]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for item in items:
        if isinstance(item, ToolOutcome):
            content = f"Error: {item.content}" if item.is_error else item.content
            messages.append({"role": "tool", "tool_call_id": item.tool_call_id, "content": content})
        elif isinstance(item, AssistantTurn):
            message = _assistant_message(item)
            if message is not None:
                messages.append(message)
        else:
            messages.append({"role": "user", "content": item.text})
    return messages


def _assistant_message(turn: AssistantTurn) -> dict[str, Any] | None:
    text = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": msgspec.json.encode(b.arguments).decode()},
        }
        for b in turn.blocks
        if isinstance(b, ToolUse)
    ]
    if not text and not calls:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


# --- response --------------------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    id: str
    has_id: bool = True
    name: str = ""
    parts: list[str] = field(default_factory=list)


class OpenAIStreamParser:
    """Sans-IO: Chat Completions chunks in, :class:`StreamEvent` values out."""

    def __init__(self) -> None:
        self.done = False
        self._kind = ""  # the open block: "", "text" or "thinking"
        self._index = -1
        self._parts: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._finish_reason: str | None = None
        self._flushed = False
        self._usage = Usage()
        self._chars = 0

    def receive(self, event: SSEEvent) -> list[StreamEvent]:
        if event.data.strip() == "[DONE]":
            return self._finish()
        chunk = decode_json(event.data)
        if not isinstance(chunk, dict):
            raise ProviderError("openai: malformed stream chunk: not a JSON object")
        if chunk.get("error"):
            kind, message = error_fields(chunk)
            raise ProviderError(
                f"openai: the server reported an error mid-stream:"
                f" {kind + ': ' if kind else ''}{message or '(no message)'}"
            )
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        return self._choice(choice) if isinstance(choice, dict) else []

    def end_of_stream(self) -> list[StreamEvent]:
        if self.done:
            return []
        if self._finish_reason is not None:
            return self._finish()
        raise ProviderError(
            "openai: the connection closed before the response was complete"
            " (no finish_reason); try again",
            retryable=True,
        )

    def _choice(self, choice: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                out += self._text("thinking", reasoning)
            content = delta.get("content")
            if isinstance(content, str) and content:
                out += self._text("text", content)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                self._tool_fragments(calls)
        reason = choice.get("finish_reason")
        if isinstance(reason, str) and reason:
            self._finish_reason = reason
            out += self._flush()
        return out

    def _text(self, kind: str, text: str) -> list[StreamEvent]:
        self._count(text)
        out = self._close_block() if self._kind != kind else []
        if self._kind != kind:
            self._kind, self._index = kind, self._index + 1
        self._parts.append(text)
        out.append(
            TextDelta(self._index, text) if kind == "text" else ThinkingDelta(self._index, text)
        )
        return out

    def _close_block(self) -> list[StreamEvent]:
        if not self._kind:
            return []
        text, kind = "".join(self._parts), self._kind
        self._kind, self._parts = "", []
        block = TextBlock(text) if kind == "text" else ThinkingBlock(text)
        return [BlockEnd(self._index, block)]

    def _tool_fragments(self, fragments: list[Any]) -> None:
        for fragment in fragments:
            if not isinstance(fragment, dict):
                continue
            call = self._call_for(fragment)
            function = fragment.get("function")
            if not isinstance(function, dict):
                continue
            if isinstance(function.get("name"), str) and function["name"]:
                call.name = function["name"]
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                self._count(arguments)
                call.parts.append(arguments)

    def _call_for(self, fragment: dict[str, Any]) -> _Call:
        raw_id = fragment.get("id")
        call_id = raw_id if isinstance(raw_id, str) else ""
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = self._guess_index(call_id)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call(call_id or f"call_{index}", has_id=bool(call_id))
        elif call_id and not call.has_id:
            call.id, call.has_id = call_id, True
        return call

    def _guess_index(self, call_id: str) -> int:
        """Some servers omit ``index``: a new id starts a new call, else the last continues."""
        for index, call in self._calls.items():
            if call_id and call.id == call_id:
                return index
        last = max(self._calls, default=-1)
        return last + 1 if call_id or last < 0 else last

    def _flush(self) -> list[StreamEvent]:
        if self._flushed:
            return []
        self._flushed = True
        out = self._close_block()
        for index in sorted(self._calls):
            call = self._calls[index]
            out.append(parse_tool_arguments(call.id, call.name, "".join(call.parts)))
        return out

    def _finish(self) -> list[StreamEvent]:
        out = self._flush()
        self.done = True
        reason = self._finish_reason or "stop"
        stop = FINISH_REASONS.get(reason, reason)
        if self._calls and stop == "end_turn":
            stop = "tool_use"  # some servers say "stop" after tool calls
        out.append(Finished(stop, self._usage))
        return out

    def _count(self, text: str) -> None:
        self._chars += len(text)
        if self._chars > MAX_RESPONSE_CHARS:
            raise ProviderError(
                f"openai: the response exceeded {MAX_RESPONSE_CHARS} characters; stopped"
            )


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = int_field(usage, "prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = int_field(details, "cached_tokens") if isinstance(details, dict) else 0
    cached = min(cached, prompt)
    return Usage(prompt - cached, int_field(usage, "completion_tokens"), cached, 0)


def _is_official(base_url: str) -> bool:
    try:
        return urlsplit(base_url).hostname == "api.openai.com"
    except ValueError:
        return False
