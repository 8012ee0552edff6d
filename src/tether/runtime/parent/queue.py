"""What waits in a run's queues: the steers and follow-ups its child accepted and has not
injected yet (``agent.queue``, ``RunHandle.queued()``).

Theory of operation. :class:`QueueBook` is an observer of one run: a ``steer`` or
``follow-up`` the child accepted is queued until its ``steering-injected`` /
``follow-up-injected`` (naming its seq as ``ref``) says the agent took it in, an ``info``
lists it as dropped (finalize, the run's end), an ``unqueue`` withdrew it, or the run
exits. Which control a seq was is read from the run's control file (the parent's own
lines), only when an ack names a seq the book has not read yet, so a parent that took the
run over still knows the controls sent before it. Texts are kept cut to
:data:`KEPT_TEXT_CHARS` (the whole text is the control's).
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

from tether.runtime.parent.observer import Observer
from tether.transports.tail import FileTail
from tether.wire import ControlAck, Exit, FollowUpInjected, Info, SteeringInjected, TooLarge

if TYPE_CHECKING:
    from tether.wire import AnyEvent

__all__ = ["KEPT_TEXT_CHARS", "QueueBook", "Queued"]

KEPT_TEXT_CHARS: Final = 4000
MAX_QUEUED: Final = 1000  # per run (a child queues without bound; the listing does not)
MAX_SEEN: Final = 4096  # control seqs remembered per run
_QUEUED_KINDS: Final = {"steer": "steer", "follow-up": "follow-up"}


class Queued(NamedTuple):
    ref: int  # the control's seq
    kind: str  # steer | follow-up
    text: str
    at: float
    truncated: bool = False


class QueueBook(Observer):
    """One agent's queued steers and follow-ups (see the module docstring)."""

    def __init__(self, control: Path) -> None:
        self._control = control
        self._offset = 0
        self._sent: OrderedDict[int, tuple[str, str, bool]] = OrderedDict()
        self.queued: OrderedDict[int, Queued] = OrderedDict()

    def replay(self, events: Path, upto: int) -> None:
        """A book made for a run already under way (a daemon that re-adopted it): the
        events before ``upto`` are read back, so what was queued before is listed too."""
        from tether.wire import Rejection, decode_event

        with contextlib.suppress(OSError), FileTail(events) as tail:
            while tail.offset < upto and (read := tail.read()).items:
                for item in read.items:
                    if isinstance(item, TooLarge) or item.offset >= upto:
                        continue
                    event = decode_event(item.data)
                    if not isinstance(event, Rejection):
                        self.on_event(event, item.data)

    def items(self) -> list[Queued]:
        return list(self.queued.values())

    def withdrawn(self, ref: int) -> None:
        self.queued.pop(ref, None)

    def on_event(self, event: AnyEvent, raw: bytes) -> None:
        if isinstance(event, ControlAck):
            self._ack(event)
        elif isinstance(event, SteeringInjected | FollowUpInjected):
            if isinstance(event.ref, int):
                self.queued.pop(event.ref, None)
        elif isinstance(event, Info) and isinstance(event.refs, list):
            for ref in event.refs:
                self.queued.pop(ref, None)
        elif isinstance(event, Exit):
            self.queued.clear()

    def _ack(self, ack: ControlAck) -> None:
        if not isinstance(ack.ref, int):
            return
        if ack.ref not in self._sent:
            self._read_controls()
        sent = self._sent.pop(ack.ref, None)
        if sent is None or ack.status != "accepted" or len(self.queued) >= MAX_QUEUED:
            return
        kind, text, truncated = sent
        self.queued[ack.ref] = Queued(ack.ref, kind, text, time.time(), truncated)

    def _read_controls(self) -> None:
        """The control file's new lines: each steer and follow-up, by seq."""
        from tether.transports.tail import FileTail, TailStatus
        from tether.wire import Rejection, TooLarge, decode

        with FileTail(self._control, offset=self._offset) as tail:
            while True:
                read = tail.read()
                for item in read.items:
                    if isinstance(item, TooLarge):
                        continue
                    message = decode(item.data, "control")
                    if isinstance(message, Rejection):
                        continue
                    kind = _QUEUED_KINDS.get(str(type(message).__struct_config__.tag))
                    text = getattr(message, "text", None)
                    if kind is not None and isinstance(text, str):
                        cut = text[:KEPT_TEXT_CHARS]
                        self._sent[message.seq] = (kind, cut, len(text) > KEPT_TEXT_CHARS)
                        while len(self._sent) > MAX_SEEN:
                            self._sent.popitem(last=False)
                if read.status is not TailStatus.OK or not read.more:
                    break
            self._offset = tail.offset
