"""InboxDrain: many inboxes tailed live with one watcher, in both watcher modes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waits import settle, wait_until_async
from tether.inbox.live import InboxDrain
from tether.inbox.messages import Clarification, Progress
from tether.inbox.store import InboxStore, StoredMessage
from tether.inbox.writer import append_inbox, create_inbox
from tether.transports.watch import FileWatcher


@pytest.fixture(params=["inotify", "polling"])
def watcher(request: pytest.FixtureRequest) -> Iterator[FileWatcher]:
    w = FileWatcher(poll_interval=0.02, force_polling=request.param == "polling")
    yield w
    w.close()


async def take(iterator: object, n: int) -> list[StoredMessage]:
    got: list[StoredMessage] = []

    async def collect() -> None:
        async for message in iterator:  # type: ignore[attr-defined]
            got.append(message)
            if len(got) == n:
                return

    await settle(collect(), f"{n} messages")
    return got


def test_live_messages_from_several_inboxes(
    watcher: FileWatcher, db_path: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a" / "inbox.jsonl", tmp_path / "b" / "inbox.jsonl"
    a.parent.mkdir()
    create_inbox(a)
    append_inbox(a, {"type": "progress", "text": "before add"})

    async def scenario() -> tuple[list[StoredMessage], list[StoredMessage]]:
        callback: list[StoredMessage] = []
        async with InboxDrain(db_path, watcher=watcher, on_message=callback.append) as drain:
            stream = drain.messages()
            drain.add(a, "run-a")
            drain.add(b, "run-b")  # not created yet
            first = await take(stream, 1)
            append_inbox(a, {"type": "clarification", "q": "which?"})
            b.parent.mkdir()
            append_inbox(b, {"type": "progress", "text": "from b"})
            rest = await take(stream, 2)
            stats = drain.statistics()
            assert stats.runs == 2
            assert stats.new == 3
            assert stats.using_inotify is watcher.using_inotify
            return first + rest, callback

    got, callback = asyncio.run(scenario())
    assert got[0].message() == Progress(text="before add")
    assert sorted(m.run_id for m in got) == ["run-a", "run-a", "run-b"]
    assert Clarification(q="which?") in [m.message() for m in got]
    assert [m.msg_key for m in callback] == [m.msg_key for m in got]
    with InboxStore(db_path) as s:
        assert s.count() == 3


def test_split_writes_arrive_whole_and_in_order(
    watcher: FileWatcher, db_path: Path, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox.jsonl"
    lines = [b'{"type":"progress","text":"%d"}\n' % i for i in range(40)]

    async def scenario() -> list[StoredMessage]:
        async with InboxDrain(db_path, watcher=watcher) as drain:
            stream = drain.messages()
            drain.add(inbox, "r")
            fd = os.open(inbox, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                for line in lines:
                    for piece in (line[:5], line[5:17]):
                        passes = drain.statistics().passes
                        os.write(fd, piece)
                        # a drain pass after each part: it reads the line in parts
                        await wait_until_async(
                            lambda n=passes: drain.statistics().passes > n, "a drain pass"
                        )
                    os.write(fd, line[17:])
            finally:
                os.close(fd)
            return await take(stream, len(lines))

    got = asyncio.run(scenario())
    assert [m.message() for m in got] == [Progress(text=str(i)) for i in range(40)]
    assert all(m.rejected_reason is None for m in got)


def test_close_drains_the_last_lines_and_ends_iterators(db_path: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"

    async def scenario() -> list[StoredMessage]:
        drain = InboxDrain(db_path, watcher=FileWatcher(poll_interval=60, force_polling=True))
        await drain.start()
        stream = drain.messages()
        drain.add(inbox, "r")
        await drain.drain_now("r")  # the (empty) inbox is tailed from here on
        append_inbox(inbox, {"type": "done", "summary": "bye"})  # no poll before close
        await drain.aclose()
        await drain.aclose()  # idempotent
        return [m async for m in stream]

    got = asyncio.run(scenario())
    assert [m.type for m in got] == ["done"]


def test_remove_stops_tailing(watcher: FileWatcher, db_path: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"

    async def scenario() -> int:
        async with InboxDrain(db_path, watcher=watcher) as drain:
            drain.add(inbox, "r")
            append_inbox(inbox, {"type": "progress", "text": "1"})
            await drain.drain_now("r")
            drain.remove("r")
            drain.remove("r")
            append_inbox(inbox, {"type": "progress", "text": "2"})
            # a drain of every tailed inbox, now: "r" is not among them any more
            assert await drain.drain_now() == []
            return drain.statistics().new

    assert asyncio.run(scenario()) == 1
    with InboxStore(db_path) as s:
        assert s.count("r") == 1


def test_a_backlog_is_drained_in_bounded_slices(db_path: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    with inbox.open("wb") as f:
        for i in range(5000):
            f.write(b'{"type":"progress","text":"%05d"}\n' % i)

    async def scenario() -> tuple[list[StoredMessage], int]:
        async with InboxDrain(db_path, max_bytes=16 * 1024) as drain:
            stream = drain.messages(maxsize=100)  # a slow reader holds the drain back
            drain.add(inbox, "r")
            got = await take(stream, 5000)
            return got, drain.statistics().passes

    got, passes = asyncio.run(scenario())
    assert [m.offset for m in got] == sorted(m.offset for m in got)
    assert len({m.msg_key for m in got}) == 5000
    assert passes > 5  # 180 kB in 16 kB slices


def test_incidents_show_in_statistics(db_path: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    append_inbox(inbox, {"type": "progress", "text": "a long enough first line"})

    async def scenario() -> tuple[tuple[str, ...], dict[str, str]]:
        async with InboxDrain(db_path) as drain:
            drain.add(inbox, "r")
            await drain.drain_now()
            os.truncate(inbox, 3)
            await drain.drain_now()
            stats = drain.statistics()
            return stats.incidents, stats.statuses

    incidents, statuses = asyncio.run(scenario())
    assert len(incidents) == 1
    assert "truncated" in incidents[0]
    assert statuses == {"r": "truncated"}


def test_a_failing_drain_is_retried_and_reported(db_path: Path, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    inbox.mkdir()  # not a regular file: the safe open refuses it

    async def scenario() -> tuple[int, str | None, list[StoredMessage]]:
        async with InboxDrain(db_path, idle_interval=0.05) as drain:
            stream = drain.messages()
            drain.add(inbox, "r")
            # a failure, then its retry
            await wait_until_async(lambda: drain.statistics().errors >= 2, "a retried failure")
            stats = drain.statistics()
            inbox.rmdir()
            append_inbox(inbox, {"type": "progress", "text": "recovered"})
            got = await take(stream, 1)
            return stats.errors, stats.last_error, got

    errors, last_error, got = asyncio.run(scenario())
    assert errors >= 2
    assert last_error is not None
    assert "not a regular file" in last_error
    assert got[0].message() == Progress(text="recovered")
