"""The run state table, as data.

One table answers "what does control C do in state S": the ack the child sends, the
state after, and the effect the child performs. A second table answers the same for the
child's internal events (a turn ending, the deadline passing, a fatal error). The child
presenter drives both; a parent mirrors them from the events alone, so the two can
never drift. Every cell is written out, rejections and impossible events included, so
a test can check that the keys are the whole product. Effects are values the runtime
interprets, never callables.

Two controls extend v1 (:data:`EXTENSIONS`): ``answer`` resolves an approval or a
question that waits in the child, ``unqueue`` withdraws a queued steer or follow-up.
Neither moves the run. Their effects are *checked* (:data:`CHECKED`): the table's ack
is ``applied`` when the runtime finds what the control names, and ``rejected`` with the
runtime's reason when it does not (no such key waits; the steer was already injected).
A child that does not know them (Fen's) rejects them as an unknown type, which a parent
tells apart from the runtime's reasons by the ack's reason.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from types import MappingProxyType
from typing import Final, Literal, TypeAlias, cast


class State(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    RUNNING = "running"
    CLOSING = "closing"
    FINALIZING = "finalizing"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"
    TIMED_OUT = "timed-out"


class ControlKind(enum.StrEnum):
    PROMPT = "prompt"
    STEER = "steer"
    FOLLOW_UP = "follow-up"
    FINALIZE = "finalize"
    CLOSE = "close"
    CANCEL = "cancel"
    ANSWER = "answer"  # extension: resolve a waiting approval or question
    UNQUEUE = "unqueue"  # extension: withdraw a queued steer or follow-up


class Internal(enum.StrEnum):
    """Events inside the child that move the run without a control."""

    STARTED = "started"  # initialization finished; the child emits `ready`
    TURN_DONE = "turn-done"  # a regular or interrupted turn ended
    FINAL_TURN_DONE = "final-turn-done"  # the tool-free finalize turn ended
    QUEUED_TURN = "queued-turn"  # a turn ended with a steer or follow-up still queued
    DEADLINE = "deadline"  # the run deadline passed
    FATAL = "fatal"  # an unrecoverable error


class AckStatus(enum.StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    APPLIED = "applied"


class Effect(enum.StrEnum):
    """What the child does after a decision."""

    NONE = "none"  # nothing further
    START_TURN = "start-turn"  # start a turn with the control's text
    QUEUE_STEERING = "queue-steering"  # queue text for the next model call
    QUEUE_FOLLOW_UP = "queue-follow-up"  # queue text for when the turn would end
    START_FINALIZE_TURN = "start-finalize-turn"  # run one turn with tools disabled
    INTERRUPT_TURN = "interrupt-turn"  # stop the turn at its next yield (then finalize)
    ABORT = "abort"  # stop the turn or tool now, then exit with the state
    FINISH = "finish"  # emit `result`, then `exit done`
    EXIT = "exit"  # exit with the (terminal) state as status
    RESOLVE_ANSWER = "resolve-answer"  # hand the answer to what waits for its key
    WITHDRAW_QUEUED = "withdraw-queued"  # take the named steer or follow-up off its queue
    IMPOSSIBLE = "impossible"  # the event cannot happen in this state


TERMINAL: Final = frozenset({State.DONE, State.CANCELLED, State.FAILED, State.TIMED_OUT})
# How a run ended: the terminal states' values, as `exit`, a parent's result and the run
# index spell them (a test keeps it equal to TERMINAL).
RunStatus: TypeAlias = Literal["done", "cancelled", "failed", "timed-out"]
ACTIVE: Final = (State.STARTING, State.READY, State.RUNNING, State.CLOSING, State.FINALIZING)
# The controls wire v1 defines, and the two tether adds (see the module docstring).
V1_CONTROLS: Final = (
    ControlKind.PROMPT,
    ControlKind.STEER,
    ControlKind.FOLLOW_UP,
    ControlKind.FINALIZE,
    ControlKind.CLOSE,
    ControlKind.CANCEL,
)
EXTENSIONS: Final = (ControlKind.ANSWER, ControlKind.UNQUEUE)
# Effects whose ack the runtime settles before writing it: `applied` when it finds what
# the control names, else `rejected` with its reason (never a move of the run).
CHECKED: Final = frozenset({Effect.RESOLVE_ANSWER, Effect.WITHDRAW_QUEUED})


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to a control: its ack, the state after, the effect, and a reason."""

    ack: AckStatus
    next_state: State
    effect: Effect
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Advance:
    """The answer to an internal event: the state after and the effect."""

    next_state: State
    effect: Effect


def _accept(effect: Effect, to: State) -> Decision:
    return Decision(AckStatus.ACCEPTED, to, effect)


def _apply(state: State) -> Decision:
    return Decision(AckStatus.APPLIED, state, Effect.NONE)


def _reject(state: State, reason: str) -> Decision:
    return Decision(AckStatus.REJECTED, state, Effect.NONE, reason)


def _checked(state: State, effect: Effect) -> Decision:
    return Decision(AckStatus.APPLIED, state, effect)


def _decisions() -> dict[tuple[State, ControlKind], Decision]:
    s, c = State, ControlKind
    cancel = _accept(Effect.ABORT, s.CANCELLED)
    table: dict[tuple[State, ControlKind], Decision] = {}
    for control in c:
        if control is not c.CANCEL:
            table[s.STARTING, control] = _reject(s.STARTING, "child is not ready")
    table[s.STARTING, c.CANCEL] = cancel
    table |= {
        (s.READY, c.PROMPT): _accept(Effect.START_TURN, s.RUNNING),
        (s.READY, c.STEER): _accept(Effect.START_TURN, s.RUNNING),
        (s.READY, c.FOLLOW_UP): _accept(Effect.START_TURN, s.RUNNING),
        (s.READY, c.FINALIZE): _accept(Effect.START_FINALIZE_TURN, s.FINALIZING),
        (s.READY, c.CLOSE): _accept(Effect.FINISH, s.DONE),
        (s.READY, c.CANCEL): cancel,
        (s.RUNNING, c.PROMPT): _reject(s.RUNNING, "a turn is running; send steer or follow-up"),
        (s.RUNNING, c.STEER): _accept(Effect.QUEUE_STEERING, s.RUNNING),
        (s.RUNNING, c.FOLLOW_UP): _accept(Effect.QUEUE_FOLLOW_UP, s.RUNNING),
        (s.RUNNING, c.FINALIZE): _accept(Effect.INTERRUPT_TURN, s.FINALIZING),
        (s.RUNNING, c.CLOSE): _accept(Effect.NONE, s.CLOSING),
        (s.RUNNING, c.CANCEL): cancel,
    }
    for state in (s.CLOSING, s.FINALIZING):
        for control in (c.PROMPT, c.STEER, c.FOLLOW_UP):
            table[state, control] = _reject(state, f"run is {state}")
        table[state, c.CANCEL] = cancel
    table[s.CLOSING, c.FINALIZE] = _accept(Effect.INTERRUPT_TURN, s.FINALIZING)
    table[s.CLOSING, c.CLOSE] = _apply(s.CLOSING)
    table[s.FINALIZING, c.FINALIZE] = _apply(s.FINALIZING)
    table[s.FINALIZING, c.CLOSE] = _apply(s.FINALIZING)
    for state in (s.READY, s.RUNNING, s.CLOSING, s.FINALIZING):
        table[state, c.ANSWER] = _checked(state, Effect.RESOLVE_ANSWER)
        table[state, c.UNQUEUE] = _checked(state, Effect.WITHDRAW_QUEUED)
    for state in TERMINAL:
        for control in c:
            table[state, control] = _reject(state, f"run is {state}")
    return table


def _advances() -> dict[tuple[State, Internal], Advance]:
    s, i = State, Internal
    table = {key: Advance(key[0], Effect.IMPOSSIBLE) for key in product(State, Internal)}
    for state in ACTIVE:
        table[state, i.DEADLINE] = Advance(s.TIMED_OUT, Effect.ABORT)
        table[state, i.FATAL] = Advance(s.FAILED, Effect.ABORT)
    table[s.STARTING, i.STARTED] = Advance(s.READY, Effect.NONE)
    table[s.RUNNING, i.TURN_DONE] = Advance(s.READY, Effect.NONE)
    table[s.CLOSING, i.TURN_DONE] = Advance(s.DONE, Effect.FINISH)
    table[s.FINALIZING, i.TURN_DONE] = Advance(s.FINALIZING, Effect.START_FINALIZE_TURN)
    table[s.FINALIZING, i.FINAL_TURN_DONE] = Advance(s.DONE, Effect.FINISH)
    # Back in ready with controls still queued: the first of them starts the next turn
    # (the child reports it with turn-started alone; no control is decided).
    table[s.READY, i.QUEUED_TURN] = Advance(s.RUNNING, Effect.START_TURN)
    # An aborted turn unwinds after the state is already terminal: its end exits with
    # that state, and a later deadline or fatal error changes nothing.
    for state in TERMINAL:
        table[state, i.TURN_DONE] = Advance(state, Effect.EXIT)
        table[state, i.FINAL_TURN_DONE] = Advance(state, Effect.EXIT)
        table[state, i.DEADLINE] = Advance(state, Effect.ABORT)
        table[state, i.FATAL] = Advance(state, Effect.ABORT)
    return table


DECISIONS: Final = MappingProxyType(_decisions())
ADVANCES: Final = MappingProxyType(_advances())
# The same cells, looked up by plain names too (a StrEnum hashes and compares as its
# value): known names are found without converting either to its enum.
_BY_NAME: Final = cast("Mapping[tuple[str, str], Decision]", DECISIONS)
# Read by every decision and move (an enum member read through its class costs ~900
# instructions on Python 3.11: EnumType's __getattr__ hook runs for each).
_ACCEPTED: Final = AckStatus.ACCEPTED
_FINALIZE_TURN: Final = Effect.START_FINALIZE_TURN
_TURN_STARTS: Final = (Effect.START_TURN, Effect.INTERRUPT_TURN)


def decide(state: State | str, control: ControlKind | str) -> Decision:
    """The decision for ``control`` in ``state``; unknown names are rejected, never raised."""
    decision = _BY_NAME.get((state, control))
    if decision is not None:
        return decision
    try:
        key = (State(state), ControlKind(control))
    except ValueError:
        return _reject(_safe_state(state), f"no transition for {control} in state {state}")
    return DECISIONS[key]


def acks_of(decision: Decision) -> frozenset[AckStatus]:
    """The acks a child may give for ``decision``: its own, and ``rejected`` too when
    its effect is checked (:data:`CHECKED`)."""
    if decision.effect in CHECKED:
        return frozenset({decision.ack, AckStatus.REJECTED})
    return frozenset({decision.ack})


def decide_for_run(state: State | str, control: ControlKind | str, run: str, own: str) -> Decision:
    """Like :func:`decide`, first rejecting a control addressed to another run."""
    if run != own:
        key = (state, run, own)
        decision = _FOREIGN.get(key)
        if decision is None:
            if len(_FOREIGN) >= FOREIGN_KEPT:
                _FOREIGN.clear()
            decision = _FOREIGN[key] = _reject(_safe_state(state), f"run {run} is not {own}")
        return decision
    return decide(state, control)


FOREIGN_KEPT: Final = 64
# The rejections of controls for other runs made last (a Decision costs ~10,000
# instructions to build): at most FOREIGN_KEPT, forgotten all at once when full.
_FOREIGN: dict[tuple[State | str, str, str], Decision] = {}


def advance(state: State | str, event: Internal | str) -> Advance:
    """The move for an internal event; ``Effect.IMPOSSIBLE`` when it cannot happen there."""
    try:
        return ADVANCES[State(state), Internal(event)]
    except ValueError:
        return Advance(_safe_state(state), Effect.IMPOSSIBLE)


class RunSession:
    """One run's place in the table, kept the same way by the child and by a parent's mirror.

    It holds the state and the one final-turn flag (the running, next or last turn is
    the tool-free finalize turn, so its end is ``final-turn-done``): an accepted decision
    or an internal event moves both, from the effect alone.
    """

    __slots__ = ("final_turn", "state")

    def __init__(self, state: State = State.STARTING, *, final_turn: bool = False) -> None:
        self.state = state
        self.final_turn = final_turn

    def decided(self, decision: Decision) -> None:
        """Apply a decision (only an accepted one moves the run)."""
        if decision.ack is _ACCEPTED:
            self._move(decision.next_state, decision.effect)

    def advance(self, event: Internal) -> Advance:
        """Apply an internal event; ``Effect.IMPOSSIBLE`` (and no move) when it cannot happen."""
        move = advance(self.state, event)
        if move.effect is not Effect.IMPOSSIBLE:
            self._move(move.next_state, move.effect)
        return move

    def turn_done(self) -> Advance:
        """The running turn ended: ``turn-done``, or ``final-turn-done`` for the final one."""
        return self.advance(Internal.FINAL_TURN_DONE if self.final_turn else Internal.TURN_DONE)

    def _move(self, state: State, effect: Effect) -> None:
        self.state = state
        if effect is _FINALIZE_TURN:
            self.final_turn = True
        elif effect in _TURN_STARTS:
            self.final_turn = False


def is_terminal(state: State | str) -> bool:
    """True for done, cancelled, failed and timed-out (the exit statuses)."""
    return state in TERMINAL


def _safe_state(state: State | str) -> State:
    if type(state) is State:
        return state
    try:
        return State(state)
    except ValueError:
        return State.FAILED
