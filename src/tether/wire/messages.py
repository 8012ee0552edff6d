"""The v1 wire messages: 22 child events and 6 parent controls (plus tether's two
extensions, ``answer`` and ``unqueue``), as msgspec Structs.

Every message is an envelope ``{v, seq, type, run}`` plus its payload. Keys on the wire
are kebab-case, some end in ``?`` (``final?``, ``is-error?``); optional fields default to
``UNSET`` and are omitted, never sent as null. Objects are open: decoding ignores unknown
members, so a newer peer's extra fields pass validation (the raw line is what gets
forwarded, so nothing is lost; see :func:`tether.wire.codec.extra_fields`).

The constraints below (integer ranges, enums, required fields) are the whole schema:
the fast decoder enforces them natively and the slow path in :mod:`tether.wire.schema`
reads them back to explain a rejection field by field.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias

import msgspec
from msgspec import UNSET, Meta, UnsetType, field

from tether.wire.limits import MAX_SAFE_INTEGER
from tether.wire.session import RunStatus

PositiveInt = Annotated[int, Meta(ge=1, le=MAX_SAFE_INTEGER)]
SafeInt = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
# Finite numbers only: JSON has no inf/nan, so an overflowing literal (1e400) is refused.
Finite = Annotated[float, Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]
Object = dict[str, Any]

AckStatus: TypeAlias = Literal["accepted", "rejected", "applied"]


class Message(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", gc=False
):
    """The envelope shared by every message. ``type`` is the struct's tag."""

    v: Literal[1]
    seq: PositiveInt
    run: str

    direction: ClassVar[str]


class Event(Message, frozen=True, kw_only=True):
    """A child-to-parent message."""

    direction: ClassVar[str] = "event"


class Control(Message, frozen=True, kw_only=True):
    """A parent-to-child message."""

    direction: ClassVar[str] = "control"


class DisplayEvent(Event, frozen=True, kw_only=True):
    """A normalized display event forwarded from the agent; these fields may ride on any."""

    timestamp: str | UnsetType = UNSET
    summary: str | UnsetType = UNSET
    transport_truncated: bool | UnsetType = field(default=UNSET, name="transport-truncated?")
    run_id: str | UnsetType = field(default=UNSET, name="run-id")
    agent: str | UnsetType = UNSET
    requested_cwd: str | UnsetType = field(default=UNSET, name="requested-cwd")
    cwd: str | UnsetType = UNSET
    physical_cwd: str | UnsetType = field(default=UNSET, name="physical-cwd")


# --- display events -------------------------------------------------------------------


class ToolCall(DisplayEvent, tag="tool-call", frozen=True, kw_only=True):
    name: str
    id: str | UnsetType = UNSET
    arguments: Any | UnsetType = UNSET


class ToolResult(DisplayEvent, tag="tool-result", frozen=True, kw_only=True):
    name: str
    is_error: bool = field(name="is-error?")
    id: str | UnsetType = UNSET
    tool_call_id: str | UnsetType = field(default=UNSET, name="tool-call-id")
    duration_seconds: Finite | UnsetType = field(default=UNSET, name="duration-seconds")
    result: Any | UnsetType = UNSET


class _ContentBlock(DisplayEvent, frozen=True, kw_only=True):
    """What whole text and thinking blocks share."""

    final: bool = field(name="final?")
    content_index: SafeInt | UnsetType = field(default=UNSET, name="content-index")
    text: str | UnsetType = UNSET


class AssistantText(_ContentBlock, tag="assistant-text", frozen=True, kw_only=True):
    pass


class AssistantThinking(_ContentBlock, tag="assistant-thinking", frozen=True, kw_only=True):
    pass


class _ContentDelta(DisplayEvent, frozen=True, kw_only=True):
    """What text and thinking deltas share."""

    content_index: SafeInt | UnsetType = field(default=UNSET, name="content-index")
    delta: str | UnsetType = UNSET


class AssistantTextDelta(_ContentDelta, tag="assistant-text-delta", frozen=True, kw_only=True):
    pass


class AssistantThinkingDelta(
    _ContentDelta, tag="assistant-thinking-delta", frozen=True, kw_only=True
):
    pass


class AssistantStreamEnd(DisplayEvent, tag="assistant-stream-end", frozen=True, kw_only=True):
    final: bool = field(name="final?")


class User(DisplayEvent, tag="user", frozen=True, kw_only=True):
    text: str | UnsetType = UNSET


class _Injected(DisplayEvent, frozen=True, kw_only=True):
    """Queued text the agent took in; ``ref`` is the seq of the control that queued it."""

    text: str | UnsetType = UNSET
    ref: PositiveInt | UnsetType = UNSET


class SteeringInjected(_Injected, tag="steering-injected", frozen=True, kw_only=True):
    pass


class FollowUpInjected(_Injected, tag="follow-up-injected", frozen=True, kw_only=True):
    pass


class _ModelNamed(DisplayEvent, frozen=True, kw_only=True):
    provider: str | UnsetType = UNSET
    model: str | UnsetType = UNSET


class LlmStart(_ModelNamed, tag="llm-start", frozen=True, kw_only=True):
    pass


class LlmEnd(DisplayEvent, tag="llm-end", frozen=True, kw_only=True):
    stop_reason: str | UnsetType = field(default=UNSET, name="stop-reason")
    usage: Object | UnsetType = UNSET


class AgentStarted(_ModelNamed, tag="agent-started", frozen=True, kw_only=True):
    pass


class AgentTurnComplete(DisplayEvent, tag="agent-turn-complete", frozen=True, kw_only=True):
    status: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Error(DisplayEvent, tag="error", frozen=True, kw_only=True):
    error: str | UnsetType = UNSET
    source: str | UnsetType = UNSET


class Dropped(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A queued steer or follow-up that was never injected: its control's seq, its kind,
    its text (cut to :data:`DROPPED_TEXT_CHARS`; the whole text is the control's)."""

    ref: PositiveInt
    kind: str
    text: str
    truncated: bool | UnsetType = field(default=UNSET, name="truncated?")


DROPPED_TEXT_CHARS: Final = 2000


class Info(DisplayEvent, tag="info", frozen=True, kw_only=True):
    refs: list[PositiveInt] | UnsetType = UNSET
    # tether: what a finalize or the run's end dropped from the queues (the child's own
    # info line, never an agent's: normalize() keeps no `dropped` from an agent)
    dropped: list[Dropped] | UnsetType = UNSET


# --- lifecycle events (emitted by the presenter itself, never forwarded) ---------------


class Ready(Event, tag="ready", frozen=True, kw_only=True):
    pass


class TurnStarted(Event, tag="turn-started", frozen=True, kw_only=True):
    turn: PositiveInt


class TurnComplete(Event, tag="turn-complete", frozen=True, kw_only=True):
    turn: PositiveInt
    stop_reason: str = field(name="stop-reason")
    usage: Object | UnsetType = UNSET


class ControlAck(Event, tag="control-ack", frozen=True, kw_only=True):
    status: AckStatus
    ref: PositiveInt | UnsetType = UNSET
    reason: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.ref is UNSET and self.status != "rejected":
            raise ValueError("ref is required unless status is rejected")


class Result(Event, tag="result", frozen=True, kw_only=True):
    stop_reason: str = field(name="stop-reason")
    final_text: str | UnsetType = field(default=UNSET, name="final-text")
    usage: Object | UnsetType = UNSET
    truncated: bool | UnsetType = field(default=UNSET, name="truncated?")
    final_text_path: str | UnsetType = field(default=UNSET, name="final-text-path")
    # Fen's revision of the schema: "complete", or "partial" when the answer was forced
    # (finalize) or the last turn did not end normally. Any string decodes (open objects).
    context: str | UnsetType = UNSET


class Exit(Event, tag="exit", frozen=True, kw_only=True):
    status: RunStatus
    error: str | UnsetType = UNSET


# --- controls ----------------------------------------------------------------------------


class Prompt(Control, tag="prompt", frozen=True, kw_only=True):
    text: str


class Steer(Control, tag="steer", frozen=True, kw_only=True):
    text: str


class FollowUp(Control, tag="follow-up", frozen=True, kw_only=True):
    text: str


DEFAULT_FINALIZE_NOTE: Final = (
    "Stop working now. Without calling tools, give your final answer from what you have so far."
)
"""What the child tells its agent on a ``finalize`` without a ``note``."""


class Finalize(Control, tag="finalize", frozen=True, kw_only=True):
    note: str | UnsetType = UNSET  # absent: DEFAULT_FINALIZE_NOTE


class Cancel(Control, tag="cancel", frozen=True, kw_only=True):
    pass


class Close(Control, tag="close", frozen=True, kw_only=True):
    pass


Decision: TypeAlias = Literal["approve", "deny"]
Scope: TypeAlias = Literal["once", "always"]
KEY_CHARS: Final = 200  # an inbox key is "<run>:<offset>"


class Answer(Control, tag="answer", frozen=True, kw_only=True):
    """Extension of v1: the answer to the approval or question ``key`` that waits in the
    child (``applied``), never injected into the conversation; ``rejected`` when no such
    key waits. ``decision`` answers an approval (``scope`` ``always``: the same for this
    kind of call for the rest of the run), ``text`` a question (or says why)."""

    key: Annotated[str, Meta(min_length=1, max_length=KEY_CHARS)]
    decision: Decision | UnsetType = UNSET
    text: str | UnsetType = UNSET
    scope: Scope | UnsetType = UNSET


class Unqueue(Control, tag="unqueue", frozen=True, kw_only=True):
    """Extension of v1: withdraw the queued steer or follow-up whose seq is ``ref``
    before it is injected (``applied``); ``rejected`` once it was injected or dropped."""

    ref: PositiveInt


AnyEvent: TypeAlias = (
    ToolCall
    | ToolResult
    | AssistantText
    | AssistantThinking
    | AssistantTextDelta
    | AssistantThinkingDelta
    | AssistantStreamEnd
    | User
    | SteeringInjected
    | FollowUpInjected
    | LlmStart
    | LlmEnd
    | AgentStarted
    | AgentTurnComplete
    | Error
    | Info
    | Ready
    | TurnStarted
    | TurnComplete
    | ControlAck
    | Result
    | Exit
)
AnyControl: TypeAlias = Prompt | Steer | FollowUp | Finalize | Cancel | Close | Answer | Unqueue
AnyMessage: TypeAlias = AnyEvent | AnyControl

DISPLAY_EVENTS: tuple[type[DisplayEvent], ...] = (
    ToolCall,
    ToolResult,
    AssistantText,
    AssistantThinking,
    AssistantTextDelta,
    AssistantThinkingDelta,
    AssistantStreamEnd,
    User,
    SteeringInjected,
    FollowUpInjected,
    LlmStart,
    LlmEnd,
    AgentStarted,
    AgentTurnComplete,
    Error,
    Info,
)
LIFECYCLE_EVENTS: tuple[type[Event], ...] = (
    Ready,
    TurnStarted,
    TurnComplete,
    ControlAck,
    Result,
    Exit,
)
EVENTS: tuple[type[Event], ...] = DISPLAY_EVENTS + LIFECYCLE_EVENTS
CONTROLS: tuple[type[Control], ...] = (
    Prompt,
    Steer,
    FollowUp,
    Finalize,
    Cancel,
    Close,
    Answer,
    Unqueue,
)


def tag_of(cls: type[Message]) -> str:
    """The wire ``type`` of a message class."""
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


EVENT_TYPES: dict[str, type[Event]] = {tag_of(c): c for c in EVENTS}
CONTROL_TYPES: dict[str, type[Control]] = {tag_of(c): c for c in CONTROLS}
DISPLAY_EVENT_TYPES: frozenset[str] = frozenset(tag_of(c) for c in DISPLAY_EVENTS)
LIFECYCLE_EVENT_TYPES: frozenset[str] = frozenset(tag_of(c) for c in LIFECYCLE_EVENTS)
