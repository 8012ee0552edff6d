"""The provider interface: what the agent loop asks of a model, and what it gets back.

A provider turns one :class:`ModelRequest` into a stream of :class:`StreamEvent` values
and ends with exactly one :class:`Finished` (or raises :class:`ProviderError`). The
conversation is provider-neutral; each provider maps it to its API's format.

Conversation items (``ModelRequest.messages``), in order:

- :class:`UserTurn` ``{text}``
- :class:`AssistantTurn` ``{blocks}`` with :class:`TextBlock`, :class:`ThinkingBlock`
  (``signature`` kept for providers that need it echoed back) and :class:`ToolUse`
- :class:`ToolOutcome` ``{tool_call_id, name, content, is_error}`` answering a ToolUse

Stream events, in the order a provider yields them: :class:`TextDelta` and
:class:`ThinkingDelta` (``index`` identifies the content block), :class:`BlockEnd` when
a text or thinking block is complete, :class:`ToolUse` for each complete tool call,
then :class:`Finished` with the stop reason and usage. Cancellation is asyncio
cancellation: a provider must stop promptly when its task is cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.agent.usage import Usage as Usage  # noqa: PLC0414 - re-exported (mypy --strict)
from tether.errors import AgentError

ToolChoice = Literal["auto", "none"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    text: str
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class ToolUse:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    blocks: tuple[TextBlock | ThinkingBlock | ToolUse, ...]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


ConversationItem = UserTurn | AssistantTurn | ToolOutcome


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    messages: tuple[ConversationItem, ...]
    system: str = ""
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_tokens: int = 8192
    thinking_budget: int | None = None  # extended thinking tokens, where supported


@dataclass(frozen=True, slots=True)
class TextDelta:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class BlockEnd:
    index: int
    block: TextBlock | ThinkingBlock


@dataclass(frozen=True, slots=True)
class Finished:
    stop_reason: str  # e.g. "end_turn"/"stop", "tool_use", "max_tokens"
    usage: Usage = field(default_factory=Usage)


StreamEvent = TextDelta | ThinkingDelta | BlockEnd | ToolUse | Finished


class ProviderError(AgentError):
    """A model call failed; ``message`` is shown to the user as an ``error`` event."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class Provider(Protocol):
    """A model backend. ``name`` is what ``--provider`` selects."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one model call; the last event is :class:`Finished`."""
        ...

    async def aclose(self) -> None:
        """Release connections (HTTP clients, processes)."""
        ...
