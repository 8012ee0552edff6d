"""The PTY agents of one daemon (:class:`PtyFleet`, an
:class:`~tether.daemon.fleet.fleet.AgentFamily` beside the wire agents' supervisor): spawn
one (a run directory, its registry row, its holder started in a session of its own),
re-adopt the live ones a restarted daemon finds, remove one. Each agent is a
:class:`~tether.daemon.pty.agent.PtyAgent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether import jsondepth, procs
from tether.daemon.fleet.fno_shapes import harness
from tether.daemon.fleet.registry import AgentExists, AgentNotFound, AgentRecord, AgentRegistry
from tether.daemon.fleet.replies import ReconcileReport, RmReply
from tether.daemon.pty.frames import (
    SOCKET_NAME,
)
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.procs import proc_start_time
from tether.runtime.parent.rundir import RunDir, create_run_dir
from tether.wire.env import without_wire_env

if TYPE_CHECKING:
    from tether.daemon.fleet.params import SpawnRequest
from tether.daemon.pty.agent import DEFAULT_TERM, PtyAgent

__all__ = ["PtyFleet"]

log = logging.getLogger("tether.daemon.pty")


class PtyFleet:
    """The PTY agents of one daemon, beside the supervisor's wire agents (one registry)."""

    def __init__(
        self, registry: Callable[[], AgentRegistry], runs_root: Path | None = None
    ) -> None:
        self.registry = registry  # the daemon's one registry (opened by the wire agents)
        self.runs_root = runs_root
        self.agents: dict[str, PtyAgent] = {}
        self._spawning: set[str] = set()
        self.recovered: list[str] = []
        self.orphaned: list[str] = []

    def get(self, name: str) -> PtyAgent | None:
        return self.agents.get(name)

    def members(self) -> list[PtyAgent]:
        return list(self.agents.values())

    def spawning(self, name: str) -> bool:
        return name in self._spawning

    async def spawn_pty(self, args: SpawnRequest) -> PtyAgent:
        """``agent.spawn {pty: true, argv, cols?, rows?, cwd?, env?}``."""
        argv = list(args.argv or ())
        if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS, "a PTY agent needs argv: a list of non-empty strings"
            )
        unused = [k for k in ("task", "provider", "model", "script") if getattr(args, k)]
        if unused or args.wait or args.agent or args.agent_args:
            raise RpcFailure(
                ErrorCode.INVALID_PARAMS,
                f"a PTY agent runs argv only; {', '.join(unused) or 'this'} does not apply",
            )
        self._spawning.add(args.name)
        try:
            return await self.spawn(
                args.name,
                argv,
                cwd=args.cwd or os.getcwd(),
                cols=args.cols,
                rows=args.rows,
                env=args.env,
                channel_id=args.channel_id,
            )
        finally:
            self._spawning.discard(args.name)

    async def spawn(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: str,
        cols: int,
        rows: int,
        env: dict[str, str] | None = None,
        channel_id: str | None = None,
    ) -> PtyAgent:
        if not await asyncio.to_thread(os.path.isdir, cwd):
            raise RpcFailure(ErrorCode.SPAWN_FAILED, f"cwd {cwd} is not a directory")
        run = await asyncio.to_thread(create_run_dir, self.runs_root)
        now = time.time()
        record = AgentRecord(
            name=name,
            run_dir=str(run.path),
            state="starting",
            cwd=cwd,
            argv=argv,
            created_at=now,
            channel_id=channel_id,
            pty={"cols": cols, "rows": rows, "socket": str(run.path / SOCKET_NAME)},
        )
        try:
            self.registry().insert(record)
        except AgentExists:
            raise RpcFailure(ErrorCode.AGENT_EXISTS, f"an agent named {name!r} exists") from None
        try:
            return await self._start(record, run, _program_env(name, env), cols, rows)
        except BaseException:
            with contextlib.suppress(AgentNotFound):
                self.registry().delete(name)
            self.agents.pop(name, None)
            raise

    async def _start(
        self, record: AgentRecord, run: RunDir, env: dict[str, str], cols: int, rows: int
    ) -> PtyAgent:
        argv, cwd = record.argv or [], record.cwd or "/"
        popen = await asyncio.to_thread(
            functools.partial(_launch_holder, run, argv, cwd, env, cols=cols, rows=rows)
        )
        assert popen.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(popen.stdout.readline), 10.0)
        except TimeoutError:
            line = b""
        popen.stdout.close()
        reply = _parse_hello(line)
        if "pid" not in reply:
            await procs.terminate_group(popen, 0.5)
            reason = reply.get("error") or f"the PTY holder did not start (see {run.stderr})"
            raise RpcFailure(ErrorCode.SPAWN_FAILED, f"cannot start {shlex.join(argv)}: {reason}")
        pty_info = {
            **(record.pty or {}),
            "holder_pid": popen.pid,
            "holder_start_time": proc_start_time(popen.pid),
        }
        pid = int(reply["pid"])
        record = self.registry().update(
            record.name,
            pid=pid,
            pid_start_time=proc_start_time(pid),
            started_at=time.time(),
            pty=pty_info,
        )
        agent = self.agents[record.name] = PtyAgent(self.registry, record, popen)
        try:
            await agent.connect()
        except (ConnectionError, TimeoutError) as exc:
            await agent._kill()
            raise RpcFailure(ErrorCode.SPAWN_FAILED, f"the PTY holder: {exc}") from None
        agent.state = "running"
        agent._save(state="running")
        return agent

    async def start(self) -> None:
        """Re-attach at daemon start (after the supervisor opened the registry)."""
        report = await self.reconcile()
        if report.recovered or report.orphaned:
            recovered, orphaned = len(report.recovered), len(report.orphaned)
            log.info("PTY agents: %d re-attached, %d ended", recovered, orphaned)

    async def reconcile(self) -> ReconcileReport:
        """Re-attach to the holders a previous daemon left (idempotent)."""
        rows = [row for row in self.registry().list() if row.pty is not None]
        for row in rows:
            if row.name not in self.agents:
                await self._adopt(row)
        return ReconcileReport(
            scanned=len(rows), recovered=list(self.recovered), orphaned=list(self.orphaned)
        )

    async def _adopt(self, row: AgentRecord) -> None:
        agent = self.agents[row.name] = PtyAgent(self.registry, row)
        if row.state not in ("starting", "running"):
            agent.mark_ended()
            return
        if agent._holder_alive():
            try:
                await agent.connect()
            except (ConnectionError, TimeoutError) as exc:
                log.warning("agent %s: cannot re-attach to its holder: %s", row.name, exc)
            else:
                agent.adopted = True
                agent.state = "running"
                self.recovered.append(row.name)
                return
        self.orphaned.append(row.name)
        await agent._after_link_lost()

    async def remove(self, name: str, *, force: bool) -> RmReply:
        agent = self.agents[name]
        if not agent.ended:
            if not force:
                raise RpcFailure(
                    ErrorCode.INVALID_STATUS,
                    f"agent {name!r} is {agent.state}; stop it first, or remove it anyway "
                    f"with `tether agent rm --force {name}` (force: true)",
                )
            await agent.hang_up()
        self.agents.pop(name, None)
        with contextlib.suppress(AgentNotFound):
            self.registry().delete(name)
        return RmReply(
            name=name,
            removed=True,
            state=agent.state,
            run_dir=str(agent.run.path),
            registry_removed=True,
            harness=harness(agent.record.argv),
        )

    async def shutdown(self) -> None:
        for agent in self.agents.values():
            await agent.detach()


def _program_env(name: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = without_wire_env(os.environ)
    env.setdefault("TERM", DEFAULT_TERM)
    env.update(extra or {})
    env["TETHER_AGENT_NAME"] = name
    return env


def _launch_holder(
    run: RunDir, argv: list[str], cwd: str, env: dict[str, str], *, cols: int, rows: int
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "tether.daemon.pty.holder", "--dir", str(run.path),
        "--cols", str(cols), "--rows", str(rows), "--cwd", cwd, "--", *argv,
    ]  # fmt: skip
    fd = os.open(run.stderr, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:
        raise RpcFailure(ErrorCode.SPAWN_FAILED, f"cannot start the PTY holder: {exc}") from None
    finally:
        os.close(fd)


def _parse_hello(line: bytes) -> dict[str, Any]:
    try:
        reply = jsondepth.loads(line)
    except ValueError:
        return {}
    return reply if isinstance(reply, dict) else {}
