"""The parent runtime: start a child that speaks the wire, talk to it, always get a result.

Theory of operation. :func:`spawn` prepares the run
(:func:`~tether.runtime.parent.launch.prepare_run`:
a private run directory, the control file created exclusively with the first ``prompt``
in it, the environment, the deadline), then starts the child (default ``tether child``)
in its own process group, its stderr and stdout kept in ``stderr.log``. The rules that
supervise the run (ready, ack, cancel and exit grace, deadline, automatic finalize and
close, the verdict) are the sans-IO :class:`~tether.runtime.parent.supervise.RunWatch`, the same
one the daemon uses; :class:`LocalRunHandle` is its I/O driver (the common
parts of a handle, shared with a run on another host, are
:class:`~tether.runtime.parent.handle.RunHandle`). One pump task per run loops:

1. read a bounded slice of ``events.jsonl`` (woken by the process's one shared watcher,
   see :mod:`tether.runtime.parent.hub`, and by a slow safety tick), validated and mirrored by
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether import procs
from tether.errors import ControlRefused, ParentError, RunEnded, SpawnError, TetherError
from tether.runtime.child.adapters import START_TIMEOUT_ENV
from tether.runtime.child.adapters.prestart import CliRequest
from tether.runtime.parent.finaltext import full_text
from tether.runtime.parent.forkserver import ForkedChild
from tether.runtime.parent.handle import RunHandle, result_of
from tether.runtime.parent.hub import WatchHub, shared_hub
from tether.runtime.parent.launch import (
    PreparedRun,
    absolute_cwd,
    make_inbox,
    monotonic_at,
    prepare_run,
    start_child,
)
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.nested import NestedFollower
from tether.runtime.parent.outcome import RunResult, Timeouts
from tether.runtime.parent.rundir import RunDir, write_private_text
from tether.runtime.parent.sidecars import InboxTail, Recorder
from tether.runtime.parent.supervise import Drain, Finish, RunWatch, Send, Terminate, Verdict, Wait
from tether.runtime.parent.updates import InboxItem, RunEvent, Update
from tether.runtime.parent.watchio import drain, end_group, read_slice, stderr_tail
from tether.store.index import RunIndex, RunRecord
from tether.transports.tail import FileTail
from tether.wire import AnyEvent, ControlAck, Rejection
from tether.wire.session import ControlKind

__all__ = [
    "ChannelError",
    "ControlRefused",
    "InboxItem",
    "LocalRunHandle",
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


class LocalRunHandle(RunHandle):
    """A run whose child this process started and owns (:func:`spawn`); the controls,
    acks, updates and the end are :class:`~tether.runtime.parent.handle.RunHandle`'s."""

    def __init__(
        self,
        *,
        prepared: PreparedRun,
        events: FileTail,
        task: str,
        proc: asyncio.subprocess.Process | ForkedChild,
        lifeline: int | None,
        watch: RunWatch,
        hub: WatchHub,
        recorder: Recorder | None,
        inbox: InboxTail | None,
        nested: RunIndex | None = None,
    ) -> None:
        run = prepared.run
        super().__init__(run.run_id, watch.mirror)
        self.run_dir: RunDir = run
        self._control = prepared.control  # one fd: a child swapping the path cannot redirect it
        self.task = task
        self.watch = watch
        self.timeouts: Timeouts = watch.timeouts
        self._proc = proc
        self._lifeline = lifeline  # closed when the run has ended (see launch.start_child)
        self._hub = hub
        self._created_at = prepared.created_at
        self._recorder = recorder
        self._inbox = inbox
        self._tail = events  # opened before the child existed: a swapped path changes nothing
        self._wake = asyncio.Event()
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

    async def answer(
        self, message: str | Mapping[str, Any], text: str = "", *, decision: str | None = None
    ) -> ControlAck:
        """Answer a ``clarification`` / ``approval_request`` from this run's inbox (the
        message as received, or its ``msg_key``); ``decision`` is ``approve`` or ``deny``.
        Recorded beside the question, sent as a steer (a follow-up when idle) that quotes
        it; see :mod:`tether.runtime.parent.answering`. Raises ``AnswerRefused``."""
        from tether.runtime.parent.answering import answer_run

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

    async def _release(self) -> None:
        """Nothing more: the run's process, files and watch are let go when it ends."""

    def send_nowait(self, kind: ControlKind | str, **fields: Any) -> int:
        """Append a control to the control file; returns its seq (see :meth:`wait_ack`)."""
        return self._send_nowait(ControlKind(kind), fields)

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

    # -- the pump: an I/O driver around the watch (see tether.runtime.parent.supervise) --------

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
        self._event(event, raw)  # the watch has mirrored it already

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
        self._fail_waiters(result.status)
        if self._inbox is not None:
            await self._inbox.close()
        if result.final_text:
            with contextlib.suppress(OSError):
                write_private_text(self.run_dir.final, result.final_text)
        if self._recorder is not None:
            note = await self._recorder.finish(result)
            if note:
                self._notes.append(note)
        self._settle(result)

    def _build_result(self, verdict: Verdict) -> RunResult:
        # wall time, so that the index (created_at, ended_at) gives the same elapsed_s
        elapsed = max(0.0, time.time() - self._created_at)
        if verdict.result is None:
            return result_of(verdict, self.run_id, elapsed)
        text, truncated = full_text(verdict.result, self.run_dir.path)
        return result_of(verdict, self.run_id, elapsed, text, truncated)


# -- spawn ----------------------------------------------------------------------------


def _agent_args(
    agent: str | None, agent_args: Sequence[str], argv: Sequence[str] | None
) -> list[str]:
    """``tether child``'s arguments for ``agent`` (a ``SpawnError`` for a bad name)."""
    from tether.runtime.child.adapters.registry import agent_child_args, resolve_agent

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
) -> LocalRunHandle:
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
    fixed_env = None
    cli = None  # an adapter child's CLI, started before the child when it is exec'd
    if agent is not None or agent_args:
        extra = _agent_args(agent, agent_args, argv)
        if agent not in (None, "builtin") and not child_args:
            cli = CliRequest(agent, list(argv or ()), list(agent_args), model)
        child_args = [*child_args, *extra]
        if agent not in (None, "builtin"):
            argv = None
            if timeouts is not None:  # the agent CLI's hand-shake: the run's start timeout
                fixed_env = {START_TIMEOUT_ENV: f"{timeouts.start_s:g}"}
    timeouts = timeouts or Timeouts()
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
    # The child starts before its row is written: the index write (tens of ms, a thread
    # and SQLite) then overlaps the child's own start-up instead of delaying it.
    events = FileTail(run.events)
    events.open()  # before the child exists: it cannot swap the file under our reader
    try:
        proc, lifeline = await start_child(
            command, run, cwd, prepared.env, prepared.control, cli=cli
        )
    except SpawnError as exc:
        prepared.control.close()
        events.close()
        if recorder is not None:
            await recorder.start(row)
            await recorder.finish(RunResult("failed", error=str(exc), run_id=run.run_id))
        raise
    if recorder is not None:
        await recorder.start(row)
        await recorder.started(proc.pid)
    return LocalRunHandle(
        prepared=prepared,
        events=events,
        task=task,
        proc=proc,
        lifeline=lifeline,
        watch=watch,
        hub=hub or shared_hub(),
        recorder=recorder,
        inbox=tail,
        nested=RunIndex(db) if follow_nested and record else None,
    )
