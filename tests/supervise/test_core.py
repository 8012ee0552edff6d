"""The sans-IO supervision core on a fake clock: each never-hang rule and the verdict."""

from __future__ import annotations

from typing import Any

from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.supervise import (
    FAILURE_DRAIN_BYTES,
    Drain,
    Finish,
    RunWatch,
    Send,
    Terminate,
    Wait,
)
from tether.wire import Sender
from tether.wire import messages as m
from tether.wire.session import ControlKind, State

RUN = "core-run"
T = Timeouts(start_s=10, ack_s=5, cancel_grace_s=2, kill_grace_s=1, exit_grace_s=3, tick_s=1)


class Child:
    """Event lines as a child would write them (the watch only ever sees lines)."""

    def __init__(self, watch: RunWatch) -> None:
        self.watch = watch
        self.sender = Sender(RUN)

    def says(self, cls: type[m.Message], **fields: Any) -> None:
        line = self.sender.next(cls, **fields)
        assert isinstance(line, bytes), line
        event, problem = self.watch.receive(line)
        assert event is not None
        assert problem is None, problem

    def acks(self, seq: int, status: str = "accepted") -> None:
        self.says(m.ControlAck, status=status, ref=seq)


def _watch(**kw: Any) -> tuple[RunWatch, Child]:
    watch = RunWatch(RunMirror(RUN), T, now=0.0, **kw)
    return watch, Child(watch)


def _last(watch: RunWatch, now: float) -> object:
    return watch.next(now)[-1]


def _ended(watch: RunWatch, now: float, *, drain: int | None) -> None:
    """The failure path: end the group, read what is left (bounded), finish."""
    assert _last(watch, now) == Terminate(T.kill_grace_s)
    watch.terminated(-9)
    assert _last(watch, now) == Drain(drain)
    watch.drained()
    assert isinstance(_last(watch, now), Finish)


def test_no_ready_within_start_s() -> None:
    watch, _ = _watch()
    assert _last(watch, 9.9) == Wait(10.0)
    _ended(watch, 10.0, drain=FAILURE_DRAIN_BYTES)
    verdict = watch.verdict("boom", "/run")
    assert verdict.status == "failed"
    assert verdict.error == "child did not send ready within 10 s; the tail of its stderr:\nboom"
    assert not watch.was_ready


def test_a_control_never_acked_fails_the_run_counted_from_ready() -> None:
    watch, child = _watch()
    sent = watch.send(ControlKind.PROMPT, 0.0, text="task")
    assert isinstance(sent, Send)
    child.says(m.Ready)
    assert _last(watch, 2.0) == Wait(3.0)  # the safety tick; the ack is due at 7
    assert _last(watch, 6.9) == Wait(7.0)
    _ended(watch, 7.0, drain=FAILURE_DRAIN_BYTES)
    verdict = watch.verdict("", "/run")
    assert verdict.error == (
        "child stopped answering: prompt (seq 1) was not acknowledged within 5 s"
        " (its stderr is empty; run dir /run)"
    )


def test_an_acked_control_and_a_cancel_honoured_end_with_the_childs_exit() -> None:
    watch, child = _watch()
    child.says(m.Ready)
    watch.next(0.0)
    seq = watch.send(ControlKind.CANCEL, 1.0)
    assert isinstance(seq, Send)
    child.acks(seq.seq)
    assert _last(watch, 2.9) == Wait(3.0)  # the cancel's grace ends at 3
    child.says(m.Exit, status="cancelled")
    assert watch.live_state is State.READY  # not terminal before the verdict is taken
    assert _last(watch, 3.5) == Wait(3.5 + T.exit_grace_s)  # the process has 3 s to go
    watch.process_exited(1)
    assert _last(watch, 4.0) == Terminate(T.kill_grace_s)  # whatever is left of its group
    watch.terminated()
    assert isinstance(_last(watch, 4.0), Finish)
    assert watch.verdict().status == "cancelled"


def test_a_cancel_ignored_fails_after_its_grace() -> None:
    watch, child = _watch()
    child.says(m.Ready)
    watch.next(0.0)
    watch.send(ControlKind.CANCEL, 1.0)
    _ended(watch, 3.0, drain=FAILURE_DRAIN_BYTES)
    assert watch.verdict().error == "child did not exit within 2 s of cancel"


def test_the_deadline_plus_grace_times_the_run_out() -> None:
    watch, child = _watch(deadline=20.0)
    child.says(m.Ready)
    assert _last(watch, 21.5) == Wait(22.0)
    _ended(watch, 22.0, drain=FAILURE_DRAIN_BYTES)
    assert watch.verdict().status == "timed-out"


def test_an_exit_left_running_has_its_group_ended_after_the_exit_grace() -> None:
    watch, child = _watch()
    child.says(m.Ready)
    child.says(m.Result, stop_reason="end_turn", final_text="hi")
    child.says(m.Exit, status="done")
    assert _last(watch, 1.0) == Wait(1.0 + T.exit_grace_s)
    assert _last(watch, 4.0) == Terminate(T.kill_grace_s)
    watch.terminated()
    assert isinstance(_last(watch, 4.0), Finish)
    verdict = watch.verdict()
    assert (verdict.status, verdict.error) == ("done", None)
    assert verdict.result is not None


def test_a_process_gone_without_exit_is_read_to_the_end_then_failed() -> None:
    watch, child = _watch()
    child.says(m.Ready)
    watch.process_exited(3)
    assert _last(watch, 1.0) == Drain(None)  # everything: an exit may follow a backlog
    watch.drained()
    assert _last(watch, 1.0) == Terminate(T.kill_grace_s)  # a grandchild may be left
    watch.terminated()
    assert isinstance(_last(watch, 1.0), Finish)
    assert watch.verdict().error == "child exited (code 3) without an exit event"


def test_exit_done_without_a_result_is_failed() -> None:
    watch, child = _watch()
    child.says(m.Ready)
    child.says(m.Exit, status="done")
    verdict = watch.verdict()
    assert verdict.status == "failed"
    assert verdict.error is not None
    assert "without a result" in verdict.error


def test_automatic_finalize_and_close() -> None:
    watch, child = _watch(finalize_at=5.0, close_when_idle=True)
    child.says(m.Ready)
    first = watch.send(ControlKind.PROMPT, 0.0, text="task")
    assert isinstance(first, Send)
    child.acks(first.seq)
    child.says(m.TurnStarted, turn=1)
    assert _last(watch, 4.0) == Wait(5.0)
    finalize = watch.next(5.0)[0]
    assert isinstance(finalize, Send)
    assert finalize.kind is ControlKind.FINALIZE
    assert not any(isinstance(a, Send) for a in watch.next(5.5))  # once
    child.acks(finalize.seq)
    assert watch.mirror.state is State.FINALIZING


def test_close_when_idle_once_ready_and_nothing_is_pending() -> None:
    watch, child = _watch(close_when_idle=True)
    child.says(m.Ready)
    close = watch.next(0.0)[0]
    assert isinstance(close, Send)
    assert close.kind is ControlKind.CLOSE
    assert len(watch.next(0.1)) == 1  # only the wait: close goes once


def test_no_automatic_control_once_the_deadline_has_passed() -> None:
    """The child times out on its own then; a close it can never answer is not sent."""
    watch, child = _watch(deadline=10.0, close_when_idle=True)
    first = watch.send(ControlKind.PROMPT, 0.0, text="task")
    assert isinstance(first, Send)
    child.says(m.Ready)
    child.acks(first.seq)
    child.says(m.TurnStarted, turn=1)
    child.says(m.TurnComplete, turn=1, stop_reason="aborted")  # idle, but past the deadline
    assert watch.mirror.idle
    assert not any(isinstance(a, Send) for a in watch.next(10.0))


def test_without_a_safety_tick_an_idle_run_waits_for_events_only() -> None:
    import math

    untimed = Timeouts(start_s=10, ack_s=5, tick_s=None)
    watch = RunWatch(RunMirror(RUN), untimed, now=0.0)
    child = Child(watch)
    assert _last(watch, 1.0) == Wait(10.0)  # ready is still due
    child.says(m.Ready)
    assert _last(watch, 2.0) == Wait(math.inf)  # nothing is due: no timer at all
    sent = watch.send(ControlKind.STEER, 3.0, text="x")
    assert isinstance(sent, Send)
    assert _last(watch, 3.0) == Wait(8.0)  # its ack is due
    child.acks(sent.seq)
    assert _last(watch, 4.0) == Wait(math.inf)
