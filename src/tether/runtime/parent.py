"""The parent runtime: start a child that speaks the wire, talk to it, always get a result.

Theory of operation. :func:`spawn` prepares the run (:func:`~tether.runtime.launch.prepare_run`:
a private run directory, the control file created exclusively with the first ``prompt``
in it, the environment, the deadline), then starts the child (default ``tether child``)
in its own process group, its stderr and stdout kept in ``stderr.log``. The rules that
supervise the run (ready, ack, cancel and exit grace, deadline, automatic finalize and
close, the verdict) are the sans-IO :class:`~tether.runtime.supervise.RunWatch`, the same
one the daemon uses; :class:`RunHandle` is its I/O driver. One pump task per run loops:

1. read a bounded slice of ``events.jsonl`` (woken by the process's one shared watcher,
   see :mod:`tether.runtime.hub`, and by a slow safety tick), validated and mirrored by
   the watch; resolve the ack a caller waits for, queue the event for
   :meth:`RunHandle.updates`;
2. drain the run's inbox into SQLite and queue its messages too;
3. do what the watch says: append an automatic control, wait (or only yield, when more
   events are waiting), end the process group, read what is left, or finish.

Errors: see :mod:`tether.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tether import procs
from tether.errors import ControlRefused, ParentError, RunEnded, SpawnError, TetherError
from tether.runtime.adapters import START_TIMEOUT_ENV
from tether.runtime.finaltext import full_text
from tether.runtime.hub import WatchHub, shared_hub
from tether.runtime.launch import (
    PreparedRun,
    absolute_cwd,
    make_inbox,
    monotonic_at,
    prepare_run,
    start_child,
)
from tether.runtime.mirror import ChannelError, RunMirror
from tether.runtime.nested import NestedFollower
from tether.runtime.outcome import RunResult, Timeouts
from tether.runtime.rundir import RunDir, write_private_text
from tether.runtime.sidecars import InboxTail, Recorder
from tether.runtime.supervise import Drain, Finish, RunWatch, Send, Terminate, Verdict, Wait
from tether.runtime.updates import InboxItem, RunEvent, Update, UpdateQueue
from tether.runtime.watchio import drain, end_group, read_slice, stderr_tail
from tether.store.index import RunIndex, RunRecord
from tether.transports.tail import FileTail
from tether.wire import AnyEvent, ControlAck, Rejection
from tether.wire.session import ControlKind, State

__all__ = [
    "ChannelError",
    "ControlRefused",
    "InboxItem",
    "ParentError",
    "RunEnded",
    "RunEvent",
    "RunHandle",
    "RunResult",
    "SpawnError",
    "TetherError",
    "Timeouts",
    "Update",
    "spawn",
]


class RunHandle:
    """A live run: send controls, read its updates, wait for its :class:`RunResult`.

    Create with :func:`spawn`. Every control method returns the ``control-ack`` the child
    sent for it; :meth:`wait` never hangs (see the module docstring).
    """

    def __init__(
        self,
        *,
        prepared: PreparedRun,
        task: str,
        proc: asyncio.subprocess.Process,
        lifeline: int | None,
        watch: RunWatch,
        hub: WatchHub,
        recorder: Recorder | None,
        inbox: InboxTail | None,
        nested: RunIndex | None = None,
    ) -> None:
        run = prepared.run
        self.run_id = run.run_id
        self.run_dir: RunDir = run
        self._control = prepared.control  # one fd: a child swapping the path cannot redirect it
        self.task = task
        self.watch = watch
        self.mirror: RunMirror = watch.mirror
        self.timeouts: Timeouts = watch.timeouts
        self._proc = proc
        self._lifeline = lifeline  # closed when the run has ended (see launch.start_child)
        self._hub = hub
        self._created_at = prepared.created_at
        self._recorder = recorder
        self._inbox = inbox
        self._tail = FileTail(run.events)
        self._wake = asyncio.Event()
        self._updates = UpdateQueue(self.run_id)
        self._acks: dict[int, ControlAck] = {}
        self._ack_waiters: dict[int, asyncio.Future[ControlAck]] = {}
        self._notes: list[str] = []
        self._ended = False
        self._result: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
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
        fields = {} if note is None else {"note": note}
        return await self.send(ControlKind.FINALIZE, **fields)

    async def close(self) -> ControlAck:
        """Finish cleanly after the current turn."""
        return await self.send(ControlKind.CLOSE)

    async def cancel(self) -> ControlAck | None:
        """Abort the run. Returns the ack, or None when the child never acknowledged it.

        A child that does not exit within ``cancel_grace_s`` has its process group ended
        (SIGTERM, then SIGKILL) and the run fails.
        """
        if self._ended:
            return None
        seq = self._send_nowait(ControlKind.CANCEL, {})
        try:
            return await self.wait_ack(seq)
        except RunEnded:
            return None

    async def answer(
        self, message: str | Mapping[str, Any], text: str = "", *, decision: str | None = None
    ) -> ControlAck:
        """Answer a ``clarification`` / ``approval_request`` from this run's inbox (the
        message as received, or its ``msg_key``); ``decision`` is ``approve`` or ``deny``.
        Recorded beside the question, sent as a steer (a follow-up when idle) that quotes
        it; see :mod:`tether.runtime.answering`. Raises ``AnswerRefused``."""
        from tether.runtime.answering import answer_run

        db = getattr(self._inbox, "db", None)
        return await answer_run(self, db, message, text, decision)

    def kill(self, reason: str = "killed by the user") -> None:
        """End the child's process group now (SIGKILL); the run fails with ``reason``."""
        if not self._ended:
            self.watch.fail("failed", reason)
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

        One consumer at a time; items are kept from the start of the run until read, up
        to a bound (a reader that falls far behind is told how many were dropped; the
        run's ``events.jsonl`` keeps every event). Ends when the run has ended.
        """
        while (item := await self._updates.get()) is not None:
            yield item

    async def events(self) -> AsyncIterator[AnyEvent]:
        """The validated wire events only (see :meth:`updates`)."""
        async for item in self.updates():
            if isinstance(item, RunEvent):
                yield item.event

    async def wait(self) -> RunResult:
        """Wait for the run to end and return its result. Never hangs."""
        return await asyncio.shield(self._result)

    async def aclose(self) -> RunResult:
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
        sent = self.watch.send(kind, time.monotonic(), **fields)
        if isinstance(sent, Rejection):
            raise ControlRefused(f"cannot send {kind}: {sent.reason}")
        self._control.append(sent.line)
        self._wake.set()  # the watch has a new timer
        return sent.seq

    # -- the pump: an I/O driver around the watch (see tether.runtime.supervise) --------

    async def _watch_process(self) -> None:
        await self._proc.wait()
        self.watch.process_exited(self._proc.returncode)
        self._wake.set()

    async def _pump(self) -> None:
        try:
            await self._loop()
        except Exception as exc:  # noqa: BLE001 (the run must end with a result, whatever happens)
            self.watch.fail("failed", f"internal error in the parent: {exc!r}")
            with contextlib.suppress(Exception):
                await end_group(self._proc, self.timeouts.kill_grace_s)
        finally:
            await self._finish()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            more = read_slice(self._tail, self.watch, self._on_event, self._channel_error)
            await self._read_inbox()
            await self._read_nested()
            for action in self.watch.next(time.monotonic()):
                if isinstance(action, Send):
                    self._control.append(action.line)
                elif isinstance(action, Wait):
                    await self._wait(action.until, more)
                elif isinstance(action, Terminate):
                    code = await end_group(self._proc, action.grace_s)
                    self.watch.terminated(code)
                elif isinstance(action, Drain):
                    await drain(
                        self._tail, self.watch, self._on_event, self._channel_error, action.limit
                    )
                    await self._read_inbox()
                    await self._read_nested()
                elif isinstance(action, Finish):
                    return

    async def _wait(self, until: float, more: bool) -> None:
        if more:  # a backlog: yield to the loop, then read on
            await asyncio.sleep(0)
            return
        if until == math.inf:  # nothing is due (Timeouts.tick_s None): events only
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(0.0, until - time.monotonic()))

    def _on_event(self, event: AnyEvent, raw: bytes) -> None:
        self._updates.put(RunEvent(self.run_id, event, raw, self.mirror.state))
        if isinstance(event, ControlAck) and isinstance(event.ref, int):
            self._acked(event.ref, event)

    def _acked(self, seq: int, ack: ControlAck) -> None:
        self._acks[seq] = ack
        waiter = self._ack_waiters.pop(seq, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(ack)

    def _channel_error(self, error: ChannelError) -> None:
        self._updates.put(error)
        self._notes.append(error.reason)

    async def _read_nested(self) -> None:
        if self._nested is None:
            return
        for update in await self._nested.poll():
            self._updates.put(update)

    async def _read_inbox(self) -> None:
        if self._inbox is None:
            return
        for message, size in await self._inbox.drain():
            self._updates.put(InboxItem(self.run_id, message, size=size))
        if self._inbox.more:  # a backlog: come back after yielding (a bounded slice a pass)
            self._wake.set()

    # -- ending ---------------------------------------------------------------------

    async def _finish(self) -> None:
        self._ended = True
        self._control.close()
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        self._hub.unsubscribe(self.run_dir.events, self._token)
        self._tail.close()
        if self._nested is not None:
            self._nested.close()
        verdict = self.watch.verdict(stderr_tail(self.run_dir), str(self.run_dir.path))
        result = self._build_result(verdict)
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
        self._updates.close()
        if not self._result.done():
            self._result.set_result(result)

    def _build_result(self, verdict: Verdict) -> RunResult:
        # wall time, so that the index (created_at, ended_at) gives the same elapsed_s
        elapsed = max(0.0, time.time() - self._created_at)
        result = verdict.result
        if result is None:
            status, error = verdict.status, verdict.error
            return RunResult(status, error=error, run_id=self.run_id, elapsed_s=elapsed)
        text, truncated = full_text(result, self.run_dir.path)
        return RunResult(
            verdict.status,
            final_text=text,
            stop_reason=result.stop_reason,
            usage=result.usage if isinstance(result.usage, dict) else None,
            truncated=truncated,
            error=verdict.error,
            run_id=self.run_id,
            elapsed_s=elapsed,
        )


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
    child`` with ``--provider``/``--model`` and then ``child_args``). ``env`` is merged
    over this process's environment. ``deadline_s`` sets ``FEN_WIRE_DEADLINE`` to
    ceil(now + deadline_s), never earlier than asked; ``finalize_after_s`` makes the
    parent send ``finalize`` at that point, so the run answers before its deadline.
    With ``close_when_idle`` the parent sends ``close`` once the child is ready with
    nothing left to do. ``record`` adds the run to the run index (``db``, default the
    state directory's database); ``follow_nested`` also hands out the updates of the
    runs it starts (subagents), with ``depth`` >= 1.
    """
    timeouts = timeouts or Timeouts()
    fixed_env = None
    if agent is not None or agent_args:
        child_args = [*child_args, *_agent_args(agent, agent_args, argv)]
        if agent not in (None, "builtin"):
            argv = None
            # the agent CLI's hand-shake is bounded by the run's start timeout
            fixed_env = {START_TIMEOUT_ENV: f"{timeouts.start_s:g}"}
    prepared = await asyncio.to_thread(
        prepare_run,
        task,
        runs_root=runs_root,
        argv=argv,
        provider=provider,
        model=model,
        child_args=child_args,
        env=env,
        fixed_env=fixed_env,
        deadline_s=deadline_s,
    )
    run, command, started = prepared.run, prepared.command, time.monotonic()
    watch = RunWatch(
        prepared.mirror,
        timeouts,
        now=started,
        deadline=None if prepared.deadline is None else monotonic_at(prepared.deadline),
        finalize_at=None if finalize_after_s is None else started + finalize_after_s,
        close_when_idle=close_when_idle,
    )
    tail = make_inbox(run, db) if inbox else None
    recorder = None
    if record:
        recorder = Recorder(RunIndex(db), run.run_id)
        row = RunRecord(
            id=run.run_id,
            task=task,
            status="starting",
            created_at=prepared.created_at,
            run_dir=str(run.path),
            provider=provider,
            model=model,
            cwd=absolute_cwd(cwd),
            parent_run=parent_run,
            argv=command,
            deadline=prepared.deadline,
        )
        await recorder.start(row)
    try:
        proc, lifeline = await start_child(command, run, cwd, prepared.env, prepared.control)
    except SpawnError as exc:
        prepared.control.close()
        if recorder is not None:
            await recorder.finish(RunResult("failed", error=str(exc), run_id=run.run_id))
        raise
    if recorder is not None:
        await recorder.started(proc.pid)
    return RunHandle(
        prepared=prepared,
        task=task,
        proc=proc,
        lifeline=lifeline,
        watch=watch,
        hub=hub or shared_hub(),
        recorder=recorder,
        inbox=tail,
        nested=RunIndex(db) if follow_nested and record else None,
    )
