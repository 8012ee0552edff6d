"""``agent.events``: a run's events read from its log, and, with ``follow``, streamed to the
calling connection, first what the log holds, then live (see :mod:`tether.daemon.fleet.verbs`
for the shapes). Every event is sent once, in increasing seq order.

- :func:`page`: without ``follow``; with ``wait_s``, a page that would be empty while the
  run goes on waits up to that long for the next event first (a long poll: what a host
  following another host's agent asks for); ``ended`` says the run had ended before the
  page was read, so with ``more`` false it holds the run's last events.
- :func:`stream_events`: ``follow`` for an agent of this daemon.
- :func:`stream_pages`: ``follow`` for an agent another host runs, from its host's pages
  (:mod:`tether.daemon.fleet.elsewhere`), until a page shows the run ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from tether.daemon.fleet.followers import Follower
from tether.daemon.fleet.replies import EventsReply, StreamEnd
from tether.daemon.fleet.wire_agent import WireAgent
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.transports.tail import FileTail
from tether.wire import Rejection, TooLarge, decode

if TYPE_CHECKING:
    from tether.daemon.fleet.params import EventsParams
    from tether.daemon.rpc.server import CallContext

__all__ = [
    "EVENTS_BYTES",
    "EVENT_METHOD",
    "STREAM_BATCH",
    "page",
    "read_events",
    "stream_events",
    "stream_pages",
]

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


async def _read(
    agent: WireAgent, after_seq: int, limit: int
) -> tuple[list[tuple[int, bytes]], bool, bool]:
    """(the events, more waiting, whether the run had ended before they were read: then
    the page holds its last events, the ``exit`` too, unless more are waiting)."""
    ended = agent.ended
    batch, more = await asyncio.to_thread(
        read_events, agent.run.events, agent.run_id, after_seq, limit
    )
    return batch, more, ended


async def page(agent: WireAgent, args: EventsParams) -> EventsReply:
    """``agent.events`` without ``follow``; see the module docstring."""
    batch, more, ended = await _read(agent, args.after_seq, args.limit)
    if not batch and args.wait_s and not ended:
        follower = agent.follow(args.after_seq)  # from here on, a new event wakes it
        try:
            batch, more, ended = await _read(agent, args.after_seq, args.limit)
            if not batch and not ended:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.wait(), args.wait_s)
                batch, more, ended = await _read(agent, args.after_seq, args.limit)
        finally:
            agent.unfollow(follower)
    last = batch[-1][0] if batch else args.after_seq
    return EventsReply(agent.name, _raw(batch), last, more, agent.state, ended=ended)


async def stream_pages(
    context: CallContext, name: str, after_seq: int, pages: AsyncIterator[EventsReply]
) -> StreamEnd:
    """``agent.events`` with ``follow`` for an agent another host runs: each page its
    host answers (long polls from ``after_seq`` on) pushed to the calling connection,
    until a page that leaves nothing more says the run had ended before it was read, or
    the client hangs up."""
    gone = asyncio.Event()
    context.socket().add_hangup_callback(lambda _: gone.set())
    last, count, state = after_seq, 0, "unknown"
    while not gone.is_set():
        reply = await _next_page(pages, gone)
        if reply is None:
            break
        if reply.events and not await _deliver(context, name, reply.events):
            return StreamEnd(name, reply.last_seq, count + len(reply.events), reply.state, False)
        count += len(reply.events)
        last, state = reply.last_seq, reply.state
        if not reply.more and reply.ended is True:
            return StreamEnd(name, last, count, state, True)
    return StreamEnd(name, last, count, state, False)


async def _next_page(pages: AsyncIterator[EventsReply], gone: asyncio.Event) -> EventsReply | None:
    """The next page, or None once the client hung up (the poll in flight is dropped)."""
    fetch = asyncio.ensure_future(anext(pages))
    hangup = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({fetch, hangup}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        hangup.cancel()
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(BaseException):
                await fetch
    return fetch.result() if not fetch.cancelled() else None


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
            if batch and not await _deliver(context, agent.name, _raw(batch)):
                return _stream_end(agent, follower, count + len(batch))
            count += len(batch)
            if batch:
                follower.last_seq = batch[-1][0]
            if not more:
                break
        while True:  # then live
            batch = follower.take(STREAM_BATCH)
            if batch:
                if not await _deliver(context, agent.name, _raw(batch)):
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


async def _deliver(context: CallContext, name: str, events: list[Any]) -> bool:
    """Send one batch; False when the client answered an error (stop streaming). A client
    that does not answer a batch within the daemon's delivery timeout (``--deliver-timeout``)
    is ``busy``: a follower that stays connected but never reads must not hold the stream
    (and its memory) for ever."""
    params = {"name": name, "events": events}
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


def _raw(batch: list[tuple[int, bytes]]) -> list[Any]:
    return [msgspec.Raw(raw) for _, raw in batch]


def _stream_end(agent: WireAgent, follower: Follower, count: int) -> StreamEnd:
    return StreamEnd(agent.name, follower.last_seq, count, agent.state, agent.ended)
