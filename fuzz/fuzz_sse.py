"""Fuzz the SSE decoder and the providers' stream parsers.

Properties checked for every input:

- :class:`SSEDecoder` never raises, and feeding the input whole, at arbitrary split points
  or one byte at a time gives the same events and rejections;
- the Anthropic and OpenAI stream parsers, fed the decoded events, raise nothing but
  :class:`ProviderError`, and yield only stream events.

Run with atheris when it is installed (``python fuzz/fuzz_sse.py [libFuzzer flags]``);
otherwise a bounded random loop runs (``python fuzz/fuzz_sse.py --iterations N --seed S``),
mixing raw bytes with structured provider events so the parsers' deep states are reached.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from tether.agent.provider import (
    BlockEnd,
    Finished,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolUse,
)
from tether.agent.providers.anthropic import AnthropicStreamParser
from tether.agent.providers.openai import OpenAIStreamParser
from tether.agent.providers.sse import SSEDecoder, SSEEvent, SSERejection

STREAM_EVENT_TYPES = (TextDelta, ThinkingDelta, BlockEnd, ToolUse, Finished)


def feed(data: bytes, cuts: list[int], limit: int) -> list[SSEEvent | SSERejection]:
    decoder = SSEDecoder(max_event_bytes=limit)
    out: list[SSEEvent | SSERejection] = []
    last = 0
    for cut in sorted(set(cuts)):
        out += decoder.feed(data[last:cut])
        last = cut
    out += decoder.feed(data[last:])
    return out


def check_sse(data: bytes) -> list[SSEEvent | SSERejection]:
    limit = 16 + (data[0] * 64 if data else 0)
    whole = feed(data, [], limit)
    step = 1 + (data[-1] % 61 if data else 0)
    assert feed(data, list(range(0, len(data), step)), limit) == whole
    if len(data) <= 256:  # one byte at a time (bounded: it is the slow case)
        assert feed(data, list(range(len(data))), limit) == whole
    return whole


def check_parsers(items: list[SSEEvent | SSERejection]) -> None:
    for parser in (AnthropicStreamParser(), OpenAIStreamParser()):
        try:
            for item in items:
                if isinstance(item, SSEEvent):
                    for event in parser.receive(item):
                        assert isinstance(event, STREAM_EVENT_TYPES), event
                    if parser.done:
                        break
            else:
                for event in parser.end_of_stream():
                    assert isinstance(event, STREAM_EVENT_TYPES), event
        except ProviderError:
            pass


def one_input(data: bytes) -> None:
    check_parsers(check_sse(data))


# --- structured random inputs ------------------------------------------------------------

_TYPES = [
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "error", "other",
]  # fmt: skip
_DELTAS = ["text_delta", "thinking_delta", "signature_delta", "input_json_delta", "x"]
_BLOCKS = ["text", "thinking", "redacted_thinking", "tool_use", "server_tool_use"]
_KEYS = [
    "text", "thinking", "signature", "partial_json", "index", "usage", "input_tokens",
    "output_tokens", "stop_reason", "id", "name", "input", "data", "error", "message",
    "choices", "delta", "content", "reasoning_content", "reasoning", "tool_calls",
    "function", "arguments", "finish_reason", "prompt_tokens", "completion_tokens",
    "prompt_tokens_details", "cached_tokens",
]  # fmt: skip


def _value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, 1, -1, 2, 7, 2**63, 1.5])
    if kind == 3:
        return rng.choice(["", "a", "{", '{"a": 1}', "[1]", "é", "stop", "tool_calls", "\x00"])
    if kind == 4:
        return rng.choice(_TYPES + _DELTAS + _BLOCKS)
    if kind == 5:
        return "[DONE]"
    if kind in (6, 7):
        return {
            rng.choice([*_KEYS, "type"]): _value(rng, depth + 1) for _ in range(rng.randrange(4))
        }
    return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]


def _anthropic_event(rng: random.Random) -> dict[str, Any]:
    event: dict[str, Any] = {"type": rng.choice(_TYPES), "index": rng.randrange(3)}
    if rng.random() < 0.5:
        event["delta"] = {"type": rng.choice(_DELTAS), rng.choice(_KEYS): _value(rng, 1)}
    if rng.random() < 0.4:
        event["content_block"] = {"type": rng.choice(_BLOCKS), "id": "t", "name": "n"}
    for _ in range(rng.randrange(3)):
        event[rng.choice(_KEYS)] = _value(rng, 1)
    return event


def _openai_chunk(rng: random.Random) -> dict[str, Any]:
    delta = {rng.choice(["content", "reasoning_content", "reasoning"]): _value(rng, 2)}
    if rng.random() < 0.5:
        call: dict[str, Any] = {
            "index": rng.choice([0, 1, None]),
            "id": rng.choice(["c1", "c2", None]),
        }
        call["function"] = {"name": "f", "arguments": rng.choice(['{"a"', ": 1}", "", "x"])}
        delta["tool_calls"] = [call]
    choice = {"index": 0, "delta": delta, "finish_reason": rng.choice([None, "stop", "length"])}
    return {"choices": [choice], "usage": rng.choice([None, {"prompt_tokens": 3}])}


_DELTA_FOR = {
    "text": ("text_delta", "text"),
    "thinking": ("thinking_delta", "thinking"),
    "tool_use": ("input_json_delta", "partial_json"),
}


def _anthropic_sequence(rng: random.Random) -> list[dict[str, Any]]:
    """A plausible Messages API stream, then mutated (events dropped, repeated, altered)."""
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": {}}}]
    for index in range(rng.randrange(4)):
        kind = rng.choice(_BLOCKS)
        block = {"type": kind, "id": f"t{index}", "name": "f", "input": {}, kind: ""}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        delta_type, key = _DELTA_FOR.get(kind, ("text_delta", "text"))
        for _ in range(rng.randrange(4)):
            text = rng.choice(["a", "é", '{"x":', " 1}", "", "]"])
            delta = {"type": delta_type, key: text}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        if kind == "thinking" and rng.random() < 0.7:
            delta = {"type": "signature_delta", "signature": "c2ln"}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    usage = {"output_tokens": rng.randrange(100)}
    events.append({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage})
    events.append({"type": "message_stop"})
    for _ in range(rng.randrange(3)):
        at = rng.randrange(len(events))
        action = rng.randrange(3)
        if action == 0:
            del events[at]
        elif action == 1:
            events.insert(at, events[at])
        else:
            events[at] = {**events[at], rng.choice(_KEYS): _value(rng, 1)}
        if not events:
            break
    return events


def random_input(rng: random.Random) -> bytes:
    if rng.random() < 0.2:
        return rng.randbytes(rng.randrange(64))
    if rng.random() < 0.4:
        payloads: list[dict[str, Any]] = _anthropic_sequence(rng)
    else:
        payloads = [
            _anthropic_event(rng) if rng.random() < 0.5 else _openai_chunk(rng)
            for _ in range(rng.randrange(1, 12))
        ]
    parts = []
    for payload in payloads:
        data = "[DONE]" if rng.random() < 0.05 else json.dumps(payload)
        if rng.random() < 0.1:
            data = data[: rng.randrange(len(data) + 1)]
        name = payload.get("type", "message") if isinstance(payload.get("type"), str) else "x"
        end = rng.choice(["\n", "\r\n", "\r"])
        parts.append(f"event: {name}{end}data: {data}{end}{end}".encode())
    raw = b"".join(parts)
    if rng.random() < 0.2 and raw:
        cut = rng.randrange(len(raw))
        raw = raw[:cut] + rng.randbytes(rng.randrange(4)) + raw[cut:]
    return raw


def run_random(iterations: int, seed: int) -> int:
    rng = random.Random(seed)
    for _ in range(iterations):
        one_input(random_input(rng))
    return iterations


def main(argv: list[str]) -> int:
    try:
        import atheris  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        atheris = None
    if atheris is not None:
        atheris.Setup(argv, one_input)
        atheris.Fuzz()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    args = parser.parse_args(argv[1:])
    print(f"fuzz_sse: random loop, seed {args.seed}, {args.iterations} inputs")
    run_random(args.iterations, args.seed)
    print("fuzz_sse: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
