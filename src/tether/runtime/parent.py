"""The parent runtime: start a child that speaks the wire, talk to it, always get a result.

Theory of operation. :func:`spawn` makes a private run directory, creates the control
file exclusively and appends the first ``prompt`` to it, then starts the child (default
``tether child``) in its own process group with the wire environment, its stderr and
stdout kept in ``stderr.log``. One pump task per run then loops:

1. read every complete line appended to ``events.jsonl`` (woken by the process's one
   shared watcher, see :mod:`tether.runtime.hub`, and by a slow safety tick);
2. validate each line and mirror the state (:class:`~tether.runtime.mirror.RunMirror`),
   resolve the ack a caller waits for, queue the event for :meth:`RunHandle.updates`;
3. drain the run's inbox into SQLite and queue its messages too;
4. check that the child is alive and keeping its promises, else end it.

The never-hang rules (each ends the process group, SIGTERM then SIGKILL after a grace,
and fails the run with the tail of the child's stderr):

- the process exits without an ``exit`` event;
- no ``ready`` within ``start_s``;
- a control not acknowledged within ``ack_s`` of the child being ready (it stopped
  answering);
- no ``exit`` within ``cancel_grace_s`` after ``cancel`` was sent;
- still running ``cancel_grace_s`` past the wire deadline (the result says timed-out);
- a fatal channel error (version mismatch, event file truncated or gone).

Errors: see :mod:`tether.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tether import procs
from tether.errors import ControlRefused, ParentError, RunEnded, SpawnError, TetherError
from tether.runtime.finaltext import full_text
from tether.runtime.hub import WatchHub, shared_hub
from tether.runtime.launch import absolute_cwd, default_argv, make_inbox, start_child, wire_env
from tether.runtime.mirror import ChannelError, RunMirror, too_large
from tether.runtime.nested import NestedFollower
from tether.runtime.outcome import Result, Status, Timeouts
from tether.runtime.rundir import (
    RunDir,
    append_line,
    create_run_dir,
    read_tail,
    write_private_text,
)
from tether.runtime.sidecars import InboxTail, Recorder
from tether.runtime.updates import InboxItem, RunEvent, Update
from tether.store.index import RunIndex, RunRecord
from tether.transports.tail import FileTail, TailStatus
from tether.wire import AnyEvent, ControlAck, Rejection, TooLarge
from tether.wire.session import ControlKind, State

__all__ = [
    "DEFAULT_FINALIZE_NOTE",
    "ChannelError",
    "ControlRefused",
    "InboxItem",
    "ParentError",
    "Result",
    "RunEnded",
    "RunEvent",
    "RunHandle",
    "SpawnError",
    "TetherError",
    "Timeouts",
    "Update",
    "spawn",
]


DEFAULT_FINALIZE_NOTE: Final = (
    "Stop working now. Without calling tools, give your final answer from what you have so far."
)
DEADLINE_FINALIZE_NOTE: Final = (
    "Your time is nearly up. Without calling tools, give your final answer from what you have "
    "so far."
)
STDERR_TAIL_BYTES: Final = 2000
_SAFETY_TICK_S: Final = 1.0  # re-check files and timers at least this often
# A parent that is itself a child must not hand its own wire settings (a deadline!) down.
_WIRE_PREFIXES: Final = ("FEN_WIRE_", "TETHER_WIRE_")


@dataclass(slots=True)
class _Clock:
    started: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)  # the index's created_at
    ready: float | None = None
    cancel_sent: float | None = None
    deadline: float | None = None  # monotonic
    finalize_at: float | None = None  # monotonic
    sent: dict[int, float] = field(default_factory=dict)


class RunHandle:
    """A live run: send controls, read its updates, wait for its :class:`Result`.

    Create with :func:`spawn`. Every control method returns the ``control-ack`` the child
    sent for it; :meth:`wait` never hangs (see the module docstring).
    """

    def __init__(
        self,
        *,
        run: RunDir,
        task: str,
        proc: asyncio.subprocess.Process,
        lifeline: int | None,
        mirror: RunMirror,
        timeouts: Timeouts,
        hub: WatchHub,
        close_when_idle: bool,
        clock: _Clock,
        recorder: Recorder | None,
        inbox: InboxTail | None,
        nested: RunIndex | None = None,
    ) -> None:
        self.run_id = run.run_id
        self.run_dir = run
        self.task = task
        self.mirror = mirror
        self.timeouts = timeouts
        self._proc = proc
        self._lifeline = lifeline  # closed when the run has ended (see launch.start_child)
        self._hub = hub
        self._close_when_idle = close_when_idle
        self._clock = clock
        self._recorder = recorder
        self._inbox = inbox
        self._tail = FileTail(run.events)
        self._wake = asyncio.Event()
        self._updates: asyncio.Queue[Update | None] = asyncio.Queue()
        self._acks: dict[int, ControlAck] = {}
        self._ack_waiters: dict[int, asyncio.Future[ControlAck]] = {}
        self._failure: tuple[Status, str] | None = None
        self._notes: list[str] = []
        self._close_sent = False
        self._finalize_sent = False
        self._proc_done = False
        self._ended = False
        self._result: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._token = hub.subscribe_event(run.events, self._wake)
        self._nested = (
            None if nested is None else NestedFollower(run.run_id, nested, hub, self._wake)
        )
        self._tasks = [
            asyncio.create_task(self._watch_process(), name=f"tether-proc-{self.run_id}"),
            asyncio.create_task(self._pump(), name=f"tether-pump-{self.run_id}"),
        ]

    # -- public ---------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def state(self) -> State:
        """The run state mirrored from the child's events."""
        return self.mirror.state

    @property
    def done(self) -> bool:
        """True once the run has ended and :meth:`wait` returns at once."""
        return self._result.done()

    async def steer(self, text: str) -> ControlAck:
        """Inject ``text`` at the next turn boundary (starts a turn when ready)."""
        return await self.send(ControlKind.STEER, text=text)

    async def follow_up(self, text: str) -> ControlAck:
        """Queue ``text`` for after the current turn (starts a turn when ready)."""
        return await self.send(ControlKind.FOLLOW_UP, text=text)

    async def finalize(self, note: str | None = None) -> ControlAck:
        """Ask for one last tool-free turn and the result."""
        self._finalize_sent = True
        fields = {} if note is None else {"note": note}
        return await self.send(ControlKind.FINALIZE, **fields)

    async def close(self) -> ControlAck:
        """Finish cleanly after the current turn."""
        self._close_sent = True
        return await self.send(ControlKind.CLOSE)

    async def cancel(self) -> ControlAck | None:
        """Abort the run. Returns the ack, or None when the child never acknowledged it.

        A child that does not exit within ``cancel_grace_s`` has its process group ended
        (SIGTERM, then SIGKILL) and the run fails.
        """
        if self._ended:
            return None
        seq = self._send_nowait(ControlKind.CANCEL, {})
        if self._clock.cancel_sent is None:
            self._clock.cancel_sent = time.monotonic()
        self._wake.set()
        try:
            return await self.wait_ack(seq)
        except RunEnded:
            return None

    def kill(self, reason: str = "killed by the user") -> None:
        """End the child's process group now (SIGKILL); the run fails with ``reason``."""
        if not self._ended:
            self._fail("failed", reason)
            procs.kill_group(self._proc)
            self._wake.set()

    async def send(self, kind: ControlKind | str, **fields: Any) -> ControlAck:
        """Send any control and wait for its ack."""
        return await self.wait_ack(self._send_nowait(ControlKind(kind), fields))

    def send_nowait(self, kind: ControlKind | str, **fields: Any) -> int:
        """Append a control to the control file; returns its seq (see :meth:`wait_ack`)."""
        return self._send_nowait(ControlKind(kind), fields)

    async def wait_ack(self, seq: int) -> ControlAck:
        """The ack for control ``seq``; raises :class:`RunEnded` if the run ends first."""
        if seq in self._acks:
            return self._acks[seq]
        if self._ended:
            raise RunEnded(f"run {self.run_id} ended before control seq {seq} was acknowledged")
        waiter = self._ack_waiters.get(seq)
        if waiter is None:
            waiter = self._ack_waiters[seq] = asyncio.get_running_loop().create_future()
        return await asyncio.shield(waiter)

    async def updates(self) -> AsyncIterator[Update]:
        """Everything that happens, in order: events, inbox messages, channel errors.

        One consumer at a time; items are kept from the start of the run until read.
        Ends when the run has ended.
        """
        while (item := await self._updates.get()) is not None:
            yield item
        self._updates.put_nowait(None)  # a later call ends at once too

    async def events(self) -> AsyncIterator[AnyEvent]:
        """The validated wire events only (see :meth:`updates`)."""
        async for item in self.updates():
            if isinstance(item, RunEvent):
                yield item.event

    async def wait(self) -> Result:
        """Wait for the run to end and return its result. Never hangs."""
        return await asyncio.shield(self._result)

    async def aclose(self) -> Result:
        """Cancel the run if it is still going, and wait for its result."""
        if not self._result.done():
            await self.cancel()
        return await self.wait()

    async def __aenter__(self) -> RunHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def notes(self) -> list[str]:
        """Problems noticed on the way (channel errors, index trouble), oldest first."""
        return list(self._notes)

    # -- sending --------------------------------------------------------------------

    def _send_nowait(self, kind: ControlKind, fields: Mapping[str, Any]) -> int:
        if self._ended:
            raise RunEnded(f"run {self.run_id} has ended; cannot send {kind}")
        stamped = self.mirror.control(kind, **fields)
        if isinstance(stamped, Rejection):
            raise ControlRefused(f"cannot send {kind}: {stamped.reason}")
        seq, line = stamped
        append_line(self.run_dir.control, line)
        self._clock.sent[seq] = time.monotonic()
        return seq

    # -- the pump -------------------------------------------------------------------

    async def _watch_process(self) -> None:
        await self._proc.wait()
        self._proc_done = True
        self._wake.set()

    async def _pump(self) -> None:
        try:
            await self._loop()
            await self._settle()
        except Exception as exc:  # noqa: BLE001 (the run must end with a result, whatever happens)
            self._fail("failed", f"internal error in the parent: {exc!r}")
            await self._terminate()
        finally:
            await self._finish()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            self._read_events()
            await self._read_inbox()
            await self._read_nested()
            if self.mirror.finished or self._failure is not None:
                return
            if self._proc_done:
                self._read_events(final=True)
                if not self.mirror.finished:
                    code = self._proc.returncode
                    self._fail("failed", f"child exited (code {code}) without an exit event")
                return
            self._auto_controls()
            wait_s = self._check_timers(time.monotonic())
            if self._failure is not None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    def _auto_controls(self) -> None:
        clock = self._clock
        if (
            clock.finalize_at is not None
            and not self._finalize_sent
            and time.monotonic() >= clock.finalize_at
            and self.mirror.state in (State.READY, State.RUNNING, State.CLOSING)
        ):
            self._finalize_sent = True
            self._send_nowait(ControlKind.FINALIZE, {"note": DEADLINE_FINALIZE_NOTE})
        if self._close_when_idle and not self._close_sent and self.mirror.idle:
            self._close_sent = True
            self._send_nowait(ControlKind.CLOSE, {})

    def _check_timers(self, now: float) -> float:
        """Fail the run when a promise is broken; else how long to sleep."""
        t, clock = self.timeouts, self._clock
        if self.mirror.state is not State.STARTING and clock.ready is None:
            clock.ready = now
        due: list[float] = [now + _SAFETY_TICK_S]
        if clock.ready is None:
            due.append(clock.started + t.start_s)
            if now >= due[-1]:
                self._fail("failed", f"child did not send ready within {t.start_s:g} s")
        else:
            for seq in self.mirror.pending:
                sent = max(clock.sent.get(seq, now), clock.ready)
                due.append(sent + t.ack_s)
                if now >= due[-1]:
                    kind = self.mirror.pending[seq].kind
                    self._fail(
                        "failed",
                        f"child stopped answering: {kind} (seq {seq}) was not acknowledged "
                        f"within {t.ack_s:g} s",
                    )
                    break
        if clock.cancel_sent is not None:
            due.append(clock.cancel_sent + t.cancel_grace_s)
            if now >= due[-1]:
                self._fail("failed", f"child did not exit within {t.cancel_grace_s:g} s of cancel")
        if clock.deadline is not None:
            due.append(clock.deadline + t.cancel_grace_s)
            if now >= due[-1]:
                self._fail("timed-out", "child did not exit by its deadline")
        if clock.finalize_at is not None and not self._finalize_sent:
            due.append(clock.finalize_at)
        return max(0.0, min(due) - now)

    def _fail(self, status: Status, reason: str) -> None:
        if self._failure is None:
            self._failure = (status, reason)

    def _read_events(self, *, final: bool = False) -> None:
        while True:
            read = self._tail.read()
            if read.status is TailStatus.TRUNCATED:
                self._channel_error(ChannelError("event file truncated", True, self.run_id))
                return
            if read.status is TailStatus.MISSING:
                self._channel_error(ChannelError("event file is gone", True, self.run_id))
                return
            if not read.items:
                return
            for item in read.items:
                if isinstance(item, TooLarge):
                    self._channel_error(too_large(self.run_id, item.offset))
                    continue
                event, problem = self.mirror.receive(item.data)
                if event is not None:
                    state = self.mirror.state
                    self._updates.put_nowait(RunEvent(self.run_id, event, item.data, state))
                    if isinstance(event, ControlAck) and isinstance(event.ref, int):
                        self._acked(event.ref, event)
                if problem is not None:
                    self._channel_error(problem)

    def _acked(self, seq: int, ack: ControlAck) -> None:
        self._acks[seq] = ack
        waiter = self._ack_waiters.pop(seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(ack)

    def _channel_error(self, error: ChannelError) -> None:
        self._updates.put_nowait(error)
        self._notes.append(error.reason)
        if error.fatal:
            self._fail("failed", f"channel error: {error.reason}")

    async def _read_nested(self) -> None:
        if self._nested is None:
            return
        for update in await self._nested.poll():
            self._updates.put_nowait(update)

    async def _read_inbox(self) -> None:
        if self._inbox is None:
            return
        for message in await self._inbox.drain():
            self._updates.put_nowait(InboxItem(self.run_id, message))

    # -- ending ---------------------------------------------------------------------

    async def _settle(self) -> None:
        """After the loop: let a finished child go, or end a broken one."""
        if self._failure is None and self.mirror.finished:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._proc.wait(), self.timeouts.exit_grace_s)
            if procs.group_alive(self._proc):
                await procs.terminate_group(self._proc, self.timeouts.kill_grace_s)
            return
        await self._terminate()
        self._read_events(final=True)  # an exit written just before the end still counts
        await self._read_inbox()
        await self._read_nested()

    async def _terminate(self) -> None:
        if self._proc.returncode is None or procs.group_alive(self._proc):
            await procs.terminate_group(self._proc, self.timeouts.kill_grace_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), self.timeouts.kill_grace_s)

    async def _finish(self) -> None:
        self._ended = True
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        self._hub.unsubscribe(self.run_dir.events, self._token)
        self._tail.close()
        if self._nested is not None:
            self._nested.close()
        result = self._build_result()
        for seq, waiter in list(self._ack_waiters.items()):
            if not waiter.done():
                waiter.set_exception(
                    RunEnded(
                        f"run {self.run_id} ended ({result.status}) before control "
                        f"seq {seq} was acknowledged"
                    )
                )
                waiter.exception()  # mark retrieved: nobody may be waiting any more
        self._ack_waiters.clear()
        if self._inbox is not None:
            await self._inbox.close()
        if result.final_text:
            with contextlib.suppress(OSError):
                write_private_text(self.run_dir.final, result.final_text)
        if self._recorder is not None:
            note = await self._recorder.finish(result)
            if note:
                self._notes.append(note)
        self._updates.put_nowait(None)
        if not self._result.done():
            self._result.set_result(result)

    def _build_result(self) -> Result:
        # wall time, so that the index (created_at, ended_at) gives the same elapsed_s
        elapsed = max(0.0, time.time() - self._clock.wall)
        exit_event = self.mirror.exit
        if exit_event is not None:
            status: Status = exit_event.status
            error = exit_event.error if isinstance(exit_event.error, str) else None
        elif self._failure is not None:
            status, reason = self._failure
            error = self._with_stderr(reason)
        else:
            status, error = "failed", self._with_stderr("run ended without an exit event")
        result = self.mirror.result
        if result is None:
            if status == "done":
                error = "child exited done without a result"
            return Result(status, error=error, run_id=self.run_id, elapsed_s=elapsed)
        text, truncated = full_text(result)
        return Result(
            status,
            final_text=text,
            stop_reason=result.stop_reason,
            usage=result.usage if isinstance(result.usage, dict) else None,
            truncated=truncated,
            error=error,
            run_id=self.run_id,
            elapsed_s=elapsed,
        )

    def _with_stderr(self, reason: str) -> str:
        tail = read_tail(self.run_dir.stderr, STDERR_TAIL_BYTES)
        if not tail:
            return f"{reason} (its stderr is empty; run dir {self.run_dir.path})"
        return f"{reason}; the tail of its stderr:\n{tail}"


# -- spawn ----------------------------------------------------------------------------


def _agent_args(
    agent: str | None, agent_args: Sequence[str], argv: Sequence[str] | None
) -> list[str]:
    """``tether child``'s arguments for ``agent`` (a ``SpawnError`` for a bad name)."""
    from tether.runtime.adapters.registry import agent_child_args, resolve_agent

    try:
        name = resolve_agent(agent)
        command = list(argv or ()) if name != "builtin" else []
        return agent_child_args(name, list(agent_args), command)
    except ValueError as exc:
        raise SpawnError(str(exc)) from None


async def spawn(
    task: str,
    *,
    agent: str | None = None,
    agent_args: Sequence[str] = (),
    provider: str | None = None,
    model: str | None = None,
    argv: Sequence[str] | None = None,
    child_args: Sequence[str] = (),
    cwd: str | os.PathLike[str] | None = None,
    deadline_s: float | None = None,
    finalize_after_s: float | None = None,
    env: Mapping[str, str] | None = None,
    close_when_idle: bool = True,
    parent_run: str | None = None,
    timeouts: Timeouts | None = None,
    runs_root: Path | None = None,
    db: Path | None = None,
    record: bool = True,
    inbox: bool = True,
    follow_nested: bool = False,
    hub: WatchHub | None = None,
) -> RunHandle:
    """Start a child on ``task`` and return its live handle (see the module docstring).

    ``agent`` names the agent (see ``tether agents``: ``builtin``, the default,
    ``claude``, ``codex``, ``pi``, ``gemini``, ``acp``, ``resp``, ...) and ``agent_args``
    are extra arguments for its CLI; with an external ``agent``, ``argv`` is the agent's
    own command (instead of its CLI on PATH; required for ``acp`` and ``resp``).
    Without one, ``argv`` runs any program that speaks the wire (default ``tether
    child`` with ``--provider``/``--model`` and then ``child_args``). ``env`` is merged over this
    process's environment. ``deadline_s`` sets ``FEN_WIRE_DEADLINE`` to now +
    ceil(deadline_s); ``finalize_after_s`` makes the parent send ``finalize`` at that
    point, so the run answers before its deadline. With ``close_when_idle`` the parent
    sends ``close`` once the child is ready with nothing left to do. ``record`` adds the
    run to the run index (``db``, default the state directory's database);
    ``follow_nested`` also hands out the updates of the runs it starts (subagents), with
    ``depth`` >= 1.
    """
    if agent is not None or agent_args:
        child_args = [*child_args, *_agent_args(agent, agent_args, argv)]
        if agent not in (None, "builtin"):
            argv = None
    loop = asyncio.get_running_loop()
    run = await loop.run_in_executor(None, create_run_dir, runs_root)
    mirror = RunMirror(run.run_id)
    first = mirror.control(ControlKind.PROMPT, text=task)
    if isinstance(first, Rejection):
        raise ControlRefused(f"cannot send the task as a prompt: {first.reason}")
    append_line(run.control, first[1])
    clock = _Clock()
    wall = clock.wall
    deadline = None if deadline_s is None else wall + math.ceil(deadline_s)
    if deadline is not None:
        clock.deadline = clock.started + (deadline - wall)
    if finalize_after_s is not None:
        clock.finalize_at = clock.started + finalize_after_s
    clock.sent[first[0]] = clock.started
    passed = {k: v for k, v in (("TETHER_PROVIDER", provider), ("TETHER_MODEL", model)) if v}
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(_WIRE_PREFIXES)}
    child_env = {**inherited, **passed, **(env or {}), **wire_env(run, deadline)}
    tail = make_inbox(run, db) if inbox else None
    command = list(argv) if argv is not None else default_argv(provider, model) + list(child_args)
    recorder = None
    if record:
        recorder = Recorder(RunIndex(db), run.run_id)
        row = RunRecord(
            id=run.run_id,
            task=task,
            status="starting",
            created_at=wall,
            run_dir=str(run.path),
            provider=provider,
            model=model,
            cwd=absolute_cwd(cwd),
            parent_run=parent_run,
            argv=command,
            deadline=deadline,
        )
        await recorder.start(row)
    try:
        proc, lifeline = await start_child(command, run, cwd, child_env)
    except SpawnError as exc:
        if recorder is not None:
            await recorder.finish(Result("failed", error=str(exc), run_id=run.run_id))
        raise
    if recorder is not None:
        await recorder.started(proc.pid)
    return RunHandle(
        run=run,
        task=task,
        proc=proc,
        lifeline=lifeline,
        mirror=mirror,
        timeouts=timeouts or Timeouts(),
        hub=hub or shared_hub(),
        close_when_idle=close_when_idle,
        clock=clock,
        recorder=recorder,
        inbox=tail,
        nested=RunIndex(db) if follow_nested and record else None,
    )
