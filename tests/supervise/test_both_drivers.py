"""The same misbehaving children through BOTH supervision drivers give the same verdicts.

The parent API (:func:`tether.spawn` / ``RunHandle``) and the daemon (its ``Supervisor``
and ``AgentRun``, in this process) are two I/O drivers around one core
(:mod:`tether.runtime.supervise`). Each case runs a real TEST DOUBLE child
(tests/parent/doubles/wire_child.py, tests/doubles/hostile_child.py) through each
driver and checks the status, the reason and that no process of the run is left.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import pytest

from tests.doubles import hostile
from tether import procs
from tether.daemon.methods import RpcFailure
from tether.daemon.protocol import ErrorCode
from tether.daemon.supervisor import SpawnParams, Supervisor
from tether.runtime.outcome import Timeouts
from tether.runtime.parent import spawn
from tether.wire.session import ControlKind

WIRE_CHILD = Path(__file__).parents[1] / "parent" / "doubles" / "wire_child.py"
FAST = Timeouts(
    start_s=5, ack_s=5, cancel_grace_s=0.5, kill_grace_s=0.5, exit_grace_s=0.5, tick_s=1.0
)


def double(mode: str, turn_ms: int = 150) -> list[str]:
    return [sys.executable, str(WIRE_CHILD), "--mode", mode, "--turn-ms", str(turn_ms)]


@dataclass
class Verdict:
    status: str
    error: str
    final_text: str
    pid: int | None


# What a case does once the child runs: nothing, or wait for an event type and send.
Step = tuple[str, ControlKind] | None


class Driver(Protocol):
    name: str

    async def run(self, argv: list[str], timeouts: Timeouts, step: Step, root: Path) -> Verdict:
        """Run ``argv`` as a child until its verdict."""
        ...


class ParentDriver:
    name = "parent"

    async def run(self, argv: list[str], timeouts: Timeouts, step: Step, root: Path) -> Verdict:
        handle = await spawn(
            "task",
            argv=argv,
            timeouts=timeouts,
            close_when_idle=False,
            runs_root=root / "runs",
            db=root / "tether.db",
        )
        if step is not None:
            event_type, kind = step
            async for event in handle.events():
                if type(event).__struct_config__.tag == event_type:
                    break
            handle.send_nowait(kind)
        result = await asyncio.wait_for(handle.wait(), 60)
        return Verdict(result.status, result.error or "", result.final_text, handle.pid)


class DaemonDriver:
    name = "daemon"

    async def run(self, argv: list[str], timeouts: Timeouts, step: Step, root: Path) -> Verdict:
        supervisor = Supervisor(db=root / "tether.db", runs_root=root / "runs", timeouts=timeouts)
        try:
            return await self._run(supervisor, argv, step, root)
        finally:
            await supervisor.shutdown()

    async def _run(
        self, supervisor: Supervisor, argv: list[str], step: Step, root: Path
    ) -> Verdict:
        params = SpawnParams(name="a", task="task", argv=argv, cwd=str(root))
        try:
            agent, _ = await supervisor.spawn(params)
        except RpcFailure as exc:  # never ready: the daemon refuses the spawn with the reason
            status = "failed" if exc.code is ErrorCode.SPAWN_FAILED else f"rpc error {exc.code}"
            return Verdict(status, exc.message, "", None)
        follower = agent.follow(0)
        if step is not None:
            event_type, kind = step
            await _until_event(follower, event_type)
            agent.send(kind)
        await asyncio.wait_for(agent.wait_ended(), 60)
        assert agent.status is not None
        return Verdict(agent.status, agent.error or "", agent.final_text or "", agent.pid)


async def _until_event(follower: object, event_type: str) -> None:
    import json

    while True:
        await follower.wait()  # type: ignore[attr-defined]
        for _, raw in follower.take(1000):  # type: ignore[attr-defined]
            if json.loads(raw)["type"] == event_type:
                return
        if follower.ended:  # type: ignore[attr-defined]
            raise AssertionError(f"the run ended before {event_type}")


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    status: str
    reason: str  # in the error (or the final text, for a done run)
    step: Step = None
    timeouts: Timeouts = FAST
    check: Callable[[Verdict], None] | None = None


def _in_error(text: str, verdict: Verdict) -> None:
    assert text in verdict.error, verdict


def _long_text(verdict: Verdict) -> None:
    assert verdict.final_text == "x" * 100_000 + " END"


CASES = [
    Case(
        "never-ready",
        double("no-ready"),
        "failed",
        "child did not send ready within 0.5 s",
        timeouts=replace(FAST, start_s=0.5),
    ),
    Case(
        "stops-acking",
        double("silent"),
        "failed",
        "child stopped answering: prompt (seq 1) was not acknowledged within 0.5 s",
        timeouts=replace(FAST, ack_s=0.5),
    ),
    Case(
        "ignores-cancel",
        double("ignore-cancel", 5000),
        "failed",
        "child did not exit within 0.5 s of cancel",
        step=("turn-started", ControlKind.CANCEL),
    ),
    Case(
        "dies-mid-turn",
        double("die-mid-turn"),
        "failed",
        "without an exit event",
        check=lambda verdict: _in_error("boom: simulated crash", verdict),
    ),
    Case(
        "exits-soon-after-ready",
        double("exit-code"),
        "failed",
        "child exited (code 3) without an exit event",
    ),
    Case(
        "long-result",
        double("long-result"),
        "done",
        "",
        step=("turn-complete", ControlKind.CLOSE),
        check=_long_text,
    ),
    Case(
        "exit-done-without-result",
        hostile("exit-no-result", arg="unused"),
        "failed",
        "child exited done without a result",
        step=("turn-complete", ControlKind.CLOSE),
    ),
]

DRIVERS: list[Driver] = [ParentDriver(), DaemonDriver()]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_same_verdict_through_both_drivers(case: Case, driver: Driver, tmp_path: Path) -> None:
    verdict = asyncio.run(driver.run(case.argv, case.timeouts, case.step, tmp_path))
    assert verdict.status == case.status, verdict
    assert case.reason in verdict.error, verdict
    if case.check is not None:
        case.check(verdict)
    if verdict.pid is not None:  # nothing of the run is left: the child, its grandchildren
        assert _group_gone(verdict.pid), f"process group {verdict.pid} still alive"


def _group_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 5.0  # killed processes take a moment to be reaped
    while procs.group_has_live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
