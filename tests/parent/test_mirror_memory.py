"""A parent mirror and a child wired in memory: after every step their states agree.

The child here is a minimal in-memory presenter driven by the same table
(``decide_for_run``/``advance``); the mirror only sees its event lines.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.runtime.mirror import RunMirror
from tether.wire import Receiver, Rejection, Sender, rejection_ack, tag_of
from tether.wire import messages as m
from tether.wire.session import (
    ControlKind,
    Effect,
    Internal,
    State,
    advance,
    decide,
    decide_for_run,
    is_terminal,
)

RUN = "mem-run"


class MemoryChild:
    """Turns control lines and internal events into event lines, like a presenter."""

    def __init__(self) -> None:
        self.state = State.STARTING
        self.sender = Sender(RUN)
        self.receiver = Receiver("control")
        self.turn = 0
        self.in_turn = False
        self.final_turn = False
        self.out: list[bytes] = []

    def emit(self, cls: type[m.Message], **fields: Any) -> None:
        line = self.sender.next(cls, **fields)
        assert isinstance(line, bytes), line
        self.out.append(line)

    def start(self) -> None:
        self.state = advance(self.state, Internal.STARTED).next_state
        self.emit(m.Ready)

    def control(self, line: bytes) -> None:
        message = self.receiver.receive(line)
        if isinstance(message, Rejection):
            self.emit(m.ControlAck, **rejection_ack(message))
            return
        decision = decide_for_run(self.state, tag_of(type(message)), message.run, RUN)
        fields: dict[str, Any] = {"status": str(decision.ack), "ref": message.seq}
        if decision.reason:
            fields["reason"] = decision.reason
        self.emit(m.ControlAck, **fields)
        if decision.ack == "accepted":
            self.state = decision.next_state
            self.act(decision.effect)

    def act(self, effect: Effect) -> None:
        if effect is Effect.START_TURN:
            self.begin(final=False)
        elif effect is Effect.START_FINALIZE_TURN:
            self.begin(final=True)
        elif effect is Effect.INTERRUPT_TURN:
            self.turn_done("aborted")
        elif effect is Effect.FINISH:
            self.emit(m.Result, stop_reason="end_turn", final_text="ok")
            self.emit(m.Exit, status="done")
        elif effect in (Effect.ABORT, Effect.EXIT):
            if self.in_turn:
                self.in_turn = False
                self.emit(m.TurnComplete, turn=self.turn, stop_reason="aborted")
            self.emit(m.Exit, status=str(self.state))

    def begin(self, *, final: bool) -> None:
        self.turn += 1
        self.in_turn, self.final_turn = True, final
        self.emit(m.TurnStarted, turn=self.turn)

    def turn_done(self, stop_reason: str = "end_turn") -> None:
        internal = Internal.FINAL_TURN_DONE if self.final_turn else Internal.TURN_DONE
        move = advance(self.state, internal)
        self.in_turn = False
        self.state = move.next_state
        self.emit(m.TurnComplete, turn=self.turn, stop_reason=stop_reason)
        if move.effect is Effect.EXIT:
            self.emit(m.Exit, status=str(self.state))
        else:
            self.act(move.effect)

    def internal(self, event: Internal) -> None:
        move = advance(self.state, event)
        if move.effect is Effect.IMPOSSIBLE:
            return
        self.state = move.next_state
        self.act(move.effect)

    def take(self) -> list[bytes]:
        out, self.out = self.out, []
        return out


def feed(mirror: RunMirror, lines: list[bytes]) -> None:
    for line in lines:
        event, problem = mirror.receive(line)
        assert problem is None, problem
        assert event is not None


STEPS = st.lists(
    st.one_of(
        st.sampled_from(list(ControlKind)).map(lambda c: ("control", c)),
        st.sampled_from(["turn-done", "deadline", "fatal"]).map(lambda e: ("internal", e)),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, started=st.booleans())
def test_states_agree_after_every_step(steps: list[tuple[str, Any]], started: bool) -> None:
    child, mirror = MemoryChild(), RunMirror(RUN)
    if started:
        child.start()
    feed(mirror, child.take())
    assert mirror.state == child.state
    for kind, what in steps:
        if is_terminal(child.state):
            break
        if kind == "control":
            stamped = mirror.control(what, **({"text": "t"} if what in _TEXT else {}))
            assert not isinstance(stamped, Rejection)
            child.control(stamped[1])
        elif what == "turn-done":
            if not child.in_turn:
                continue
            child.turn_done()
        else:
            child.internal(Internal(what))
        feed(mirror, child.take())
        assert mirror.state == child.state, (steps, child.state, mirror.state)
        assert not mirror.pending or kind != "control" or child.state is State.STARTING


_TEXT = {ControlKind.PROMPT, ControlKind.STEER, ControlKind.FOLLOW_UP}


def test_every_state_and_control_agrees() -> None:
    """Each (state, control) cell, reached in memory, gives the same ack and state."""
    paths: dict[State, list[tuple[str, Any]]] = {
        State.STARTING: [],
        State.READY: [("start", None)],
        State.RUNNING: [("start", None), ("control", ControlKind.PROMPT)],
        State.CLOSING: [
            ("start", None),
            ("control", ControlKind.PROMPT),
            ("control", ControlKind.CLOSE),
        ],
        State.FINALIZING: [
            ("start", None),
            ("control", ControlKind.PROMPT),
            ("control", ControlKind.FINALIZE),
        ],
        State.CANCELLED: [("start", None), ("control", ControlKind.CANCEL)],
    }
    for state, path in paths.items():
        for control in ControlKind:
            child, mirror = MemoryChild(), RunMirror(RUN)
            for kind, what in path:
                if kind == "start":
                    child.start()
                else:
                    stamped = mirror.control(what, **({"text": "t"} if what in _TEXT else {}))
                    assert not isinstance(stamped, Rejection)
                    child.control(stamped[1])
                feed(mirror, child.take())
            assert child.state is state
            assert mirror.state is state
            stamped = mirror.control(control, **({"text": "t"} if control in _TEXT else {}))
            assert not isinstance(stamped, Rejection)
            child.control(stamped[1])
            lines = child.take()
            ack = next(msg for msg in map(_decode, lines) if isinstance(msg, m.ControlAck))
            assert ack.status == decide(state, control).ack
            if is_terminal(state):
                # a real child has exited by now; anything after exit is reported
                _, problem = mirror.receive(lines[0])
                assert problem is not None
                assert problem.reason == "control-ack after exit"
                continue
            feed(mirror, lines)
            assert mirror.state == child.state


def _decode(line: bytes) -> m.AnyMessage:
    from tether.wire import decode

    message = decode(line, "event")
    assert not isinstance(message, Rejection)
    return message


def test_disagreement_is_reported_not_silent() -> None:
    mirror = RunMirror(RUN)
    child = MemoryChild()
    child.start()
    feed(mirror, child.take())
    # an ack for a control the mirror never sent
    line = child.sender.next(m.ControlAck, status="accepted", ref=42)
    assert isinstance(line, bytes)
    event, problem = mirror.receive(line)
    assert event is not None
    assert problem is not None
    assert "seq 42" in problem.reason
    # an event for another run
    other = Sender("other").next(m.Ready)
    assert isinstance(other, bytes)
    _, problem = mirror.receive(other)
    assert problem is not None
    assert problem.reason == "event for foreign run other"
    # a turn-complete while ready
    line = child.sender.next(m.TurnComplete, turn=1, stop_reason="end_turn")
    assert isinstance(line, bytes)
    _, problem = mirror.receive(line)
    assert problem is not None
    assert "unexpected turn-complete in state ready" in problem.reason
    # a version mismatch is fatal
    _, problem = mirror.receive(b'{"v":2,"seq":99,"type":"ready","run":"mem-run"}')
    assert problem is not None
    assert problem.fatal
