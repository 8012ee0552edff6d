"""The same misbehaving children through BOTH supervision drivers give the same verdicts.

The parent API (:func:`tether.spawn` / ``RunHandle``) and the daemon (its ``Supervisor``
and ``AgentRun``, in this process) are two I/O drivers around one core
(:mod:`tether.runtime.parent.supervise`). Each case runs a real TEST DOUBLE child
(tests/parent/doubles/wire_child.py, tests/doubles/hostile_child.py) through each
driver and checks the status, the reason and that no process of the run is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.doubles import hostile
from tests.parent.helpers import ENDLESS, double
from tests.supervise.drivers import DRIVERS, FAST, Driver, Run, Step, Verdict
from tests.support.waits import wait_group_gone
from tether.runtime.parent.outcome import Timeouts
from tether.wire.session import ControlKind


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
        double("ignore-cancel", ENDLESS),
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


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_same_verdict_through_both_drivers(case: Case, driver: Driver, tmp_path: Path) -> None:
    verdict = asyncio.run(driver.run(Run(case.argv, case.timeouts, case.step), tmp_path))
    assert verdict.status == case.status, verdict
    assert case.reason in verdict.error, verdict
    if case.check is not None:
        case.check(verdict)
    if verdict.pid is not None:  # nothing of the run is left: the child, its grandchildren
        wait_group_gone(verdict.pid)
