"""One JetStream consumer over many channels (``tail_matching``), on a real nats-server."""

from __future__ import annotations

import asyncio
import os

import pytest
from tests.channels import nats_server
from tests.nats_server import NatsServer
from tests.support.waits import HANG_S, loop_pass

from tether.transports.channel import Entry, TransportError
from tether.transports.jetstream import JetStreamChannel, open_jetstream

__all__ = ["nats_server"]  # fixture


async def _take(
    channel: JetStreamChannel, pattern: str, count: int, after: int | None = None
) -> list[tuple[str, Entry]]:
    got: list[tuple[str, Entry]] = []
    async with asyncio.timeout(HANG_S):
        async for item in channel.tail_matching(pattern, after=after):
            got.append(item)
            if len(got) == count:
                break
    return got


def test_one_tail_follows_the_matching_channels_in_stream_order(nats_server: NatsServer) -> None:
    async def body() -> None:
        channel = await open_jetstream(nats_server.url, prefix=f"m{os.urandom(4).hex()}")
        try:
            wrote: list[tuple[str, int, bytes]] = []
            last = 0
            for i in range(30):
                name = f"run.r{i % 3}.events"
                line = b'{"n":%d}' % i
                wrote.append((name, await channel.append(name, line), line))
                last = await channel.append(f"run.r{i % 3}.control", b"not an event")
            got = await _take(channel, "run.*.events", 30)
            assert [(name, entry.offset, entry.data) for name, entry in got] == wrote
            # resuming the whole set after the last offset handled
            resumed = await _take(channel, "run.*.events", 10, after=got[19][1].offset)
            assert [entry.data for _, entry in resumed] == [line for *_, line in wrote[20:]]
            # a live one, appended once the tail has started (it reads from `after`: the
            # line is its whether the subscription was up by then or not)
            waiting = asyncio.ensure_future(_take(channel, "run.>", 1, after=last))
            await loop_pass()
            offset = await channel.append("run.r9.inbox", b"late")
            assert [(name, entry) for name, entry in await waiting] == [
                ("run.r9.inbox", Entry(offset, b"late"))
            ]
        finally:
            await channel.aclose()

    asyncio.run(body())


@pytest.mark.parametrize("pattern", ["run.>.events", "run.a b", "", "run..x", "a." * 16 + "b"])
def test_bad_patterns_are_refused(nats_server: NatsServer, pattern: str) -> None:
    async def body() -> None:
        channel = await open_jetstream(nats_server.url, prefix=f"m{os.urandom(4).hex()}")
        try:
            with pytest.raises(TransportError):
                await _take(channel, pattern, 1)
        finally:
            await channel.aclose()

    asyncio.run(body())


def test_a_reader_far_behind_the_stream_misses_nothing(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server pushes a backlog faster than a reader takes it; nats-py then drops
    messages ("slow consumer") and counts them as delivered. With a small queue, a tail
    from the start of a long channel (one channel, and many through one pattern) must
    still give every line once, in order."""
    from tether.transports import jetstream

    monkeypatch.setattr(jetstream, "TAIL_PENDING_MSGS", 200)
    lines = [b'{"n":%d}' % i for i in range(2000)]

    async def body() -> None:
        channel = await open_jetstream(nats_server.url, prefix=f"s{os.urandom(4).hex()}")
        try:
            for start in range(0, len(lines), 500):
                batch = [(line, None) for line in lines[start : start + 500]]
                await channel.append_many("run.r1.events", batch)
            got: list[bytes] = []
            async with asyncio.timeout(HANG_S):
                async for item in channel.tail("run.r1.events"):
                    assert isinstance(item, Entry)
                    got.append(item.data)
                    await loop_pass()  # a reader with work of its own between lines
                    if len(got) == len(lines):
                        break
            assert got == lines
            matched = await _take(channel, "run.*.events", len(lines))
            assert [entry.data for _, entry in matched] == lines
        finally:
            await channel.aclose()

    asyncio.run(body())


def test_a_stream_without_atomic_batches_is_upgraded_or_gets_lines_one_by_one(
    nats_server: NatsServer,
) -> None:
    """A stream made by an older tether (no ``allow_atomic``): ``open_jetstream`` turns
    atomic batches on; a channel that cannot (here: one never set up) learns from the
    server's refusal and sends its bursts line by line, in order, stored once."""
    import nats
    from nats.js.api import StreamConfig

    async def body() -> None:
        prefix = f"u{os.urandom(4).hex()}"
        client = await nats.connect(nats_server.url)
        try:
            stream = f"TETHER_{prefix.upper()}"
            await client.jetstream().add_stream(
                StreamConfig(name=stream, subjects=[f"{prefix}.ch.>"], duplicate_window=120)
            )
            plain = JetStreamChannel(client, prefix=prefix, max_line_bytes=1 << 20)
            lines = [(b'{"n":%d}' % i, f"r:{i}") for i in range(10)]
            offsets = await plain.append_many("run.r.events", lines)
            assert not plain.atomic
            assert await plain.append_many("run.r.events", lines) == offsets  # stored once
            assert offsets == sorted(offsets)
            upgraded = await open_jetstream(nats_server.url, prefix=prefix)
            try:
                info = await client.jetstream().stream_info(stream)
                assert info.config.allow_atomic
                assert upgraded.atomic
                more = [(b'{"n":%d}' % i, f"r:{i}") for i in range(10, 20)]
                assert await upgraded.append_many("run.r.events", more) == list(
                    range(offsets[-1] + 1, offsets[-1] + 11)
                )
            finally:
                await upgraded.aclose()
        finally:
            await client.close()

    asyncio.run(body())
