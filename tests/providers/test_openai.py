"""OpenAIProvider against a real local HTTP server speaking the Chat Completions SSE format."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tether.agent.provider import (
    AssistantTurn,
    BlockEnd,
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolOutcome,
    ToolSpec,
    ToolUse,
    Usage,
    UserTurn,
)
from tether.agent.providers import InvalidToolUse, ProviderHTTPError
from tether.agent.providers.openai import OpenAIProvider

from .http_server import LocalServer, Reply, collect, fixture, free_port

HELLO = ModelRequest(model="gpt-4o-mini", messages=(UserTurn("Hi"),), max_tokens=256)


def provider(url: str, env: dict[str, str] | None = None, **options: str) -> OpenAIProvider:
    opts = {"base_url": url + "/v1", "retry_delay": "0.01", **options}
    env = {"OPENAI_API_KEY": "sk-test"} if env is None else env
    return OpenAIProvider(model="gpt-4o-mini", env=env, options=opts)


def run(
    replies: list[Reply],
    request: ModelRequest = HELLO,
    env: dict[str, str] | None = None,
    **options: str,
) -> tuple[list[StreamEvent], ProviderError | None, LocalServer]:
    async def main() -> tuple[list[StreamEvent], ProviderError | None, LocalServer]:
        async with LocalServer(replies) as server:
            events, error = await collect(provider(server.url, env, **options), request)
        return events, error, server

    return asyncio.run(main())


def chunks(*deltas: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
    """A chat.completion.chunk stream as the API frames it, ending with ``data: [DONE]``."""
    out = []
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    for delta in deltas:
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        out.append({**base, "choices": [choice]})
    if finish is not None:
        out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage is not None:
        out.append({**base, "choices": [], "usage": usage})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in out) + b"data: [DONE]\n\n"


TEXT_EVENTS: list[StreamEvent] = [
    TextDelta(0, "Hello"),
    TextDelta(0, ", wörld ✓"),
    BlockEnd(0, TextBlock("Hello, wörld ✓")),
    Finished("end_turn", Usage(input=15, output=10, cache_read=4)),
]


@pytest.mark.parametrize(
    ("pieces", "framing"), [("whole", "chunked"), ("bytes", "chunked"), (11, "close")]
)
def test_text_reply_with_usage_chunk(pieces: Any, framing: Any) -> None:
    reply = Reply(body=fixture("openai_text.sse"), pieces=pieces, framing=framing)
    events, error, server = run([reply])
    assert (events, error) == (TEXT_EVENTS, None)
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.json() == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
    }


def test_parallel_tool_calls_assembled_from_index_keyed_fragments() -> None:
    events, error, _ = run([Reply(body=fixture("openai_tool_calls.sse"), pieces="bytes")])
    assert error is None
    assert events == [
        ToolUse("call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", {"location": "Paris é"}),
        ToolUse("call_ABlRcJ5DsK4S3yfZpBx5fXnq", "get_time", {"tz": "UTC"}),
        Finished("tool_use", Usage(input=82, output=41)),
    ]


def test_reasoning_content_becomes_thinking_and_usage_may_ride_on_the_finish_chunk() -> None:
    events, error, _ = run([Reply(body=fixture("openai_reasoning.sse"))])
    assert error is None
    assert events == [
        ThinkingDelta(0, "9.11 vs 9.8:"),
        ThinkingDelta(0, " compare tenths."),
        BlockEnd(0, ThinkingBlock("9.11 vs 9.8: compare tenths.")),
        TextDelta(1, "9.8 is greater."),
        BlockEnd(1, TextBlock("9.8 is greater.")),
        Finished("end_turn", Usage(input=15, output=30)),
    ]


def test_reasoning_field_and_interleaving_open_new_blocks() -> None:
    body = chunks({"reasoning": "a"}, {"content": "b"}, {"reasoning": "c"}, finish="length")
    events, _, _ = run([Reply(body=body)])
    assert events == [
        ThinkingDelta(0, "a"),
        BlockEnd(0, ThinkingBlock("a")),
        TextDelta(1, "b"),
        BlockEnd(1, TextBlock("b")),
        ThinkingDelta(2, "c"),
        BlockEnd(2, ThinkingBlock("c")),
        Finished("max_tokens", Usage()),
    ]


def test_tool_calls_without_index_and_without_id_and_bad_json() -> None:
    # Some local servers send each call whole, with no index; some send no id.
    body = chunks(
        {"content": ""},
        {"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": '{"x": 1}'}}]},
        {"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": "{oops"}}]},
        {"tool_calls": [{"index": 5, "function": {"name": "c", "arguments": "[1]"}}]},
        finish="stop",
    )
    events, error, _ = run([Reply(body=body)])
    assert error is None
    assert events[0] == ToolUse("c1", "a", {"x": 1})
    bad, wrong_type = events[1], events[2]
    assert isinstance(bad, InvalidToolUse)
    assert (bad.id, bad.name, bad.arguments, bad.raw_arguments) == ("c2", "b", {}, "{oops")
    assert isinstance(wrong_type, InvalidToolUse)
    assert wrong_type.id == "call_5"
    assert wrong_type.error == "the arguments are JSON list, not an object: [1]"
    assert events[3] == Finished("tool_use", Usage())  # "stop" after tool calls


def test_conversation_tools_and_tool_choice_none_are_mapped_exactly() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    request = ModelRequest(
        model="qwen3:8b",
        system="Be brief.",
        messages=(
            UserTurn("Read a.txt"),
            AssistantTurn(
                (
                    ThinkingBlock("need to read", "sig"),
                    TextBlock("Reading."),
                    ToolUse("call_1", "read", {"path": "a.txt"}),
                )
            ),
            ToolOutcome("call_1", "read", "hello"),
            AssistantTurn((ToolUse("call_2", "read", {"path": "b.txt"}),)),
            ToolOutcome("call_2", "read", "no such file", is_error=True),
            AssistantTurn((ThinkingBlock("only thinking"),)),
            UserTurn("Thanks"),
        ),
        tools=(ToolSpec("read", "Read a file", schema),),
        tool_choice="none",
        max_tokens=100,
    )
    _, error, server = run(
        [Reply(body=fixture("openai_text.sse"))], request, env={}, reasoning_effort="low"
    )
    assert error is None
    req = server.requests[0]
    assert "authorization" not in req.headers  # no key: local servers need none
    assert req.json() == {
        "model": "qwen3:8b",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read a.txt"},
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"a.txt"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":"b.txt"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such file"},
            {"role": "user", "content": "Thanks"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 100,
        "tools": [
            {
                "type": "function",
                "function": {"name": "read", "description": "Read a file", "parameters": schema},
            }
        ],
        "tool_choice": "none",
        "reasoning_effort": "low",
    }


def test_max_tokens_field_defaults_by_host_and_include_usage_can_be_off() -> None:
    official = OpenAIProvider(model="gpt-4o", env={})
    assert official.url == "https://api.openai.com/v1/chat/completions"
    assert official.max_tokens_field == "max_completion_tokens"
    assert (
        OpenAIProvider(model="m", env={"OPENAI_BASE_URL": "http://h:1/v1"}).max_tokens_field
        == "max_tokens"
    )
    _, _, server = run(
        [Reply(body=fixture("openai_text.sse"))],
        include_usage="false",
        max_tokens_field="max_completion_tokens",
    )
    body = server.requests[0].json()
    assert "stream_options" not in body
    assert body["max_completion_tokens"] == 256


def test_missing_done_after_finish_is_accepted_but_no_finish_is_an_error() -> None:
    body = fixture("openai_text.sse").replace(b"data: [DONE]\n\n", b"")
    events, error, _ = run([Reply(body=body, framing="close")])
    assert (events, error) == (TEXT_EVENTS, None)
    cut = fixture("openai_text.sse")
    cut = cut[: cut.index(b'"finish_reason":"stop"')]
    cut = cut[: cut.rindex(b"data:")]
    events, error, _ = run([Reply(body=cut, framing="close")], max_retries="0")
    assert events == TEXT_EVENTS[:2]
    assert error is not None
    assert error.retryable
    assert "before the response was complete" in error.message


def test_connection_dropped_mid_stream() -> None:
    body = fixture("openai_text.sse")
    cut = body.index(b'"finish_reason":"stop"')
    events, error, server = run([Reply(body=body, end="drop", drop_after=cut)] * 2)
    assert events == TEXT_EVENTS[:2]
    assert error is not None
    assert "connection failed mid-response" in error.message
    assert len(server.requests) == 1


def test_error_chunk_mid_stream() -> None:
    error_chunk = {"error": {"message": "model crashed", "type": "server_error", "code": None}}
    body = chunks({"content": "par"}).replace(
        b"data: [DONE]", f"data: {json.dumps(error_chunk)}".encode()
    )
    events, error, _ = run([Reply(body=body)])
    assert events == [TextDelta(0, "par")]
    assert error is not None
    assert (
        error.message
        == "openai: the server reported an error mid-stream: server_error: model crashed"
    )


def test_http_401_with_openai_error_body() -> None:
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-test. You can find your API key at"
            " https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    reply = Reply(
        status=401, body=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    events, error, server = run([reply] * 3)
    assert events == []
    assert isinstance(error, ProviderHTTPError)
    assert not error.retryable
    assert error.message.startswith("openai API error 401 invalid_request_error: Incorrect API key")
    assert error.message.endswith("(authentication failed; check $OPENAI_API_KEY)")
    assert len(server.requests) == 1


def test_http_429_then_success() -> None:
    detail = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
    body = json.dumps({"error": detail}).encode()
    first = Reply(
        status=429, body=body, headers={"content-type": "application/json", "retry-after": "0"}
    )
    events, error, server = run([first, Reply(body=fixture("openai_text.sse"))])
    assert (events, error) == (TEXT_EVENTS, None)
    assert len(server.requests) == 2


def test_http_500_gives_up_after_retries() -> None:
    reply = Reply(status=500, body=b"upstream exploded", headers={"content-type": "text/plain"})
    _, error, server = run([reply] * 2, max_retries="1")
    assert isinstance(error, ProviderHTTPError)
    assert error.message == (
        "openai API error 500: upstream exploded (the service failed; try again later)"
    )
    assert len(server.requests) == 2


def test_connection_refused_and_missing_model() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    _, error = asyncio.run(collect(provider(url, max_retries="0"), HELLO))
    assert error is not None
    assert error.retryable
    assert error.message.startswith(f"openai: could not connect to {url}/v1/chat/completions")
    p = OpenAIProvider(model="", env={}, options={"base_url": url})
    _, error = asyncio.run(collect(p, ModelRequest(model="", messages=(UserTurn("x"),))))
    assert error is not None
    assert error.message == "openai: no model given; pass --model NAME"


def test_json_body_instead_of_a_stream_is_reported() -> None:
    body = json.dumps({"error": {"message": "streaming is disabled", "type": "bad_config"}})
    reply = Reply(body=body.encode(), headers={"content-type": "application/json"})
    events, error, _ = run([reply])
    assert events == []
    assert error is not None
    assert error.message == (
        "openai: expected an event stream but the server answered with JSON:"
        " bad_config: streaming is disabled (does the server support streaming?)"
    )
