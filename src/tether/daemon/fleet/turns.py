"""Which turn answers an ``agent.ask``, and what it said: sans-IO, fed the run's events.

Theory of operation: an ask sends one control (``prompt`` when the agent is ready,
``follow-up`` when it is running) and waits for the turn that reads it. The child's event
stream says exactly when that happens:

- a ``prompt`` that is accepted starts a turn at once: the ``turn-started`` right after
  its ``control-ack`` is its turn;
- a ``follow-up`` (or ``steer``) is read when the child emits ``follow-up-injected``
  (``steering-injected``) naming its seq in ``ref``: in the running turn, or as the opening
  of the next one.

From that point the tracker keeps the text of each finished model call (the
``assistant-text`` blocks between ``llm-start`` and ``assistant-stream-end``; when a block
was cut for transport, the streamed deltas of that block instead). The ask's answer is the
last such text when its turn's ``turn-complete`` arrives, with that turn's usage and stop
reason (and, for a turn that failed, the error its ``agent-turn-complete`` or last
``error`` event gave). A control the child rejects, drops (an ``info`` listing its seq)
or never reads because the run exits ends the ask with a reason instead.

No I/O and no clock: :mod:`tether.daemon.fleet.wire_agent` feeds events and resolves futures.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final

from tether.wire import (
    AgentTurnComplete,
    AnyEvent,
    AssistantStreamEnd,
    AssistantText,
    AssistantTextDelta,
    ControlAck,
    Error,
    Exit,
    FollowUpInjected,
    Info,
    LlmStart,
    SteeringInjected,
    TurnComplete,
    TurnStarted,
)

MAX_ANSWER_CHARS: Final = 1_048_576
"""The longest answer text an ask returns (the rest is cut, ``truncated`` says so)."""
MAX_ERROR_CHARS: Final = 4096
"""The longest error of a failed turn an ask returns."""


class Phase(enum.Enum):
    ACK = "ack"  # waiting for the control's ack
    START = "start"  # accepted prompt: the next turn-started is its turn
    INJECT = "inject"  # accepted follow-up/steer: waiting for *-injected with its ref
    COLLECT = "collect"  # its turn is running; keeping the latest call text


@dataclass(frozen=True, slots=True)
class TurnAnswer:
    """The answer of one ask: its turn's last assistant text, usage and stop reason."""

    seq: int
    turn: int
    text: str
    usage: dict[str, Any]
    stop_reason: str
    truncated: bool = False
    error: str | None = None  # a failed turn's error

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "turn": self.turn,
            "text": self.text,
            "usage": self.usage,
            "stop_reason": self.stop_reason,
            "truncated": self.truncated,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class AskFailed:
    """The ask's control was refused or never read; ``reason`` says why."""

    seq: int
    reason: str
    rejected: bool = False


Outcome = TurnAnswer | AskFailed


@dataclass(slots=True)
class _Ask:
    seq: int
    opens_turn: bool  # a prompt: its turn is the next turn-started
    phase: Phase = Phase.ACK
    turn: int = 0
    text: str = ""
    truncated: bool = False


@dataclass(slots=True)
class _Call:
    """The text blocks of the model call in progress (each kind kept to one char past the cap,
    so an answer that was longer is known to be cut)."""

    texts: dict[int, str] = field(default_factory=dict)
    deltas: dict[int, list[str]] = field(default_factory=dict)
    cut: bool = False  # a block was cut for transport: prefer the streamed deltas
    order: list[int] = field(default_factory=list)
    text_size: int = 0
    delta_size: int = 0

    def add_text(self, index: int, text: str, cut: bool) -> None:
        if index not in self.texts:
            self.order.append(index)
            self.texts[index] = ""
        text = text[: max(0, MAX_ANSWER_CHARS + 1 - self.text_size)]
        self.texts[index] += text
        self.text_size += len(text)
        self.cut = self.cut or cut

    def add_delta(self, index: int, delta: str) -> None:
        delta = delta[: max(0, MAX_ANSWER_CHARS + 1 - self.delta_size)]
        if delta:
            self.deltas.setdefault(index, []).append(delta)
            self.delta_size += len(delta)

    def compose(self) -> str:
        parts = []
        for index in self.order:
            streamed = self.deltas.get(index)
            parts.append("".join(streamed) if self.cut and streamed else self.texts[index])
        return "".join(parts)

    @property
    def empty(self) -> bool:
        return not self.order


class TurnTracker:
    """Follows a run's events and resolves the asks registered with :meth:`expect`."""

    def __init__(self) -> None:
        self._asks: dict[int, _Ask] = {}
        self._call = _Call()
        self._error: str | None = None  # the running turn's error, if it reported one
        self.turn = 0

    def __len__(self) -> int:
        return len(self._asks)

    def expect(self, seq: int, *, opens_turn: bool) -> None:
        """Track control ``seq``: a prompt (``opens_turn``) or a follow-up/steer."""
        self._asks[seq] = _Ask(seq, opens_turn)

    def forget(self, seq: int) -> None:
        self._asks.pop(seq, None)

    def feed(self, event: AnyEvent) -> list[Outcome]:
        """Apply one valid event of the run; returns the asks it settled."""
        if isinstance(event, ControlAck):
            return self._ack(event)
        if isinstance(event, TurnStarted):
            self.turn = event.turn
            self._call, self._error = _Call(), None
            for ask in self._asks.values():
                if ask.phase is Phase.START:
                    ask.phase, ask.turn = Phase.COLLECT, event.turn
            return []
        if isinstance(event, FollowUpInjected | SteeringInjected):
            injected = self._asks.get(event.ref) if isinstance(event.ref, int) else None
            if injected is not None and injected.phase in (Phase.ACK, Phase.INJECT):
                injected.phase, injected.turn, injected.text = Phase.COLLECT, self.turn, ""
            return []
        self._display(event)
        if isinstance(event, TurnComplete):
            return self._turn_complete(event)
        if isinstance(event, Info) and isinstance(event.refs, list):
            return self._dropped(event.refs)
        if isinstance(event, Exit):
            return self.fail_all(f"the run ended ({event.status}) before answering")
        return []

    def fail_all(self, reason: str) -> list[Outcome]:
        """Settle every open ask with ``reason`` (the run is over)."""
        settled: list[Outcome] = [AskFailed(seq, reason) for seq in self._asks]
        self._asks.clear()
        return settled

    # -- internals -------------------------------------------------------------------

    def _ack(self, ack: ControlAck) -> list[Outcome]:
        ask = self._asks.get(ack.ref) if isinstance(ack.ref, int) else None
        if ask is None or ask.phase is not Phase.ACK:
            return []
        if ack.status == "rejected":
            del self._asks[ask.seq]
            reason = ack.reason if isinstance(ack.reason, str) else "rejected"
            return [AskFailed(ask.seq, reason, rejected=True)]
        ask.phase = Phase.START if ask.opens_turn else Phase.INJECT
        return []

    def _display(self, event: AnyEvent) -> None:
        if isinstance(event, LlmStart):
            self._call = _Call()
        elif isinstance(event, AssistantText):
            if isinstance(event.text, str):
                index = event.content_index if isinstance(event.content_index, int) else 0
                self._call.add_text(index, event.text, event.transport_truncated is True)
        elif isinstance(event, AssistantTextDelta):
            if isinstance(event.delta, str):
                index = event.content_index if isinstance(event.content_index, int) else 0
                self._call.add_delta(index, event.delta)
        elif isinstance(event, AgentTurnComplete | Error) and isinstance(event.error, str):
            self._error = event.error[:MAX_ERROR_CHARS]
        elif isinstance(event, AssistantStreamEnd) or (
            isinstance(event, TurnComplete) and not self._call.empty
        ):
            self._end_call()

    def _end_call(self) -> None:
        call, self._call = self._call, _Call()
        if call.empty:
            return
        text, truncated = _clip(call.compose())
        for ask in self._asks.values():
            if ask.phase is Phase.COLLECT:
                ask.text, ask.truncated = text, truncated

    def _turn_complete(self, event: TurnComplete) -> list[Outcome]:
        usage = event.usage if isinstance(event.usage, dict) else {}
        done = [a for a in self._asks.values() if a.phase is Phase.COLLECT and a.turn == event.turn]
        for ask in done:
            del self._asks[ask.seq]
        error = self._error if event.stop_reason == "error" else None
        return [
            TurnAnswer(a.seq, a.turn, a.text, dict(usage), event.stop_reason, a.truncated, error)
            for a in done
        ]

    def _dropped(self, refs: list[int]) -> list[Outcome]:
        settled: list[Outcome] = []
        for ref in refs:
            ask = self._asks.get(ref)
            if ask is not None and ask.phase is not Phase.COLLECT:
                del self._asks[ref]
                reason = "the message was dropped unread: the run is finishing"
                settled.append(AskFailed(ref, reason))
        return settled


def _clip(text: str) -> tuple[str, bool]:
    if len(text) > MAX_ANSWER_CHARS:
        return text[:MAX_ANSWER_CHARS], True
    return text, False
