"""The daemon's agents: spawn them, find them again after a restart, forward their inboxes.

Theory of operation. Every agent has a row in the registry (``daemon_agents``) and, while
this daemon runs, a :class:`~tether.daemon.fleet.wire_agent.WireAgent` in :attr:`Supervisor.agents`.

- :meth:`Supervisor.spawn` makes a run directory (control, events, inbox, stderr), writes
  the task as the first ``prompt`` when there is one, inserts the row, starts the child in
  a new session and waits for ``ready``. A child that cannot be started or ends before
  ``ready`` is ``spawn_failed``: its row is removed (the run directory stays as history).
- :meth:`Supervisor.reconcile` runs at start-up and on ``agent.reconcile``. For each row
  this daemon does not supervise yet: a live state whose pid is alive and started at the
  recorded start time is *recovered* (re-adopted: the mirror is restored from the row's
  snapshot and tailing resumes at its offset); a live state whose process is gone is
  *orphaned* (what it wrote is read, then it ends: its exit status, else ``failed``); an
  ended row is kept as history. Recovered and orphaned names accumulate over the
  daemon's life, so calling reconcile again changes nothing and reports the same.
- What a composition adds to every agent (a channel's forwarding, the checks of a spawn's
  extra parameters) comes from the :class:`FleetExtension` objects the composition root
  hands in (:mod:`tether.daemon.app`); nothing agent-specific lives here.

A daemon that stops (or is killed) leaves its children running; only ``stop``/``rm``
(or a child's own deadline) end them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Any

import msgspec

from tether.daemon.fleet.assembly import AgentParts, FleetExtension
from tether.daemon.fleet.followers import is_live_state, restore_mirror
from tether.daemon.fleet.launch import check_descriptors, launch
from tether.daemon.fleet.params import SpawnParams
from tether.daemon.fleet.queue import AgentQueue, kept_params
from tether.daemon.fleet.registry import (
    AgentExists,
    AgentNotFound,
    AgentRecord,
    AgentRegistry,
)
from tether.daemon.fleet.replies import ReconcileError, ReconcileReport, RmReply
from tether.daemon.fleet.wire_agent import DAEMON_TIMEOUTS, WireAgent
from tether.daemon.fleet.worktrees import (
    AGENT_OWNER,
    open_agent_worktree,
    resolve_spawn,
    resumable_run,
)
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import BadOptions, ControlRefused, SpawnError
from tether.procs import proc_start_time, process_matches
from tether.runtime.child.adapters.config import write_config
from tether.runtime.parent import forkserver
from tether.runtime.parent.command import ChildCommand, child_command
from tether.runtime.parent.hub import WatchHub, shared_hub
from tether.runtime.parent.launch import (
    PreparedRun,
    prepare_run,
)
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.process import ChildProcess
from tether.runtime.parent.rundir import RunDir
from tether.runtime.parent.worktrees import RUN_OWNER
from tether.store.index import LIVE_STATUSES, RunIndex
from tether.transports.tail import FileTail

log = logging.getLogger("tether.daemon.fleet")


def spawn_failed(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.SPAWN_FAILED, message)


def invalid(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.INVALID_PARAMS, message)


class Supervisor:
    """Every wire agent of this daemon; see the module docstring."""

    def __init__(
        self,
        *,
        db: Path | None = None,
        runs_root: Path | None = None,
        timeouts: Timeouts | None = None,
        extensions: tuple[FleetExtension, ...] = (),
        max_running: int | None = None,
        policy: str | None = None,
    ) -> None:
        self.db = db
        self.policy = policy  # the approval policy of a spawn that names none (--policy)
        self.runs_root = runs_root
        self.timeouts = timeouts or DAEMON_TIMEOUTS
        self.extensions = extensions
        self.agents: dict[str, WireAgent] = {}
        self.recovered: list[str] = []
        self.orphaned: list[str] = []
        self.errors: list[ReconcileError] = []
        self._registry: AgentRegistry | None = None
        self._hub: WatchHub | None = None
        self._spawning: dict[str, asyncio.Future[Any]] = {}  # name -> its spawn
        self.parts = AgentParts(
            db=db,
            timeouts=self.timeouts,
            extensions=extensions,
            registry=lambda: self.registry,
            hub=lambda: self.hub,
            released=self._released,
            leave_queue=self._leave_queue,
        )
        self.queue = AgentQueue(
            max_running,
            registry=lambda: self.registry,
            agents=self.agents,
            make_agent=self.parts.agent,
            start=self._start_queued,
        )

    @property
    def registry(self) -> AgentRegistry:
        if self._registry is None:
            self._registry = AgentRegistry.open(self.db)
        return self._registry

    @property
    def hub(self) -> WatchHub:
        """The agents' file watcher. On the daemon's loop it dispatches on that loop (no
        thread hand-off between a child's write and its agent's pump); else it is the
        process's shared hub."""
        if self._hub is None:
            try:
                self._hub = WatchHub(loop=asyncio.get_running_loop())
            except RuntimeError:
                self._hub = shared_hub()
        return self._hub

    async def start(self) -> None:
        """Open the registry and recover the agents a previous daemon left running."""
        if forkserver.enabled():  # the template imports while the daemon reconciles
            forkserver.shared_forkserver().warm()
        report = await self.reconcile()
        if report.recovered or report.orphaned or report.errors:
            log.info(
                "reconciled %d agents: %d recovered, %d orphaned, %d errors",
                report.scanned,
                len(report.recovered),
                len(report.orphaned),
                len(report.errors),
            )

    async def shutdown(self) -> None:
        """Stop supervising; the children keep running and a later daemon recovers them."""
        spawns = list(self._spawning.values())
        for spawn in spawns:  # a child at its gate then ends (its starter is going)
            spawn.cancel()
        await asyncio.gather(*spawns, return_exceptions=True)
        await asyncio.gather(*(agent.detach() for agent in self.agents.values()))
        if self._hub is not None and self._hub.loop is not None:
            self._hub.close()
            self._hub = None
        if self._registry is not None:
            self._registry.close()
            self._registry = None

    # -- the family's face (see tether.daemon.fleet.fleet) -----------------------------

    def get(self, name: str) -> WireAgent | None:
        return self.agents.get(name)

    def members(self) -> list[WireAgent]:
        return list(self.agents.values())

    def spawning(self, name: str) -> bool:
        return name in self._spawning

    def require(self, name: str) -> WireAgent:
        agent = self.agents.get(name)
        if agent is None:
            raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name!r}")
        return agent

    # -- spawn ------------------------------------------------------------------------

    async def spawn(self, params: SpawnParams) -> tuple[WireAgent, asyncio.Future[Any] | None]:
        """Start an agent and wait until it is ready; see the module docstring.

        The spawn runs as a task of its own, shielded from the caller: a client that goes
        away mid-spawn (its call cancelled) leaves an agent, or a refusal that frees the
        name, never a reserved row that no agent serves and a child stuck at its gate.
        """
        name = params.name
        if name in self.agents or name in self._spawning:
            raise RpcFailure(ErrorCode.AGENT_EXISTS, f"an agent named {name!r} already exists")
        task = self._spawning[name] = asyncio.ensure_future(self._spawn(params))
        task.add_done_callback(lambda _: self._spawned(name, task))
        return await asyncio.shield(task)

    def _spawned(self, name: str, task: asyncio.Future[Any]) -> None:
        self._spawning.pop(name, None)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that went away never reads it

    async def wait_spawned(self, name: str) -> WireAgent | None:
        """Until a spawn of ``name`` in progress has ended (whether or not its caller still
        waits); the agent of that name, None when there is none."""
        task = self._spawning.get(name)
        if task is not None:
            await asyncio.wait([task])
        return self.agents.get(name)

    async def _spawn(self, p: SpawnParams) -> tuple[WireAgent, asyncio.Future[Any] | None]:
        p, command, cwd = await self._checked(p)
        if not self.queue.request(p.name):  # --max-running: it waits its turn
            held = self.queue.hold(p, command.argv, cwd)
            return held, self.queue.answer(p.name) if p.wait else None
        try:
            return await self._start(p, command, cwd)
        except BaseException:
            self._released(p.name)
            raise

    async def _start(
        self,
        p: SpawnParams,
        command: ChildCommand,
        cwd: str,
        queued: AgentRecord | None = None,
    ) -> tuple[WireAgent, asyncio.Future[Any] | None]:
        """Prepare the run, take the row (``queued``: the one that waited), start the child
        behind its gate and wait until it is ready."""
        prepared = await self._prepare(p, command)
        run, first_seq = prepared.run, prepared.first_seq
        control = prepared.control  # opened before the child exists: it cannot swap it
        record = self._reserve(p, prepared, command, cwd, queued)
        try:  # its worktree, now that its name is taken
            p, worktree = await asyncio.to_thread(open_agent_worktree, p, self._let_go)
        except (BadOptions, SpawnError) as exc:
            control.close()
            self._forget_row(p.name)
            raise spawn_failed(str(exc)) from None
        cwd = p.cwd or cwd
        events = FileTail(run.events)
        events.open()  # before the child exists: it cannot swap the file under our reader
        try:
            popen, gate = await asyncio.to_thread(
                launch, command.argv, run, cwd, prepared.env, control
            )
        except (OSError, ValueError) as exc:
            control.close()
            events.close()
            self._forget_row(p.name)
            argv = shlex.join(command.argv)
            raise spawn_failed(f"cannot start the child ({argv}): {exc}") from None
        try:  # the child waits at its gate until its pid is in the row (issue 10 item 11)
            record = self.registry.update(
                p.name,
                pid=popen.pid,
                pid_start_time=proc_start_time(popen.pid),
                started_at=time.time(),
                cwd=cwd,
                worktree=worktree or record.worktree,
            )
        except BaseException:
            gate.close()
            raise
        gate.open()
        watch = self.parts.watch(prepared.mirror, record, close_when_idle=p.close_when_idle)
        handle = self.parts.handle(record, watch, events, ChildProcess(popen), control=control)
        agent = self.parts.agent(record, handle)
        answer = agent.expect_answer(first_seq) if p.wait and first_seq is not None else None
        self.agents[p.name] = agent
        await self.parts.record(agent, handle, p.options())
        agent.start()
        await handle.wait_started(self.timeouts.start_s + 1.0)
        if not handle.watch.was_ready:  # an agent that ended after `ready` was spawned
            await self._spawn_failed(agent)
        return agent, answer

    # -- admission (--max-running) ----------------------------------------------------

    def queue_position(self, name: str) -> int | None:
        """A queued agent's place, 1 first."""
        return self.queue.position(name)

    def _released(self, name: str) -> None:
        self.queue.released(name)

    async def _start_queued(self, agent: WireAgent, wait: bool) -> asyncio.Future[Any] | None:
        """Start a queued agent from the parameters its row kept (the queue's starter);
        with ``wait`` (a spawn waits for it), its task's answer."""
        p = msgspec.convert(agent.record.spawn or {}, SpawnParams)
        p = msgspec.structs.replace(p, wait=wait)
        p, command, cwd = await self._checked(p, extensions=False)
        _, answer = await self._start(p, command, cwd, queued=agent.record)
        return answer

    async def _leave_queue(self, agent: WireAgent) -> None:
        await self.queue.leave(agent)

    async def _checked(
        self, p: SpawnParams, *, extensions: bool = True
    ) -> tuple[SpawnParams, ChildCommand, str]:
        """The spawn's parameters (a resumed run's options filled in), the child's command
        and cwd, or the refusal: before anything exists."""
        for extension in self.extensions if extensions else ():
            extension.check_spawn(p)
        check_descriptors()
        try:
            p, command = await asyncio.to_thread(_commanded, p, RunIndex(self.db), self.policy)
        except BadOptions as exc:
            raise invalid(str(exc)) from None
        except SpawnError as exc:  # an agent CLI that is not installed
            raise spawn_failed(str(exc)) from None
        cwd = p.cwd or os.getcwd()
        if not await asyncio.to_thread(os.path.isdir, cwd):
            raise spawn_failed(f"cwd {cwd} is not a directory")
        return p, command, cwd

    async def _prepare(self, p: SpawnParams, command: ChildCommand) -> PreparedRun:
        if command.config is not None:  # base_url: the agent's configuration, in its home
            try:
                await asyncio.to_thread(write_config, command.config)
            except SpawnError as exc:
                raise spawn_failed(str(exc)) from None
        try:
            return await asyncio.to_thread(
                prepare_run,
                p.task,
                p.options(),
                command,
                runs_root=self.runs_root,
                fixed_env={"TETHER_AGENT_NAME": p.name},
            )
        except ControlRefused as exc:
            raise invalid(str(exc)) from None

    def _reserve(
        self,
        p: SpawnParams,
        prepared: PreparedRun,
        command: ChildCommand,
        cwd: str,
        queued: AgentRecord | None = None,
    ) -> AgentRecord:
        """The agent's row, inserted (or the queued one's, filled in): its name is taken
        from here on."""
        if queued is not None:  # a queued agent, or an ended one that resumes
            return self.registry.update(
                p.name,
                run_dir=str(prepared.run.path),
                state="starting",
                deadline_at=prepared.deadline,
                # a resume keeps what it continues: a run cut short (a SIGKILL) before its
                # child saved anything is not where the conversation is (see resume)
                spawn=kept_params(p) if p.resume is not None else None,
                task=p.task,
                argv=command.argv,
                cwd=cwd,
                provider=p.provider,
                model=p.model,
                pid=None,
                pid_start_time=None,
                exit_code=None,
                detail=None,
                last_seq=0,
                event_offset=0,
                turn=0,
                usage=None,
                snapshot=None,
            )
        record = AgentRecord(
            name=p.name,
            run_dir=str(prepared.run.path),
            state="starting",
            task=p.task,
            provider=p.provider,
            model=p.model,
            cwd=cwd,
            argv=command.argv,
            channel_id=p.channel_id,
            deadline_at=prepared.deadline,
            created_at=prepared.created_at,
        )
        try:
            self.registry.insert(record)
        except AgentExists:
            prepared.control.close()
            message = f"an agent named {p.name!r} already exists"
            raise RpcFailure(ErrorCode.AGENT_EXISTS, message) from None
        return record

    async def _spawn_failed(self, agent: WireAgent) -> None:
        if not agent.ended:
            await agent.kill("the child did not become ready")
        self.agents.pop(agent.name, None)
        self._forget_row(agent.name)
        reason = agent.error or f"the child ended ({agent.state}) before it was ready"
        raise spawn_failed(f"agent {agent.name!r} failed to start: {reason}")

    def _forget_row(self, name: str) -> None:
        with contextlib.suppress(AgentNotFound):
            self.registry.delete(name)

    def _let_go(self, owner: str) -> bool:
        """Whether a worktree's holder has let go of it: an agent this daemon no longer
        has, a run that has ended."""
        if owner.startswith(AGENT_OWNER):
            name = owner.removeprefix(AGENT_OWNER)
            return name not in self.agents and name not in self._spawning
        if owner.startswith(RUN_OWNER):
            record = RunIndex(self.db).get(owner.removeprefix(RUN_OWNER))
            return record is None or record.status not in LIVE_STATUSES
        return False

    # -- resume -----------------------------------------------------------------------

    async def resume(self, name: str, text: str) -> tuple[WireAgent, int | None]:
        """A new run of the ended agent ``name`` that continues its conversation with
        ``text`` (same name, same worktree); the agent and its first control's seq.
        Refused (``invalid_params``) when its agent is not resumable, with the reason."""
        agent = self.require(name)
        if not agent.ended or agent.queued or name in self._spawning:
            raise RpcFailure(ErrorCode.INVALID_STATUS, f"agent {name!r} is {agent.state}")
        source = agent.run_id
        earlier = (agent.record.spawn or {}).get("resume")
        if isinstance(earlier, str) and not await asyncio.to_thread(
            resumable_run, agent.record.argv, agent.record.run_dir
        ):  # a resume cut short before it saved anything: what it continued
            source = earlier
        p = SpawnParams(name=name, task=text, resume=source)
        task = self._spawning[name] = asyncio.ensure_future(self._resume(agent, p))
        task.add_done_callback(lambda _: self._spawned(name, task))
        return await asyncio.shield(task)

    async def _resume(self, old: WireAgent, p: SpawnParams) -> tuple[WireAgent, int | None]:
        p, command, cwd = await self._checked(p, extensions=False)
        if not self.queue.request(p.name):
            return self.queue.hold_again(p), None
        try:
            agent, _ = await self._start(p, command, cwd, queued=old.record)
        except BaseException:
            self._released(p.name)
            self._restore(old)
            raise
        return agent, 1 if p.task is not None else None

    def _restore(self, old: WireAgent) -> None:
        """A resume that failed: the agent's row and entry as they were before it."""
        fields = msgspec.structs.asdict(old.record)
        for key in ("name", "created_at"):
            fields.pop(key)
        try:
            self.registry.update(old.name, **fields)
        except AgentNotFound:
            self.registry.insert(old.record)
        self.agents[old.name] = old

    # -- reconcile --------------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """Adopt what a previous daemon left; see the module docstring."""
        rows = [row for row in self.registry.list() if row.pty is None]  # PTY: pty/fleet.py
        skipped: list[str] = []
        waits = []
        for row in rows:
            if row.name in self.agents or row.name in self._spawning:
                skipped.append(row.name)
                continue
            try:
                agent = self._adopt(row)
            except Exception as exc:  # one bad row must not stop the others
                log.exception("cannot recover agent %s", row.name)
                self._adopt_failed(row, exc)
                continue
            if agent is None:
                skipped.append(row.name)
            elif agent.orphaned:
                waits.append(agent.wait_ended(self.timeouts.exit_grace_s))
        await asyncio.gather(*waits)
        touched = {*self.recovered, *self.orphaned, *(e.name for e in self.errors)}
        return ReconcileReport(
            scanned=len(rows),
            recovered=list(self.recovered),
            orphaned=list(self.orphaned),
            skipped=[name for name in skipped if name not in touched],
            errors=list(self.errors),
        )

    def _adopt(self, row: AgentRecord) -> WireAgent | None:
        """Supervise ``row`` again; None for an ended one (kept as history)."""
        if row.state == "queued":  # it waits again, in spawn order (rows come oldest first)
            agent = self.agents[row.name] = self.parts.agent(row, None, queued=True)
            if self.queue.request(row.name):  # there is room: it starts now
                self.queue.begin(row.name)
            return agent
        run = RunDir(Path(row.run_dir).name, Path(row.run_dir))
        if not is_live_state(row.state):
            self.agents[row.name] = self.parts.agent(row, None)
            return None
        row, mirror = _restored(row, run)
        alive = process_matches(row.pid, row.pid_start_time)
        process = ChildProcess(row.pid) if alive and row.pid is not None else None
        events = FileTail(run.events, offset=row.event_offset)
        handle = self.parts.handle(row, self.parts.watch(mirror, row), events, process)
        agent = self.parts.agent(row, handle, adopted=alive, orphaned=not alive)
        if alive:
            self.queue.adopt(row.name)
            self.recovered.append(row.name)
        else:
            handle.fail_soon("failed", f"its process (pid {row.pid}) was gone at recovery")
            self.orphaned.append(row.name)
        self.agents[row.name] = agent
        agent.start()
        return agent

    def _adopt_failed(self, row: AgentRecord, exc: Exception) -> None:
        error = f"cannot recover: {type(exc).__name__}: {exc}"
        self.errors.append(ReconcileError(row.name, error))
        with contextlib.suppress(Exception):
            self.registry.update(row.name, state="failed", detail=error)
        with contextlib.suppress(Exception):
            self.agents[row.name] = self.parts.agent(self.registry.require(row.name), None)

    # -- remove -----------------------------------------------------------------------

    async def remove(self, name: str, *, force: bool) -> RmReply:
        agent = self.require(name)
        if agent.queued:  # never ran: it leaves the queue
            await self._leave_queue(agent)
            agent = self.require(name)
        if not agent.ended and agent.finished:  # its exit was read: the end is moments away
            await agent.wait_ended(self.timeouts.exit_grace_s + self.timeouts.kill_grace_s)
        if not agent.ended:
            if not force:
                raise RpcFailure(
                    ErrorCode.INVALID_STATUS,
                    f"agent {name!r} is {agent.state}; stop it first, or remove it anyway "
                    f"with `tether agent rm --force {name}` (force: true)",
                )
            await agent.kill("removed (rm --force)")
        self._forget_row(name)  # first: a row that cannot go (a full disk) keeps the agent
        self.agents.pop(name, None)
        return RmReply(
            name=name,
            removed=True,
            state=agent.state,
            run_dir=str(agent.run.path),
            registry_removed=True,
            harness=agent.reference.get("harness"),
            was_orphaned=agent.orphaned,
        )


def _commanded(
    p: SpawnParams, index: RunIndex, policy: str | None
) -> tuple[SpawnParams, ChildCommand]:
    """The spawn's parameters resolved (a resumed run's options, its worktree's branch,
    its agent's home, the daemon's ``policy`` when it names none) and its child's command;
    raises ``BadOptions``. Blocking."""
    p, resumed = resolve_spawn(p, index)
    if policy is not None and p.policy is None and _asks(p):  # after: a resumed run's wins
        p = msgspec.structs.replace(p, policy=policy)
    command = child_command(p.options(), None, resumed)
    if command.config is not None and command.config.home:  # kept for its resume
        p = msgspec.structs.replace(p, home=command.config.home)
    return p, command


def _restored(row: AgentRecord, run: RunDir) -> tuple[AgentRecord, RunMirror]:
    """The mirror at the row's snapshot; without a usable one, replay the log from 0."""
    if row.snapshot is not None:
        try:
            return row, restore_mirror(run.run_id, row.snapshot, row.last_seq, run.control)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("agent %s: snapshot unusable (%s); replaying its log", row.name, exc)
    row = msgspec.structs.replace(row, event_offset=0, last_seq=0, usage=None, turn=0)
    return row, restore_mirror(run.run_id, None, 0, run.control)


def _asks(p: SpawnParams) -> bool:
    """The run has an approval desk (tether's child, or an agent's adapter): a bare
    command (``argv`` with no agent) has none to take a policy."""
    return p.argv is None or p.agent not in (None, "builtin")
