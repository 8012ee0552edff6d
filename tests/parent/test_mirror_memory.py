"""The real supervision core against the real child core, in one process: states agree.

The child is the real presenter (:class:`tether.runtime.child.presenter.Presenter`, the code that
``tether child`` runs) with a gated TEST runner: a turn runs until the test releases it
(taking the queued steers and follow-ups, or leaving them queued, so the next turn
starts from the queue: the ``queued-turn`` move), or until it is interrupted or
aborted. The parent is the real :class:`tether.runtime.parent.supervise.RunWatch` on a fake
clock, fed the child's event lines as they are written. After every step the mirror's
state is the child's, every control has its ack, and the watch never asks to end a
child that keeps its promises; at the end its verdict is the child's exit.
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.controls import control_fields
from tests.support.waits import HANG_S, loop_pass, wait_until_async
from tether.agent.runner import EmitFn, TurnControl, TurnOutcome, TurnRequest
from tether.runtime.child.files import EventLog
from tether.runtime.child.presenter import ChildOptions, Presenter
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import append_line
from tether.runtime.parent.supervise import Finish, RunWatch, Send, Terminate, Wait
from tether.runtime.parent.watchio import read_slice
from tether.transports.tail import FileTail
from tether.wire import Sender
from tether.wire import messages as m
from tether.wire.session import ControlKind, Internal, State, acks_of, decide

RUN = "mem-run"
TIMEOUTS = Timeouts(start_s=5, ack_s=5, cancel_grace_s=1, kill_grace_s=1, exit_grace_s=1)
STEP_S = 1.0  # the fake clock moves this much per step (less than any grace)
WAIT_S = HANG_S  # a step the child does not finish by then is a hang: the test fails


class GatedRunner:
    """TEST runner: a turn ends when released, interrupted, or cancelled (aborted)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.take_queued = False

    async def prepare(self) -> None:
        return None

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        self.release.clear()
        released = asyncio.ensure_future(self.release.wait())
        interrupted = asyncio.ensure_future(control.wait_interrupted())
        try:
            await asyncio.wait({released, interrupted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
            interrupted.cancel()
        if control.interrupted:
            return TurnOutcome("aborted")
        if self.take_queued:
            control.take_steering()
            control.take_follow_ups()
        return TurnOutcome("end_turn")

    def final_text(self) -> str:
        return "ok"

    async def aclose(self) -> None:
        return None


class Pair:
    """A presenter and a watch over two files in a temp dir; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.control = root / "control.jsonl"
        self.events = root / "events.jsonl"
        self.control.touch(0o600)
        self.runner = GatedRunner()
        self.now = 0.0
        self.watch = RunWatch(RunMirror(RUN), TIMEOUTS, now=self.now)
        self.tail = FileTail(self.events)
        self.acks: dict[int, m.ControlAck] = {}
        log = EventLog(self.events, RUN)
        self.presenter = Presenter(ChildOptions(self.control, self.events, self._build, RUN), log)
        self.task = asyncio.create_task(self.presenter.run())

    async def _build(self, emit: EmitFn) -> GatedRunner:
        return self.runner

    @property
    def mirror(self) -> RunMirror:
        return self.watch.mirror

    # -- steps --------------------------------------------------------------------------

    async def started(self) -> None:
        await self._until(lambda: self.mirror.state is not State.STARTING)

    async def send(self, kind: ControlKind) -> m.ControlAck:
        sent = self.watch.send(kind, self.now, **control_fields(kind, "t"))
        assert isinstance(sent, Send), sent
        append_line(self.control, sent.line)
        await self._until(lambda: sent.seq not in self.mirror.pending)
        await self._settle()
        return self.acks[sent.seq]

    async def turn_done(self, *, take_queued: bool) -> None:
        turn = self.presenter.turn_task
        if turn is None:
            return
        self.runner.take_queued = take_queued
        self.runner.release.set()
        await asyncio.wait_for(asyncio.shield(turn), WAIT_S)
        await self._settle()

    async def internal(self, event: Internal) -> None:
        if event is Internal.DEADLINE:
            self.presenter._on_deadline()  # what the child's deadline timer calls
        else:
            self.presenter.fail("a fatal error")
        await self._settle()

    # -- checks -------------------------------------------------------------------------

    def agree(self) -> None:
        assert self.mirror.state == self.presenter.state, (self.mirror.state, self.presenter)
        assert not self.mirror.pending
        self.now += STEP_S
        actions = self.watch.next(self.now)
        if not self.mirror.finished:
            assert all(isinstance(a, Send | Wait) for a in actions), actions

    async def finish(self) -> str:
        """End the run (cancel when still live) and take the watch's verdict."""
        if not self.task.done():
            await self.send(ControlKind.CANCEL)
        await asyncio.wait_for(self.task, WAIT_S)
        self._read()
        assert self.mirror.finished
        self.watch.process_exited(0 if self.presenter.state is State.DONE else 1)
        assert isinstance(self.watch.next(self.now)[-1], Terminate)  # the group, if any
        self.watch.terminated()
        assert isinstance(self.watch.next(self.now)[-1], Finish)
        self.tail.close()
        return self.watch.verdict().status

    # -- plumbing -----------------------------------------------------------------------

    def _read(self) -> None:
        def on_event(event: Any, raw: bytes) -> None:
            if isinstance(event, m.ControlAck) and isinstance(event.ref, int):
                self.acks[event.ref] = event

        def on_error(error: Any) -> None:
            raise AssertionError(f"channel error: {error}")

        while read_slice(self.tail, self.watch, on_event, on_error):
            pass

    async def _until(self, done: Any) -> None:
        """Until ``done()`` holds, re-read each time the child writes an event line."""

        def read_and_check() -> bool:
            self._read()
            return bool(done())

        await wait_until_async(read_and_check, "the child's step", files=[self.events])

    async def _settle(self) -> None:
        """Let the child finish what the step set off (a turn start, its exit): the loop
        passes its callbacks take, in the loop's own order (no clock)."""
        for _ in range(5):
            await loop_pass()
        if self.presenter.exiting:
            await asyncio.wait_for(asyncio.shield(self.task), WAIT_S)
        self._read()


def _pair(root: Path) -> Pair:
    return Pair(root)


STEPS = st.lists(
    st.one_of(
        st.sampled_from(list(ControlKind)).map(lambda c: ("control", c)),
        st.booleans().map(lambda take: ("turn-done", take)),
        st.sampled_from([Internal.DEADLINE, Internal.FATAL]).map(lambda e: ("internal", e)),
    ),
    max_size=10,
)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_states_agree_after_every_step(steps: list[tuple[str, Any]]) -> None:
    async def go(root: Path) -> None:
        pair = _pair(root)
        await pair.started()
        pair.agree()
        for kind, what in steps:
            if pair.task.done():
                break
            if kind == "control":
                await pair.send(what)
            elif kind == "turn-done":
                await pair.turn_done(take_queued=what)
            else:
                await pair.internal(what)
            pair.agree()
        assert await pair.finish() == pair.presenter.state.value

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(go(Path(root)))
    gc.unfreeze()  # the presenter freezes start-up objects (gc.freeze) after prepare


def test_queued_controls_start_the_next_turn_and_the_mirror_follows() -> None:
    """A steer and a follow-up queued during a turn start the next turns by themselves."""

    async def go(root: Path) -> None:
        pair = _pair(root)
        await pair.started()
        await pair.send(ControlKind.PROMPT)
        assert (await pair.send(ControlKind.STEER)).status == "accepted"
        assert (await pair.send(ControlKind.FOLLOW_UP)).status == "accepted"
        await pair.turn_done(take_queued=False)  # both still queued: the steer goes next
        pair.agree()
        assert (pair.mirror.state, pair.mirror.turn) == (State.RUNNING, 2)
        await pair.turn_done(take_queued=False)  # then the follow-up
        assert (pair.mirror.state, pair.mirror.turn) == (State.RUNNING, 3)
        await pair.turn_done(take_queued=False)  # nothing left: ready
        pair.agree()
        assert (pair.mirror.state, pair.mirror.turn) == (State.READY, 3)
        await pair.send(ControlKind.CLOSE)
        assert await pair.finish() == "done"

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(go(Path(root)))
    gc.unfreeze()


def test_every_state_and_control_agrees() -> None:
    """Each (state, control) cell, reached with the real child, gives the same ack and state."""
    paths: dict[State, list[ControlKind]] = {
        State.READY: [],
        State.RUNNING: [ControlKind.PROMPT],
        State.CLOSING: [ControlKind.PROMPT, ControlKind.CLOSE],
        State.FINALIZING: [ControlKind.PROMPT, ControlKind.FINALIZE],
    }

    async def cell(root: Path, state: State, path: list[ControlKind], control: ControlKind) -> None:
        pair = _pair(root)
        await pair.started()
        for kind in path:
            await pair.send(kind)
        assert pair.presenter.state is state
        ack = await pair.send(control)
        assert ack.status in acks_of(decide(state, control))
        pair.agree()
        await pair.finish()

    for state, path in paths.items():
        for control in ControlKind:
            with tempfile.TemporaryDirectory() as root:
                asyncio.run(cell(Path(root), state, path, control))
    gc.unfreeze()


def test_the_core_ends_a_child_that_stops_reading_on_the_fake_clock() -> None:
    """A control the child never gets: past ack_s on the watch's clock the run fails."""

    async def go(root: Path) -> None:
        pair = _pair(root)
        await pair.started()
        pair.agree()  # the watch has seen ready (a driver calls next after every read)
        sent = pair.watch.send(ControlKind.STEER, pair.now, text="lost")  # never written
        assert isinstance(sent, Send)
        assert isinstance(pair.watch.next(pair.now + TIMEOUTS.ack_s - 0.5)[-1], Wait)
        assert isinstance(pair.watch.next(pair.now + TIMEOUTS.ack_s)[-1], Terminate)
        verdict = pair.watch.verdict("", "")
        assert verdict.status == "failed"
        assert verdict.error is not None
        assert "steer (seq 1) was not acknowledged within 5 s" in verdict.error
        pair.presenter.fail("ended by the test")
        await asyncio.wait_for(pair.task, WAIT_S)
        pair.tail.close()

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(go(Path(root)))
    gc.unfreeze()


def test_disagreement_is_reported_not_silent() -> None:
    mirror = RunMirror(RUN)
    child = Sender(RUN)

    def line(cls: type[m.Message], **fields: Any) -> bytes:
        out = child.next(cls, **fields)
        assert isinstance(out, bytes), out
        return out

    event, problem = mirror.receive(line(m.Ready))
    assert event is not None
    assert problem is None
    # an ack for a control the mirror never sent
    event, problem = mirror.receive(line(m.ControlAck, status="accepted", ref=42))
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
    _, problem = mirror.receive(line(m.TurnComplete, turn=1, stop_reason="end_turn"))
    assert problem is not None
    assert "unexpected turn-complete in state ready" in problem.reason
    # a version mismatch is fatal
    _, problem = mirror.receive(b'{"v":2,"seq":99,"type":"ready","run":"mem-run"}')
    assert problem is not None
    assert problem.fatal
