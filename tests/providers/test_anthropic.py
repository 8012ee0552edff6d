"""AnthropicProvider against a real local HTTP server speaking the Messages API SSE format."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.waits import settle
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
from tether.agent.providers import InvalidToolUse, ProviderHTTPError, is_loopback_url
from tether.agent.providers.anthropic import AnthropicProvider

from .http_server import LocalServer, Reply, collect, fixture, free_port

KEY_ENV = {"ANTHROPIC_API_KEY": "sk-ant-test"}
HELLO = ModelRequest(model="claude-sonnet-4-5", messages=(UserTurn("Hi"),), max_tokens=1024)


def provider(url: str, env: dict[str, str] | None = None, **options: str) -> AnthropicProvider:
    opts = {"base_url": url, "retry_delay": "0.01", **options}
    return AnthropicProvider(
        model="claude-sonnet-4-5", env=KEY_ENV if env is None else env, options=opts
    )


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


TEXT_EVENTS: list[StreamEvent] = [
    TextDelta(0, "Hello"),
    TextDelta(0, ", wörld ✓"),
    BlockEnd(0, TextBlock("Hello, wörld ✓")),
    Finished("end_turn", Usage(input=25, output=15, cache_read=12, cache_write=0)),
]


@pytest.mark.parametrize(
    ("pieces", "framing"),
    [
        ("whole", "chunked"),
        ("bytes", "chunked"),
        (7, "chunked"),
        ("whole", "length"),
        (13, "close"),
    ],
)
def test_text_reply(pieces: Any, framing: Any) -> None:
    events, error, server = run(
        [Reply(body=fixture("anthropic_text.sse"), pieces=pieces, framing=framing)]
    )
    assert error is None
    assert events == TEXT_EVENTS
    (req,) = server.requests
    assert (req.method, req.path) == ("POST", "/v1/messages")
    assert req.headers["x-api-key"] == "sk-ant-test"
    assert req.headers["anthropic-version"] == "2023-06-01"
    assert req.headers["content-type"] == "application/json"
    assert "anthropic-beta" not in req.headers
    assert req.json() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "stream": True,
    }


def test_crlf_stream_gives_the_same_events() -> None:
    body = fixture("anthropic_text.sse").replace(b"\n", b"\r\n")
    events, error, _ = run([Reply(body=body, pieces=5)])
    assert (events, error) == (TEXT_EVENTS, None)


def test_thinking_then_text_with_signature_and_thinking_param() -> None:
    events, error, server = run(
        [Reply(body=fixture("anthropic_thinking.sse"), pieces="bytes")],
        thinking_budget="2048",
        anthropic_beta="interleaved-thinking-2025-05-14",
    )
    assert error is None
    thinking = (
        "Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3"
    )
    assert events == [
        ThinkingDelta(0, "Let me solve this step by step:\n\n1. First break down 27 * 453"),
        ThinkingDelta(0, "\n2. 453 = 400 + 50 + 3"),
        BlockEnd(
            0, ThinkingBlock(thinking, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
        ),
        TextDelta(1, "27 * 453 = 12,231"),
        BlockEnd(1, TextBlock("27 * 453 = 12,231")),
        Finished("end_turn", Usage(input=40, output=120)),
    ]
    body = server.requests[0].json()
    # budget >= max_tokens: max_tokens grows so the answer keeps its room
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 2048 + 1024
    assert server.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_request_thinking_budget_wins_over_option_and_small_budget_keeps_max_tokens() -> None:
    request = ModelRequest(
        model="m", messages=(UserTurn("x"),), max_tokens=8192, thinking_budget=1024
    )
    _, _, server = run([Reply(body=fixture("anthropic_text.sse"))], request, thinking_budget="4000")
    body = server.requests[0].json()
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 8192


def test_tool_use_with_awkwardly_split_json_fragments() -> None:
    events, error, _ = run([Reply(body=fixture("anthropic_tool_use.sse"), pieces="bytes")])
    assert error is None
    assert events == [
        TextDelta(0, "Okay, let's check the weather"),
        BlockEnd(0, TextBlock("Okay, let's check the weather")),
        ToolUse(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            {"location": 'San Francisco, CA é"', "unit": "fahrenheit"},
        ),
        Finished("tool_use", Usage(input=472, output=89)),
    ]


def sse(*events: dict[str, Any]) -> bytes:
    """Messages API events, framed the way the API frames them."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "m",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
}
STOP = {"type": "message_stop"}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str, output: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output},
    }


def test_malformed_tool_json_becomes_invalid_tool_use() -> None:
    body = sse(
        START,
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"command": "ls'},
        },
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_2", "name": "noargs", "input": {}}),
        block_stop(1),
        message_delta("tool_use", 9),
        STOP,
    )
    events, error, _ = run([Reply(body=body)])
    assert error is None
    bad = events[0]
    assert isinstance(bad, InvalidToolUse)
    assert (bad.id, bad.name, bad.arguments) == ("toolu_1", "bash", {})
    assert bad.raw_arguments == '{"command": "ls'
    assert bad.error.startswith("the arguments are not valid JSON")
    assert events[1:] == [ToolUse("toolu_2", "noargs", {}), Finished("tool_use", Usage(3, 9))]


def test_redacted_thinking_round_trips_through_the_signature() -> None:
    body = sse(
        START,
        block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
        block_stop(0),
        message_delta("end_turn", 2),
        STOP,
    )
    events, _, _ = run([Reply(body=body)])
    block = ThinkingBlock("", "redacted:EmwKAhgBEgy3va3pzix")
    assert events == [BlockEnd(0, block), Finished("end_turn", Usage(3, 2))]
    request = ModelRequest(
        model="m", messages=(UserTurn("a"), AssistantTurn((block,)), UserTurn("b"))
    )
    _, _, server = run([Reply(body=fixture("anthropic_text.sse"))], request)
    assert server.requests[0].json()["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}],
    }


def test_unknown_events_and_blocks_are_ignored_and_malformed_events_fail() -> None:
    body = sse(
        START,
        {"type": "future_event", "x": 1},
        block_start(0, {"type": "server_tool_use", "id": "srv_1", "name": "web_search"}),
        block_stop(0),
        message_delta("end_turn", 4),
        STOP,
    )
    events, error, _ = run([Reply(body=body)])
    assert (events, error) == ([Finished("end_turn", Usage(3, 4))], None)
    events, error, _ = run([Reply(body=b"event: message_start\ndata: {not json\n\n")])
    assert events == []
    assert error is not None
    assert error.message == "anthropic: malformed stream event 'message_start': not a JSON object"


def test_conversation_tools_and_tool_choice_none_are_mapped_exactly() -> None:
    schema = {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    }
    request = ModelRequest(
        model="claude-opus-4-1",
        system="You are terse.",
        messages=(
            UserTurn("List files"),
            AssistantTurn(
                (
                    ThinkingBlock("I should run ls.", "sig-1"),
                    ThinkingBlock("unsigned thoughts from elsewhere"),
                    TextBlock(""),
                    TextBlock("Running ls."),
                    ToolUse("toolu_a", "bash", {"command": "ls"}),
                    ToolUse("toolu_b", "bash", {"command": "false"}),
                )
            ),
            ToolOutcome("toolu_a", "bash", "a.txt\nb.txt"),
            ToolOutcome("toolu_b", "bash", "exit status 1", is_error=True),
            UserTurn("Now summarise."),
        ),
        tools=(ToolSpec("bash", "Run a command", schema),),
        tool_choice="none",
        max_tokens=500,
    )
    _, error, server = run([Reply(body=fixture("anthropic_text.sse"))], request)
    assert error is None
    assert server.requests[0].json() == {
        "model": "claude-opus-4-1",
        "max_tokens": 500,
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List files"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should run ls.", "signature": "sig-1"},
                    {"type": "text", "text": "Running ls."},
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "bash",
                        "input": {"command": "ls"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_b",
                        "name": "bash",
                        "input": {"command": "false"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.txt\nb.txt"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_b",
                        "content": "exit status 1",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Now summarise."},
                ],
            },
        ],
        "tools": [{"name": "bash", "description": "Run a command", "input_schema": schema}],
        "tool_choice": {"type": "none"},
        "stream": True,
    }


# --- failures ----------------------------------------------------------------------------

RATE_LIMIT = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit",
        },
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
).encode()
JSON = {"content-type": "application/json"}


def test_error_event_mid_stream_after_content_is_not_retried() -> None:
    events, error, server = run([Reply(body=fixture("anthropic_error_midstream.sse"))])
    assert events == [TextDelta(0, "Partial")]
    assert error is not None
    assert error.retryable
    assert "overloaded_error" in error.message
    assert "Overloaded" in error.message
    assert len(server.requests) == 1


def test_error_event_before_content_is_retried() -> None:
    overloaded = sse(
        START, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    events, error, server = run([Reply(body=overloaded), Reply(body=fixture("anthropic_text.sse"))])
    assert (events, error) == (TEXT_EVENTS, None)
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


def test_http_429_is_retryable_with_retry_after_and_clear_message() -> None:
    reply = Reply(
        status=429, body=RATE_LIMIT, headers={**JSON, "retry-after": "7"}, framing="length"
    )
    events, error, server = run([reply], max_retries="0")
    assert events == []
    assert isinstance(error, ProviderHTTPError)
    assert (error.status, error.retryable, error.retry_after) == (429, True, 7.0)
    assert error.message == (
        "anthropic API error 429 rate_limit_error: Number of request tokens has exceeded your"
        " per-minute rate limit (rate limited; wait and try again)"
    )
    assert len(server.requests) == 1


def test_http_429_then_success_honours_retry_after() -> None:
    first = Reply(
        status=429, body=RATE_LIMIT, headers={**JSON, "retry-after": "0"}, framing="length"
    )
    events, error, server = run([first, Reply(body=fixture("anthropic_text.sse"))])
    assert (events, error) == (TEXT_EVENTS, None)
    assert len(server.requests) == 2


def test_http_500_is_retried_up_to_max_retries_then_reported() -> None:
    body = b'{"type":"error","error":{"type":"api_error","message":"Internal server error"}}'
    events, error, server = run([Reply(status=500, body=body, headers=JSON)] * 3, max_retries="2")
    assert events == []
    assert isinstance(error, ProviderHTTPError)
    assert error.retryable
    assert error.message.startswith("anthropic API error 500 api_error: Internal server error")
    assert len(server.requests) == 3


def test_http_529_overloaded_then_success() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    events, error, server = run(
        [Reply(status=529, body=body, headers=JSON), Reply(body=fixture("anthropic_text.sse"))]
    )
    assert (events, error) == (TEXT_EVENTS, None)
    assert len(server.requests) == 2


def test_http_401_is_not_retried_and_names_the_key_variable() -> None:
    body = json.dumps(
        {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            "request_id": "req_1",
        }
    ).encode()
    _, error, server = run([Reply(status=401, body=body, headers=JSON)] * 3)
    assert isinstance(error, ProviderHTTPError)
    assert not error.retryable
    assert error.message == (
        "anthropic API error 401 authentication_error: invalid x-api-key"
        " (authentication failed; check $ANTHROPIC_API_KEY)"
    )
    assert len(server.requests) == 1


def test_non_json_error_body_is_quoted() -> None:
    reply = Reply(
        status=400, body=b"<html>Bad gateway thing</html>", headers={"content-type": "text/html"}
    )
    _, error, _ = run([reply])
    assert error is not None
    assert (
        error.message
        == "anthropic API error 400: <html>Bad gateway thing</html> (the API rejected the request)"
    )


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_connection_dropped_mid_stream(framing: Any) -> None:
    body = fixture("anthropic_text.sse")
    cut = body.index(b"event: content_block_stop")
    events, error, server = run([Reply(body=body, framing=framing, end="drop", drop_after=cut)] * 2)
    assert events == TEXT_EVENTS[:2]
    assert error is not None
    assert error.retryable
    assert "connection failed mid-response" in error.message
    assert len(server.requests) == 1  # content was already streamed: no retry


def test_clean_eof_before_message_stop_is_an_error() -> None:
    body = fixture("anthropic_text.sse")
    body = body[: body.index(b"event: message_stop")]
    events, error, _ = run([Reply(body=body, framing="close")], max_retries="0")
    assert events == TEXT_EVENTS[:3]
    assert error is not None
    assert "before the response was complete" in error.message


def test_read_timeout_becomes_a_retryable_error() -> None:
    events, error, _ = run(
        [Reply(body=fixture("anthropic_text.sse"), end="stall", drop_after=0)],
        read_timeout="0.2",
        max_retries="0",
    )
    assert events == []
    assert error is not None
    assert error.retryable
    assert error.message.startswith("anthropic: timed out waiting for data")


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    events, error = asyncio.run(collect(provider(url, max_retries="0"), HELLO))
    assert events == []
    assert error is not None
    assert error.retryable
    assert error.message.startswith(f"anthropic: could not connect to {url}/v1/messages")


def test_missing_key_and_bad_options_fail_before_any_request() -> None:
    async def main() -> list[str]:
        messages = []
        async with LocalServer([]) as server:
            for p in (
                provider("http://192.0.2.1:9", env={}),  # not this machine: a key is due
                provider(server.url, colour="blue"),
                provider(server.url, thinking_budget="lots"),
            ):
                _, error = await collect(p, HELLO)
                assert error is not None
                messages.append(error.message)
            assert server.requests == []
        return messages

    assert asyncio.run(main()) == [
        "anthropic: $ANTHROPIC_API_KEY is not set; export your Anthropic API key",
        "anthropic: unknown --provider-option colour; known options: anthropic_beta, api_key_env,"
        " base_url, connect_timeout, max_retries, read_timeout, retry_delay, thinking_budget",
        "anthropic: --provider-option thinking_budget='lots' is invalid; expected an integer >= 1",
    ]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_loopback_base_url_needs_no_key(host: str) -> None:
    async def main() -> LocalServer:
        async with LocalServer([Reply(body=fixture("anthropic_text.sse"))]) as server:
            url = server.url.replace("127.0.0.1", host)
            events, error = await collect(provider(url, env={}), HELLO)
            assert (events, error) == (TEXT_EVENTS, None)
        return server

    server = asyncio.run(main())
    assert "x-api-key" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://127.9.8.7", True),
        ("http://[::1]:9000", True),
        ("http://localhost:11434", True),
        ("http://LOCALHOST", True),
        ("https://api.anthropic.com", False),
        ("http://128.0.0.1", False),
        ("http://localhost.example.com", False),
        ("http://[::1", False),
        ("not a url", False),
    ],
)
def test_is_loopback_url(url: str, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


def test_base_url_and_key_from_environment() -> None:
    async def main() -> LocalServer:
        async with LocalServer([Reply(body=fixture("anthropic_text.sse"))]) as server:
            env = {"ANTHROPIC_BASE_URL": server.url + "/", "MY_KEY": "k2"}
            p = AnthropicProvider(model="m", env=env, options={"api_key_env": "MY_KEY"})
            events, error = await collect(p, HELLO)
            assert (events, error) == (TEXT_EVENTS, None)
        return server

    server = asyncio.run(main())
    assert server.requests[0].path == "/v1/messages"
    assert server.requests[0].headers["x-api-key"] == "k2"


def test_cancellation_stops_the_stream_promptly() -> None:
    async def main() -> list[StreamEvent]:
        body = fixture("anthropic_text.sse")
        cut = body.index(b"event: content_block_stop")
        async with LocalServer([Reply(body=body, end="stall", drop_after=cut)]) as server:
            p = provider(server.url)
            seen: list[StreamEvent] = []
            two = asyncio.Event()

            async def consume() -> None:
                async for event in p.stream(HELLO):
                    seen.append(event)
                    if len(seen) == 2:
                        two.set()

            task = asyncio.create_task(consume())
            await settle(two.wait(), "two events")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await p.aclose()
            return seen

    assert asyncio.run(main()) == TEXT_EVENTS[:2]
