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
import os
import shutil
import time
from typing import Any

import msgspec

from tether.errors import ControlRefused, ParentError, RunEnded, SpawnError, TetherError
from tether.runtime.child.adapters.config import write_config
from tether.runtime.parent.command import ChildCommand, child_command
from tether.runtime.parent.continuation import continued
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
from tether.runtime.parent.worktrees import (
    WorktreeRelease,
    check_worktree,
    open_worktree,
    run_owner,
    worktree_of,
)
from tether.store.index import LIVE_STATUSES, RunIndex, RunRecord
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
    "resume",
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


async def resume(
    run_id: str, task: str, options: SpawnOptions | None = None, /, **fields: Any
) -> LocalRunHandle:
    """A new run on ``task`` that continues run ``run_id``'s conversation: the same agent
    (and its options, worktree and home), the model seeing the earlier turns; ``fork=True``
    starts a new conversation from it instead. ``options`` and ``fields`` change what they
    name (see :func:`spawn`). Raises :class:`~tether.errors.BadOptions` when the run is
    not resumable (with the reason)."""
    opts, supervision = split_fields(options, fields)
    return await spawn_run(task, opts.replace(resume=run_id), supervision)


async def spawn_run(task: str, opts: SpawnOptions, supervision: Supervision) -> LocalRunHandle:
    """:func:`spawn` with its options sorted (the blocking faces call this too)."""
    timeouts = supervision.timeouts or Timeouts()
    opts, command = await asyncio.to_thread(_checked, opts, supervision)
    prepared = await asyncio.to_thread(
        prepare_run, task, opts, command, runs_root=supervision.runs_root
    )
    run = prepared.run
    try:
        if worktree_of(opts) is not None or command.config is not None:
            opts = await asyncio.to_thread(_workspace, opts, command, run.run_id, supervision)
    except BaseException:
        prepared.control.close()
        await asyncio.to_thread(shutil.rmtree, run.path, True)  # nothing stays of it
        raise
    started = time.monotonic()
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
            options=msgspec.to_builtins(opts, enc_hook=_path_text),
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
    if worktree_of(opts) is not None:
        observers.append(WorktreeRelease(opts, run_owner(run.run_id)))
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


def _path_text(value: Any) -> str:
    """A path a Python caller gave for a string field (``cwd=Path(...)``), as text."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)  # type: ignore[no-any-return]
    raise TypeError(f"cannot keep a {type(value).__name__} in the run index")


def _checked(opts: SpawnOptions, supervision: Supervision) -> tuple[SpawnOptions, ChildCommand]:
    """The run's options (a resumed run's resolved) and its child's command, or the
    refusal (:class:`~tether.errors.BadOptions`) before anything exists. Blocking."""
    resumed = None
    if opts.resume is not None:
        opts, resumed = continued(opts, RunIndex(supervision.db))
    check_worktree(opts)
    command = child_command(opts, supervision.timeouts, resumed)
    if command.config is not None and command.config.home:  # the agent's home, kept
        opts = opts.replace(home=command.config.home)
    return opts, command


def _workspace(
    opts: SpawnOptions, command: ChildCommand, run_id: str, supervision: Supervision
) -> SpawnOptions:
    """The run's worktree (made, forked or given to it) and its agent's home (written):
    the options the run goes on with and the index keeps. Blocking."""
    index = RunIndex(supervision.db)

    def ended(owner: str) -> bool:  # a run that held the worktree and is over
        if not owner.startswith(run_owner("")):
            return False
        record = index.get(owner.removeprefix(run_owner("")))
        return record is None or record.status not in LIVE_STATUSES

    opts, _ = open_worktree(opts, run_id, run_owner(run_id), stale=ended)
    if command.config is not None:
        write_config(command.config)
    return opts
