"""The display boundary: validated wire events become display messages.

Theory of operation: :class:`Boundary` turns each wire event of a run into zero or more
display items: the message kinds of :mod:`tether.framing.messages` (TEXT, THINKING,
TOOL_CALL, ...; converted by its ``from_wire_event``), or one of the two items that are
not message kinds: :class:`UserInput` (a prompt, steer or follow-up injected into the run)
and :class:`Notice` (an ``info`` event, a rejected control). It keeps a
little state per run, so that the same run drawn twice gives the same items:

- Deltas and whole blocks: the agent streams ``assistant-*-delta`` events and then sends
  each block whole (``assistant-text`` / ``assistant-thinking``). A whole block is shown
  only when no delta of that kind was streamed for its ``content-index`` (or with its
  opening text) since the model call began; otherwise it would be shown twice.
- Stops: ``llm-end`` gives USAGE and a STOP with the model's stop reason; the presenter's
  ``turn-complete`` adds a STOP only when its reason differs from the turn's last one
  (``aborted``, ``error``), and ``agent-turn-complete`` adds none (the presenter always
  follows it with ``turn-complete``).
- Retries: an ``error`` from the provider followed, in the same turn, by a new
  ``llm-start`` is a retry: RETRY comes before the new call.
- Nested runs (depth >= 1): their ``result`` is kept and their ``exit`` becomes a
  SUB_AGENT_RESULT. The top run's ``result`` and ``exit`` are the caller's
  (``display.final``, after a notice of the error when it failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import msgspec

from tether.framing import messages as kinds
from tether.framing.stream_json import Record
from tether.wire import (
    AgentStarted,
    AgentTurnComplete,
    AnyEvent,
    AssistantStreamEnd,
    AssistantText,
    AssistantTextDelta,
    AssistantThinking,
    AssistantThinkingDelta,
    ControlAck,
    Error,
    Exit,
    FollowUpInjected,
    Info,
    LlmEnd,
    LlmStart,
    Ready,
    Result,
    SteeringInjected,
    ToolResult,
    TurnComplete,
    TurnStarted,
    User,
)

# Streamed text remembered per block to recognise its whole version (characters).
_OPENING: Final = 256
# Up to this much streamed text per block is kept, to show the rest of a block that the
# stream stopped short of (a longer stream is only recognised, never completed).
_REMEMBER: Final = 4096
_USER_KINDS: Final = {User: "user", SteeringInjected: "steer", FollowUpInjected: "follow-up"}


@dataclass(frozen=True, slots=True)
class UserInput:
    """Input given to the run: ``kind`` is ``user``, ``steer`` or ``follow-up``."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Notice:
    """A line for the person watching: ``level`` is ``info``, ``warning`` or ``error``."""

    text: str
    level: str = "info"


# Records (session_start, sub_agent_start, ...) come only from stream-json input.
Item: TypeAlias = "kinds.Message | Record | UserInput | Notice"


class FailedToolResult(kinds.ToolResult, frozen=True, kw_only=True):
    """A TOOL_RESULT whose tool failed (``is-error?``); frames have no field for it."""


def _failed(result: kinds.ToolResult) -> FailedToolResult:
    return FailedToolResult(
        tool_use_id=result.tool_use_id, tool_name=result.tool_name, output=result.output
    )


def tool_output(result: Any) -> Any:
    """A tool result's text: ``{"content": text}`` or content blocks' ``text`` joined.

    Agents wrap tool output (tether's loop sends ``{"content": text}``, pi-style agents a
    list of ``{"type": "text", "text": ...}`` blocks); anything else is returned as is.
    """
    if isinstance(result, dict) and set(result) <= {"content", "details", "is-error?"}:
        result = result.get("content", result)
    if (
        isinstance(result, list)
        and result
        and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in result)
    ):
        return "\n".join(b["text"] for b in result)
    return result


@dataclass(slots=True)
class _Run:
    """What the boundary remembers about one run."""

    streamed: dict[tuple[str, int | None], str] = field(default_factory=dict)
    provider_error: bool = False
    last_stop: str | None = None
    result: Result | None = None

    def new_call(self) -> None:
        self.streamed.clear()


def _opt(value: Any) -> Any:
    return None if value is msgspec.UNSET else value


class Boundary:
    """Wire events -> display items, per run. See the module docstring."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def convert(self, event: AnyEvent, *, run: str, depth: int = 0) -> list[Item]:
        state = self._runs.get(run)
        if state is None:
            state = self._runs[run] = _Run()
        if isinstance(event, AssistantTextDelta | AssistantThinkingDelta):
            return self._delta(state, event)
        if isinstance(event, AssistantText | AssistantThinking):
            return self._whole(state, event)
        if isinstance(event, AssistantStreamEnd):
            state.new_call()
            return []
        kind = _USER_KINDS.get(type(event))
        if kind is not None:
            text = _opt(getattr(event, "text", None))
            return [UserInput(kind, text or "")]
        if isinstance(event, ToolResult):
            return self._tool_result(event)
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            items: list[Item] = handler(self, state, event, run, depth)
            return items
        return list(kinds.from_wire_event(_wire_dict(event)))

    def forget(self, run: str) -> None:
        """Drop a finished run's state."""
        self._runs.pop(run, None)

    # -- text -------------------------------------------------------------------------------

    def _delta(self, state: _Run, event: AssistantTextDelta | AssistantThinkingDelta) -> list[Item]:
        delta = _opt(event.delta)
        if not delta:
            return []
        key = (_kind_of(event), _opt(event.content_index))
        seen = state.streamed.get(key, "")
        if len(seen) <= _REMEMBER:
            state.streamed[key] = seen + delta[: _REMEMBER + 1 - len(seen)]
        return list(kinds.from_wire_event(_wire_dict(event)))

    def _whole(self, state: _Run, event: AssistantText | AssistantThinking) -> list[Item]:
        text = _opt(event.text)
        if not text:
            return []
        kind = _kind_of(event)
        seen = state.streamed.get((kind, _opt(event.content_index)))
        if seen is None:
            seen = next(
                (s for (k, _), s in state.streamed.items() if k == kind and _overlap(s, text)), None
            )
        if seen is None:
            return list(kinds.from_wire_event(_wire_dict(event), streamed=False))
        if len(seen) <= _REMEMBER and len(text) > len(seen) and text.startswith(seen):
            # The stream stopped short of the whole block: show the rest once.
            return self._delta(state, _rest_of(event, text[len(seen) :]))
        return []

    def _tool_result(self, event: ToolResult) -> list[Item]:
        wire = _wire_dict(event)
        wire["result"] = tool_output(wire.get("result", ""))
        items: list[Item] = list(kinds.from_wire_event(wire))
        if event.is_error:
            items = [_failed(i) if isinstance(i, kinds.ToolResult) else i for i in items]
        return items

    # -- lifecycle ---------------------------------------------------------------------------

    def _llm_start(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        state.new_call()
        if state.provider_error:
            state.provider_error = False
            return [kinds.Retry()]
        return []

    def _llm_end(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        state.new_call()
        items: list[Item] = list(kinds.from_wire_event(_wire_dict(event)))
        stops = [i for i in items if isinstance(i, kinds.Stop)]
        reason = _opt(event.stop_reason)
        if not stops and reason:
            items.append(kinds.Stop(reason=reason))
        if stops or reason:
            state.last_stop = stops[-1].reason if stops else reason
        return items

    def _error(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        if _opt(event.source) == "provider":
            state.provider_error = True
        return list(kinds.from_wire_event(_wire_dict(event)))

    def _turn_started(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        state.provider_error = False
        state.last_stop = None
        state.new_call()
        return []

    def _turn_complete(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        reason, last = event.stop_reason, state.last_stop
        state.provider_error = False
        state.last_stop = None
        if reason and reason != last:
            return [kinds.Stop(reason=reason)]
        return []

    def _info(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        return [Notice(_opt(event.summary) or "info")]

    def _ack(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        if event.status != "rejected":
            return []
        reason = _opt(event.reason) or "no reason given"
        return [Notice(f"{run}: control rejected: {reason}", "warning")]

    def _result(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        state.result = event
        return []

    def _exit(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        error = _opt(event.error)
        if depth == 0:
            return []
        result = state.result
        usage = (_opt(result.usage) if result is not None else None) or {}
        text = (_opt(result.final_text) if result is not None else None) or error or ""
        self.forget(run)
        return [
            kinds.SubAgentResult(
                session_id=run,
                status="ok" if event.status == "done" else "failed",
                input_tokens=_tokens(usage, "input_tokens", "input"),
                output_tokens=_tokens(usage, "output_tokens", "output"),
                thinking="",
                text=text,
            )
        ]

    def _ignore(self, state: _Run, event: Any, run: str, depth: int) -> list[Item]:
        return []


def _tokens(usage: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def _overlap(seen: str, text: str) -> bool:
    """True when streamed text and a whole block share their opening."""
    return seen[:_OPENING].startswith(text[:_OPENING]) or text.startswith(seen[:_OPENING])


def _rest_of(
    event: AssistantText | AssistantThinking, rest: str
) -> AssistantTextDelta | AssistantThinkingDelta:
    """A delta event carrying the part of a whole block that was not streamed."""
    cls = AssistantThinkingDelta if isinstance(event, AssistantThinking) else AssistantTextDelta
    return cls(v=1, seq=event.seq, run=event.run, content_index=event.content_index, delta=rest)


def _kind_of(event: Any) -> str:
    return "thinking" if isinstance(event, AssistantThinking | AssistantThinkingDelta) else "text"


def _wire_dict(event: AnyEvent) -> dict[str, Any]:
    """The event as the wire's JSON object (kebab-case keys, ``type`` included)."""
    out: dict[str, Any] = msgspec.to_builtins(event)
    return out


_HANDLERS: Final[dict[type, Any]] = {
    LlmStart: Boundary._llm_start,
    LlmEnd: Boundary._llm_end,
    Error: Boundary._error,
    TurnStarted: Boundary._turn_started,
    TurnComplete: Boundary._turn_complete,
    Info: Boundary._info,
    ControlAck: Boundary._ack,
    Result: Boundary._result,
    Exit: Boundary._exit,
    Ready: Boundary._ignore,
    AgentStarted: Boundary._ignore,
    AgentTurnComplete: Boundary._ignore,
}
