"""The parent API's start: :func:`spawn` a child on a task and get its live handle.

Theory of operation. :func:`spawn` takes the run's
:class:`~tether.runtime.parent.options.SpawnOptions` (as one value, or its fields by
keyword) and this process's :class:`~tether.runtime.parent.options.Supervision`, checks the
options into the child's command (:func:`~tether.runtime.parent.command.child_command`: a
bad option is :class:`~tether.errors.BadOptions` before anything exists), prepares the
run (:func:`~tether.runtime.parent.launch.prepare_run`: a private run directory, the
control file created exclusively with the first ``prompt`` in it, the environment, the
deadline), starts the child in its own process group (stderr and stdout in
``stderr.log``, a lifeline it ends on when this process dies) and hands the run to the
one driver, :class:`~tether.runtime.parent.driver.LocalRunHandle`, which the daemon's
agents use too. The run index row and the nested runs' follower ride on it as observers.

Errors: see :mod:`tether.errors`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether.errors import ControlRefused, ParentError, RunEnded, SpawnError, TetherError
from tether.runtime.parent.command import child_command
from tether.runtime.parent.driver import LocalRunHandle, Observer
from tether.runtime.parent.handle import RunHandle
from tether.runtime.parent.hub import shared_hub
from tether.runtime.parent.launch import (
    absolute_cwd,
    make_inbox,
    monotonic_at,
    prepare_run,
    start_child,
)
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.options import SpawnOptions, Supervision, split_fields
from tether.runtime.parent.outcome import RunResult, Timeouts
from tether.runtime.parent.process import ChildProcess
from tether.runtime.parent.sidecars import Recorder
from tether.runtime.parent.supervise import RunWatch
from tether.runtime.parent.updates import InboxItem, RunEvent, Update
from tether.store.index import RunIndex, RunRecord
from tether.transports.tail import FileTail

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
    "SpawnOptions",
    "TetherError",
    "Timeouts",
    "Update",
    "spawn",
]


async def spawn(task: str, options: SpawnOptions | None = None, /, **fields: Any) -> LocalRunHandle:
    """Start a child on ``task`` and return its live handle (see the module docstring).

    ``options`` (a :class:`SpawnOptions`) and ``fields`` (any of its fields, and of
    :class:`Supervision`, by keyword: ``provider="scripted"``, ``deadline_s=600``,
    ``db=...``) say what to run and how; see those classes. Raises ``TypeError`` for an
    unknown keyword, :class:`~tether.errors.BadOptions` for options that cannot work,
    :class:`SpawnError` when the child cannot be started.
    """
    opts, supervision = split_fields(options, fields)
    return await spawn_run(task, opts, supervision)


async def spawn_run(task: str, opts: SpawnOptions, supervision: Supervision) -> LocalRunHandle:
    """:func:`spawn` with its options sorted (the blocking faces call this too)."""
    timeouts = supervision.timeouts or Timeouts()
    command = await asyncio.to_thread(child_command, opts, supervision.timeouts)
    prepared = await asyncio.to_thread(
        prepare_run,
        task,
        runs_root=supervision.runs_root,
        argv=command.argv,
        provider=opts.provider,
        model=opts.model,
        env=opts.env,
        fixed_env=command.env,
        deadline_s=opts.deadline_s,
    )
    run, started = prepared.run, time.monotonic()
    watch = RunWatch(
        prepared.mirror,
        timeouts,
        now=started,
        deadline=None if prepared.deadline is None else monotonic_at(prepared.deadline),
        finalize_at=None if opts.finalize_after_s is None else started + opts.finalize_after_s,
        close_when_idle=opts.close_when_idle is not False,
    )
    inbox = make_inbox(run, supervision.db) if supervision.inbox else None
    recorder = None
    if supervision.record:
        recorder = Recorder(RunIndex(supervision.db), run.run_id)
        row = RunRecord(
            id=run.run_id,
            task=task,
            status="starting",
            created_at=prepared.created_at,
            run_dir=str(run.path),
            provider=opts.provider,
            model=opts.model,
            cwd=absolute_cwd(opts.cwd),
            parent_run=opts.parent_run,
            argv=prepared.command,
            deadline=prepared.deadline,
        )
    # The child starts before its row is written: the index write (tens of ms, a thread
    # and SQLite) then overlaps the child's own start-up instead of delaying it.
    events = FileTail(run.events)
    events.open()  # before the child exists: it cannot swap the file under our reader
    try:
        proc, lifeline = await start_child(
            prepared.command, run, opts.cwd, prepared.env, prepared.control, cli=command.cli
        )
    except SpawnError as exc:
        prepared.control.close()
        events.close()
        if recorder is not None:
            await recorder.start(row)
            await recorder.finish(RunResult("failed", error=str(exc), run_id=run.run_id))
        raise
    observers: list[Observer] = []
    if recorder is not None:
        await recorder.start(row)
        await recorder.started(proc.pid)
        observers.append(recorder)
    hub = supervision.hub or shared_hub()
    handle = LocalRunHandle(
        run=run,
        watch=watch,
        events=events,
        process=ChildProcess(proc),
        hub=hub,
        control=prepared.control,
        lifeline=lifeline,
        inbox=inbox,
        created_at=prepared.created_at,
        task=task,
    )
    if supervision.follow_nested and supervision.record:
        from tether.runtime.parent.nested import NestedUpdates

        observers.append(NestedUpdates(run.run_id, RunIndex(supervision.db), hub, handle.put))
    handle.observe(*observers)
    handle.start()
    return handle
