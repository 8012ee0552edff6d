"""The model server's OpenAI formats: Chat Completions (read back by tether's own OpenAI
provider, a real client) and Responses (the event sequence Codex reads)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tether.agent.provider import (
    BlockEnd,
    Finished,
    ModelRequest,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUse,
    Usage,
    UserTurn,
)
from tether.agent.providers.openai import OpenAIProvider
from tether.modelserver import open_model_server

from .test_model_server import post, sse

SCRIPT: list[dict[str, Any]] = [
    {
        "thinking": "hmm",
        "text": ["Let me ", "look."],
        "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}, "id": "call_1"}],
        "usage": {"input": 7, "output": 3, "cache_read": 2},
    },
    {"text": "All done.", "stop_reason": "max_tokens"},
    {"error": "scripted failure"},
]


def collect(base_url: str) -> list[object]:
    async def run() -> list[object]:
        provider = OpenAIProvider(
            model="m", env={"OPENAI_API_KEY": "x"}, options={"base_url": base_url}
        )
        request = ModelRequest(model="m", messages=(UserTurn("hi"),))
        try:
            return [event async for event in provider.stream(request)]
        finally:
            await provider.aclose()

    return asyncio.run(run())


def test_chat_completions_read_back_by_a_real_openai_client(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with open_model_server(SCRIPT, log=log) as server:
        events = collect(f"{server.url}/v1")
    assert events == [
        ThinkingDelta(0, "hmm"),
        BlockEnd(0, ThinkingBlock("hmm")),
        TextDelta(1, "Let me "),
        TextDelta(1, "look."),
        BlockEnd(1, TextBlock("Let me look.")),
        ToolUse("call_1", "bash", {"command": "ls"}),
        Finished("tool_use", Usage(input=7, output=3, cache_read=2)),
    ]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["api"], r["reply"]) for r in logged] == [("openai-chat", 1)]


def test_chat_completions_whole_length_stop_and_errors() -> None:
    with open_model_server(SCRIPT) as server:
        url = f"{server.url}/v1/chat/completions"
        first = post(url, {"model": "m", "stream": True, "messages": []})
        assert first[0] == 200
        assert first[1].rstrip().endswith(b"data: [DONE]")
        status, data = post(url, {"model": "m", "messages": [{"role": "user"}]})
        assert status == 200
        whole = json.loads(data)
        assert whole["choices"][0]["message"]["content"] == "All done."
        assert whole["choices"][0]["finish_reason"] == "length"
        status, data = post(url, {"model": "m", "stream": True, "messages": []})
        assert status == 400
        assert json.loads(data)["error"]["message"] == "scripted failure"
        status, data = post(url, {"model": "m", "stream": True, "messages": []})
        assert status == 400
        assert "used up" in json.loads(data)["error"]["message"]


def test_responses_stream_items_and_usage() -> None:
    with open_model_server(SCRIPT) as server:
        status, data = post(f"{server.url}/v1/responses", {"model": "m", "stream": True})
    assert status == 200
    events = sse(data)
    assert all(name == payload["type"] for name, payload in events)
    assert [p["sequence_number"] for _, p in events] == list(range(1, len(events) + 1))
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    added = [p["item"]["type"] for n, p in events if n == "response.output_item.added"]
    assert added == ["reasoning", "message", "function_call"]
    text = [p["delta"] for n, p in events if n == "response.output_text.delta"]
    assert text == ["Let me ", "look."]
    thinking = [p["delta"] for n, p in events if n == "response.reasoning_summary_text.delta"]
    assert thinking == ["hmm"]
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    call = final["output"][2]
    assert (call["call_id"], call["name"], json.loads(call["arguments"])) == (
        "call_1",
        "bash",
        {"command": "ls"},
    )
    assert final["output"][1]["content"][0]["text"] == "Let me look."
    assert final["usage"]["input_tokens"] == 9
    assert final["usage"]["input_tokens_details"] == {"cached_tokens": 2}
    assert final["usage"]["output_tokens"] == 3
    ids = [p["item"]["id"] for n, p in events if n == "response.output_item.done"]
    assert len(set(ids)) == 3


def test_responses_incomplete_failed_and_used_up() -> None:
    with open_model_server(SCRIPT) as server:
        url = f"{server.url}/v1/responses"
        post(url, {"model": "m", "stream": True})
        status, data = post(url, {"model": "m", "stream": True})
        assert status == 200
        last = sse(data)[-1][1]
        assert last["type"] == "response.incomplete"
        assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
        for expected in ("scripted failure", "used up"):
            status, data = post(url, {"model": "m", "stream": True})
            assert status == 200
            failed = sse(data)[-1][1]
            assert failed["type"] == "response.failed"
            assert expected in failed["response"]["error"]["message"]
