"""Run supervision, sans-IO: the rules that keep a parent from hanging and its answer honest.

Theory of operation. :class:`RunWatch` owns one run's
:class:`~tether.runtime.parent.mirror.RunMirror` and its timers. The one run driver,
:class:`~tether.runtime.parent.driver.LocalRunHandle` (behind ``tether.spawn`` and each of
the daemon's wire agents alike), is the I/O around it: it does the
reading, writing, waiting and signalling, and tells the watch what happened, always
with ``now`` (one monotonic clock, in seconds):

- :meth:`RunWatch.send` stamps a control (the driver appends the line it returns);
- :meth:`RunWatch.receive`, :meth:`RunWatch.too_large`, :meth:`RunWatch.channel_error`:
  what the event file said;
- :meth:`RunWatch.process_exited`, :meth:`RunWatch.terminated`, :meth:`RunWatch.drained`:
  what the process did, and that what the driver was asked to do is done;
- :meth:`RunWatch.fail`: the driver's own reason to end the run (a kill, a lost process).

:meth:`RunWatch.next` answers with actions: :class:`Send` (append these automatic
controls), then one of :class:`Wait` (until a time, or until something happens),
:class:`Terminate` (end the process group: SIGTERM, then SIGKILL after ``grace_s``;
nothing when it is already empty), :class:`Drain` (read what is left of the event file,
at most ``limit`` bytes) or :class:`Finish` (:meth:`RunWatch.verdict` is ready).

The never-hang rules; each fails the run, ends the process group and reads what the
child wrote last (an ``exit`` written just before the end still counts):

- no ``ready`` within ``start_s``;
- a control not acknowledged within ``ack_s`` of the child being ready;
- no ``exit`` within ``cancel_grace_s`` of a ``cancel`` (of ``ready``, if it came first);
- still running ``cancel_grace_s`` past the wire deadline (``timed-out``);
- a fatal channel error (version mismatch, event file truncated or gone);
- the process exits without an ``exit`` event (read to the end of the file first).

After ``exit`` the process has ``exit_grace_s`` to go; then, and whenever the process
is gone, whatever is left in its process group is ended. Automatic controls: a
``finalize`` at ``finalize_at``, and ``close`` once the child is idle when
``close_when_idle`` (neither once the wire deadline has passed: the child is exiting).

The verdict is the child's ``exit`` when it wrote one (``exit done`` without a
``result`` is a failed run: the wire promises ``result`` first), else the failure with
the tail of the child's stderr.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from tether.runtime.parent.mirror import ChannelError, RunMirror, too_large
from tether.runtime.parent.outcome import Timeouts
from tether.wire import AnyEvent, ControlAck, Ready, Rejection, TurnComplete
from tether.wire import Result as ResultEvent
from tether.wire.session import ControlKind, RunStatus, State, is_terminal

__all__ = [
    "DEADLINE_FINALIZE_NOTE",
    "FAILURE_DRAIN_BYTES",
    "STDERR_TAIL_BYTES",
    "Action",
    "Drain",
    "Finish",
    "RunWatch",
    "Send",
    "Terminate",
    "Timeouts",
    "Verdict",
    "Wait",
    "with_stderr",
]

DEADLINE_FINALIZE_NOTE: Final = (
    "Your time is nearly up. Without calling tools, give your final answer from what you have "
    "so far."
)
# How much of the child's stderr a failed run's error quotes.
STDERR_TAIL_BYTES: Final = 2000
# After the driver ended a live child, at most this much of its event file is still read
# (a flooding child must not keep a finished run reading for ever).
FAILURE_DRAIN_BYTES: Final = 4 * 1024 * 1024
NO_RESULT: Final = "child exited done without a result (the wire sends result before exit done)"


@dataclass(frozen=True, slots=True)
class Send:
    """Append this control line (an automatic ``finalize`` or ``close``)."""

    seq: int
    kind: ControlKind
    line: bytes


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do until ``until`` (monotonic), or until the driver learns something.

    ``until`` is ``math.inf`` when nothing is due at all (no timer runs and
    ``Timeouts.tick_s`` is None): the driver waits for events only.
    """

    until: float


@dataclass(frozen=True, slots=True)
class Terminate:
    """End the process group (SIGTERM, SIGKILL after ``grace_s``), then :meth:`terminated`."""

    grace_s: float


@dataclass(frozen=True, slots=True)
class Drain:
    """Read the rest of the event file (at most ``limit`` bytes), then :meth:`drained`."""

    limit: int | None


@dataclass(frozen=True, slots=True)
class Finish:
    """The run is over: take :meth:`RunWatch.verdict`."""


Action = Send | Wait | Terminate | Drain | Finish


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the run ended: its status, the error explaining it, and the child's result."""

    status: RunStatus
    error: str | None
    result: ResultEvent | None


class RunWatch:
    """One run's supervision; see the module docstring."""

    def __init__(
        self,
        mirror: RunMirror,
        timeouts: Timeouts,
        *,
        now: float,
        deadline: float | None = None,
        finalize_at: float | None = None,
        close_when_idle: bool = False,
    ) -> None:
        self.mirror = mirror
        self.timeouts = timeouts
        self.started = now
        self.deadline = deadline  # the wire deadline on the monotonic clock
        self.finalize_at = finalize_at
        self.close_when_idle = close_when_idle
        self.failure: tuple[RunStatus, str] | None = None
        self.exit_code: int | None = None
        self.ready_at: float | None = None if mirror.state is State.STARTING else now
        self.live_state = State.STARTING if is_terminal(mirror.state) else mirror.state
        self._saw_ready = self.ready_at is not None
        self._sent: dict[int, float] = dict.fromkeys(mirror.pending, now)
        self._cancel_at: float | None = None
        self._exit_at: float | None = None
        self._finalize_sent = False
        self._close_sent = False
        self._last_stop: str | None = None  # the stop reason of the last turn-complete
        self._proc_exited = False
        self._terminate_asked = False
        self._exited_itself = False
        self._group_ended = False
        self._drained = False

    # -- what the driver tells ----------------------------------------------------------

    @property
    def was_ready(self) -> bool:
        """The child has said ``ready`` (or was past it when the watch began)."""
        return self._saw_ready

    def send(self, kind: ControlKind | str, now: float, **fields: Any) -> Send | Rejection:
        """Stamp the next control; the driver appends :attr:`Send.line`."""
        kind = ControlKind(kind)
        stamped = self.mirror.control(kind, **fields)
        if isinstance(stamped, Rejection):
            return stamped
        seq, line = stamped
        self._sent[seq] = now
        if kind is ControlKind.CANCEL and self._cancel_at is None:
            self._cancel_at = now
        elif kind is ControlKind.FINALIZE:
            self._finalize_sent = True
        elif kind is ControlKind.CLOSE:
            self._close_sent = True
        return Send(seq, kind, line)

    def receive(self, line: bytes) -> tuple[AnyEvent | None, ChannelError | None]:
        """One event line: validated and mirrored (see :meth:`RunMirror.receive`)."""
        event, problem = self.mirror.receive(line)
        if isinstance(event, ControlAck) and isinstance(event.ref, int):
            self._sent.pop(event.ref, None)
        elif isinstance(event, Ready) and problem is None:
            self._saw_ready = True
        elif isinstance(event, TurnComplete):
            self._last_stop = event.stop_reason
        if not is_terminal(self.mirror.state):
            self.live_state = self.mirror.state
        if problem is not None:
            self.channel_error(problem)
        return event, problem

    def too_large(self, offset: int) -> ChannelError:
        """An event line over the line limit was skipped (reported, not fatal)."""
        return too_large(self.mirror.run, offset)

    def channel_error(self, error: ChannelError) -> None:
        if error.fatal:
            self.fail("failed", f"channel error: {error.reason}")

    def fail(self, status: RunStatus, reason: str) -> None:
        """End the run with ``status`` (the first reason given wins)."""
        if self.failure is None:
            self.failure = (status, reason)

    def process_exited(self, code: int | None) -> None:
        """The child process is gone (on its own, unless after a :class:`Terminate`)."""
        if not self._terminate_asked:
            self._exited_itself = True
        self._proc_exited = True
        if code is not None:
            self.exit_code = code

    def terminated(self, code: int | None = None) -> None:
        """The process group asked for by :class:`Terminate` is gone."""
        self._group_ended = True
        self._proc_exited = True
        if code is not None and self.exit_code is None:
            self.exit_code = code

    def drained(self) -> None:
        """The :class:`Drain` asked for is done."""
        self._drained = True

    # -- what the driver does next ----------------------------------------------------

    def next(self, now: float) -> list[Action]:
        """The actions due at ``now``: maybe some :class:`Send`, then exactly one other."""
        if self.ready_at is None and self.mirror.state is not State.STARTING:
            self.ready_at = now
        if self.mirror.finished:
            return self._after_exit(now)
        if self.failure is None and self._proc_exited:
            if not self._drained:
                return [Drain(None)]  # an exit may follow a long backlog
            self.fail("failed", f"child exited{_code(self.exit_code)} without an exit event")
        if self.failure is None:
            self._check_timers(now)
        if self.failure is not None:
            return self._after_failure()
        return [*self._auto_controls(now), Wait(self._next_due(now))]

    def _after_exit(self, now: float) -> list[Action]:
        if self._exit_at is None:
            self._exit_at = now
        if not self._proc_exited:
            due = self._exit_at + self.timeouts.exit_grace_s
            if now < due:
                return [Wait(due)]
        if not self._group_ended:
            return [self._terminate()]
        return [Finish()]

    def _after_failure(self) -> list[Action]:
        if not self._group_ended:
            return [self._terminate()]
        if not self._drained:
            return [Drain(None if self._exited_itself else FAILURE_DRAIN_BYTES)]
        return [Finish()]

    def _terminate(self) -> Terminate:
        self._terminate_asked = True
        return Terminate(self.timeouts.kill_grace_s)

    def _check_timers(self, now: float) -> None:
        t = self.timeouts
        if self.ready_at is None:
            if now >= self.started + t.start_s:
                self.fail("failed", f"child did not send ready within {t.start_s:g} s")
        elif (oldest := self._oldest_pending()) is not None:
            seq, sent = oldest
            if now >= max(sent, self.ready_at) + t.ack_s:
                kind = self.mirror.pending[seq].kind
                self.fail(
                    "failed",
                    f"child stopped answering: {kind} (seq {seq}) was not acknowledged "
                    f"within {t.ack_s:g} s",
                )
        cancel_due = self._cancel_due()
        if cancel_due is not None and now >= cancel_due:
            self.fail("failed", f"child did not exit within {t.cancel_grace_s:g} s of cancel")
        if self.deadline is not None and now >= self.deadline + t.cancel_grace_s:
            self.fail("timed-out", "child did not exit by its deadline")

    def _cancel_due(self) -> float | None:
        # like an ack, counted from when the child could first read it (start_s covers before)
        if self._cancel_at is None or self.ready_at is None:
            return None
        return max(self._cancel_at, self.ready_at) + self.timeouts.cancel_grace_s

    def _oldest_pending(self) -> tuple[int, float] | None:
        for seq in self.mirror.pending:  # stamped in order: the first is the oldest
            return seq, self._sent.get(seq, self.started)
        return None

    def _auto_controls(self, now: float) -> list[Action]:
        out: list[Action] = []
        if self.deadline is not None and now >= self.deadline:
            return out  # the child is timing out: a control now would never be answered
        state = self.mirror.state
        if (
            self.finalize_at is not None
            and not self._finalize_sent
            and now >= self.finalize_at
            and state in (State.READY, State.RUNNING, State.CLOSING)
        ):
            sent = self.send(ControlKind.FINALIZE, now, note=DEADLINE_FINALIZE_NOTE)
            if isinstance(sent, Send):
                out.append(sent)
        # After a turn the child aborted on its own (its deadline, a fatal error) its exit
        # follows at once: a close now would race that exit and never be answered.
        ended_itself = self._last_stop == "aborted"
        if self.close_when_idle and not self._close_sent and self.mirror.idle and not ended_itself:
            sent = self.send(ControlKind.CLOSE, now)
            if isinstance(sent, Send):
                out.append(sent)
        return out

    def _next_due(self, now: float) -> float:
        t = self.timeouts
        due = [] if t.tick_s is None else [now + t.tick_s]
        if self.ready_at is None:
            due.append(self.started + t.start_s)
        elif (oldest := self._oldest_pending()) is not None:
            due.append(max(oldest[1], self.ready_at) + t.ack_s)
        if (cancel_due := self._cancel_due()) is not None:
            due.append(cancel_due)
        if self.deadline is not None:
            due.append(self.deadline + t.cancel_grace_s)
        if self.finalize_at is not None and not self._finalize_sent:
            due.append(self.finalize_at)
        return min(due, default=math.inf)

    # -- the verdict --------------------------------------------------------------------

    def verdict(self, stderr_tail: str = "", where: str = "") -> Verdict:
        """How the run ended; ``stderr_tail`` (and the run dir ``where``) explain failures."""
        exit_event, result = self.mirror.exit, self.mirror.result
        if exit_event is not None:
            error = exit_event.error if isinstance(exit_event.error, str) else None
            if exit_event.status == "done" and result is None:
                return Verdict("failed", NO_RESULT, None)
            return Verdict(exit_event.status, error, result)
        status, reason = self.failure or ("failed", "run ended without an exit event")
        return Verdict(status, with_stderr(reason, stderr_tail, where), result)


def with_stderr(reason: str, tail: str, where: str = "") -> str:
    """A failure reason followed by the tail of the child's stderr."""
    if tail:
        return f"{reason}; the tail of its stderr:\n{tail}"
    if where:
        return f"{reason} (its stderr is empty; run dir {where})"
    return reason


def _code(code: int | None) -> str:
    return "" if code is None else f" (code {code})"
