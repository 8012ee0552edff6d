"""The daemon's agents: spawn them, find them again after a restart, forward their inboxes.

Theory of operation. Every agent has a row in the registry (``daemon_agents``) and, while
this daemon runs, an :class:`~tether.daemon.fleet.wire_agent.AgentRun` in :attr:`Supervisor.agents`.

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
- Inbox messages of an agent spawned with a ``channel_id`` are pushed to that channel as
  MCP channel notifications, in order, by one forwarding task per agent.

A daemon that stops (or is killed) leaves its children running; only ``stop``/``rm``
(or a child's own deadline) end them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import shlex
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from tether.daemon.fleet.followers import is_live_state, restore_mirror
from tether.daemon.fleet.registry import (
    AgentExists,
    AgentNotFound,
    AgentRecord,
    AgentRegistry,
)
from tether.daemon.fleet.wire_agent import DAEMON_TIMEOUTS, AgentRun
from tether.daemon.rpc.lifecycle import descriptors_free
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import ControlRefused
from tether.numbers import PositiveSeconds
from tether.procs import Gate, find_program, nul_problem, proc_start_time, process_matches
from tether.runtime.parent import forkserver
from tether.runtime.parent.forkserver import ForkedChild
from tether.runtime.parent.hub import WatchHub, shared_hub
from tether.runtime.parent.launch import default_argv, fork_child, make_inbox, prepare_run
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.rundir import RunDir, append_line
from tether.runtime.parent.sidecars import InboxTail
from tether.transports.wake import ControlWriter
from tether.wire.session import State

if TYPE_CHECKING:
    from tether.daemon.channels.hub import ChannelHub

log = logging.getLogger("tether.daemon.fleet.verbs")

MAX_OUTBOX: Final = 10_000  # inbox messages waiting for one channel
# An agent holds about this many descriptors here: control file, wake-up pipe, event file,
# pidfd, its inbox's database (file, WAL, shared memory), and one in flight while spawning.
DESCRIPTORS_PER_AGENT: Final = 8
DESCRIPTORS_RESERVED: Final = 64  # kept for clients' connections and the daemon's own files
_CONTENT_KEYS: Final = ("text", "q", "note", "summary", "reason")


class SpawnParams(msgspec.Struct, frozen=True):
    name: str
    task: str | None = None
    agent: str | None = None  # see `tether agents`; fno-agents' provider: "claude" works too
    agent_args: list[str] | None = None
    provider: str | None = None
    model: str | None = None
    cwd: str | None = None
    argv: list[str] | None = None
    deadline_s: PositiveSeconds | None = None
    channel_id: str | None = None
    script: str | None = None
    env: dict[str, str] | None = None
    wait: bool = False

    def __post_init__(self) -> None:
        # Everything that reaches exec (the command, the environment, cwd): a NUL byte
        # there is invalid_params, refused before the name is reserved.
        for name in _EXEC_FIELDS:
            problem = nul_problem(name, getattr(self, name))
            if problem is not None:
                raise ValueError(problem)


_EXEC_FIELDS: Final = (
    "name",
    "agent",
    "agent_args",
    "provider",
    "model",
    "cwd",
    "argv",
    "script",
    "env",
)


def spawn_failed(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.SPAWN_FAILED, message)


def invalid(message: str) -> RpcFailure:
    return RpcFailure(ErrorCode.INVALID_PARAMS, message)


class Supervisor:
    """Every agent of this daemon; see the module docstring."""

    def __init__(
        self,
        *,
        channels: ChannelHub | None = None,
        db: Path | None = None,
        runs_root: Path | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self.channels = channels
        self.db = db
        self.runs_root = runs_root
        self.timeouts = timeouts or DAEMON_TIMEOUTS
        self.agents: dict[str, AgentRun] = {}
        self.recovered: list[str] = []
        self.orphaned: list[str] = []
        self.errors: list[dict[str, str]] = []
        self._registry: AgentRegistry | None = None
        self._hub: WatchHub | None = None
        self._spawning: dict[str, asyncio.Future[Any]] = {}  # name -> its spawn
        self._forwarders: dict[str, _Forwarder] = {}

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
        if report["recovered"] or report["orphaned"] or report["errors"]:
            log.info(
                "reconciled %d agents: %d recovered, %d orphaned, %d errors",
                report["scanned"],
                len(report["recovered"]),
                len(report["orphaned"]),
                len(report["errors"]),
            )

    async def shutdown(self) -> None:
        """Stop supervising; the children keep running and a later daemon recovers them."""
        spawns = list(self._spawning.values())
        for spawn in spawns:  # a child at its gate then ends (its starter is going)
            spawn.cancel()
        await asyncio.gather(*spawns, return_exceptions=True)
        for forwarder in self._forwarders.values():
            forwarder.close()
        await asyncio.gather(*(agent.detach() for agent in self.agents.values()))
        if self._hub is not None and self._hub.loop is not None:
            self._hub.close()
            self._hub = None
        if self._registry is not None:
            self._registry.close()
            self._registry = None

    def require(self, name: str) -> AgentRun:
        agent = self.agents.get(name)
        if agent is None:
            raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name!r}")
        return agent

    # -- spawn ------------------------------------------------------------------------

    async def spawn(self, params: SpawnParams) -> tuple[AgentRun, asyncio.Future[Any] | None]:
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

    async def wait_spawned(self, name: str) -> AgentRun | None:
        """Until a spawn of ``name`` in progress has ended (whether or not its caller still
        waits); the agent of that name, None when there is none."""
        task = self._spawning.get(name)
        if task is not None:
            await asyncio.wait([task])
        return self.agents.get(name)

    async def _spawn(self, p: SpawnParams) -> tuple[AgentRun, asyncio.Future[Any] | None]:
        self._check_channel(p.channel_id)
        _check_descriptors()
        command = self._command(p)
        cwd = p.cwd or os.getcwd()
        if not await asyncio.to_thread(os.path.isdir, cwd):
            raise spawn_failed(f"cwd {cwd} is not a directory")
        try:
            prepared = await asyncio.to_thread(
                prepare_run,
                p.task,
                runs_root=self.runs_root,
                argv=command,
                provider=p.provider,
                model=p.model,
                env=p.env,
                fixed_env={"TETHER_AGENT_NAME": p.name},
                deadline_s=p.deadline_s,
            )
        except ControlRefused as exc:
            raise invalid(str(exc)) from None
        run, mirror, first_seq = prepared.run, prepared.mirror, prepared.first_seq
        control = prepared.control  # opened before the child exists: it cannot swap it
        inbox = make_inbox(run, self.db)
        record = AgentRecord(
            name=p.name,
            run_dir=str(run.path),
            state="starting",
            task=p.task,
            provider=p.provider,
            model=p.model,
            cwd=cwd,
            argv=command,
            channel_id=p.channel_id,
            deadline_at=prepared.deadline,
            created_at=prepared.created_at,
        )
        try:
            self.registry.insert(record)
        except AgentExists:
            control.close()
            message = f"an agent named {p.name!r} already exists"
            raise RpcFailure(ErrorCode.AGENT_EXISTS, message) from None
        try:
            popen, gate = await asyncio.to_thread(_launch, command, run, cwd, prepared.env, control)
        except (OSError, ValueError) as exc:
            control.close()
            self._forget_row(p.name)
            raise spawn_failed(f"cannot start the child ({shlex.join(command)}): {exc}") from None
        try:  # the child waits at its gate until its pid is in the row (issue 10 item 11)
            record = self.registry.update(
                p.name,
                pid=popen.pid,
                pid_start_time=proc_start_time(popen.pid),
                started_at=time.time(),
            )
        except BaseException:
            gate.close()
            raise
        gate.open()
        agent = self._make_run(record, mirror, inbox=inbox, popen=popen, control=control)
        answer = agent.expect_answer(first_seq) if p.wait and first_seq is not None else None
        self.agents[p.name] = agent
        agent.start()
        await self._index_insert(agent)
        await agent.wait_started(self.timeouts.start_s + 1.0)
        if not agent.watch.was_ready:  # an agent that ended after `ready` was spawned
            await self._spawn_failed(agent)
        return agent, answer

    def _check_channel(self, channel_id: str | None) -> None:
        if channel_id is None:
            return
        channels = self.channels
        if channels is None or channels.get(channel_id) is None:
            raise RpcFailure(ErrorCode.CHANNEL_UNKNOWN, f"no channel with id {channel_id!r}")

    def _command(self, p: SpawnParams) -> list[str]:
        from tether.runtime.child.adapters.registry import agent_child_args, resolve_agent

        try:
            agent = resolve_agent(p.agent, p.provider)
        except ValueError as exc:
            raise invalid(str(exc)) from None
        if agent != "builtin":
            return self._agent_command(p, agent, agent_child_args)
        if p.agent_args:
            raise invalid("agent_args go with an external agent (agent: NAME)")
        if p.argv is not None:
            if not p.argv or not all(isinstance(a, str) and a for a in p.argv):
                raise invalid("argv must be a non-empty list of non-empty strings")
            if p.script is not None:
                raise invalid("script goes with the built-in child, not with argv")
            return list(p.argv)
        from tether.agent.registry import ProviderSetupError, check_provider

        try:
            check_provider(p.provider or "scripted")
        except ProviderSetupError as exc:
            raise spawn_failed(str(exc)) from None
        if p.script is not None:
            _check_script(p.script)
        command = default_argv(p.provider, p.model)
        return [*command, "--script", p.script] if p.script is not None else command

    def _agent_command(self, p: SpawnParams, agent: str, child_args: Any) -> list[str]:
        """``tether child --agent NAME ...``; ``argv`` is then the agent's own command."""
        if p.script is not None:
            raise invalid("script goes with the built-in child; point the CLI at a model server")
        for name, values in (("argv", p.argv), ("agent_args", p.agent_args)):
            if values is not None and not all(isinstance(a, str) and a for a in values):
                raise invalid(f"{name} must be a list of non-empty strings")
        command: list[str] = child_args(agent, p.agent_args or [], p.argv or [])
        return [*default_argv(None, p.model), *command]  # the adapter passes the model on

    async def _spawn_failed(self, agent: AgentRun) -> None:
        if not agent.ended:
            await agent.kill("the child did not become ready")
        self.agents.pop(agent.name, None)
        self._forget_row(agent.name)
        reason = agent.error or f"the child ended ({agent.state}) before it was ready"
        raise spawn_failed(f"agent {agent.name!r} failed to start: {reason}")

    def _forget_row(self, name: str) -> None:
        with contextlib.suppress(AgentNotFound):
            self.registry.delete(name)

    def _make_run(
        self,
        record: AgentRecord,
        mirror: RunMirror,
        *,
        inbox: Any,
        popen: subprocess.Popen[bytes] | ForkedChild | None = None,
        adopted: bool = False,
        watch: bool = True,
        control: ControlWriter | None = None,
    ) -> AgentRun:
        return AgentRun(
            record,
            control=control,
            registry=self.registry,
            hub=self.hub,
            timeouts=self.timeouts,
            mirror=mirror,
            inbox=inbox,
            popen=popen,
            adopted=adopted,
            watch=watch,
            on_inbox=self._on_inbox,
            on_end=self._on_end,
        )

    # -- reconcile --------------------------------------------------------------------

    async def reconcile(self) -> dict[str, Any]:
        """Adopt what a previous daemon left; see the module docstring."""
        rows = [row for row in self.registry.list() if row.pty is None]  # PTY: pty_agent.py
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
        touched = {*self.recovered, *self.orphaned, *(e["name"] for e in self.errors)}
        return {
            "scanned": len(rows),
            "recovered": list(self.recovered),
            "orphaned": list(self.orphaned),
            "skipped": [name for name in skipped if name not in touched],
            "errors": list(self.errors),
        }

    def _adopt(self, row: AgentRecord) -> AgentRun | None:
        """Supervise ``row`` again; None for an ended one (kept as history)."""
        run = RunDir(Path(row.run_dir).name, Path(row.run_dir))
        if not is_live_state(row.state):
            agent = self._make_run(row, RunMirror(run.run_id), inbox=None, watch=False)
            agent.mark_ended()
            self.agents[row.name] = agent
            return None
        row, mirror = _restored(row, run)
        alive = process_matches(row.pid, row.pid_start_time)
        inbox = InboxTail(run.inbox, run.run_id, self.db) if run.inbox.exists() else None
        agent = self._make_run(row, mirror, inbox=inbox, adopted=alive, watch=alive)
        if alive:
            self.recovered.append(row.name)
        else:
            agent.orphaned = True
            agent.fail_soon("failed", f"its process (pid {row.pid}) was gone at recovery")
            self.orphaned.append(row.name)
        self.agents[row.name] = agent
        agent.start()
        return agent

    def _adopt_failed(self, row: AgentRecord, exc: Exception) -> None:
        error = f"cannot recover: {type(exc).__name__}: {exc}"
        self.errors.append({"name": row.name, "error": error})
        with contextlib.suppress(Exception):
            self.registry.update(row.name, state="failed", detail=error)
        with contextlib.suppress(Exception):
            record = self.registry.require(row.name)
            agent = self._make_run(record, RunMirror(Path(row.run_dir).name), inbox=None)
            agent.mark_ended()
            self.agents[row.name] = agent

    # -- remove -----------------------------------------------------------------------

    async def remove(self, name: str, *, force: bool) -> dict[str, Any]:
        agent = self.require(name)
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
        forwarder = self._forwarders.pop(name, None)
        if forwarder is not None:
            forwarder.close()
        return {"name": name, "removed": True, "state": agent.state, "run_dir": str(agent.run.path)}

    # -- inbox -> channel -------------------------------------------------------------

    def _on_inbox(self, agent: AgentRun, messages: list[dict[str, Any]]) -> None:
        channel_id = agent.record.channel_id
        channels = self.channels
        if channel_id is None or channels is None:
            return
        channel = channels.get(channel_id)
        if channel is not None and channel.to_agent and channel.name == agent.name:
            return  # its own channel pushes to it: its inbox would loop back into it
        forwarder = self._forwarders.get(agent.name)
        if forwarder is None:
            forwarder = self._forwarders[agent.name] = _Forwarder(channels, agent, channel_id)
        for message in messages:
            forwarder.put(message)

    # -- the run index ----------------------------------------------------------------

    async def _index_insert(self, agent: AgentRun) -> None:
        from tether.store.index import RunIndex, RunRecord

        record = agent.record
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
        )
        try:
            await asyncio.to_thread(RunIndex(self.db).insert, row)
        except Exception as exc:  # noqa: BLE001 (the index only makes runs findable)
            agent.notes.append(f"run index not updated: {exc}")

    async def _on_end(self, agent: AgentRun) -> None:
        from tether.store.index import RunIndex

        result = agent.mirror.result
        fields: dict[str, Any] = {
            "status": agent.state,
            "ended_at": agent.ended_at,
            "usage": agent.usage,
            "error": agent.error,
        }
        if result is not None:
            fields["stop_reason"] = result.stop_reason
        try:
            await asyncio.to_thread(RunIndex(self.db).update, agent.run_id, **fields)
        except Exception as exc:  # noqa: BLE001
            agent.notes.append(f"run index not updated: {exc}")


class _Forwarder:
    """Pushes one agent's inbox messages to its channel, in order, one at a time."""

    def __init__(self, channels: ChannelHub, agent: AgentRun, channel_id: str) -> None:
        self._channels = channels
        self._agent = agent
        self._channel_id = channel_id
        self._queue: deque[dict[str, Any]] = deque()
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"tether-forward-{agent.name}")

    def put(self, message: dict[str, Any]) -> None:
        if len(self._queue) >= MAX_OUTBOX:
            self._agent.channel_stats["failed"] += 1
            self._agent.channel_stats["last_error"] = "too many messages waiting; dropped"
            return
        self._queue.append(message)
        self._ready.set()

    def close(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        stats = self._agent.channel_stats
        while True:
            await self._ready.wait()
            while self._queue:
                envelope = channel_envelope(self._agent, self._queue.popleft())
                reason = await self._push(envelope)
                if reason is None:
                    stats["pushed"] += 1
                else:
                    stats["failed"] += 1
                    stats["last_error"] = reason
            self._ready.clear()

    async def _push(self, envelope: dict[str, Any]) -> str | None:
        try:
            result = await self._channels.push(self._channel_id, envelope)
        except RpcFailure as exc:
            return exc.message
        return None if result.delivered else (result.reason or "not delivered")


def channel_envelope(agent: AgentRun, message: dict[str, Any]) -> dict[str, Any]:
    """The MCP channel notification for one inbox message of ``agent``."""
    from tether.daemon.channels.hub import make_channel_envelope

    kind = message.get("type")
    content = next(
        (message[k] for k in _CONTENT_KEYS if isinstance(message.get(k), str)),
        None,
    )
    if content is None:
        content = json.dumps(message, ensure_ascii=False)
    meta = {
        "run_id": agent.run_id,
        "agent": agent.name,
        "type": kind if isinstance(kind, str) else "message",
        "source": "tether_inbox",
    }
    return make_channel_envelope(content, meta)


def _restored(row: AgentRecord, run: RunDir) -> tuple[AgentRecord, RunMirror]:
    """The mirror at the row's snapshot; without a usable one, replay the log from 0."""
    if row.snapshot is not None:
        try:
            return row, restore_mirror(run.run_id, row.snapshot, row.last_seq, run.control)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("agent %s: snapshot unusable (%s); replaying its log", row.name, exc)
    row = msgspec.structs.replace(row, event_offset=0, last_seq=0, usage=None, turn=0)
    return row, restore_mirror(run.run_id, None, 0, run.control)


def _check_descriptors() -> None:
    """Refuse a spawn that would leave the daemon too few descriptors to serve its clients
    (it would otherwise fail halfway, or stop accepting connections: ``EMFILE``)."""
    free, limit = descriptors_free()
    if free < DESCRIPTORS_PER_AGENT + DESCRIPTORS_RESERVED:
        raise spawn_failed(
            f"the daemon is near its descriptor limit ({limit}; about {free} left, and each "
            f"agent needs about {DESCRIPTORS_PER_AGENT} while {DESCRIPTORS_RESERVED} are kept "
            "for connections): stop or remove agents, or start the daemon with a higher "
            "limit (ulimit -n; it raises its soft limit to the hard one itself)"
        )


def _check_script(path: str) -> None:
    from tether.agent.scripted import ScriptError, load_script

    try:
        load_script(path)
    except ScriptError as exc:
        raise spawn_failed(f"script {path}: {exc}") from None


def _launch(
    command: list[str], run: RunDir, cwd: str, env: dict[str, str], control: ControlWriter
) -> tuple[subprocess.Popen[bytes] | ForkedChild, Gate]:
    """Start the child in its own session, waiting at a :class:`~tether.procs.Gate`.

    stdin /dev/null, stdout+stderr to ``stderr.log``. The caller opens the gate once the
    pid is recorded: a daemon killed in between leaves no child running unrecorded. A
    built-in child is forked from the fork server (:func:`~tether.runtime.parent.launch.fork_child`,
    which waits at the same gate), others are exec'd.
    (Not :func:`tether.runtime.parent.launch.start_child`: the daemon watches every child with a
    pidfd, including those a previous daemon started, so it owns no asyncio child watcher.)
    The child inherits ``control``'s wake-up pipe (``TETHER_WAKE_FD``).
    """
    fd = os.open(run.stderr, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    gate = Gate()
    env = {**env, **control.child_env()}
    child: subprocess.Popen[bytes] | ForkedChild | None
    try:
        child = fork_child(
            command,
            cwd=cwd,
            env=env,
            output=fd,
            pass_fds=control.pass_fds(),
            gate_fd=gate.read_fd,
        )
        child = child or _exec(command, cwd, env, output=fd, gate=gate, pass_fds=control.pass_fds())
    except OSError as exc:
        gate.close()
        append_line(run.stderr, f"tether: cannot start {shlex.join(command)}: {exc}".encode())
        raise
    finally:
        os.close(fd)
        control.started()
    gate.started()
    return child, gate


def _exec(
    command: list[str],
    cwd: str,
    env: dict[str, str],
    *,
    output: int,
    gate: Gate,
    pass_fds: tuple[int, ...],
) -> subprocess.Popen[bytes]:
    if find_program(command[0], cwd, env) is None:  # the gate's sh would say it less clearly
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
    return subprocess.Popen(
        Gate.argv(command),
        stdin=gate.read_fd,
        stdout=output,
        stderr=output,
        cwd=cwd,
        env=env,
        close_fds=True,
        pass_fds=pass_fds,
        start_new_session=True,
    )
