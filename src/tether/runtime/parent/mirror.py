"""The parent's view of a run, sans-IO: stamp controls, receive events, mirror the state.

Theory of operation: the child decides every control with ``decide`` and moves on its
own events with ``advance``; it reports both through its event stream, in order
(every ack is written before any event the control causes). So a parent that applies
the same table to the same stream, in the same order, is always in the child's state:

- ``ready`` is ``advance(starting, started)``;
- a ``control-ack`` names the seq of a control this mirror stamped; when the child
  accepted or applied it, ``decide(state, kind)`` gives the state after (an ``answer``
  or ``unqueue`` the child could not match is rejected: the table allows both acks);
- ``turn-complete`` is ``advance(state, turn-done)``, or ``final-turn-done`` when the
  tool-free finalize turn was the one running (the same
  :class:`~tether.wire.session.RunSession` the child keeps knows it from the effects);
- ``turn-started`` in ``ready`` is ``advance(ready, queued-turn)``: a turn the child
  began on its own from a steer or follow-up still queued when the last turn ended;
- ``exit`` sets the terminal state it names.

Anything that disagrees with the table is reported as a :class:`ChannelError` rather
than silently ignored; the mirror then follows the child's word where it has one.
No files, no clock: :mod:`tether.runtime.parent.spawn` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.wire import (
    AnyEvent,
    ControlAck,
    Exit,
    Ready,
    Receiver,
    Rejection,
    Result,
    Sender,
    TurnComplete,
    TurnStarted,
    decode,
    encode,
)
from tether.wire.messages import CONTROL_TYPES
from tether.wire.session import (
    Advance,
    ControlKind,
    Effect,
    Internal,
    RunSession,
    State,
    acks_of,
    decide,
    is_terminal,
)


@dataclass(frozen=True, slots=True)
class ChannelError:
    """Something wrong on the channel: a bad event line, a foreign run, a truncated file.

    ``fatal`` errors end the channel (the parent then stops the child and fails the run).
    """

    reason: str
    fatal: bool = False
    run: str = ""
    offset: int | None = None


def too_large(run: str, offset: int) -> ChannelError:
    """The error for an event line over the line limit (it is skipped)."""
    return ChannelError(f"event line at offset {offset} is too large; skipped", False, run, offset)


def _restored_event(line: object, kind: type[Result] | type[Exit]) -> Any:
    """A ``result`` or ``exit`` event a snapshot kept (None when it kept none)."""
    if line is None:
        return None
    event = decode(line, "event") if isinstance(line, str) else None
    if not isinstance(event, kind):
        raise ValueError(f"the snapshot's {kind.__struct_config__.tag} is {line!r:.80}")
    return event


@dataclass(slots=True)
class Pending:
    """A control that was sent and not yet acknowledged."""

    seq: int
    kind: ControlKind


class RunMirror:
    """One run's channel state as the parent sees it; see the module docstring."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.sender = Sender(run)
        self.receiver = Receiver("event")
        self.session = RunSession()
        self.pending: dict[int, Pending] = {}
        self.turn = 0
        self.result: Result | None = None
        self.exit: Exit | None = None

    @property
    def state(self) -> State:
        return self.session.state

    # -- snapshot and restore (the daemon keeps a run's mirror across restarts) --------

    def snapshot(self) -> dict[str, Any]:
        """The mirror's state as JSON-safe data, at the receiver seq it has reached (with
        the run's ``result`` and ``exit`` events once read: a restore resumes reading after
        them, and the verdict needs both)."""
        snap: dict[str, Any] = {
            "state": self.state.value,
            "turn": self.turn,
            "pending": {str(seq): p.kind.value for seq, p in self.pending.items()},
            "final_next": self.session.final_turn,
            "sender_seq": self.sender.seq,
        }
        for key, event in (("result", self.result), ("exit", self.exit)):
            line = None if event is None else encode(event)
            if isinstance(line, bytes):
                snap[key] = line.decode()
        return snap

    @classmethod
    def restore(cls, run: str, snap: dict[str, Any] | None, last_seq: int) -> RunMirror:
        """A mirror as :meth:`snapshot` recorded it at receiver seq ``last_seq`` (None: a
        fresh one at that seq). Raises ``ValueError``/``KeyError``/``TypeError`` for a
        snapshot that does not parse."""
        mirror = cls(run)
        if snap is not None:
            final = snap["final_next"]
            if not isinstance(final, bool):
                raise TypeError(f"final_next is {final!r}")
            mirror.session = RunSession(State(snap["state"]), final_turn=final)
            mirror.turn = int(snap["turn"])
            pending = snap["pending"].items()
            mirror.pending = {int(q): Pending(int(q), ControlKind(k)) for q, k in pending}
            mirror.sender.seq = int(snap["sender_seq"])
            mirror.result = _restored_event(snap.get("result"), Result)
            mirror.exit = _restored_event(snap.get("exit"), Exit)
        mirror.receiver.seq = last_seq
        return mirror

    # -- controls ----------------------------------------------------------------------

    def control(self, kind: ControlKind | str, **fields: Any) -> tuple[int, bytes] | Rejection:
        """Stamp the next control line (no newline); it is pending until acknowledged."""
        kind = ControlKind(kind)
        line = self.sender.next(CONTROL_TYPES[kind.value], **fields)
        if isinstance(line, Rejection):
            return line
        seq = self.sender.seq
        self.pending[seq] = Pending(seq, kind)
        return seq, line

    def expect(self, line: bytes) -> None:
        """Treat a control line read back from a control file as sent (for replays)."""
        from tether.wire import decode

        message = decode(line, "control")
        if isinstance(message, Rejection):
            return
        kind = ControlKind(str(type(message).__struct_config__.tag))
        self.pending[message.seq] = Pending(message.seq, kind)
        self.sender.seq = max(self.sender.seq, message.seq)

    @property
    def idle(self) -> bool:
        """Ready with no unacknowledged control: the child waits for the parent."""
        return self.state is State.READY and not self.pending

    @property
    def finished(self) -> bool:
        """The child said ``exit``."""
        return self.exit is not None

    # -- events ------------------------------------------------------------------------

    def receive(self, line: bytes) -> tuple[AnyEvent | None, ChannelError | None]:
        """Validate one event line and apply it to the mirrored state.

        Returns the event (None when the line was refused) and a channel error (None
        when all is well). A valid event that disagrees with the table comes with both.
        """
        before = self.receiver.seq
        message = self.receiver.receive(line)
        run = message.run
        if run is not None and run != self.run:
            self.receiver.seq = before  # another run's seqs say nothing about ours
            return None, ChannelError(f"event for foreign run {run}", run=self.run)
        if isinstance(message, Rejection):
            reason = f"invalid event line ({message.code}): {message.reason}"
            return None, ChannelError(reason, fatal=message.fatal, run=self.run)
        event: AnyEvent = message  # type: ignore[assignment]
        problem = self.apply(event)
        return event, None if problem is None else ChannelError(problem, run=self.run)

    def apply(self, event: AnyEvent) -> str | None:
        """Move the mirror for a valid event of this run; a reason when it disagrees."""
        if self.exit is not None:
            return f"{_tag(event)} after exit"
        if isinstance(event, Ready):
            return self._advance(Internal.STARTED, "ready")
        if isinstance(event, ControlAck):
            return self._ack(event)
        if isinstance(event, TurnStarted):
            self.turn = event.turn
            if self.state is State.READY:  # a turn the child started from its queue
                return self._advance(Internal.QUEUED_TURN, "turn-started")
            return None
        if isinstance(event, TurnComplete):
            return self._moved(self.session.turn_done(), "turn-complete")
        if isinstance(event, Result):
            if self.result is not None:
                return "a second result"
            self.result = event
            return None
        if isinstance(event, Exit):
            self.exit = event
            self.session.state = State(event.status)
            self.pending.clear()
        return None

    def _advance(self, internal: Internal, what: str) -> str | None:
        return self._moved(self.session.advance(internal), what)

    def _moved(self, move: Advance, what: str) -> str | None:
        if move.effect is Effect.IMPOSSIBLE:
            return f"unexpected {what} in state {self.state}"
        return None

    def _ack(self, ack: ControlAck) -> str | None:
        if not isinstance(ack.ref, int):
            return None  # a rejection of a line without a usable seq
        pending = self.pending.pop(ack.ref, None)
        if pending is None:
            return f"control-ack for seq {ack.ref}, which is not awaiting an ack"
        decision = decide(self.state, pending.kind)
        if ack.status not in acks_of(decision):
            return (
                f"child {ack.status} {pending.kind} (seq {ack.ref}) in state {self.state}; "
                f"the table says {decision.ack}"
            )
        self.session.decided(decision)
        return None

    def terminal(self) -> bool:
        return is_terminal(self.state)


def _tag(event: AnyEvent) -> str:
    tag = type(event).__struct_config__.tag
    return tag if isinstance(tag, str) else type(event).__name__
