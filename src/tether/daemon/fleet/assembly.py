"""How a wire agent is put together from its row: its watch, its run's one driver (with
its inbox), the :class:`~tether.daemon.fleet.wire_agent.WireAgent` over it and what rides
on it (the extensions' observers, its place in the admission, its run index row). The
supervisor spawns, re-adopts and queues agents; this builds them, the same way each time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tether.daemon.fleet.registry import AgentRecord, AgentRegistry
from tether.daemon.fleet.wire_agent import WireAgent
from tether.runtime.parent.driver import LocalRunHandle
from tether.runtime.parent.hub import WatchHub
from tether.runtime.parent.launch import make_inbox, monotonic_at
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.options import SpawnOptions
from tether.runtime.parent.outcome import RunResult, Timeouts
from tether.runtime.parent.process import ChildProcess
from tether.runtime.parent.rundir import RunDir
from tether.runtime.parent.sidecars import InboxTail, Recorder
from tether.runtime.parent.supervise import RunWatch
from tether.store.index import RunIndex, RunRecord
from tether.transports.tail import FileTail
from tether.transports.wake import ControlWriter
from tether.wire.session import State

if TYPE_CHECKING:
    from tether.daemon.fleet.params import SpawnParams

__all__ = ["AgentParts", "FleetExtension"]


class FleetExtension:
    """What a composition adds to the fleet's wire agents (every method optional): a check
    of a spawn's parameters before anything exists, and observers of each agent's run."""

    def check_spawn(self, params: SpawnParams) -> None:
        """Raise :class:`~tether.daemon.rpc.methods.RpcFailure` to refuse the spawn."""

    def observers(self, agent: WireAgent) -> list[Observer]:
        """Observers of ``agent``'s run (its driver tells them what happens)."""
        return []


class AgentParts:
    """Builds wire agents for one supervisor; see the module docstring."""

    def __init__(
        self,
        *,
        db: Path | None,
        timeouts: Timeouts,
        extensions: tuple[FleetExtension, ...],
        registry: Callable[[], AgentRegistry],
        hub: Callable[[], WatchHub],
        released: Callable[[str], None],
        leave_queue: Callable[[WireAgent], Awaitable[None]],
    ) -> None:
        self.db = db
        self.timeouts = timeouts
        self.extensions = extensions
        self._registry = registry
        self._hub = hub
        self._released = released
        self._leave_queue = leave_queue

    def watch(
        self, mirror: RunMirror, record: AgentRecord, *, close_when_idle: bool | None = None
    ) -> RunWatch:
        deadline = record.deadline_at
        return RunWatch(
            mirror,
            self.timeouts,
            now=time.monotonic(),
            deadline=None if deadline is None else monotonic_at(deadline),
            close_when_idle=bool(close_when_idle),  # long-lived unless asked
        )

    def handle(
        self,
        record: AgentRecord,
        watch: RunWatch,
        events: FileTail,
        process: ChildProcess | None,
        *,
        control: ControlWriter | None = None,
    ) -> LocalRunHandle:
        run = RunDir(Path(record.run_dir).name, Path(record.run_dir))
        if control is not None:  # a new run: its inbox is created now
            inbox = make_inbox(run, self.db)
        else:  # a re-adopted run: its inbox, if it has one
            inbox = InboxTail(run.inbox, run.run_id, self.db) if run.inbox.exists() else None
        return LocalRunHandle(
            run=run,
            watch=watch,
            events=events,
            process=process,
            hub=self._hub(),
            control=control,
            inbox=inbox,
            created_at=record.created_at,
            task=record.task,
            keep_updates=False,
        )

    def agent(
        self,
        record: AgentRecord,
        handle: LocalRunHandle | None,
        *,
        adopted: bool = False,
        orphaned: bool = False,
        queued: bool = False,
    ) -> WireAgent:
        agent = WireAgent(
            record,
            handle,
            registry=self._registry(),
            adopted=adopted,
            orphaned=orphaned,
            queued=self._leave_queue if queued else None,
        )
        if handle is not None:
            for extension in self.extensions:
                handle.observe(*extension.observers(agent))
            handle.observe(_Release(lambda: self._released(record.name)))
        return agent

    async def record(self, agent: WireAgent, handle: LocalRunHandle, options: SpawnOptions) -> None:
        """The run's row in the run index (with its options: a later resume or fork reads
        them), kept current by its :class:`Recorder`."""
        record = agent.record
        recorder = Recorder(RunIndex(self.db), agent.run_id)
        row = RunRecord(
            id=agent.run_id,
            task=record.task or "",
            status=State.RUNNING.value,
            created_at=record.created_at,
            run_dir=record.run_dir,
            provider=record.provider,
            model=record.model,
            cwd=record.cwd,
            argv=record.argv,
            pid=agent.pid,
            deadline=record.deadline_at,
            options=msgspec.to_builtins(options.replace(cwd=record.cwd)),
        )
        note = await recorder.start(row)
        if note:
            handle.note(note)
        handle.observe(recorder)


class _Release(Observer):
    """Frees an agent's place in the admission once its run has ended."""

    def __init__(self, released: Callable[[], None]) -> None:
        self._released = released

    async def on_end(self, result: RunResult) -> str | None:
        self._released()
        return None
