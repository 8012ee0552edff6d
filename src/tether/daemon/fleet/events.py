"""``agent.events``: a run's events read from its log, and, with ``follow``, streamed to the
calling connection, first what the log holds, then live (see :mod:`tether.daemon.fleet.verbs`
for the shapes). Every event is sent once, in increasing seq order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from tether.daemon.fleet.followers import Follower
from tether.daemon.fleet.replies import StreamEnd
from tether.daemon.fleet.wire_agent import WireAgent
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.transports.tail import FileTail
from tether.wire import Rejection, TooLarge, decode

if TYPE_CHECKING:
    from tether.daemon.rpc.server import CallContext

__all__ = ["EVENTS_BYTES", "EVENT_METHOD", "STREAM_BATCH", "read_events", "stream_events"]

EVENTS_BYTES: Final = 8 * 1024 * 1024  # per response or streamed batch
STREAM_BATCH: Final = 512
EVENT_METHOD: Final = "agent.event"


def read_events(
    path: Path, run_id: str, after_seq: int, limit: int, max_bytes: int = EVENTS_BYTES
) -> tuple[list[tuple[int, bytes]], bool]:
    """Valid events of ``run_id`` in ``path`` with increasing seq > ``after_seq``.

    At most ``limit`` events and about ``max_bytes``; the bool says more are waiting.
    """
    out: list[tuple[int, bytes]] = []
    size, last = 0, after_seq
    with FileTail(path) as tail:
        while (read := tail.read()).items:
            for item in read.items:
                if isinstance(item, TooLarge):
                    continue
                message = decode(item.data, "event")
                if isinstance(message, Rejection) or message.run != run_id:
                    continue
                if message.seq <= last:
                    continue
                if len(out) >= limit or (out and size + len(item.data) > max_bytes):
                    return out, True
                out.append((message.seq, item.data))
                size += len(item.data)
                last = message.seq
    return out, False


async def stream_events(context: CallContext, agent: WireAgent, after_seq: int) -> StreamEnd:
    """``agent.events`` with ``follow``: see the module docstring."""
    connection = context.socket()  # a caller without one (another host) is refused up front
    follower = agent.follow(after_seq)
    connection.add_hangup_callback(lambda _: follower.end())  # the client can ack no more
    count = 0
    try:
        while True:  # what the log holds
            batch, more = await asyncio.to_thread(
                read_events, agent.run.events, agent.run_id, follower.last_seq, STREAM_BATCH
            )
            if batch and not await _deliver(context, agent.name, batch):
                return _stream_end(agent, follower, count + len(batch))
            count += len(batch)
            if batch:
                follower.last_seq = batch[-1][0]
            if not more:
                break
        while True:  # then live
            batch = follower.take(STREAM_BATCH)
            if batch:
                if not await _deliver(context, agent.name, batch):
                    return _stream_end(agent, follower, count + len(batch))
                count += len(batch)
                continue
            if follower.ended and follower.drained:
                break
            await follower.wait()
    finally:
        agent.unfollow(follower)
    if follower.overflowed:
        raise RpcFailure(
            ErrorCode.BUSY,
            f"the client fell behind after seq {follower.last_seq}; reconnect with that after_seq",
        )
    return _stream_end(agent, follower, count)


async def _deliver(context: CallContext, name: str, batch: list[tuple[int, bytes]]) -> bool:
    """Send one batch; False when the client answered an error (stop streaming). A client
    that does not answer a batch within the daemon's delivery timeout (``--deliver-timeout``)
    is ``busy``: a follower that stays connected but never reads must not hold the stream
    (and its memory) for ever."""
    params = {"name": name, "events": [msgspec.Raw(raw) for _, raw in batch]}
    limit = context.daemon.config.deliver_timeout_s
    try:
        async with asyncio.timeout(limit):
            response = await context.socket().call(EVENT_METHOD, params)
    except TimeoutError:
        raise RpcFailure(
            ErrorCode.BUSY,
            f"the client did not take a batch of events within {limit:g} s; "
            "reconnect with after_seq to go on",
        ) from None
    return not response.is_error


def _stream_end(agent: WireAgent, follower: Follower, count: int) -> StreamEnd:
    return StreamEnd(agent.name, follower.last_seq, count, agent.state, agent.ended)
