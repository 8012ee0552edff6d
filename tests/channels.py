"""Channel backends for tests: files, and NATS JetStream on a real nats-server."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats_server import NatsServer, run_nats_server
from tests.support.waits import HANG_S, retry_async
from tether.transports.channel import Channel, Entry, FileChannel, TransportError

BACKENDS = ["file", "jetstream"]


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with run_nats_server(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(kind, where): a directory for files, a server URL and a fresh prefix for NATS."""
    if request.param == "file":
        return "file", str(tmp_path / "channels")
    server: NatsServer = request.getfixturevalue("nats_server")
    return "jetstream", f"{server.url} t{os.urandom(4).hex()}"


async def open_channel(kind: str, where: str) -> Channel:
    if kind == "file":
        return FileChannel(where)
    from tether.transports.jetstream import open_jetstream

    url, prefix = where.split()
    return await open_jetstream(url, prefix=prefix)


async def take_entries(channel: Channel, name: str, count: int) -> list[Entry]:
    """The first ``count`` entries of a channel, each waited for as it arrives."""
    got: list[Entry] = []
    tail = channel.tail(name)
    try:
        async with asyncio.timeout(HANG_S):
            while len(got) < count:
                item = await anext(tail)
                assert isinstance(item, Entry)
                got.append(item)
    finally:
        await tail.aclose()  # type: ignore[attr-defined]
    return got


async def read_through_marker(channel: Channel, name: str) -> list[Entry]:
    """A channel from its start up to a marker line appended now: every entry before it,
    a doubled line included (a channel keeps append order), decided by the marker's
    arrival, not by how long nothing else came."""
    token = os.urandom(8).hex()
    marker = b'{"marker":"%s"}' % token.encode()
    # retried while a cluster elects a leader; its id keeps a retried marker single
    await retry_async(
        lambda: channel.append(name, marker, msg_id=f"marker:{token}"), TransportError, "a marker"
    )
    got: list[Entry] = []
    tail = channel.tail(name)
    try:
        async with asyncio.timeout(HANG_S):
            async for item in tail:
                assert isinstance(item, Entry)
                if item.data == marker:
                    return got
                got.append(item)
    finally:
        await tail.aclose()  # type: ignore[attr-defined]
    raise AssertionError(f"the channel {name} ended before its marker")
