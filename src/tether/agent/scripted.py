"""The ``scripted`` provider: deterministic replies from a JSON file.

For reproducible runs and tests. The file is a JSON list of replies, consumed one per
model call::

    [{"text": "...", "thinking": "...", "tool_calls": [{"name": "bash",
      "arguments": {"command": "ls"}, "id": "call-1"}], "delay_ms": 100,
      "chunk_ms": 10, "stop_reason": "end_turn", "error": "rate limited",
      "usage": {"input": 10, "output": 5}}]

Every key is optional. ``thinking`` then ``text`` stream as deltas (a string is cut into
chunks of up to :data:`CHUNK_CHARS` characters at spaces; a list of strings gives the
chunks explicitly) with ``chunk_ms`` between chunks; ``delay_ms`` waits before the first
chunk. Both waits are plain asyncio sleeps, so cancellation stops them at once.
``error`` makes the call fail with that message (after the delay). Under tool choice
``none`` the tool calls are dropped. When the list is exhausted the call fails with a
clear error. Without ``stop_reason`` a reply with tool calls stops with ``tool_use``,
else ``end_turn``; without ``usage`` it counts the conversation's items as input and
about four characters per output token.

The file is checked when the provider is built: a malformed script is a
:class:`ScriptError` naming the reply and key, never a failure halfway through a run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tether import fsafe, jsondepth
from tether.agent.provider import (
    BlockEnd,
    Finished,
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUse,
    Usage,
    UserTurn,
)
from tether.errors import AgentError

__all__ = [
    "CHUNK_CHARS",
    "DEFAULT_SCRIPT_NOTE",
    "Reply",
    "ScriptError",
    "ScriptedProvider",
    "default_replies",
    "load_script",
]

DEFAULT_SCRIPT_NOTE: Final = (
    "(This answer came from the scripted provider: no model was called. Pass --script FILE "
    "for your own replies, or --provider anthropic|openai with an API key for a real model.)"
)


def default_replies(task: str) -> list[Reply]:
    """The replies used when no script is given: list the directory, then answer."""
    return load_script(
        [
            {
                "text": "I'll take a quick look at the working directory first.",
                "tool_calls": [{"name": "bash", "arguments": {"command": "pwd; ls | head -20"}}],
                "chunk_ms": 15,
            },
            {
                "text": f"You asked: {task}\n\nI listed the working directory with a real "
                f"tool call above.\n\n{DEFAULT_SCRIPT_NOTE}",
                "chunk_ms": 15,
            },
        ]
    )


def _user_texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if isinstance(m, UserTurn)]


def _first_user_text(request: ModelRequest) -> str:
    return next(iter(_user_texts(request)), "")


def _last_user_text(request: ModelRequest) -> str:
    texts = _user_texts(request)
    return texts[-1] if texts else ""


CHUNK_CHARS: Final = 64
MAX_SCRIPT_BYTES: Final = 64 * 1024 * 1024
MAX_WAIT_MS: Final = 3_600_000
_KEYS: Final = frozenset(
    {"text", "thinking", "tool_calls", "delay_ms", "chunk_ms", "stop_reason", "error", "usage"}
)


class ScriptError(AgentError, ValueError):
    """The script file is missing, unreadable, or not a list of valid replies."""


@dataclass(frozen=True, slots=True)
class Reply:
    text: tuple[str, ...] = ()
    thinking: tuple[str, ...] = ()
    tool_calls: tuple[ToolUse, ...] = ()
    delay_ms: float = 0
    chunk_ms: float = 0
    stop_reason: str | None = None
    error: str | None = None
    usage: Usage | None = None


def chunk_text(text: str, size: int = CHUNK_CHARS) -> tuple[str, ...]:
    """Cut ``text`` into pieces of at most ``size`` characters, preferring to end at a space."""
    pieces: list[str] = []
    while len(text) > size:
        cut = text.rfind(" ", 0, size) + 1 or size
        pieces.append(text[:cut])
        text = text[cut:]
    if text:
        pieces.append(text)
    return tuple(pieces)


def load_script(source: str | os.PathLike[str] | list[Any]) -> list[Reply]:
    """Parse a script file (or an already decoded list) into replies; raises ScriptError."""
    if isinstance(source, list):
        data: object = source
    else:
        data = _read_json(Path(source))
    if not isinstance(data, list):
        raise ScriptError("script must be a JSON list of replies")
    return [_reply(i, item) for i, item in enumerate(data, 1)]


def _read_json(path: Path) -> object:
    try:  # a FIFO never blocks: the child would wait for it for ever
        return jsondepth.loads(fsafe.read_given(path, MAX_SCRIPT_BYTES))
    except OSError as exc:
        raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ScriptError(f"script {path} is not valid JSON: {exc}") from None


def _reply(n: int, item: object) -> Reply:
    where = f"reply {n}"
    if not isinstance(item, Mapping):
        raise ScriptError(f"{where}: must be an object")
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise ScriptError(f"{where}: unknown key {', '.join(map(repr, unknown))}")
    return Reply(
        text=_chunks(item.get("text"), f"{where}: text"),
        thinking=_chunks(item.get("thinking"), f"{where}: thinking"),
        tool_calls=_tool_calls(item.get("tool_calls"), n),
        delay_ms=_ms(item.get("delay_ms"), f"{where}: delay_ms"),
        chunk_ms=_ms(item.get("chunk_ms"), f"{where}: chunk_ms"),
        stop_reason=_opt_str(item.get("stop_reason"), f"{where}: stop_reason"),
        error=_opt_str(item.get("error"), f"{where}: error"),
        usage=_usage(item.get("usage"), f"{where}: usage"),
    )


def _chunks(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return chunk_text(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v for v in value if v)
    raise ScriptError(f"{where}: must be a string or a list of strings")


def _ms(value: object, where: str) -> float:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScriptError(f"{where}: must be a number of milliseconds >= 0")
    return float(min(value, MAX_WAIT_MS))


def _opt_str(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ScriptError(f"{where}: must be a string")


def _usage(value: object, where: str) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ScriptError(f"{where}: must be an object")
    counts: dict[str, int] = {}
    for key, field_name in (
        ("input", "input"),
        ("output", "output"),
        ("cache_read", "cache_read"),
        ("cache-read", "cache_read"),
        ("cache_write", "cache_write"),
        ("cache-write", "cache_write"),
    ):
        count = value.get(key)
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ScriptError(f"{where}: {key} must be a non-negative integer")
        counts[field_name] = count
    return Usage(**counts)


def _tool_calls(value: object, n: int) -> tuple[ToolUse, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ScriptError(f"reply {n}: tool_calls must be a list")
    calls = []
    for i, call in enumerate(value, 1):
        where = f"reply {n}: tool_calls[{i}]"
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}: must be an object with a string name")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ScriptError(f"{where}: arguments must be an object")
        call_id = call.get("id", f"call-{n}-{i}")
        if not isinstance(call_id, str):
            raise ScriptError(f"{where}: id must be a string")
        calls.append(ToolUse(id=call_id, name=call["name"], arguments=arguments))
    return tuple(calls)


class ScriptedProvider:
    """Plays a script's replies in order, one per model call."""

    name = "scripted"

    def __init__(
        self,
        model: str | None = None,
        *,
        script: str | os.PathLike[str] | list[Any] | None = None,
        env: Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        source = script if script is not None else (options or {}).get("script")
        if source is None:
            source = (env or {}).get("TETHER_SCRIPT")
        self.model = model or "scripted"
        # Without a script: a two-step first try (look around with bash, then answer),
        # built on the first call, when the task is known.
        self.replies: list[Reply] | None = None if source is None else load_script(source)
        self.calls = 0
        self._default = False

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.replies is None:
            self._default = True
            self.replies = default_replies(_first_user_text(request))
        self.calls += 1
        if self._default and self.calls > len(self.replies):
            # the built-in first try answers every later turn (a follow-up) the same way
            text = f"You asked: {_last_user_text(request)}\n\n{DEFAULT_SCRIPT_NOTE}"
            self.replies += load_script([{"text": text, "chunk_ms": 15}])
        if self.calls > len(self.replies):
            raise ProviderError(
                f"scripted provider: the script's {len(self.replies)} replies are used up "
                f"(model call {self.calls} has no reply)"
            )
        reply = self.replies[self.calls - 1]
        if reply.delay_ms:
            await asyncio.sleep(reply.delay_ms / 1000)
        if reply.error is not None:
            raise ProviderError(reply.error)
        first = True
        index = 0
        for chunks, delta, block in (
            (reply.thinking, ThinkingDelta, ThinkingBlock),
            (reply.text, TextDelta, TextBlock),
        ):
            if not chunks:
                continue
            for chunk in chunks:
                if not first and reply.chunk_ms:
                    await asyncio.sleep(reply.chunk_ms / 1000)
                first = False
                yield delta(index, chunk)
            yield BlockEnd(index, block("".join(chunks)))
            index += 1
        calls = reply.tool_calls if request.tool_choice != "none" else ()
        for call in calls:
            yield call
        stop = reply.stop_reason or ("tool_use" if calls else "end_turn")
        yield Finished(stop, reply.usage or _default_usage(request, reply))

    async def aclose(self) -> None:
        return None


def _default_usage(request: ModelRequest, reply: Reply) -> Usage:
    produced = sum(len(c) for c in reply.text + reply.thinking)
    return Usage(input=len(request.messages), output=max(1, (produced + 3) // 4))
