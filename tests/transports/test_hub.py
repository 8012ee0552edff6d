"""The watch hub: one watcher, many subscribers; on a thread, or on an event loop (the
daemon's), where callbacks run on the loop's own thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from tests.support.waits import HANG_S, loop_pass

from tether.runtime.parent.hub import WatchHub
from tether.transports.watch import FileWatcher

BOUND_S = HANG_S  # a hang detector, not a measured figure


@pytest.mark.parametrize("polling", [False, True], ids=["inotify", "polling"])
def test_a_hub_on_a_loop_calls_back_on_that_loop(tmp_path: Path, polling: bool) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        hub = WatchHub(FileWatcher(poll_interval=0.03, force_polling=polling), loop=loop)
        seen: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        events, other = tmp_path / "events.jsonl", tmp_path / "control.jsonl"
        events.write_bytes(b"")

        def broken(_: Path) -> None:
            raise RuntimeError("a subscriber's bug")

        def record(path: Path) -> None:
            seen.put_nowait((path.name, threading.get_ident()))

        hub.subscribe(events, broken)  # must not stop the others' wake-ups
        token = hub.subscribe(events, record)
        # the first report follows the watch itself (a change before it is not lost)
        assert await asyncio.wait_for(seen.get(), BOUND_S) == ("events.jsonl", loop_thread)
        other.write_bytes(b"x\n")  # a file in the same directory nobody subscribed to
        with events.open("ab") as file:
            file.write(b"{}\n")
        assert await asyncio.wait_for(seen.get(), BOUND_S) == ("events.jsonl", loop_thread)
        hub.unsubscribe(events, token)
        with events.open("ab") as file:  # after close no callback runs, even if the
            file.write(b"{}\n")  # loop still has the change to read
        hub.close()
        assert not hub.running
        for _ in range(3):  # the loop polls its readers in each pass: a stale one fires
            await loop_pass()  # (the change was queued by the kernel at the write)
        assert seen.empty()

    loop_thread = threading.get_ident()  # asyncio.run runs the loop on this thread
    asyncio.run(main())


def test_a_hub_without_a_loop_calls_back_on_its_thread(tmp_path: Path) -> None:
    hub = WatchHub(FileWatcher())
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    got: list[int] = []
    done = threading.Event()

    def record(_: Path) -> None:
        got.append(threading.get_ident())
        done.set()

    hub.subscribe(path, record)
    try:
        assert done.wait(BOUND_S)
        assert got[0] != threading.get_ident()
    finally:
        hub.close()
