"""A hostile event stream through BOTH drivers (issue 10 items 4, 5, 6, 18), real processes.

- a 5 MB event line is reported once and skipped, and the run after it still counts;
- a child flooding events for ever is still ended at its deadline (timers run between
  bounded reads), and an unread flood does not pile up in the parent's memory, yet a
  reader who comes late, or reads slowly, still gets every event and inbox message;
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
from tests.support.waits import settle
from tether.runtime.parent.driver import LocalRunHandle
from tether.runtime.parent.replay import read_log
from tether.runtime.parent.spawn import spawn
from tether.runtime.parent.updates import MAX_UNREAD, InboxItem, RunEvent, Update
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


async def _flood(tmp_path: Path, mode: str, count: int) -> LocalRunHandle:
    return await spawn(
        "task",
        argv=hostile(mode, arg="x", count=count),
        timeouts=FAST,
        runs_root=tmp_path / "runs",
        db=tmp_path / "tether.db",
    )


def test_an_unread_flood_stays_bounded_and_loses_nothing(tmp_path: Path) -> None:
    """Nobody reads while the child floods: the parent holds at most MAX_UNREAD updates,
    and the reader who comes later still gets every event, in order, with the states the
    live run had (issue 28 item 4)."""

    async def go() -> tuple[str, int, list[Update]]:
        handle = await _flood(tmp_path, "flood", 3 * MAX_UNREAD)
        result = await handle.wait()  # nobody reads the updates meanwhile
        assert handle._updates is not None
        held = len(handle._updates._items)
        return result.status, held, [item async for item in handle.updates()]

    status, held, items = asyncio.run(go())
    assert status == "done"
    assert held <= MAX_UNREAD
    assert not [i for i in items if "dropped" in getattr(i, "reason", "")]
    events = [item for item in items if isinstance(item, RunEvent)]
    assert [e.event.seq for e in events] == list(range(1, len(events) + 1))
    assert len(events) > 3 * MAX_UNREAD
    run = next(iter((tmp_path / "runs").iterdir()))
    replayed = [
        u
        for u in read_log(run / "events.jsonl", events[0].run, controls=run / "control.jsonl")
        if isinstance(u, RunEvent)
    ]
    assert [(e.event.seq, e.state) for e in events] == [(r.event.seq, r.state) for r in replayed]


def test_a_reader_behind_a_log_the_child_replaced_goes_on(tmp_path: Path) -> None:
    """The child floods past MAX_UNREAD, then replaces its events.jsonl with an empty file
    (its own descriptor writes on): the reader that fell behind cannot be served from the
    log. It is told so once and the updates end with the run (before: the catch-up found
    nothing to read and asked the log again, at 100 % CPU, for ever)."""

    async def go() -> tuple[str, list[Update]]:
        handle = await _flood(tmp_path, "flood-then-swap", 2 * MAX_UNREAD)
        result = await handle.wait()  # nobody reads meanwhile: the reader falls behind
        items = await settle(_all(handle), "the updates of a run whose log was replaced")
        return result.status, items

    status, items = asyncio.run(go())
    assert status == "done"
    lost = [i for i in items if "no longer hold" in getattr(i, "reason", "")]
    assert len(lost) == 1, items[:3]


async def _all(handle: LocalRunHandle) -> list[Update]:
    return [item async for item in handle.updates()]


@pytest.mark.parametrize("reader", ["after-the-end", "alongside"])
def test_a_slow_reader_of_a_flooded_inbox_gets_every_message_in_order(
    tmp_path: Path, reader: str
) -> None:
    """30,000 inbox lines of 1 KiB (30 MiB, past MAX_UNREAD_BYTES): read after the run
    ended, or alongside it, every message arrives once, in file order."""
    count = 30_000

    async def go() -> list[InboxItem]:
        handle = await _flood(tmp_path, "inbox-flood", count)
        if reader == "after-the-end":
            await handle.wait()
        return [item async for item in handle.updates() if isinstance(item, InboxItem)]

    items = asyncio.run(go())
    texts = [str(item.message.get("text", "")).split(" ")[0] for item in items]
    assert texts == [str(n) for n in range(count)]
    offsets = [item.offset for item in items]
    assert offsets == sorted(set(offsets))


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
