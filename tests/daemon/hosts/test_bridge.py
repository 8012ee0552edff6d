"""The host bridge: a run's local files carried over a channel (files and JetStream)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from tests.channels import backend, nats_server, open_channel

from tether.daemon.hosts.bridge import BRIDGE_CONSUMER, Inbound, Outbound, last_seq
from tether.transports.channel import Channel, Entry, FileChannel, PartialAppend, TransportError

__all__ = ["backend", "nats_server"]  # fixtures


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


async def _entries(channel: Channel, name: str, count: int) -> list[Entry]:
    got: list[Entry] = []
    async with asyncio.timeout(20):
        async for item in channel.tail(name):
            assert isinstance(item, Entry)
            got.append(item)
            if len(got) == count:
                return got
    return got


def test_outbound_forwards_each_line_once_across_a_restart(
    backend: tuple[str, str], tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    _write(events, b"".join(b'{"seq":%d}\n' % i for i in range(5)) + b'{"seq":5')

    async def body() -> None:
        channel = await open_channel(*backend)
        try:
            first = Outbound(channel, "run.r1.events", events)
            await first.start()
            assert await first.pump() == 5
            assert first.uncommitted  # a pump forwards; the owner commits when it likes
            await first.commit()
            assert not first.uncommitted
            first.close()
            _write(events, b"}\n" + b'{"seq":6}\n')
            # A restarted bridge resumes just past its commit: the partial line, now
            # complete, and the next one.
            assert await channel.committed("run.r1.events", BRIDGE_CONSUMER) == len(
                b"".join(b'{"seq":%d}\n' % i for i in range(5))
            )
            again = Outbound(channel, "run.r1.events", events)
            await again.start()
            assert await again.pump() == 2
            again.close()
            got = await _entries(channel, "run.r1.events", 7)
            assert [e.data for e in got] == [b'{"seq":%d}' % i for i in range(7)]
        finally:
            await channel.aclose()

    asyncio.run(body())


def test_inbound_appends_each_control_once_even_when_redelivered(
    backend: tuple[str, str], tmp_path: Path
) -> None:
    control = tmp_path / "control.jsonl"
    _write(control, b'{"v":1,"seq":0,"type":"prompt","text":"hi"}\n')

    async def body() -> None:
        channel = await open_channel(*backend)
        try:
            for seq in (1, 2, 2, 3):  # a parent that retried seq 2 with a new msg id
                line = b'{"v":1,"seq":%d,"type":"steer","text":"s"}' % seq
                await channel.append("run.r3.control", line)
            inbound = Inbound(channel, "run.r3.control", control)
            task = asyncio.ensure_future(inbound.run())
            async with asyncio.timeout(20):
                await inbound.wait_handled(4)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert last_seq(control) == 3
            assert inbound.appended == 3
            assert inbound.duplicates == 1
            # A restarted bridge resumes after its commit and appends nothing again.
            restarted = Inbound(channel, "run.r3.control", control)
            await channel.append("run.r3.control", b'{"v":1,"seq":4,"type":"close"}')
            task = asyncio.ensure_future(restarted.run())
            async with asyncio.timeout(20):
                await restarted.wait_handled(1)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert restarted.duplicates == 0
            seqs = [line for line in control.read_bytes().splitlines() if line]
            assert len(seqs) == 5
        finally:
            await channel.aclose()

    asyncio.run(body())


class FlakyChannel(FileChannel):
    """A test double for a channel whose network drops: the appends named fail once."""

    def __init__(self, root: Path, fail_on: set[int]) -> None:
        super().__init__(root)
        self.fail_on = fail_on
        self.calls = 0

    async def append(self, name: str, line: bytes, *, msg_id: str | None = None) -> int:
        self.calls += 1
        if self.calls in self.fail_on:
            raise TransportError("connection lost (test double)")
        return await super().append(name, line, msg_id=msg_id)


def test_outbound_reads_a_failed_batch_again_from_the_failed_line(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    _write(events, b"".join(b'{"seq":%d}\n' % i for i in range(6)))

    async def body() -> None:
        channel = FlakyChannel(tmp_path / "ch", fail_on={3})
        try:
            bridge = Outbound(channel, "run.r.events", events)
            await bridge.start()
            with pytest.raises(PartialAppend) as failed:
                await bridge.pump()  # lines 0 and 1 went; line 2 failed
            assert len(failed.value.offsets) == 2
            assert await bridge.pump() == 4
            got = await _entries(channel, "run.r.events", 6)
            assert [e.data for e in got] == [b'{"seq":%d}' % i for i in range(6)]
        finally:
            await channel.aclose()

    asyncio.run(body())
