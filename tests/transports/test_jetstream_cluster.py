"""R3 on a real three-node NATS cluster: a killed node loses no line and doubles none.

A writer appends numbered lines with message ids (retrying what failed while the cluster
elects a new leader); a tail reads them live across the kill. The stream leader is the
node killed. Afterwards the stream holds each line once, in order, and so did the tail.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.nats_server import NatsCluster, open_r3, run_nats_cluster
from tests.support.waits import retry_async

from tether.transports.channel import Entry, TransportError
from tether.transports.jetstream import JetStreamChannel

LINES = 300


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    with run_nats_cluster(tmp_path / "cluster", size=3) as running:
        yield running


async def _append_with_retry(channel: JetStreamChannel, index: int) -> int:
    """The append, retried while the stream has no leader (the cluster elects one)."""
    return await retry_async(
        lambda: channel.append("run.x.events", b'{"n":%d}' % index, msg_id=f"w:{index}"),
        TransportError,
        "an append to the stream",
    )


def test_killing_the_stream_leader_loses_and_doubles_nothing(cluster: NatsCluster) -> None:
    async def main() -> None:
        prefix = "r" + os.urandom(4).hex()
        channel = await open_r3(cluster.urls, prefix)
        try:
            seen: list[Entry] = []

            async def follow() -> None:
                async for item in channel.tail("run.x.events"):
                    assert isinstance(item, Entry)
                    seen.append(item)
                    if len(seen) == LINES:
                        return

            reader = asyncio.ensure_future(follow())
            offsets = []
            for index in range(LINES):
                if index == LINES // 3:
                    info = await channel.js.stream_info(channel.stream)
                    assert info.cluster is not None
                    leader = info.cluster.leader
                    cluster.kill(cluster.names.index(str(leader)))
                offsets.append(await _append_with_retry(channel, index))
            async with asyncio.timeout(60):
                await reader
            expected = [b'{"n":%d}' % i for i in range(LINES)]
            assert [e.data for e in seen] == expected
            assert [e.offset for e in seen] == offsets
            again: list[Entry] = []
            async with asyncio.timeout(30):
                async for item in channel.tail("run.x.events"):
                    assert isinstance(item, Entry)
                    again.append(item)
                    if len(again) == LINES:
                        break
            assert [e.data for e in again] == expected
            info = await channel.js.stream_info(channel.stream)
            assert info.state.messages == LINES
        finally:
            await channel.aclose()

    asyncio.run(main())


def test_a_channel_opens_on_a_cluster_still_electing_its_leaders(tmp_path: Path) -> None:
    """Opened the moment the three nodes listen, before JetStream has a meta leader (its
    lookups get no answer, or 503, for a while): the channel asks again and opens, where
    it used to fail the host's start with a timeout."""
    from tether.transports.jetstream import open_jetstream

    async def main(urls: str) -> None:
        channel = await open_jetstream(urls, prefix="e" + os.urandom(4).hex(), replicas=3)
        try:
            assert await channel.append("run.x.events", b'{"n":1}') >= 1
        finally:
            await channel.aclose()

    with run_nats_cluster(tmp_path / "cluster", size=3) as fresh:
        asyncio.run(main(fresh.urls))
