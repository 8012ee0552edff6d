"""The built-in agent loop: history, streaming model calls, tools, display events.

Theory of operation: :class:`Agent` keeps the conversation for the whole run (saved
item by item when given a :class:`~tether.agent.conversation.ConversationLog`, and
started from a saved one to resume) and runs one turn at a time for the presenter (it
is a :class:`tether.agent.runner.TurnRunner`).
A turn adds its opening message, then loops: inject queued steering, call the model
(streaming deltas out as they arrive), run the tool calls it asked for, and go round
again; when the model stops without tool calls, queued steering or follow-ups keep the
turn going, else the turn ends. Each model call and each tool runs in its own task
raced against the turn's interrupt, so finalize stops a long model call or tool at
once: unexecuted tool calls are paired with cancelled results (the history stays valid
for the final turn) and the turn ends ``aborted``. Abort (task cancellation) unwinds
the same way, ending tool process groups on the way out.

Display events (raw, wire keys; the presenter normalizes them): agent-started, user /
steering-injected / follow-up-injected, llm-start, assistant-thinking-delta,
assistant-text-delta, assistant-thinking, assistant-text, assistant-stream-end,
llm-end, tool-call, tool-result, error, agent-turn-complete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from tether.agent.conversation import ConversationLog
from tether.agent.provider import (
    AssistantTurn,
    BlockEnd,
    ConversationItem,
    Finished,
    ModelRequest,
    Provider,
    ProviderError,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolOutcome,
    ToolUse,
    Usage,
    UserTurn,
)
from tether.agent.runner import EmitFn, Injection, TurnControl, TurnOutcome, TurnRequest
from tether.agent.tools import ToolContext, ToolRegistry

__all__ = ["DEFAULT_SYSTEM", "Agent", "wire_stop_reason"]

T = TypeVar("T")

DEFAULT_SYSTEM: Final = (
    "You are a capable software agent working in {cwd}. Use the tools to inspect files, "
    "change them and run commands. When the task is done, reply with a concise final "
    "answer and no tool calls."
)
CANCELLED_TOOL: Final = "cancelled: the turn was interrupted before this tool finished"
SKIPPED_TOOL: Final = "cancelled: the turn was interrupted before this tool ran"
NO_TOOLS_TOOL: Final = "not run: tools are disabled for this turn"

_STOP_REASONS: Final = {
    "end_turn": "stop",
    "stop": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool-use",
    "tool_calls": "tool-use",
    "toolUse": "tool-use",
    "max_tokens": "length",
    "length": "length",
}


def wire_stop_reason(reason: str) -> str:
    """A provider's stop reason in the wire's words (stop, tool-use, length, ...)."""
    return _STOP_REASONS.get(reason, reason.replace("_", "-"))


@dataclass
class _Call:
    """One model call as it streams in."""

    blocks: list[TextBlock | ThinkingBlock | ToolUse] = field(default_factory=list)
    partial: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    finished: Finished | None = None
    error: str | None = None

    @property
    def tool_uses(self) -> list[ToolUse]:
        return [b for b in self.blocks if isinstance(b, ToolUse)]

    def salvage(self) -> list[TextBlock]:
        """The text streamed so far (complete and partial blocks), for an interrupted call."""
        done = [b for b in self.blocks if isinstance(b, TextBlock)]
        partial = ["".join(parts) for kind, parts in self.partial.values() if kind == "text"]
        return done + [TextBlock(t) for t in partial if t]


class Agent:
    """The built-in agent; see the module docstring."""

    def __init__(
        self,
        provider: Provider,
        *,
        emit: EmitFn,
        tools: ToolRegistry,
        context: ToolContext,
        model: str | None = None,
        system: str | None = None,
        max_tokens: int = 8192,
        meta: Mapping[str, str] | None = None,
        history: Sequence[ConversationItem] = (),
        log: ConversationLog | None = None,
    ) -> None:
        self.provider = provider
        self.model = model or getattr(provider, "model", None) or provider.name
        self.emit = emit
        self.tools = tools
        self.context = context
        template = DEFAULT_SYSTEM if system is None else system
        self.system = template.replace("{cwd}", str(context.cwd))
        self.max_tokens = max_tokens
        self.meta = dict(meta or {})
        self.history: list[ConversationItem] = list(history)  # a resumed conversation
        self.log = log  # where each item is saved as it is added (see agent.conversation)
        self._final_text = ""

    def remember(self, item: ConversationItem) -> None:
        """Add ``item`` to the conversation, and save it."""
        self.history.append(item)
        if self.log is not None:
            self.log.append(item)

    def final_text(self) -> str:
        return self._final_text

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        if self.log is not None:
            self.log.close()
        await self.provider.aclose()

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        turn = _Turn(self, control, tools_enabled=not request.final and len(self.tools) > 0)
        return await turn.run(request.opening)


class _Turn:
    """One turn of an :class:`Agent` (state that lives only while the turn runs)."""

    def __init__(self, agent: Agent, control: TurnControl, *, tools_enabled: bool) -> None:
        self.agent = agent
        self.emit = agent.emit
        self.control = control
        self.tools_enabled = tools_enabled
        self.usage = Usage()
        self.stop = "stop"
        self.error: str | None = None

    async def run(self, opening: Injection) -> TurnOutcome:
        agent = self.agent
        started = {"type": "agent-started", "provider": agent.provider.name, "model": agent.model}
        self.emit(started | {"cwd": str(agent.context.cwd)} | agent.meta)
        self._inject([opening])
        try:
            await self._loop()
        except asyncio.CancelledError:
            self._pair_unanswered(CANCELLED_TOOL)
            self._complete("aborted", "the run was aborted")
            raise
        status = {"aborted": "aborted", "error": "error"}.get(self.stop, "done")
        self._complete(status, self.error)
        return TurnOutcome(self.stop, self.usage.to_wire(), self.error)

    async def _loop(self) -> None:
        control = self.control
        while True:
            if control.interrupted:
                self.stop = "aborted"
                return
            self._inject(control.take_steering())
            interrupted, call = await self._until_interrupted(self._model_call())
            if interrupted or call is None:
                self.stop = "aborted"
                return
            if call.error is not None:
                self.stop, self.error = "error", call.error
                return
            uses = call.tool_uses
            if uses:
                if not self.tools_enabled:
                    self._skip(uses, NO_TOOLS_TOOL)
                    return
                if await self._run_tools(uses):
                    self.stop = "aborted"
                    return
                continue
            more = control.take_steering() or control.take_follow_ups()
            if not more:
                return
            self._inject(more)

    def _inject(self, items: Sequence[Injection]) -> None:
        for item in items:
            self.agent.remember(UserTurn(item.text))
            self.emit(item.event())

    def _complete(self, status: str, error: str | None) -> None:
        event: dict[str, Any] = {"type": "agent-turn-complete", "status": status}
        if error:
            event["error"] = error
        else:
            event["result"] = self.agent.final_text()
        self.emit(event)

    async def _until_interrupted(self, work: Awaitable[T]) -> tuple[bool, T | None]:
        """Run ``work`` until it finishes or the turn is interrupted (then cancel it)."""
        task = asyncio.ensure_future(work)
        waiter = asyncio.ensure_future(self.control.wait_interrupted())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        if task.cancelled():
            return True, None
        return False, task.result()

    # -- model calls ------------------------------------------------------------------

    def _request(self) -> ModelRequest:
        agent = self.agent
        return ModelRequest(
            model=agent.model,
            messages=tuple(agent.history),
            system=agent.system,
            tools=agent.tools.specs() if self.tools_enabled else (),
            tool_choice="auto" if self.tools_enabled else "none",
            max_tokens=agent.max_tokens,
        )

    async def _model_call(self) -> _Call:
        agent = self.agent
        call = _Call()
        self.emit({"type": "llm-start", "provider": agent.provider.name, "model": agent.model})
        try:
            async for event in agent.provider.stream(self._request()):
                self._on_stream(call, event)
        except ProviderError as exc:
            call.error = exc.message or str(exc) or "provider error"
        except asyncio.CancelledError:
            self._record(call, interrupted=True)
            raise
        except Exception as exc:  # noqa: BLE001 - a provider bug must not kill the run
            call.error = f"{type(exc).__name__}: {exc}"
        self._record(call, interrupted=False)
        return call

    def _on_stream(self, call: _Call, event: object) -> None:
        if isinstance(event, TextDelta | ThinkingDelta):
            kind = "text" if isinstance(event, TextDelta) else "thinking"
            call.partial.setdefault(event.index, (kind, []))[1].append(event.text)
            wire = f"assistant-{kind}-delta"
            self.emit({"type": wire, "content-index": event.index, "delta": event.text})
        elif isinstance(event, BlockEnd):
            call.partial.pop(event.index, None)
            call.blocks.append(event.block)
        elif isinstance(event, ToolUse):
            call.blocks.append(event)
        elif isinstance(event, Finished):
            call.finished = event

    def _record(self, call: _Call, *, interrupted: bool) -> None:
        """Emit the call's closing events and add its assistant message to the history."""
        if interrupted or call.error is not None:
            blocks: Sequence[TextBlock | ThinkingBlock | ToolUse] = call.salvage()
            final, stop = False, "aborted" if interrupted else "error"
        else:
            blocks = call.blocks
            final = not call.tool_uses
            stop = call.finished.stop_reason if call.finished else "stop"
            stop = wire_stop_reason(stop)
        for index, block in enumerate(blocks):
            if isinstance(block, TextBlock | ThinkingBlock):
                kind = "assistant-text" if isinstance(block, TextBlock) else "assistant-thinking"
                self.emit(
                    {"type": kind, "final?": final, "content-index": index, "text": block.text}
                )
        self.emit({"type": "assistant-stream-end", "final?": final})
        usage = call.finished.usage if call.finished else Usage()
        self.usage += usage
        self.emit({"type": "llm-end", "stop-reason": stop, "usage": usage.to_wire()})
        if call.error is not None:
            self.emit({"type": "error", "error": call.error, "source": "provider"})
        if blocks:
            self.agent.remember(AssistantTurn(tuple(blocks)))
            self.agent._final_text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
        if not interrupted and call.error is None:
            self.stop = stop

    # -- tools ------------------------------------------------------------------------

    async def _run_tools(self, uses: list[ToolUse]) -> bool:
        """Run the calls in order; True when the turn was interrupted."""
        for position, use in enumerate(uses):
            if self.control.interrupted:
                self._skip(uses[position:], SKIPPED_TOOL)
                return True
            self.emit(
                {"type": "tool-call", "name": use.name, "id": use.id, "arguments": use.arguments}
            )
            started = time.monotonic()
            work = self.agent.tools.call(use.name, use.arguments, self.agent.context)
            try:
                interrupted, output = await self._until_interrupted(work)
            except asyncio.CancelledError:
                self._answer(use, CANCELLED_TOOL, True, started)
                raise
            content, is_error = output if output is not None else (CANCELLED_TOOL, True)
            self._answer(use, content, is_error, started)
            if interrupted:
                self._skip(uses[position + 1 :], SKIPPED_TOOL)
                return True
        return False

    def _answer(self, use: ToolUse, content: str, is_error: bool, started: float | None) -> None:
        self.agent.remember(ToolOutcome(use.id, use.name, content, is_error))
        event: dict[str, Any] = {
            "type": "tool-result",
            "name": use.name,
            "id": use.id,
            "tool-call-id": use.id,
            "is-error?": is_error,
            "result": {"content": content},
        }
        if started is not None:
            event["duration-seconds"] = round(time.monotonic() - started, 3)
        self.emit(event)

    def _skip(self, uses: Sequence[ToolUse], reason: str) -> None:
        for use in uses:
            self._answer(use, reason, True, None)

    def _pair_unanswered(self, reason: str) -> None:
        """Give every tool call in the history without an outcome a cancelled one."""
        answered = {i.tool_call_id for i in self.agent.history if isinstance(i, ToolOutcome)}
        for item in list(self.agent.history):
            if isinstance(item, AssistantTurn):
                for block in item.blocks:
                    if isinstance(block, ToolUse) and block.id not in answered:
                        self._answer(block, reason, True, None)
                        answered.add(block.id)
