"""The two compositions of the one run driver, driven the same way for tests: the parent
API and the daemon's fleet.

:class:`ParentDriver` runs a child through :func:`tether.spawn`; :class:`DaemonDriver`
through the daemon's ``Supervisor`` (a ``WireAgent`` over the same ``LocalRunHandle``) in
this process. Both return a :class:`Verdict`: how the run ended, its notes, the child's pid.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tests.support.waits import HANG_S, wait_until_async
from tether.daemon.fleet.params import SpawnParams
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.runtime.parent.outcome import Timeouts
from tether.runtime.parent.spawn import spawn
from tether.wire.session import ControlKind

FAST = Timeouts(
    start_s=5, ack_s=5, cancel_grace_s=0.5, kill_grace_s=0.5, exit_grace_s=0.5, tick_s=1.0
)
WAIT_S = HANG_S  # a run not over by then hangs: the test fails instead of waiting for ever


@dataclass
class Verdict:
    status: str
    error: str
    final_text: str
    pid: int | None
    notes: list[str] = field(default_factory=list)


# What a case does once the child runs: nothing, or wait for an event type and send.
Step = tuple[str, ControlKind] | None


@dataclass(frozen=True)
class Run:
    argv: list[str]
    timeouts: Timeouts = FAST
    step: Step = None
    deadline_s: float | None = None


class Driver(Protocol):
    name: str

    async def run(self, run: Run, root: Path) -> Verdict:
        """Run a child until its verdict."""
        ...


class ParentDriver:
    name = "parent"

    async def run(self, run: Run, root: Path) -> Verdict:
        handle = await spawn(
            "task",
            argv=run.argv,
            timeouts=run.timeouts,
            deadline_s=run.deadline_s,
            close_when_idle=False,
            runs_root=root / "runs",
            db=root / "tether.db",
        )
        if run.step is not None:
            event_type, kind = run.step
            async for event in handle.events():
                if type(event).__struct_config__.tag == event_type:
                    break
            handle.send_nowait(kind)
        result = await asyncio.wait_for(handle.wait(), WAIT_S)
        error = result.error or ""
        return Verdict(result.status, error, result.final_text, handle.pid, handle.notes)


class DaemonDriver:
    name = "daemon"

    async def run(self, run: Run, root: Path) -> Verdict:
        supervisor = Supervisor(
            db=root / "tether.db", runs_root=root / "runs", timeouts=run.timeouts
        )
        try:
            return await self._run(supervisor, run, root)
        finally:
            await supervisor.shutdown()

    async def _run(self, supervisor: Supervisor, run: Run, root: Path) -> Verdict:
        params = SpawnParams(
            name="a", task="task", argv=run.argv, cwd=str(root), deadline_s=run.deadline_s
        )
        try:
            agent, _ = await supervisor.spawn(params)
        except RpcFailure as exc:  # never ready: the daemon refuses the spawn with the reason
            status = "failed" if exc.code is ErrorCode.SPAWN_FAILED else f"rpc error {exc.code}"
            return Verdict(status, exc.message, "", None)
        if run.step is not None:
            event_type, kind = run.step
            await _until_logged(agent.run.events, event_type)
            assert agent.handle is not None
            agent.handle.send_nowait(kind)
        await asyncio.wait_for(agent.wait_ended(), WAIT_S)
        assert agent.ended
        text = agent.final_text or ""
        return Verdict(agent.state, agent.error or "", text, agent.pid, list(agent.notes))


async def _until_logged(events: Path, event_type: str) -> None:
    """Until the run's own log has an event of ``event_type`` (the log is the truth),
    re-read as the child appends to it."""
    needle = f'"type":"{event_type}"'.encode()

    def logged() -> bool:
        lines = events.read_bytes().split(b"\n")[:-1] if events.exists() else []
        return any(needle in line and _is_type(line, event_type) for line in lines)

    await wait_until_async(logged, f"{event_type} in {events}", files=[events])


def _is_type(line: bytes, event_type: str) -> bool:
    try:
        return bool(json.loads(line).get("type") == event_type)
    except ValueError:
        return False


DRIVERS: list[Driver] = [ParentDriver(), DaemonDriver()]
