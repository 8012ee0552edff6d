"""Order across a JetStream leader change in the middle of a burst (R3, three nodes).

A writer forwards numbered lines the way a host's bridge does: bursts of ``append_many``
with message ids, resending from the first line not stored when a burst fails. Meanwhile
the stream's leader is asked to step down (``$JS.API.STREAM.LEADER.STEPDOWN.<stream>``)
again and again, each time while a burst is in flight. Afterwards the channel holds every
line once, in the order written: a line stored after one that failed would show here.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.channels import read_through_marker
from tests.nats_server import NatsCluster, open_r3, run_nats_cluster

from tether.transports.channel import PartialAppend, TransportError
from tether.transports.jetstream import JetStreamChannel

BURST = 400  # lines per append_many
BURSTS = 12
STEPDOWNS = 6  # leader changes, each one timed to land inside a burst


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    with run_nats_cluster(tmp_path / "cluster", size=3) as running:
        yield running


async def _step_down(channel: JetStreamChannel) -> bool:
    """Ask the stream's leader to step down; whether the cluster took the request."""
    subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{channel.stream}"
    try:
        reply = await channel.client.request(subject, b"", timeout=5)
    except Exception:  # no leader at this moment, or it is busy electing one: try again
        return False
    return bool(json.loads(reply.data).get("success"))


async def _forward(
    writer: JetStreamChannel, admin: JetStreamChannel, name: str, lines: list[bytes]
) -> tuple[int, int]:
    """Send ``lines`` in bursts, resending from the first one not stored (the bridge's
    loop); every other burst asks for a leader change as it starts, so the request meets
    the burst's publishes on their way. Returns (leader changes, failed bursts)."""
    stepped = failures = bursts = sent = 0
    deadline = time.monotonic() + 120
    while sent < len(lines):
        assert time.monotonic() < deadline, f"the cluster never took the lines ({sent} sent)"
        burst = [(line, f"{name}:{sent + i}") for i, line in enumerate(lines[sent : sent + BURST])]
        bursts += 1
        step = None
        if bursts % 2 == 0 and stepped < STEPDOWNS:
            step = asyncio.ensure_future(_step_down(admin))  # runs at append_many's first await
        try:
            sent += len(await writer.append_many(name, burst))
        except PartialAppend as error:
            failures += 1
            sent += len(error.offsets)
        except TransportError:
            failures += 1
        if step is not None and await step:
            stepped += 1
    return stepped, failures


def test_a_leader_change_in_the_middle_of_bursts_keeps_every_line_once_in_order(
    cluster: NatsCluster,
) -> None:
    async def main() -> None:
        prefix = "o" + os.urandom(4).hex()
        writer = await open_r3(cluster.urls, prefix)
        admin = await open_r3(cluster.urls, prefix)
        name = "h.B.run.r1.events"
        lines = [b'{"n":%d,"pad":"%s"}' % (i, b"x" * 200) for i in range(BURST * BURSTS)]
        try:
            stepped, failures = await asyncio.wait_for(_forward(writer, admin, name, lines), 150)
            assert stepped >= 1, "no leader change happened during the bursts"
            stored = await read_through_marker(admin, name)
            numbers = [json.loads(entry.data)["n"] for entry in stored]
            assert numbers == list(range(len(lines))), (
                f"{stepped} leader changes, {failures} failed bursts: "
                f"first out of place at {_first_out_of_place(numbers)}"
            )
        finally:
            await writer.aclose()
            await admin.aclose()

    asyncio.run(main())


def _first_out_of_place(numbers: list[int]) -> int | None:
    for index, number in enumerate(numbers):
        if number != index:
            return index
    return None
