"""One conformance suite for every channel transport: files and NATS JetStream.

Each test runs against both; the JetStream one against a real nats-server on 127.0.0.1.
Waits are bounded by ``asyncio.timeout`` and decided by what arrives, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from tests.channels import backend, nats_server, open_channel
from tests.support.waits import wait_until_async

from tether.transports.channel import Channel, Entry, FileChannel, Skipped, TransportError

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["backend", "nats_server"]  # fixtures


Body = Callable[[Channel], Awaitable[None]]


@pytest.fixture
def with_channel(backend: tuple[str, str]) -> Callable[[Body], None]:
    """Run an async test body against a freshly opened channel of this backend."""

    def run(body: Body) -> None:
        async def main() -> None:
            opened = await open_channel(*backend)
            try:
                await body(opened)
            finally:
                await opened.aclose()

        asyncio.run(main())

    return run


async def take(channel: Channel, name: str, count: int, *, after: int | None = None) -> list[Entry]:
    got: list[Entry] = []
    async with asyncio.timeout(20):
        async for item in channel.tail(name, after=after):
            assert isinstance(item, Entry)
            got.append(item)
            if len(got) == count:
                break
    return got


def test_appends_come_back_in_order_with_increasing_offsets(
    with_channel: Callable[[Body], None],
) -> None:
    async def body(channel: Channel) -> None:
        lines = [b'{"n":%d}' % i for i in range(100)]
        offsets = [await channel.append("run.a.events", line) for line in lines]
        assert offsets == sorted(set(offsets))
        got = await take(channel, "run.a.events", 100)
        assert [e.data for e in got] == lines
        assert [e.offset for e in got] == offsets

    with_channel(body)


def test_append_many_stores_a_batch_in_order_once_even_when_sent_again(
    with_channel: Callable[[Body], None],
) -> None:
    async def body(channel: Channel) -> None:
        batch = [(b'{"n":%d}' % i, f"b:{i}") for i in range(300)]
        offsets = await channel.append_many("run.m.events", batch[:200])
        assert offsets == sorted(set(offsets))
        assert len(offsets) == 200
        # a bridge that lost the acks sends from an earlier line again: stored once
        again = await channel.append_many("run.m.events", batch[100:])
        assert again[:100] == offsets[100:]
        got = await take(channel, "run.m.events", 300)
        assert [e.data for e in got] == [line for line, _ in batch]
        assert [e.offset for e in got] == offsets + again[100:]
        assert await channel.append_many("run.m.events", []) == []

    with_channel(body)


def test_append_many_refuses_a_bad_line_before_sending_any(
    with_channel: Callable[[Body], None],
) -> None:
    async def body(channel: Channel) -> None:
        with pytest.raises(TransportError):
            await channel.append_many("run.x.events", [(b"fine", None), (b"two\nlines", None)])
        marker = await channel.append("run.x.events", b"marker")
        got = await take(channel, "run.x.events", 1)
        assert [(e.offset, e.data) for e in got] == [(marker, b"marker")]

    with_channel(body)


def test_channels_are_separate(with_channel: Callable[[Body], None]) -> None:
    async def body(channel: Channel) -> None:
        await channel.append("run.a.control", b"a1")
        await channel.append("run.b.control", b"b1")
        await channel.append("run.a.control", b"a2")
        assert [e.data for e in await take(channel, "run.a.control", 2)] == [b"a1", b"a2"]
        assert [e.data for e in await take(channel, "run.b.control", 1)] == [b"b1"]

    with_channel(body)


def test_tail_after_an_offset_starts_just_past_it(with_channel: Callable[[Body], None]) -> None:
    async def body(channel: Channel) -> None:
        offsets = [await channel.append("c", b"line %d" % i) for i in range(10)]
        got = await take(channel, "c", 5, after=offsets[4])
        assert [e.data for e in got] == [b"line %d" % i for i in range(5, 10)]

    with_channel(body)


def test_a_waiting_tail_sees_lines_appended_later(with_channel: Callable[[Body], None]) -> None:
    async def body(channel: Channel) -> None:
        await channel.append("live", b"first")
        reader = asyncio.ensure_future(take(channel, "live", 3))
        seen = await take(channel, "live", 1)  # the channel exists and the first line is there
        assert seen[0].data == b"first"
        await channel.append("live", b"second")
        await channel.append("live", b"third")
        assert [e.data for e in await reader] == [b"first", b"second", b"third"]

    with_channel(body)


def test_a_retried_append_with_the_same_msg_id_is_stored_once(
    with_channel: Callable[[Body], None],
) -> None:
    async def body(channel: Channel) -> None:
        first = await channel.append("inbox.r1", b'{"type":"progress"}', msg_id="r1:0")
        again = await channel.append("inbox.r1", b'{"type":"progress"}', msg_id="r1:0")
        other = await channel.append("inbox.r1", b'{"type":"done"}', msg_id="r1:20")
        assert again == first
        assert other > first
        got = await take(channel, "inbox.r1", 2)
        assert [e.offset for e in got] == [first, other]

    with_channel(body)


@pytest.mark.parametrize("line", [b"x" * 70_000, b"two\nlines"])
def test_lines_out_of_bounds_are_refused_before_sending(
    with_channel: Callable[[Body], None], line: bytes
) -> None:
    async def body(channel: Channel) -> None:
        with pytest.raises(TransportError):
            await channel.append("bounded", line)
        offset = await channel.append("bounded", b"ok")
        got = await take(channel, "bounded", 1)
        assert got == [Entry(offset, b"ok")]

    with_channel(body)


@pytest.mark.parametrize("name", ["", "a..b", "a/b", "../x", "a b", "x" * 200])
def test_bad_channel_names_are_refused(with_channel: Callable[[Body], None], name: str) -> None:
    async def body(channel: Channel) -> None:
        with pytest.raises(TransportError):
            await channel.append(name, b"x")

    with_channel(body)


def test_commits_only_move_forward(with_channel: Callable[[Body], None]) -> None:
    async def body(channel: Channel) -> None:
        assert await channel.committed("c", "drain") is None
        offsets = [await channel.append("c", b"%d" % i) for i in range(3)]
        await channel.commit("c", "drain", offsets[1])
        await channel.commit("c", "drain", offsets[0])
        assert await channel.committed("c", "drain") == offsets[1]
        await channel.commit("c", "other", offsets[2])
        assert await channel.committed("c", "drain") == offsets[1]
        assert await channel.committed("c", "other") == offsets[2]

    with_channel(body)


READER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from tests.channels import open_channel

    def step():  # the test's go: one byte of stdin per step (EOF: no more holding back)
        sys.stdin.buffer.read(1)

    async def main():
        channel = await open_channel({kind!r}, {where!r})
        after = await channel.committed("work", "reader")
        with open({out!r}, "a") as out:
            async for entry in channel.tail("work", after=after):
                step()
                out.write(f"{{entry.offset}} {{entry.data.decode()}}\\n")
                out.flush()
                step()
                await channel.commit("work", "reader", entry.offset)

    asyncio.run(main())
    """
)


def test_commits_from_two_writers_only_move_forward(backend: tuple[str, str]) -> None:
    """Two channel objects (two processes' views) commit one consumer in turn: each sees
    the other's commits, and neither moves the offset back (a stale revision is re-read)."""

    async def main() -> None:
        first, second = await open_channel(*backend), await open_channel(*backend)
        try:
            offsets = [await first.append("two", b"%d" % i) for i in range(4)]
            await first.commit("two", "drain", offsets[0])
            await first.commit("two", "drain", offsets[1])  # first knows its last revision
            await second.commit("two", "drain", offsets[3])
            await first.commit("two", "drain", offsets[2])  # stale: must not move it back
            assert await first.committed("two", "drain") == offsets[3]
            assert await second.committed("two", "drain") == offsets[3]
            await second.commit("two", "drain", offsets[1])
            assert await first.committed("two", "drain") == offsets[3]
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(main())


def test_a_reader_killed_at_any_moment_resumes_from_its_commit(
    with_channel: Callable[[Body], None], backend: tuple[str, str], tmp_path: Path
) -> None:
    """SIGKILL a real reader process again and again. Every restart resumes just past its
    committed offset: what it recorded, with a repeat collapsed where a kill fell between
    recording an entry and committing it, is every entry once, in order.

    The reader takes one step per byte the test feeds it (record, then commit): fed an odd
    number, it is killed between recording an entry and committing it; fed an even one,
    right after a commit. No kill depends on how fast the reader runs."""
    total = 100  # 4 rounds at least: at most 30 entries a round
    out = tmp_path / "seen.txt"
    script = READER.format(root=str(ROOT), kind=backend[0], where=backend[1], out=str(out))
    rnd = random.Random(20260707)

    async def body(channel: Channel) -> None:
        offsets = [await channel.append("work", b"item-%d" % i) for i in range(total)]
        kills = 0
        while len(set(_offsets(out))) < total:
            reader = await asyncio.create_subprocess_exec(
                sys.executable, "-c", script, stdin=asyncio.subprocess.PIPE
            )
            assert reader.stdin is not None
            steps = rnd.randint(20, 60)
            reader.stdin.write(b"x" * steps)
            await _wait_for_progress(out, reader, total, (steps + 1) // 2)
            reader.send_signal(signal.SIGKILL)
            await reader.wait()
            kills += 1
        seen = [int(offset) for offset in _offsets(out)]
        collapsed = [o for i, o in enumerate(seen) if i == 0 or seen[i - 1] != o]
        assert collapsed == offsets
        assert len(seen) - len(collapsed) < kills
        assert kills >= 2

    with_channel(body)


async def _wait_for_progress(
    out: Path, reader: asyncio.subprocess.Process, total: int, more: int
) -> None:
    """Until the reader has recorded ``more`` entries, or all of them (its file, inotify)."""
    before = len(_offsets(out))

    def progressed() -> bool:
        assert reader.returncode is None, "the reader died on its own"
        return len(_offsets(out)) >= before + more or len(set(_offsets(out))) >= total

    await wait_until_async(progressed, "the reader's progress", files=[out], pids=[reader.pid])


def _offsets(out: Path) -> list[str]:
    if not out.exists():
        return []
    return [line.split(" ", 1)[0] for line in out.read_text().splitlines() if line]


def test_file_channel_reports_a_foreign_overlong_line_once(tmp_path: Path) -> None:
    async def body() -> None:
        channel = FileChannel(tmp_path / "ch", max_line_bytes=1024)
        try:
            path = tmp_path / "ch" / "inbox.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(fd, b"x" * 5000 + b"\n" + b'{"ok":1}\n')
            os.close(fd)
            items: list[Entry | Skipped] = []
            async with asyncio.timeout(10):
                async for item in channel.tail("inbox"):
                    items.append(item)
                    if len(items) == 2:
                        break
            assert items == [Skipped(0), Entry(5001, b'{"ok":1}')]
        finally:
            await channel.aclose()

    asyncio.run(body())


def test_file_channel_refuses_a_symlinked_channel_file(tmp_path: Path) -> None:
    channel = FileChannel(tmp_path / "ch")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "ch" / "evil.jsonl").symlink_to(victim)
    with pytest.raises(TransportError, match="not a private regular file"):
        channel.append_nowait("evil", b"overwrite")
    assert victim.read_text() == "precious\n"


def test_file_channel_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    channel = FileChannel(tmp_path / "ch")
    os.mkfifo(tmp_path / "ch" / "trap.jsonl", 0o600)
    with pytest.raises(TransportError, match="not a private regular file"):
        channel.append_nowait("trap", b"x")


def test_file_channel_refuses_a_root_it_does_not_own_privately(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(TransportError):
        FileChannel(shared)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(TransportError):
        FileChannel(tmp_path / "link")
