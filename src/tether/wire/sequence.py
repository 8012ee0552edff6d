"""Sequence numbers: a Sender stamps them, a Receiver enforces that they increase."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from tether.wire.codec import Code, Rejection, decode, encode, validate
from tether.wire.limits import MAX_SAFE_INTEGER, VERSION
from tether.wire.messages import CONTROL_TYPES, AnyMessage, Message, tag_of

M = TypeVar("M", bound=Message)


class Sender:
    """Stamps outgoing messages for one run with strictly increasing seqs, starting at 1.

    The seq advances only when a line is produced, so a refused message leaves no gap.
    """

    def __init__(self, run: str, *, last_seq: int = 0) -> None:
        self.run = run
        self.seq = last_seq

    def stamp(self, cls: type[M], /, **fields: Any) -> M:
        """Build the next message of type ``cls`` (not yet counted as sent)."""
        return cls(v=VERSION, seq=self.seq + 1, run=self.run, **fields)

    def next(self, cls: type[Message], /, **fields: Any) -> bytes | Rejection:
        """Stamp, validate and encode the next message; returns its line (no newline)."""
        if self.seq >= MAX_SAFE_INTEGER:
            return Rejection(code=Code.INVALID, reason="sender exhausted its seq space")
        try:  # as stamp(), inline: one keyword expansion, not two
            message = cls(v=VERSION, seq=self.seq + 1, run=self.run, **fields)
        except (TypeError, ValueError) as exc:
            return Rejection(code=Code.INVALID_PAYLOAD, reason=str(exc), type=tag_of(cls))
        line = encode(message)
        if isinstance(line, bytes):
            self.seq = message.seq
        return line

    def next_payload(self, payload: Mapping[str, Any]) -> bytes | Rejection:
        """Stamp a wire-keyed payload dict (e.g. from :func:`normalize`) with the envelope."""
        obj = {**payload, "v": VERSION, "seq": self.seq + 1, "run": self.run}
        kind = obj.get("type")
        direction = "control" if kind in CONTROL_TYPES else "event"
        message = validate(obj, direction)
        if isinstance(message, Rejection):
            return message
        line = encode(message)
        if isinstance(line, bytes):
            self.seq = message.seq
        return line

    def next_message(self, message: Message) -> bytes | Rejection:
        """Like :meth:`next`, re-stamping an existing message with this sender's run and seq."""
        envelope = ("v", "seq", "run")
        fields = {f: getattr(message, f) for f in message.__struct_fields__ if f not in envelope}
        return self.next(type(message), **fields)


class Receiver:
    """Decodes incoming lines for one direction and rejects a seq that does not increase.

    Any readable increasing seq is consumed even when the payload is then rejected, so a
    later line cannot reuse it. An out-of-order rejection carries no seq, so its ack names
    no line. A fatal rejection (version mismatch) is returned before any ordering check.
    """

    def __init__(self, direction: str, *, last_seq: int = 0) -> None:
        self.direction = direction
        self.seq = last_seq

    def receive(self, line: bytes | bytearray | memoryview | str) -> AnyMessage | Rejection:
        result = decode(line, self.direction)
        if isinstance(result, Rejection):
            if result.fatal:
                return result
            seq = result.seq
        else:
            seq = result.seq
        if seq is None:
            return result
        if seq <= self.seq:
            return Rejection(
                code=Code.OUT_OF_ORDER,
                reason=f"seq {seq} does not follow {self.seq}",
                type=_kind(result),
                run=result.run,
            )
        self.seq = seq
        return result


def _kind(result: AnyMessage | Rejection) -> str | None:
    if isinstance(result, Rejection):
        return result.type
    return tag_of(type(result))


__all__ = ["Receiver", "Sender"]
