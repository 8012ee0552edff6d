"""A hostile event stream through BOTH drivers (issue 10 items 4, 5, 6, 18), real processes.

- a 5 MB event line is reported once and skipped, and the run after it still counts;
- a child flooding events for ever is still ended at its deadline (timers run between
  bounded reads), and an unread flood does not pile up in the parent's memory;
- ``exit done`` without a ``result`` is an honest failure (see test_both_drivers.py);
- the deadline given to the child is never before the time asked for.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.doubles import hostile
from tests.supervise.drivers import DRIVERS, FAST, Driver, Run
from tether.runtime.parent.spawn import spawn
from tether.runtime.parent.updates import MAX_UNREAD
from tether.wire.session import ControlKind

CLOSE_AFTER_TURN = ("turn-complete", ControlKind.CLOSE)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_huge_event_line_is_skipped_once_and_the_run_still_counts(
    driver: Driver, tmp_path: Path
) -> None:
    run = Run(hostile("huge-line", arg="x", size=5_000_000), step=CLOSE_AFTER_TURN)
    verdict = asyncio.run(driver.run(run, tmp_path))
    assert (verdict.status, verdict.error) == ("done", ""), verdict
    assert verdict.final_text.startswith("answer: task"), verdict
    too_large = [n for n in verdict.notes if "too large" in n]
    assert len(too_large) == 1, verdict.notes


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_flooding_child_is_ended_at_its_deadline(driver: Driver, tmp_path: Path) -> None:
    run = Run(hostile("flood", arg="x", count=0), deadline_s=3)
    verdict = asyncio.run(driver.run(run, tmp_path))  # (drivers give up on a hang)
    assert verdict.status == "timed-out", verdict
    assert "child did not exit by its deadline" in verdict.error


def test_an_unread_flood_keeps_the_parent_bounded(tmp_path: Path) -> None:
    async def go() -> tuple[str, list[object]]:
        handle = await spawn(
            "task",
            argv=hostile("flood", arg="x", count=3 * MAX_UNREAD),
            timeouts=FAST,
            runs_root=tmp_path / "runs",
            db=tmp_path / "tether.db",
        )
        result = await handle.wait()  # nobody reads the updates meanwhile
        items = [item async for item in handle.updates()]
        return result.status, items

    status, items = asyncio.run(go())
    assert status == "done"
    assert len(items) <= MAX_UNREAD + 1
    notice = items[0]
    assert "updates dropped: the reader fell behind" in getattr(notice, "reason", ""), notice


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_the_deadline_is_never_before_the_time_asked_for(driver: Driver, tmp_path: Path) -> None:
    given = tmp_path / "deadline.txt"
    run = Run(hostile("report-deadline", arg=given), step=CLOSE_AFTER_TURN, deadline_s=2)
    asked_at = time.time()
    verdict = asyncio.run(driver.run(run, tmp_path))
    assert verdict.status == "done", verdict
    deadline = float(given.read_text())
    assert deadline >= asked_at + 2  # int(now + S) floors: up to a second early
    assert deadline == int(deadline)  # whole seconds on the wire, as every child reads them
