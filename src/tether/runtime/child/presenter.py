"""The live child presenter: the state table driven over two files.

Theory of operation: the presenter builds its turn runner, writes ``ready``, and then
reacts to three things, all on one asyncio loop (so no two reactions interleave):

- a control line (the reader task tails the control file; the writer's byte on the
  inherited wake-up pipe wakes it, else one inotify watch when the file grows, else it
  polls at 30 ms in a turn / 300 ms idle: :class:`~tether.transports.wake.ControlWaiter`).
  Each line gets exactly one ``control-ack``, written before anything the control causes: decode
  (rejections are acked with ``rejection_ack``; a version mismatch is fatal and gets no
  ack), ``decide_for_run``, ack, then the effect (start a turn, queue, interrupt,
  abort, finish). The extensions' checked effects settle their ack first: ``answer``
  is applied when the run's approval desk (:mod:`tether.agent.desk`) has its key
  waiting, ``unqueue`` when its steer or follow-up is still queued;
- the end of a turn (``turn-complete``, then ``advance``: back to ready, the finalize
  turn, or the finish);
- the deadline timer, a signal, or a fatal error (``advance`` to timed-out / failed).

Leaving is one path (:meth:`Presenter._exit`): stop reading, cancel a running turn
(which ends tool process groups at once) and let it unwind briefly, ack any control
lines already in the file (they are rejected: the run is terminal), report queued
controls that were never injected (their refs and texts) in one ``info``, then
``result`` (only for done) and ``exit``. ``result`` is therefore always immediately
before ``exit done``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from tether import exits
from tether.agent.runner import (
    Injection,
    InjectionKind,
    Mortal,
    RunnerFactory,
    RunnerSetupError,
    TurnOutcome,
    TurnRequest,
    TurnRunner,
)
from tether.runtime.child import backstop
from tether.runtime.child.files import (
    ControlFeed,
    ControlLine,
    EventLog,
    first_line,
    result_fields,
    utc_now,
)
from tether.transports.wake import ControlWaiter
from tether.wire import (
    Answer,
    AnyControl,
    ControlAck,
    Dropped,
    Exit,
    Finalize,
    Info,
    Ready,
    Result,
    TurnComplete,
    TurnStarted,
    Unqueue,
    rejection_ack,
    tag_of,
)
from tether.wire.limits import POLL_BUSY_S, POLL_IDLE_S
from tether.wire.messages import DEFAULT_FINALIZE_NOTE, DROPPED_TEXT_CHARS
from tether.wire.session import (
    CHECKED,
    AckStatus,
    Effect,
    Internal,
    RunSession,
    State,
    decide_for_run,
    is_terminal,
)
from tether.wire.usage import add_usage, clean_usage

if TYPE_CHECKING:
    from tether.agent.desk import Desk

__all__ = ["ChildOptions", "Presenter", "run_child"]

DEADLINE_ERROR: Final = "run deadline exceeded"
# Reads (each <= 64 lines) granted to control lines written after the final drain began.
LATE_DRAIN_READS: Final = 16
# How long a cancelled turn may take to unwind before `exit` is written anyway.
UNWIND_GRACE_S: Final = 1.0
# A last turn that stopped this way leaves a partial answer (``result.context``).
PARTIAL_STOPS: Final = frozenset({"aborted", "error"})
# States whose end is already decided by a control read earlier: a removed control file
# (the parent gone) changes nothing, the turn runs out and the run ends done.
_ENDS_WITHOUT_CONTROLS: Final = frozenset({State.CLOSING, State.FINALIZING})

# How many queued controls' fates (injected, withdrawn, dropped) an unqueue can name.
FATES_KEPT: Final = 4096
_yield_cpu: Final = getattr(os, "sched_yield", lambda: None)
# What every control's ack reads, looked up once (an enum member read through its class
# costs ~900 instructions on Python 3.11, its .value ~1,800; the ack path runs cold).
_ACCEPTED: Final = AckStatus.ACCEPTED
_REJECTED: Final = AckStatus.REJECTED.value
_ACK_NAMES: Final = {status: status.value for status in AckStatus}
_RESOLVE_ANSWER: Final = Effect.RESOLVE_ANSWER
_WITHDRAW_QUEUED: Final = Effect.WITHDRAW_QUEUED
_INJECTION_KINDS: Final[dict[str, InjectionKind]] = {
    "prompt": "user",
    "steer": "steering",
    "follow-up": "follow-up",
}


class ChildOptions(NamedTuple):
    control_path: Path
    event_path: Path
    runner_factory: RunnerFactory
    run: str = "run"
    deadline: float | None = None  # Unix time in seconds
    force_polling: bool = False
    ready_sent: bool = False  # the caller already wrote `ready` (before importing asyncio)
    early_signals: list[int] | None = None  # signals caught before the loop took over
    lifeline_fd: int | None = None  # EOF on it: the parent process is gone
    wake_fd: int | None = None  # checked TETHER_WAKE_FD: a byte on it means "read controls"
    # control kind -> what the agent really does with it, said in its accepted acks
    # (an external agent's capability that is not native; see `tether agents`)
    ack_notes: Mapping[str, str] | None = None
    # where the run's approvals and questions wait (answer controls resolve them)
    desk: Desk | None = None
    # the wall clock the deadline is read against (a test's virtual one)
    wall_clock: Callable[[], float] = time.time


class _TurnControl:
    """The presenter's side of one running turn (a :class:`TurnControl`)."""

    def __init__(self, presenter: Presenter) -> None:
        self._presenter = presenter
        self._interrupt = asyncio.Event()

    @property
    def interrupted(self) -> bool:
        return self._interrupt.is_set()

    def interrupt(self) -> None:
        self._interrupt.set()

    async def wait_interrupted(self) -> None:
        await self._interrupt.wait()

    def take_steering(self) -> list[Injection]:
        return self._presenter.take(self._presenter.steering)

    def take_follow_ups(self) -> list[Injection]:
        return self._presenter.take(self._presenter.follow_ups)


class Presenter:
    """Drives one run; see the module docstring. Use :func:`run_child`."""

    def __init__(self, options: ChildOptions, log: EventLog) -> None:
        self.options = options
        self.log = log
        log.on_error = self._event_write_failed
        self.session = RunSession()  # the state and the final-turn flag, as the table says
        self.feed = ControlFeed(options.control_path)
        self.watcher: ControlWaiter | None = None
        self.runner: TurnRunner | None = None
        self.turn = 0
        self.turn_task: asyncio.Task[None] | None = None
        self.control: _TurnControl | None = None
        self.steering: deque[Injection] = deque()
        self.follow_ups: deque[Injection] = deque()
        self._fates: OrderedDict[int, str] = OrderedDict()  # ref -> what became of it
        self.finalize_note = DEFAULT_FINALIZE_NOTE
        self.usage: dict[str, int] = {}
        self._prepare: asyncio.Task[None] | None = None
        self.last_stop = "stop"
        self.error: str | None = None
        self._channel_dead = False
        self._unread = False  # the last read left lines behind (read again before sleeping)
        self._reader: asyncio.Task[None] | None = None
        self._exit_task: asyncio.Task[None] | None = None
        self._exited = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> State:
        return self.session.state

    @state.setter
    def state(self, state: State) -> None:
        self.session.state = state

    # -- running ----------------------------------------------------------------------

    async def run(self) -> State:
        """Run until ``exit`` is written; returns the exit state."""
        try:
            self.runner = await self.options.runner_factory(self._emit_display)
        except Exception as exc:  # noqa: BLE001 - any set-up failure ends the run `failed`
            self.session.advance(Internal.FATAL)
            self.log.emit(Exit, status=self.state.value, error=first_line(str(exc) or repr(exc)))
            self.log.close()
            return self.state
        loop = asyncio.get_running_loop()
        wake_fd = self.options.wake_fd
        self.watcher = ControlWaiter(
            self.options.control_path,
            wake_fd,
            poll_interval=POLL_IDLE_S,
            force_polling=self.options.force_polling,
            fifo_dir=None if wake_fd is None else self.options.control_path.parent,
            on_wake=self._on_wake,
        )
        self.watcher.start(loop)
        if not self.options.ready_sent:
            self.log.emit(Ready)
        self.log.hold_displays(loop)  # a loop pass's display lines go out in one write
        self.session.advance(Internal.STARTED)
        self._arm(loop)
        self._watch_lifeline(loop)
        if self.options.early_signals:
            self.fail(f"terminated by {signal.Signals(self.options.early_signals[0]).name}")
        self._reader = asyncio.create_task(self._guard(self._read_controls()))
        self._prepare = asyncio.create_task(self._prepare_runner(self.runner))
        try:
            await self._exited.wait()
        finally:
            await self._close()
        return self.state

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        deadline = self.options.deadline
        if deadline is not None:
            delay = max(0.0, deadline - self.options.wall_clock())
            self._timer = loop.call_at(loop.time() + delay, self._on_deadline)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.add_signal_handler(sig, self.fail, f"terminated by {sig.name}")
        backstop.handle_stop_signals()  # the loop's handling stays; a stuck loop ends too

    def _watch_lifeline(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = self.options.lifeline_fd
        if fd is None:
            return
        try:
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)  # tools and programs we start must not hold it
            loop.add_reader(fd, self._on_lifeline, loop, fd)
        except (OSError, ValueError):
            return  # not a usable descriptor: run without a lifeline
        backstop.watch_lifeline(fd)  # if the loop gets stuck, the kernel still tells us

    def _on_lifeline(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        try:
            data = os.read(fd, 64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return  # nothing is ever written; ignore stray bytes
        loop.remove_reader(fd)
        self.fail("the parent went away (its lifeline pipe closed)")

    async def _close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._prepare is not None and not self._prepare.done():
            self._prepare.cancel()
            await asyncio.wait({self._prepare})
        if self.runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.runner.aclose(), UNWIND_GRACE_S)
        if self.watcher is not None:
            self.watcher.close()
        self.feed.close()
        self.log.close()

    async def _prepare_runner(self, runner: TurnRunner) -> None:
        """The runner's slow set-up, after `ready`; its failure ends the run `failed`, and
        so does the death of a :class:`Mortal` runner's agent (a CLI killed or crashed:
        idle, the run would only fail every turn it is given)."""
        try:
            await runner.prepare()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.fail(str(exc) or type(exc).__name__)
            return
        gc.freeze()  # start-up objects leave the collector's view: shorter pauses later
        if isinstance(runner, Mortal):
            self.fail(await runner.gone())

    async def _guard(self, work: Any) -> None:
        """Run a presenter coroutine; a bug in it ends the run `failed`, never a hang."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            print(f"tether child: internal error: {exc!r}", file=sys.stderr)
            self.fail(f"internal error: {type(exc).__name__}: {exc}")

    # -- controls ---------------------------------------------------------------------

    @property
    def exiting(self) -> bool:
        return self._exit_task is not None or is_terminal(self.state)

    async def _read_controls(self) -> None:
        watcher = self.watcher
        assert watcher is not None
        while not self.exiting:
            self._check_deadline()
            if self.exiting or not self._read_once():
                return
            if self.exiting:
                return
            if self.feed.more():
                await asyncio.sleep(0)  # let a running turn breathe between bounded reads
            else:
                await watcher.wait()

    def _on_wake(self) -> bool:
        """The writer's wake-up byte: read the new lines now, in the reader's callback (the
        ack goes out without a hop through the reader task). True when nothing is left
        for the reader task to do (it then sleeps on)."""
        if self.exiting or self._channel_dead:
            return False
        try:
            return self._read_once() and not self.exiting and not self._unread
        except Exception as exc:  # noqa: BLE001 - as _guard: a bug ends the run `failed`
            print(f"tether child: internal error: {exc!r}", file=sys.stderr)
            self.fail(f"internal error: {type(exc).__name__}: {exc}")
            return False

    def _read_once(self) -> bool:
        """One bounded read, every line handled; False when the channel is dead."""
        got = self.feed.read()
        self._unread = got.more
        if got.truncated:
            self._channel_dead = True
            self.fail(f"control file truncated below offset {self.feed.offset}")
            return False
        if got.removed:  # the parent is gone with its files: no control can ever arrive
            self._channel_dead = True
            self._control_removed()
            return False
        for line in got.controls:
            self._on_line(line)
            if self._channel_dead:
                return False
        if got.controls:
            # The acks are written; what they started has not run yet. A parent woken by
            # them often waits on this very CPU (a waking child lands on its waker's):
            # give it the CPU now, so it reads the acks before the turn's work, not after.
            _yield_cpu()
        return True

    def _control_removed(self) -> None:
        """No control can arrive any more: the run fails, unless a close or finalize read
        before the removal already decided its end (it then ends with its turn, done)."""
        if self.state not in _ENDS_WITHOUT_CONTROLS:
            self.fail("control file was removed")
            return
        summary = f"control file was removed; the run ends with its turn ({self.state})"
        self.log.emit(Info, timestamp=utc_now(), summary=summary)

    def _on_line(self, line: ControlLine) -> None:
        rejection = line.rejection
        if rejection is not None:
            if rejection.fatal:  # version mismatch: no ack, the channel stops
                self._channel_dead = True
                self.fail(rejection.reason)
            else:
                self.log.emit(ControlAck, **rejection_ack(rejection))
            return
        message = line.message
        assert message is not None
        kind = tag_of(type(message))
        decision = decide_for_run(self.state, kind, message.run, self.log.run)
        ack: dict[str, Any] = {"status": _ACK_NAMES[decision.ack], "ref": message.seq}
        refused = self._checked(decision.effect, message)
        if refused is not None:
            ack = {"status": _REJECTED, "ref": message.seq, "reason": refused}
        elif decision.reason:
            ack["reason"] = decision.reason
        elif decision.ack is _ACCEPTED and self.options.ack_notes:
            note = self.options.ack_notes.get(kind)
            if note:
                ack["reason"] = note
        self.log.emit(ControlAck, **ack)
        self.session.decided(decision)
        if decision.ack is _ACCEPTED:
            self._apply(decision.effect, message)
        elif refused is None and decision.effect in CHECKED:
            self._apply_checked(decision.effect, message)

    def _checked(self, effect: Effect, message: AnyControl) -> str | None:
        """Why a checked effect cannot be applied (None: it can, or it is not checked)."""
        if effect is _RESOLVE_ANSWER and isinstance(message, Answer):
            desk = self.options.desk
            if desk is None:
                return "this child has no approvals or questions to answer"
            return desk.check(message.key, _set(message.decision), _set(message.text))
        if effect is _WITHDRAW_QUEUED and isinstance(message, Unqueue):
            if any(item.ref == message.ref for item in (*self.steering, *self.follow_ups)):
                return None
            fate = self._fates.get(message.ref)
            if fate is not None:
                return f"control {message.ref} was {fate}"
            return f"no queued steer or follow-up with seq {message.ref}"
        return None

    def _apply_checked(self, effect: Effect, message: AnyControl) -> None:
        if isinstance(message, Answer) and self.options.desk is not None:
            desk = self.options.desk
            desk.resolve(
                message.key, _set(message.decision), _set(message.text), _set(message.scope)
            )
        elif isinstance(message, Unqueue):
            for queue in (self.steering, self.follow_ups):
                for item in list(queue):
                    if item.ref == message.ref:
                        queue.remove(item)
                        self._fate(message.ref, "withdrawn")

    def _fate(self, ref: int | None, fate: str) -> None:
        if ref is None:
            return
        self._fates[ref] = fate
        while len(self._fates) > FATES_KEPT:
            self._fates.popitem(last=False)

    def _apply(self, effect: Effect, message: AnyControl) -> None:
        text = getattr(message, "text", "")
        kind = tag_of(type(message))
        if text and self.options.desk is not None:
            self.options.desk.resolve_text(text)  # an answer from a parent without `answer`
        if effect is Effect.START_TURN:
            self._start_turn(TurnRequest(Injection(text, _INJECTION_KINDS[kind], message.seq)))
        elif effect is Effect.QUEUE_STEERING:
            self.steering.append(Injection(text, "steering", message.seq))
        elif effect is Effect.QUEUE_FOLLOW_UP:
            self.follow_ups.append(Injection(text, "follow-up", message.seq))
        elif effect in (Effect.START_FINALIZE_TURN, Effect.INTERRUPT_TURN):
            if isinstance(message, Finalize) and isinstance(message.note, str) and message.note:
                self.finalize_note = message.note
            self._drop_queued()
            if effect is Effect.START_FINALIZE_TURN:
                self._start_finalize_turn()
            elif self.control is not None:
                self.control.interrupt()
        elif effect in (Effect.ABORT, Effect.FINISH):
            self._begin_exit()

    def take(self, queue: deque[Injection]) -> list[Injection]:
        """Hand the queued items to the running turn (they count as injected from now on)."""
        items = list(queue)
        queue.clear()
        for item in items:
            self._fate(item.ref, "already handed to the agent")
        return items

    def _drop_queued(self) -> None:
        """Drop queued steers and follow-ups, reported in one ``info`` listing their seqs
        and texts (each cut to ``DROPPED_TEXT_CHARS``; the whole text is its control's)."""
        dropped = sorted((*self.steering, *self.follow_ups), key=lambda i: i.ref or 0)
        self.steering.clear()
        self.follow_ups.clear()
        items = [i for i in dropped if i.ref is not None]
        if not items:
            return
        names = ", ".join(f"{i.kind} {i.ref}" for i in items)
        summary = f"dropped {len(items)} queued control(s) never injected: {names}"
        texts = [_dropped(i) for i in items]
        for item in items:
            self._fate(item.ref, "dropped")
        self.log.emit(
            Info,
            timestamp=utc_now(),
            summary=summary[:160],
            refs=[i.ref for i in items],
            dropped=texts,
        )

    # -- turns ------------------------------------------------------------------------

    def _start_turn(self, request: TurnRequest) -> None:
        assert self.runner is not None
        self.turn += 1
        self.control = _TurnControl(self)
        self.log.emit(TurnStarted, turn=self.turn)
        if self.watcher is not None:
            self.watcher.set_poll_interval(POLL_BUSY_S)
        self.turn_task = asyncio.create_task(self._turn(self.runner, request, self.control))

    def _start_finalize_turn(self) -> None:
        self._start_turn(TurnRequest(Injection(self.finalize_note), final=True))

    async def _turn(self, runner: TurnRunner, request: TurnRequest, control: _TurnControl) -> None:
        try:
            outcome = await runner.run_turn(request, control)
        except asyncio.CancelledError:
            outcome = TurnOutcome("aborted")
        except RunnerSetupError as exc:
            # The agent cannot run at all: the run ends here. No turn-complete, or the
            # parent would see an idle child and send controls that race the exit.
            self.fail(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a runner bug ends the turn, not the run
            error = f"{type(exc).__name__}: {exc}"
            self._emit_display({"type": "error", "error": error, "source": "agent"})
            outcome = TurnOutcome("error", error=error)
        try:
            self._turn_finished(outcome)
        except Exception as exc:  # noqa: BLE001
            self.fail(f"internal error: {type(exc).__name__}: {exc}")

    def _turn_finished(self, outcome: TurnOutcome) -> None:
        usage = {"input": 0, "output": 0, **clean_usage(outcome.usage)}
        add_usage(self.usage, usage)
        self.last_stop = outcome.stop_reason
        self.log.emit(TurnComplete, turn=self.turn, stop_reason=outcome.stop_reason, usage=usage)
        self.turn_task, self.control = None, None
        if self.watcher is not None:
            self.watcher.set_poll_interval(POLL_IDLE_S)
        final = self.session.final_turn
        move = self.session.turn_done()
        if move.effect is Effect.START_FINALIZE_TURN:
            self._start_finalize_turn()
        elif move.effect is Effect.FINISH:
            self._begin_exit()
        elif move.effect is Effect.NONE and self.state is State.READY:
            self._start_leftover_turn()
        elif move.effect is Effect.IMPOSSIBLE:
            event = Internal.FINAL_TURN_DONE if final else Internal.TURN_DONE
            self.fail(f"internal error: {event} cannot happen in state {self.state}")

    def _start_leftover_turn(self) -> None:
        """A steer or follow-up still queued when the turn ended starts the next turn."""
        queued = sorted((*self.steering, *self.follow_ups), key=lambda i: i.ref or 0)
        if not queued:
            return
        if self.session.advance(Internal.QUEUED_TURN).effect is not Effect.START_TURN:
            return
        first = queued[0]
        (self.steering if first.kind == "steering" else self.follow_ups).remove(first)
        self._start_turn(TurnRequest(first))

    # -- internal events --------------------------------------------------------------

    def fail(self, error: str) -> None:
        """A fatal error: the run exits ``failed`` with ``error``."""
        self._internal(Internal.FATAL, error)

    def _event_write_failed(self, exc: OSError) -> None:
        """The event file took no more (a full disk): nothing more can be said; end now."""
        self.fail(f"cannot write the event file: {exc.strerror or exc}")
        with contextlib.suppress(OSError):  # stderr.log may sit on the same full disk
            print(f"tether child: cannot write the event file: {exc}", file=sys.stderr)

    def _on_deadline(self) -> None:
        self._internal(Internal.DEADLINE, DEADLINE_ERROR)

    def _check_deadline(self) -> None:
        deadline = self.options.deadline
        if deadline is not None and self.options.wall_clock() >= deadline:
            self._on_deadline()

    def _internal(self, event: Internal, error: str) -> None:
        if self.exiting:
            return
        if self.session.advance(event).effect is Effect.IMPOSSIBLE:
            return
        self.error = error
        self._begin_exit()

    # -- leaving ----------------------------------------------------------------------

    def _begin_exit(self) -> None:
        if self._exit_task is None:
            self._exit_task = asyncio.create_task(self._exit())

    async def _exit(self) -> None:
        try:
            await self._unwind()
            self._final_drain()
            self._drop_queued()
            if self.state is State.DONE:
                self._emit_result()
        except Exception as exc:  # noqa: BLE001 - never leave without an exit line
            self.state, self.error = State.FAILED, f"internal error: {type(exc).__name__}: {exc}"
        finally:
            error = None if self.state is State.DONE else self.error
            fields = {"status": self.state.value}
            if error:
                fields["error"] = first_line(error)
            with contextlib.suppress(OSError, ValueError):
                self.log.emit(Exit, **fields)
            self.log.close()
            self._exited.set()

    async def _unwind(self) -> None:
        current = asyncio.current_task()
        if self._reader is not None and self._reader is not current:
            self._reader.cancel()
            await asyncio.wait({self._reader})
        task = self.turn_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=UNWIND_GRACE_S)

    def _final_drain(self) -> None:
        """Ack every control line written before the exit began, each exactly once.

        The run is terminal, so the table rejects them all. Reads stay bounded (memory
        too). Everything up to the file's size when the drain starts is acked, however
        many lines that is; lines still arriving get :data:`LATE_DRAIN_READS` more reads,
        so a parent that keeps writing cannot hold the exit back for ever.
        """
        end, late = self.feed.size(), 0
        while not self._channel_dead and late <= LATE_DRAIN_READS:
            if not self.feed.behind(end):
                if not self.feed.more():
                    return
                late += 1
            before = self.feed.position()
            if not self._read_once() or self.feed.position() == before:
                return  # the channel died, or the file can no longer be read

    def _emit_result(self) -> None:
        assert self.runner is not None
        spill = [self.options.event_path.parent]  # the run dir: the only place a parent reads
        fields = result_fields(
            self.runner.final_text(),
            self.last_stop,
            {"input": 0, "output": 0} | self.usage,
            run=self.log.run,
            spill_dirs=spill,
            context=self._answer_context(),
        )
        self.log.emit(Result, **fields)

    def _answer_context(self) -> str:
        """``partial`` when the answer was forced (finalize) or its turn was cut short."""
        if self.session.final_turn or self.last_stop in PARTIAL_STOPS:
            return "partial"
        return "complete"

    # -- display events ---------------------------------------------------------------

    def _emit_display(self, raw: Mapping[str, Any]) -> None:
        meta = {"run-id": self.log.run} if raw.get("type") == "agent-started" else None
        self.log.emit_display(raw, meta)


def _set(value: Any) -> Any:
    """A msgspec field's value, None when it is unset."""
    import msgspec

    return None if value is msgspec.UNSET else value


def _dropped(item: Injection) -> Dropped:
    assert item.ref is not None
    kind = "steer" if item.kind == "steering" else item.kind
    text = item.text
    if len(text) <= DROPPED_TEXT_CHARS:
        return Dropped(ref=item.ref, kind=kind, text=text)
    return Dropped(ref=item.ref, kind=kind, text=text[:DROPPED_TEXT_CHARS], truncated=True)


def run_child(options: ChildOptions, log: EventLog | None = None) -> int:
    """Run a live child until its ``exit`` line; the process's exit status is the exit
    line's (:mod:`tether.exits`: 0 only after ``exit done``, 4 when none was written).

    ``log`` is the event log when the caller opened it already (to write ``ready``).
    """
    if log is None:
        try:
            log = EventLog(options.event_path, options.run)
        except OSError as exc:
            where = options.event_path
            print(f"tether child: cannot open event file {where}: {exc}", file=sys.stderr)
            return exits.USAGE
    presenter = Presenter(options, log)
    try:
        with asyncio.Runner(loop_factory=_ChildLoop) as runner:  # asyncio.run's steps
            state = runner.run(presenter.run())
    except (OSError, ValueError) as exc:
        print(f"tether child: {exc}", file=sys.stderr)
        return exits.FAILED
    return exits.for_status(state.value) if log.closed else exits.FAILED


_VALID_SIGNALS: Final = frozenset(int(sig) for sig in signal.valid_signals())


class _ChildLoop(asyncio.SelectorEventLoop):
    """asyncio's event loop, whose signal-number check does not build the set of every
    ``signal.Signals`` member at each ``add_signal_handler`` (``signal.valid_signals()``
    converts each number to its enum member): in a child forked from the fork server
    that wrote to the template's enum objects, ~0.15 MiB of private memory per child
    for the presenter's three handlers."""

    def _check_signal(self, sig: int) -> None:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in _VALID_SIGNALS:
            raise ValueError(f"invalid signal number {sig}")
