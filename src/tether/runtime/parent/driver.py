"""The one run driver: :class:`LocalRunHandle`, the I/O around the sans-IO
:class:`~tether.runtime.parent.supervise.RunWatch`.

Theory of operation. Whoever supervises a child on this machine drives it with this class:
:func:`tether.spawn` (and so ``tether run`` and :func:`tether.run`), and each of the
daemon's wire agents, whether the daemon started the child or re-adopted it after a
restart. The rules (ready, ack, cancel and exit grace, deadline, automatic finalize and
close, the verdict) are the watch's; this class reads, writes, waits and signals, and
tells the watch what happened. One pump task per run loops:

1. read a bounded slice of ``events.jsonl`` (woken by the process's shared
   :class:`~tether.runtime.parent.hub.WatchHub`; when a caller waits for an ack the slice
   is read in the watcher's callback, so that call is answered first), validated and
   mirrored by the watch; each event resolves the ack a caller waits for and goes to the
   run's reader (:meth:`RunHandle.updates`) and its observers;
2. drain the run's inbox into SQLite and hand its messages out the same way;
3. do what the watch says: append an automatic control, wait (or only yield, while more
   is waiting, so the timers run under any flood), end the process group, read what is
   left, or finish.

What a composition adds rides on :class:`Observer` (the daemon's registry checkpoint, its
followers and asks; a nested-run follower), never on a second driver. The child process
is a :class:`~tether.runtime.parent.process.ChildProcess`; a run whose process is gone
from the start (re-adopted as orphaned) is read to its end and judged.

The control pre-check is :meth:`RunHandle.send`'s (see :mod:`tether.runtime.parent.handle`):
a run that has ended raises :class:`~tether.errors.RunEnded`; anything else is sent and
the child's own ack, accepted or rejected, is the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from tether import fsafe
from tether.errors import RunEnded
from tether.runtime.parent.approvals import Approval, ApprovalFeed
from tether.runtime.parent.catchup import RunLogs
from tether.runtime.parent.finaltext import full_text
from tether.runtime.parent.handle import RunHandle, result_of
from tether.runtime.parent.hub import WatchHub
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.process import ChildProcess
from tether.runtime.parent.queue import QueueBook, Queued
from tether.runtime.parent.rundir import RunDir, write_private_text
from tether.runtime.parent.sidecars import InboxTail
from tether.runtime.parent.supervise import Drain, Finish, RunWatch, Send, Terminate, Wait
from tether.runtime.parent.updates import InboxItem, Update
from tether.runtime.parent.watchio import drain, end_group, read_slice, stderr_tail
from tether.transports.tail import FileTail
from tether.transports.wake import ControlWriter, WakePipe, open_wake_fifo
from tether.wire import AnyEvent, ControlAck
from tether.wire.session import ControlKind, State

__all__ = ["MAX_NOTES", "LocalRunHandle", "Observer"]

MAX_NOTES: Final = 20  # problems kept on a handle (the oldest go first)


class LocalRunHandle(RunHandle):
    """A run whose child this machine supervises; see the module docstring.

    Built by :func:`tether.spawn` or the daemon's fleet, never by hand. ``control`` is the
    control file opened before the child started (None for a re-adopted child: it is
    opened on the first send, and the child's wake FIFO taken over); ``process`` is None
    when the child was already gone.
    """

    def __init__(
        self,
        *,
        run: RunDir,
        watch: RunWatch,
        events: FileTail,
        process: ChildProcess | None,
        hub: WatchHub,
        control: ControlWriter | None = None,
        lifeline: int | None = None,
        inbox: InboxTail | None = None,
        created_at: float | None = None,
        task: str | None = None,
        keep_updates: bool = True,
    ) -> None:
        source = RunLogs(run, None if inbox is None else inbox.db)
        super().__init__(run.run_id, watch.mirror, keep_updates=keep_updates, source=source)
        self.run_dir = run
        self.watch = watch
        self.timeouts = watch.timeouts
        self.task = task
        self.observers: list[Observer] = []
        self.created_at = time.time() if created_at is None else created_at
        self._control = control  # one fd: a child swapping the path cannot redirect it
        self._rewake: WakePipe | None = None  # a re-adopted child's wake FIFO
        self._tail = events  # opened before the child existed (or at the saved offset)
        self._process = process
        self._lifeline = lifeline  # closed when the run has ended (see launch.start_child)
        self._hub = hub
        self._inbox = inbox
        self._inbox_dirty = inbox is not None
        self._wake = asyncio.Event()
        self._started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tokens: list[tuple[Path, int]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.ended_at: float | None = None
        self.final_text: str | None = None
        if process is None:
            watch.process_exited(None)
        if watch.was_ready:
            self._set_started()
        # the approval requests a local API run hands out (a daemon's agent keeps none)
        self._approvals = ApprovalFeed(self) if keep_updates and inbox is not None else None
        if self._approvals is not None:
            self.observers.append(self._approvals)
        # what waits in the run's queues (a daemon's agent gets its own book from the fleet)
        self._queue = QueueBook(run.control) if keep_updates else None
        if self._queue is not None:
            self.observers.append(self._queue)

    def start(self) -> None:
        """Subscribe to the run's files, watch the process, start the pump."""
        loop = asyncio.get_running_loop()
        self._subscribe(loop, self.run_dir.events, inbox=False)
        if self._inbox is not None:
            self._subscribe(loop, self.run_dir.inbox, inbox=True)
        if self._process is not None:
            if self._control is None:
                self._take_over_wake()
            self._tasks.append(loop.create_task(self._watch_process(), name=f"proc-{self.run_id}"))
        self._tasks.append(loop.create_task(self._pump(), name=f"tether-run-{self.run_id}"))

    # -- public ---------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def event_offset(self) -> int:
        """How far ``events.jsonl`` has been read (and mirrored)."""
        return self._tail.offset

    @property
    def live_state(self) -> State:
        """The mirrored state, never terminal until the run has ended."""
        return self.watch.live_state

    async def answer(
        self,
        message: str | Mapping[str, Any],
        text: str = "",
        *,
        decision: str | None = None,
        scope: str | None = None,
    ) -> ControlAck:
        """Answer a ``clarification`` / ``approval_request`` from this run's inbox (the
        message as received, or its ``msg_key``); ``decision`` is ``approve`` or ``deny``,
        ``scope`` ``always`` for the same kind of call for the rest of the run. Recorded
        beside the question, then sent to the child as an ``answer`` control (to a child
        without it, a steer that quotes it); see :mod:`tether.runtime.parent.answering`.
        Raises ``AnswerRefused``."""
        from tether.runtime.parent.answering import answer_run

        db = None if self._inbox is None else self._inbox.db
        return await answer_run(self, db, message, text, decision, scope=scope)

    async def approvals(self) -> AsyncIterator[Approval]:
        """The calls the run's agent waits on a person for, as they come (one reader);
        answer each with ``await approval.approve()`` / ``deny(text)``. A request decided
        meanwhile (a rule, the timeout) is skipped. Ends when the run has ended."""
        if self._approvals is None:
            raise TypeError(f"run {self.run_id} hands out no approvals (it keeps no inbox)")
        while (approval := await self._approvals.next()) is not None:
            yield approval

    def queued(self) -> list[Queued]:
        """The steers and follow-ups the child accepted and has not injected yet, oldest
        first (``ref``: the control's seq; see :mod:`tether.runtime.parent.queue`)."""
        return [] if self._queue is None or self.done else self._queue.items()

    async def unqueue(self, ref: int) -> ControlAck:
        """Withdraw the queued steer or follow-up ``ref`` before it is injected: the
        child's ack, ``applied``, or ``rejected`` with why (already injected; a child
        that does not know ``unqueue`` rejects it as an unknown control)."""
        ack = await self.send(ControlKind.UNQUEUE, ref=ref)
        if ack.status == "applied" and self._queue is not None:
            self._queue.withdrawn(ref)
        return ack

    def kill(self, reason: str = "killed by the user") -> None:
        """End the child's process group now; the run fails with ``reason``."""
        self.fail_soon("failed", reason)

    def fail_soon(self, status: Any, reason: str) -> None:
        """End the run with ``status`` and ``reason`` (its process group too), from the pump."""
        if not self._ended:
            self.watch.fail(status, reason)
            self._wake.set()

    def send_nowait(self, kind: ControlKind | str, **fields: Any) -> int:
        """Append a control to the control file; returns its seq (see :meth:`wait_ack`).

        Raises :class:`RunEnded` once the run has ended, ``ValueError`` for a control that
        cannot be encoded, ``OSError`` when the control file cannot be written (the child
        swapped it: the run then fails).
        """
        kind = ControlKind(kind)
        if self._ended:
            raise RunEnded(f"run {self.run_id} has ended; cannot send {kind}")
        sent = self.watch.send(kind, time.monotonic(), **fields)
        if not isinstance(sent, Send):
            raise ValueError(f"cannot send {kind}: {sent.reason}")
        self._append(sent.line)
        self._wake.set()  # the watch has a new timer (its ack, a cancel's grace)
        return sent.seq

    async def _deliver(self, kind: ControlKind, fields: dict[str, Any]) -> ControlAck:
        try:
            seq = self.send_nowait(kind, **fields)
        except OSError as exc:
            raise RunEnded(f"run {self.run_id} is ending: {exc.strerror or exc}") from None
        return await self.wait_ack(seq)

    def catch_up(self) -> None:
        """Read what the child wrote so far, so the mirror is current (before a decision)."""
        if not self._ended:
            self._read_events()

    async def wait_started(self, timeout: float) -> None:  # noqa: ASYNC109
        """Until the child is ready (or the run ended, or ``timeout``)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._started), timeout)

    async def wait_ended(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Until the run has ended (or ``timeout``); True once it has."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wait(), timeout)
        return self.done

    async def detach(self) -> None:
        """Stop supervising without ending the run (the daemon's shutdown): the child keeps
        running and a later driver re-adopts it."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._let_go()

    async def _release(self) -> None:
        """Nothing more: the run's process, files and watch are let go when it ends."""

    def observe(self, *observers: Observer) -> None:
        """Tell ``observers`` what happens from now on (before :meth:`start`)."""
        self.observers.extend(observers)

    def put(self, update: Update) -> None:
        """Hand ``update`` to the run's reader (a composition's own, e.g. nested runs)."""
        self._put(update)

    def note(self, text: str) -> None:
        """Keep a problem noticed on the way (at most :data:`MAX_NOTES`); observers are told."""
        self._notes.append(text)
        del self._notes[:-MAX_NOTES]
        for observer in self.observers:
            observer.on_note(text)

    # -- files ----------------------------------------------------------------------

    def _subscribe(self, loop: asyncio.AbstractEventLoop, path: Path, *, inbox: bool) -> None:
        if self._hub.loop is loop:  # the hub dispatches on our loop: poke directly

            def poke_here(_: Path) -> None:
                self._poke(inbox)

            callback: Callable[[Path], None] = poke_here
        else:

            def poke(_: Path) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(self._poke, inbox)

            callback = poke
        self._tokens.append((path, self._hub.subscribe(path, callback)))

    def _poke(self, inbox: bool) -> None:
        if inbox:
            self._inbox_dirty = True
        elif self._ack_waiters:
            # A caller waits for an ack: read now, in the watcher's callback, so the call
            # that waits for it runs in the next loop pass, ahead of the pumps this change
            # woke (their turns' events can wait a pass; the ack is what someone is timing).
            self.catch_up()
        else:
            # Woken a pass later than a caller's ack read in this same dispatch, whatever
            # order the watcher reported the files in.
            asyncio.get_running_loop().call_soon(self._wake.set)
            return
        self._wake.set()

    def _take_over_wake(self) -> None:
        """A re-adopted child lost its wake-up pipe with its previous parent and listens on
        its run's wake FIFO instead: open it and say we are here (it drops its watcher)."""
        self._rewake = open_wake_fifo(self.run_dir.path)
        if self._rewake is not None:
            self._rewake.wake()

    def _append(self, line: bytes) -> None:
        try:
            if self._control is None:
                file = fsafe.AppendFile(self.run_dir.control)
                self._control = ControlWriter(file, self._rewake, fifo_dir=self.run_dir.path)
                self._rewake = None
            self._control.append(line)
        except OSError as exc:  # the child swapped its control file (a FIFO, a symlink...)
            self.fail_soon("failed", f"cannot write the control file: {exc.strerror or exc}")
            raise

    # -- the pump -------------------------------------------------------------------

    async def _watch_process(self) -> None:
        assert self._process is not None
        code = await self._process.wait()
        self.watch.process_exited(code)
        self._wake.set()

    async def _pump(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (the run must end with a result, whatever happens)
            self.watch.fail("failed", f"internal error in the parent: {exc!r}")
            with contextlib.suppress(Exception):
                await self._terminate(self.timeouts.kill_grace_s)
        await self._finish()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            more = self._read_events()
            if self._inbox_dirty:
                self._inbox_dirty = False
                await self._read_inbox()
            for action in self.watch.next(time.monotonic()):
                if isinstance(action, Send):
                    with contextlib.suppress(OSError):  # the run fails on the next pass
                        self._append(action.line)
                elif isinstance(action, Wait):
                    await self._wait(action.until, more)
                elif isinstance(action, Terminate):
                    await self._terminate(action.grace_s)
                elif isinstance(action, Drain):
                    await drain(
                        self._tail, self.watch, self._on_event, self._channel_error, action.limit
                    )
                    await self._read_inbox()
                elif isinstance(action, Finish):
                    return

    async def _wait(self, until: float, more: bool) -> None:
        if more:  # a backlog: yield to the loop (other runs, callers), then read on
            await asyncio.sleep(0)
            return
        if until == math.inf:  # nothing is due: only an event wakes this run
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.001, until - time.monotonic())):
                await self._wake.wait()

    async def _terminate(self, grace_s: float) -> None:
        """End what is left of the process group (only one seen alive: ours to end)."""
        process = self._process
        code = None
        if process is not None and process.owns_group:
            code = await end_group(process.target, grace_s)
            if code is None:
                code = process.returncode
        self.watch.terminated(code)

    def _read_events(self) -> bool:
        """Apply a bounded slice of the event file; True when more is waiting."""
        return read_slice(self._tail, self.watch, self._on_event, self._channel_error)

    def _on_event(self, event: AnyEvent, raw: bytes) -> None:
        self._event(event, raw)  # the watch has mirrored it already
        if not self._started.done() and self.watch.was_ready:
            self._set_started()
        for observer in self.observers:
            observer.on_event(event, raw)

    def _channel_error(self, error: ChannelError) -> None:
        self._put(error)
        self.note(error.reason)

    async def _read_inbox(self) -> None:
        if self._inbox is None:
            return
        messages = await self._inbox.drain()
        for message, size, offset in messages:
            self._put(InboxItem(self.run_id, message, size=size, offset=offset))
        if self._inbox.more:  # a backlog: come back after yielding (a bounded slice a pass)
            self._inbox_dirty = True
            self._wake.set()
        if messages:
            plain = [message for message, _, _ in messages]
            for observer in self.observers:
                observer.on_inbox(plain)

    def _set_started(self) -> None:
        if not self._started.done():
            self._started.set_result(None)

    # -- ending ---------------------------------------------------------------------

    async def _finish(self) -> None:
        self._ended = True
        self._let_go()
        verdict = self.watch.verdict(stderr_tail(self.run_dir), str(self.run_dir.path))
        elapsed = max(0.0, time.time() - self.created_at)  # wall time, as the index keeps it
        if verdict.result is None:
            result = result_of(verdict, self.run_id, elapsed)
        else:
            text, truncated = full_text(verdict.result, self.run_dir.path)
            result = result_of(verdict, self.run_id, elapsed, text, truncated)
        self.final_text = result.final_text if verdict.result is not None else None
        self.ended_at = time.time()
        self._fail_waiters(result.status)
        self._set_started()
        if self._inbox is not None:
            with contextlib.suppress(Exception):
                await self._read_inbox()
            if await self._inbox.close() and self._updates is not None:
                self._updates.stored_unread()  # the reader gets them from the store
        if self._approvals is not None and self._approvals.denied:
            result = dataclasses.replace(result, denied=tuple(self._approvals.denied))
        if result.final_text:
            with contextlib.suppress(OSError):
                write_private_text(self.run_dir.final, result.final_text)
        for observer in self.observers:
            with contextlib.suppress(Exception):
                problem = await observer.on_end(result)
                if problem:
                    self.note(problem)
        self._settle(result)

    def _let_go(self) -> None:
        """Close the run's files, unsubscribe, stop the process watch."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._rewake is not None:
            self._rewake.close()
            self._rewake = None
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        for path, token in self._tokens:
            self._hub.unsubscribe(path, token)
        self._tokens.clear()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._tail.close()
