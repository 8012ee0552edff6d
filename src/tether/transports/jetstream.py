"""Channels over NATS JetStream (``pip install 'tether[nats]'``).

Theory of operation: one JetStream stream (``TETHER_<PREFIX>``) holds every channel of a
cluster, one subject per channel (``<prefix>.ch.<name>``). The stream sequence is the
offset: strictly increasing, opaque to callers, never reused. An append is a JetStream
publish that waits for the server's acknowledgement; with ``msg_id`` it carries the
``Nats-Msg-Id`` header, so a retry inside the stream's duplicate window (two minutes) is
answered with the first sequence and stores nothing. ``append_many`` sends its lines as
atomic batches (stored whole or not at all, so in order across a leader change). A tail
is an ordered consumer that starts at ``after + 1`` and filters on the channel's subject:
it redelivers nothing, recreates itself after a lost connection and subscribes again
past its last entry when nats-py dropped a message (a reader behind). Commits live in a KV bucket
(``<prefix>_offsets``), one key per (consumer, channel), updated with a revision check so
they only move forward even with two writers.

Durability: JetStream acknowledges a publish once the stream's leader has it in memory
and, with ``replicas > 1``, once a quorum of nodes has it; it fsyncs on an interval
(``sync_interval`` in the server's configuration, two minutes by default). A single node
that must not lose an acknowledged line needs ``sync_interval: always``; a cluster should
use ``replicas=3``. See ``docs/scale-out.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from tether import jsondepth
from tether.transports.channel import (
    Entry,
    PartialAppend,
    Skipped,
    TransportError,
    check_consumer,
    check_line,
    check_msg_id,
    check_name,
)
from tether.transports.cluster import (
    Cluster,
    ClusterSettings,
    Handler,
    Incoming,
    NoResponders,
    Registry,
    RequestTimedOut,
    redacted,
    server_list,
)
from tether.wire.limits import MAX_LINE_BYTES

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.api import StreamConfig
    from nats.js.client import JetStreamContext
    from nats.js.kv import KeyValue

__all__ = [
    "JetStreamChannel",
    "JetStreamCluster",
    "created",
    "looked_up",
    "nats_options",
    "on_nats_error",
    "open_cluster",
    "open_jetstream",
]

log = logging.getLogger("tether.transports.jetstream")
T = TypeVar("T")

DUPLICATE_WINDOW_S = 120.0
PUBLISH_TIMEOUT_S = 5.0  # the acknowledgement of one publish, or of one atomic batch
ATOMIC_BATCH_LINES = 1000  # the server's bound on one atomic batch
ATOMIC_IN_FLIGHT = 16  # batches one channel has open at once (a stream takes 50)
ATOMIC_DISABLED = 10174  # JetStream's error code: the stream does not allow atomic batches
# A tail holds at most this many undelivered messages (and bytes) in memory. The server
# pushes a consumer's backlog as fast as it can (its flow control lets up to 32 MiB wait
# in the client), so a reader behind by more drops messages (nats-py: "slow consumer")
# and the tail subscribes again from the last entry it gave out (see ``follow``).
TAIL_PENDING_MSGS = 16_384
TAIL_PENDING_BYTES = 16 * 1024 * 1024
RESUBSCRIBE_S = 0.2  # the first pause before a tail subscribes again
LOOKUP_WAIT_S = 30.0
"""How long :func:`looked_up` asks again when a host's lookup of a stream or bucket at its
start gets no answer (a cluster still electing its JetStream leaders answers nothing, or 503)."""
CONNECT_TIMEOUT_S = 10.0  # the first connection, all attempts included
KNOWN_COMMITS = 65_536  # commit revisions remembered per channel object


async def open_jetstream(
    url: str = "nats://127.0.0.1:4222",
    *,
    prefix: str = "tether",
    replicas: int = 1,
    max_line_bytes: int = MAX_LINE_BYTES,
    connect_options: dict[str, Any] | None = None,
) -> JetStreamChannel:
    """Connect, make sure the stream and the commit bucket exist, and return the channel.

    ``url`` may name several servers of one cluster, comma-separated.
    ``connect_options`` go to ``nats.connect`` as they are (``user_credentials``, ``tls``,
    ``nkeys_seed``, reconnect settings). Close the result with :meth:`JetStreamChannel.aclose`.
    (What the hosts use is :func:`open_cluster`, through :mod:`tether.transports.opener`.)
    """
    check_consumer(prefix)
    client = await _connect(url, connect_options or {})
    channel = JetStreamChannel(client, prefix=prefix, max_line_bytes=max_line_bytes)
    try:
        await channel.ensure(replicas=replicas)
    except BaseException:
        await client.close()
        raise
    return channel


async def open_cluster(
    url: str,
    *,
    settings: ClusterSettings,
    replicas: int = 1,
    streams: bool = True,
    prefix: str = "tether",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> JetStreamCluster:
    """:func:`tether.transports.opener.open_cluster` for ``nats://`` and ``tls://`` URLs:
    one connection for the requests, the registries and the channel."""
    check_consumer(prefix)
    client = await _connect(url, nats_options(settings))
    cluster = JetStreamCluster(
        JetStreamChannel(client, prefix=prefix, max_line_bytes=max_line_bytes), replicas
    )
    if streams:
        try:
            await cluster.channel.ensure(replicas=replicas)
        except BaseException:
            await client.close()
            raise
    return cluster


async def _connect(url: str, connect_options: dict[str, Any]) -> Client:
    """A connection, bounded as a whole (a failed TLS handshake can leave nats-py waiting
    for ever): a few tries, then, once in, reconnecting for ever."""
    import nats

    # nats-py applies max_reconnect_attempts to the first connect too (and -1, or 0, retry a
    # refused login for ever): try a few times, then keep reconnecting for ever once in.
    options: dict[str, Any] = {
        "max_reconnect_attempts": 2,
        "reconnect_time_wait": 0.2,
        "error_cb": on_nats_error,
    }
    options.update(connect_options)
    try:
        client = await asyncio.wait_for(
            nats.connect(server_list(url), **options), CONNECT_TIMEOUT_S
        )
    except TimeoutError:
        raise TransportError(
            f"cannot reach NATS at {redacted(url)}: no connection within {CONNECT_TIMEOUT_S:g} s"
        ) from None
    except Exception as error:  # nats raises many unrelated types here
        raise TransportError(f"cannot reach NATS at {redacted(url)}: {error}") from error
    client.options["max_reconnect_attempts"] = -1
    return client


async def on_nats_error(error: Exception) -> None:
    """nats-py's error callback: a dropped message ("slow consumer") is handled by the
    tail that owns the subscription (it subscribes again), so it is not an error here;
    nats-py's default logged each one with a traceback, slowing the reader further."""
    from nats.errors import SlowConsumerError

    if isinstance(error, SlowConsumerError):
        flag = _DROPS.get(error.sub)
        if flag is not None:
            flag.set()
        log.debug("nats: %s", error)
        return
    log.warning("nats: %s", error)


async def looked_up(lookup: Callable[[], Awaitable[T]], what: str) -> T:
    """``lookup()``, asked again with back-off while the cluster gives no answer (a
    timeout, no responders, 503: JetStream not up yet) for up to ``LOOKUP_WAIT_S``; then
    a ``TransportError``. Any other answer (found, not found, refused) is returned or
    raised at once."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.errors import ServiceUnavailableError

    deadline = asyncio.get_running_loop().time() + LOOKUP_WAIT_S
    pause = 0.25
    while True:
        try:
            return await lookup()
        except (NatsTimeout, TimeoutError, NoRespondersError, ServiceUnavailableError) as error:
            if asyncio.get_running_loop().time() + pause > deadline:
                raise TransportError(
                    f"cannot read {what}: no answer in {LOOKUP_WAIT_S:.0f} s ({error!r})"
                ) from None
            log.info("no answer yet looking up %s (%r): asking again", what, error)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)


async def created(creation: Awaitable[T], what: str) -> T:
    """A stream or bucket made; refused creation (a host's credentials may not create
    streams: the server drops the request, so it times out) as a ``TransportError`` that
    says what to do."""
    from nats.errors import Error as NatsError

    try:
        return await creation
    except (NatsError, TimeoutError) as error:
        raise TransportError(
            f"{what} does not exist and could not be created ({error or type(error).__name__}): "
            "create the cluster's streams once with `tether daemon --nats URL init-cluster` "
            "and credentials that may (the operator's)"
        ) from None


def nats_options(settings: ClusterSettings) -> dict[str, Any]:
    """``nats.connect`` options for :class:`~tether.transports.cluster.ClusterSettings`: a
    ``.creds`` file (JWT and NKEY seed), a CA for ``tls://`` servers, the reply prefix."""
    options: dict[str, Any] = {}
    if settings.creds is not None:
        options["user_credentials"] = settings.creds
    if settings.ca is not None:
        import ssl

        options["tls"] = ssl.create_default_context(cafile=settings.ca)
    if settings.reply_prefix is not None:
        options["inbox_prefix"] = settings.reply_prefix
    return options


class _Refusal(msgspec.Struct):
    err_code: int = 0
    description: str = ""


class _PubAck(msgspec.Struct):
    seq: int = 0
    error: _Refusal | None = None


_decode_pub_ack = msgspec.json.Decoder(_PubAck)


def _pub_ack(data: bytes) -> tuple[int, _Refusal | None]:
    """A JetStream publish acknowledgement: (the stored sequence, None), or (0, why not)."""
    try:
        ack = jsondepth.decode(_decode_pub_ack, data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return 0, _Refusal(description=f"unreadable acknowledgement {data[:80]!r}")
    if ack.error is not None or ack.seq <= 0:
        return 0, ack.error or _Refusal(description="no sequence in the acknowledgement")
    return ack.seq, None


class Flag(asyncio.Event):
    """Set when nats-py dropped a message of the subscription it belongs to."""


# A tail's subscription -> its flag (weak: a subscription gone needs no entry).
_DROPS: weakref.WeakKeyDictionary[Any, Flag] = weakref.WeakKeyDictionary()


async def _next_message(subscription: Any, dropped: Flag) -> Msg | None:
    """The subscription's next message; None once it dropped one (and the messages
    queued before are taken) or the connection closed."""
    from nats.errors import Error as NatsError

    if subscription.pending_msgs == 0:
        if dropped.is_set():
            return None
        receive = asyncio.ensure_future(subscription.next_msg(timeout=None))
        signal = asyncio.ensure_future(dropped.wait())
        try:
            await asyncio.wait({receive, signal}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signal.cancel()
            if not receive.done():
                receive.cancel()
                await asyncio.wait({receive})  # a message taken meanwhile is kept
        if receive.cancelled():
            return None
        error = receive.exception()
        return None if isinstance(error, NatsError) else receive.result()
    try:
        message: Msg = await subscription.next_msg(timeout=None)
    except NatsError:  # the connection closed
        return None
    return message


class JetStreamChannel:
    """The :class:`tether.transports.channel.Channel` interface over one JetStream stream."""

    def __init__(self, client: Client, *, prefix: str, max_line_bytes: int) -> None:
        self.client = client
        self.js: JetStreamContext = client.jetstream()
        self.prefix = prefix
        self.stream = f"TETHER_{prefix.upper().replace('-', '_')}"
        self.max_line_bytes = max_line_bytes
        self._offsets: KeyValue | None = None
        # (offset, KV revision) of the commits this channel wrote last, so the next one
        # is a single compare-and-set round trip instead of a read and a write.
        self._known: dict[str, tuple[int, int]] = {}
        self.atomic = True  # the stream takes atomic batches (see append_many)
        self._batches = asyncio.Semaphore(ATOMIC_IN_FLIGHT)

    async def ensure(self, *, replicas: int = 1) -> None:
        """Create the stream and the commit bucket if they are missing."""
        from nats.errors import Error as NatsError
        from nats.js.api import KeyValueConfig, StorageType, StreamConfig
        from nats.js.errors import BucketNotFoundError, NotFoundError

        config = StreamConfig(
            name=self.stream,
            subjects=[f"{self.prefix}.ch.>"],
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=DUPLICATE_WINDOW_S,
            max_msg_size=self.max_line_bytes,
            allow_atomic=True,
        )
        try:
            info = await looked_up(
                lambda: self.js.stream_info(self.stream), f"the stream {self.stream}"
            )
        except NotFoundError:
            await created(self.js.add_stream(config), self.stream)
        except (NatsError, TimeoutError) as error:  # no leader yet, or not allowed to look
            raise TransportError(f"cannot read the stream {self.stream}: {error!r}") from None
        else:
            if not info.config.allow_atomic:  # made by an older tether, or by hand
                await self._allow_atomic(info.config)
        bucket = f"{self.prefix}_offsets"
        try:
            self._offsets = await looked_up(
                lambda: self.js.key_value(bucket), f"the bucket {bucket}"
            )
        except BucketNotFoundError:
            self._offsets = await created(
                self.js.create_key_value(
                    KeyValueConfig(bucket=bucket, history=1, replicas=replicas)
                ),
                f"KV_{bucket}",
            )
        except (NatsError, TimeoutError) as error:  # no answer (a busy server, no right)
            raise TransportError(f"cannot read the bucket {bucket}: {error!r}") from None

    async def _allow_atomic(self, config: StreamConfig) -> None:
        """Turn on atomic batches on an existing stream; without the right to (a host's
        credentials may only publish), append_many sends lines one by one."""
        from nats.errors import Error as NatsError

        try:
            await self.js.update_stream(dataclasses.replace(config, allow_atomic=True))
        except (NatsError, TimeoutError) as error:
            log.warning(
                "%s does not allow atomic batches and cannot be changed here (%s): "
                "bursts go line by line",
                self.stream,
                error,
            )
            self.atomic = False

    def subject(self, name: str) -> str:
        return f"{self.prefix}.ch.{check_name(name)}"

    async def append(self, name: str, line: bytes, *, msg_id: str | None = None) -> int:
        check_line(line, self.max_line_bytes)
        check_msg_id(msg_id)
        try:
            offset, _ = await self._publish(self.subject(name), line, msg_id)
        except TransportError as error:
            raise TransportError(f"append to {name!r} failed: {error}") from None
        return offset

    async def append_many(self, name: str, lines: Sequence[tuple[bytes, str | None]]) -> list[int]:
        """Append the lines in order: stored all, or a prefix (:class:`PartialAppend`).

        Two or more lines go as JetStream atomic batches (``Nats-Batch-*`` headers, server
        2.12+, ``allow_atomic`` on the stream; at most ``ATOMIC_BATCH_LINES`` each): one
        write, one acknowledgement, and a batch is stored whole or not at all, so a
        stream leader changing in the middle of one cannot store a line after one that
        failed (lines published one by one and acknowledged together could be: the first
        reached the old leader and was lost, the next the new one). A batch refused by
        the server (a line already stored, from a resend: the batch would store it twice,
        so the server refuses it whole; a stream without atomic publishes; too many
        batches in flight) is sent line by line, each acknowledged before the next, which
        keeps the order and answers a stored line with its first offset, up to the first
        line not stored before; the rest goes as a batch again.
        """
        subject = self.subject(name)
        for line, msg_id in lines:
            check_line(line, self.max_line_bytes)
            check_msg_id(msg_id)
        offsets: list[int] = []
        for start in range(0, len(lines), ATOMIC_BATCH_LINES):
            chunk = lines[start : start + ATOMIC_BATCH_LINES]
            try:
                offsets += await self._append_chunk(subject, chunk)
            except PartialAppend as error:
                raise PartialAppend(str(error), offsets + error.offsets) from error
        return offsets

    async def _append_chunk(
        self, subject: str, lines: Sequence[tuple[bytes, str | None]]
    ) -> list[int]:
        """One batch; when refused, line by line up to the first line not stored before
        (a resend's stored prefix answers with its first offsets), then a batch again."""
        offsets: list[int] = []
        rest = list(lines)
        while rest:
            if len(rest) > 1 and self.atomic:
                try:
                    async with self._batches:
                        stored = await self._append_batch(subject, rest)
                except PartialAppend as error:
                    raise PartialAppend(str(error), offsets) from None
                if stored is not None:
                    return offsets + stored
            while rest:
                line, msg_id = rest.pop(0)
                try:
                    seq, duplicate = await self._publish(subject, line, msg_id)
                except TransportError as error:
                    raise PartialAppend(f"append to {subject!r} failed: {error}", offsets) from None
                offsets.append(seq)
                if not duplicate:
                    break
        return offsets

    async def _append_batch(
        self, subject: str, lines: Sequence[tuple[bytes, str | None]]
    ) -> list[int] | None:
        """The offsets of an atomic batch; None when the server refused it (nothing is
        stored); PartialAppend with none stored when the answer did not come."""
        from nats.errors import Error as NatsError

        batch = os.urandom(12).hex()
        last = len(lines)
        try:
            for index, (line, msg_id) in enumerate(lines, 1):
                headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(index)}
                if msg_id is not None:
                    headers["Nats-Msg-Id"] = msg_id
                if index < last:
                    await self.client.publish(subject, line, headers=headers)
                    continue
                headers["Nats-Batch-Commit"] = "1"
                reply = await self.client.request(
                    subject, line, headers=headers, timeout=PUBLISH_TIMEOUT_S
                )
        except (NatsError, TimeoutError) as error:  # stored whole, or not at all: unknown
            raise PartialAppend(f"append to {subject!r} failed: {error}", []) from None
        seq, refusal = _pub_ack(reply.data)
        if refusal is None:
            return list(range(seq - last + 1, seq + 1))
        log.debug("%s: batch refused: %s", subject, refusal.description)
        if refusal.err_code == ATOMIC_DISABLED:
            log.warning("%s: the stream refuses atomic batches; lines go one by one", self.stream)
            self.atomic = False
        return None

    async def _publish(self, subject: str, line: bytes, msg_id: str | None) -> tuple[int, bool]:
        """(the line's offset, whether it was stored before under ``msg_id``)."""
        from nats.errors import Error as NatsError

        headers = None if msg_id is None else {"Nats-Msg-Id": msg_id}
        try:
            ack = await self.js.publish(subject, line, headers=headers, timeout=PUBLISH_TIMEOUT_S)
        except (NatsError, TimeoutError) as error:
            raise TransportError(str(error)) from error
        return int(ack.seq), bool(ack.duplicate)

    async def tail(self, name: str, *, after: int | None = None) -> AsyncIterator[Entry | Skipped]:
        """The entries after ``after``, then new ones, until cancelled.

        The ordered consumer recreates itself after a lost connection; when its
        subscription ends anyway (a cluster that lost the consumer's node, say), the tail
        subscribes again just past the last entry it gave out, so it never ends on its own
        and never repeats or skips an entry.
        """
        async for message in self.follow(self.subject(name), after):
            yield Entry(int(message.metadata.sequence.stream), message.data)

    async def tail_matching(
        self, pattern: str, *, after: int | None = None
    ) -> AsyncIterator[tuple[str, Entry]]:
        """``(channel name, entry)`` for every channel whose name matches ``pattern`` (NATS
        wildcards: ``*`` one token, a last ``>`` the rest, as in ``h.B.run.*.events``),
        in stream order, after the stream sequence ``after``: one consumer for many runs
        (a parent following a thousand runs needs no thousand consumers, their heartbeats
        and their flow control). The offsets are the stream's, as :meth:`tail` gives them,
        so a reader resumes the whole set from the last one it handled."""
        start = len(self.subject("x")) - 1
        wanted = self.subject_pattern(pattern)
        async for message in self.follow(wanted, after):
            entry = Entry(int(message.metadata.sequence.stream), message.data)
            yield message.subject[start:], entry

    def subject_pattern(self, pattern: str) -> str:
        parts = pattern.split(".")
        for index, part in enumerate(parts):
            if part == "*" or (part == ">" and index == len(parts) - 1):
                continue
            check_name(part)
        if len(parts) > 16:
            raise TransportError(f"bad channel pattern {pattern!r}")
        return f"{self.prefix}.ch.{pattern}"

    async def follow(
        self, subject: str, after: int | None, stream: str | None = None
    ) -> AsyncIterator[Msg]:
        """The messages of ``subject`` (in ``stream``: by default the channels') past the
        stream sequence ``after``, subscribing again whenever one is missed.

        nats-py drops a message when a subscription's queue is full (a reader slower than
        the server's push of a backlog) and counts it as delivered, so its ordered
        consumer never notices. We do, two ways: :func:`on_nats_error` flags the
        subscription, and the consumer's own sequence (1, 2, 3... per consumer) jumps or
        restarts at 1. Either ends the subscription once the messages queued before the
        drop are handed on, and a new one starts just past the last entry."""
        last = after or 0
        while True:
            subscription = await self._subscribe(subject, last, stream or self.stream)
            dropped = _DROPS.setdefault(getattr(subscription, "_sub", subscription), Flag())
            delivered = 0  # the consumer sequence of the last message handed on
            try:
                while (message := await _next_message(subscription, dropped)) is not None:
                    metadata = message.metadata
                    if int(metadata.sequence.consumer) != delivered + 1:
                        break
                    delivered += 1
                    seq = int(metadata.sequence.stream)
                    if seq > last:
                        last = seq
                        yield message
                if dropped.is_set():
                    log.info("%s: the reader fell behind; reading on from %d", subject, last)
                else:
                    await asyncio.sleep(RESUBSCRIBE_S)  # it ended: the cluster lost it
            finally:
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()

    async def _subscribe(self, subject: str, last: int, stream: str) -> Any:
        from nats.errors import Error as NatsError
        from nats.js.api import ConsumerConfig, DeliverPolicy

        pause = RESUBSCRIBE_S
        while True:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=last + 1
            )
            try:
                return await self.js.subscribe(
                    subject,
                    stream=stream,  # known: no STREAM.NAMES round trip (nor permission)
                    ordered_consumer=True,
                    config=config,
                    pending_msgs_limit=TAIL_PENDING_MSGS,
                    pending_bytes_limit=TAIL_PENDING_BYTES,
                )
            except (NatsError, TimeoutError):  # no leader yet, or the connection is away
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    async def commit(self, name: str, consumer: str, offset: int) -> None:
        from nats.errors import Error as NatsError

        key = f"{check_consumer(consumer)}.{check_name(name)}"
        try:
            await self._commit(key, offset)
        except NatsError as error:  # e.g. no responders while a cluster elects a leader
            raise TransportError(f"commit of {key!r} failed: {error}") from error

    async def _commit(self, key: str, offset: int) -> None:
        from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

        kv = self._bucket()
        known = self._known.get(key)
        if known is not None:  # one round trip: update from the revision we wrote last
            if known[0] >= offset:
                return
            with contextlib.suppress(KeyWrongLastSequenceError):  # another writer: read
                self._remember(key, offset, await kv.update(key, b"%d" % offset, last=known[1]))
                return
        while True:
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                with contextlib.suppress(KeyWrongLastSequenceError):
                    self._remember(key, offset, await kv.create(key, b"%d" % offset))
                    return
                continue
            if entry.value is not None and int(entry.value) >= offset:
                self._remember(key, int(entry.value), entry.revision)
                return
            with contextlib.suppress(KeyWrongLastSequenceError):
                revision = await kv.update(key, b"%d" % offset, last=entry.revision)
                self._remember(key, offset, revision)
                return

    def _remember(self, key: str, offset: int, revision: int | None) -> None:
        if len(self._known) >= KNOWN_COMMITS and key not in self._known:
            self._known.clear()  # a bound, not a cache policy: the next commit reads again
        if revision is not None:
            self._known[key] = (offset, int(revision))

    async def committed(self, name: str, consumer: str) -> int | None:
        from nats.errors import Error as NatsError
        from nats.js.errors import KeyNotFoundError

        key = f"{check_consumer(consumer)}.{check_name(name)}"
        try:
            entry = await self._bucket().get(key)
        except KeyNotFoundError:
            return None
        except NatsError as error:
            raise TransportError(f"reading the commit of {key!r} failed: {error}") from error
        return None if entry.value is None else int(entry.value)

    def _bucket(self) -> KeyValue:
        if self._offsets is None:
            raise TransportError("the channel is not set up: call ensure() first")
        return self._offsets

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.drain()
        await self.client.close()


# -- the cluster: requests, services, registries ---------------------------------------------


class JetStreamCluster:
    """:class:`~tether.transports.cluster.Cluster` over one NATS connection: core NATS
    request/reply for the requests and services, KV buckets for the registries, the
    channel's stream for the lines."""

    def __init__(self, channel: JetStreamChannel, replicas: int = 1) -> None:
        self.channel = channel
        self.client = channel.client
        self.replicas = replicas
        self._stores = [channel.stream, f"KV_{channel.prefix}_offsets"]

    @property
    def max_payload(self) -> int:
        return int(self.client.max_payload)

    async def request(self, subject: str, body: bytes, *, wait_s: float | None) -> bytes:
        from nats.errors import Error as NatsError
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        try:
            # nats-py hands the timeout to asyncio.wait_for, where None waits for ever
            reply = await self.client.request(subject, body, timeout=cast(float, wait_s))
        except NoRespondersError:
            raise NoResponders(f"nobody serves {subject}") from None
        except (NatsTimeout, TimeoutError):
            raise RequestTimedOut(f"no reply on {subject} in {wait_s} s") from None
        except NatsError as error:  # the connection closed or failed
            raise TransportError(f"request on {subject} failed: {error}") from None
        return bytes(reply.data)

    async def serve(self, subject: str, handler: Handler) -> _Served:
        """nats-py runs one subscription's callbacks one after another, in the order the
        messages came: what the interface promises."""
        from nats.errors import Error as NatsError

        async def on_message(message: Msg) -> None:
            await handler(_Incoming(message))

        try:
            return _Served(await self.client.subscribe(subject, cb=on_message))
        except NatsError as error:
            raise TransportError(f"cannot serve {subject}: {error}") from None

    async def open_registry(self, name: str) -> JetStreamRegistry:
        from nats.errors import Error as NatsError
        from nats.js.api import KeyValueConfig
        from nats.js.errors import BucketNotFoundError

        js = self.channel.js
        try:
            try:
                kv = await looked_up(lambda: js.key_value(name), f"the registry {name}")
            except BucketNotFoundError:
                config = KeyValueConfig(bucket=name, history=1, replicas=self.replicas)
                kv = await created(js.create_key_value(config), f"KV_{name}")
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"cannot open the registry {name}: {error}") from None
        return self._registry(kv, name)

    async def find_registry(self, name: str) -> JetStreamRegistry | None:
        from nats.errors import Error as NatsError
        from nats.js.errors import BucketNotFoundError

        try:
            kv = await self.channel.js.key_value(name)
        except BucketNotFoundError:
            return None
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"cannot read the registry {name}: {error}") from None
        return self._registry(kv, name)

    def _registry(self, kv: KeyValue, name: str) -> JetStreamRegistry:
        if f"KV_{name}" not in self._stores:
            self._stores.append(f"KV_{name}")
        return JetStreamRegistry(kv, name, self.channel)

    def stores(self) -> list[str]:
        return list(self._stores)

    async def aclose(self) -> None:
        await self.channel.aclose()


class _Incoming:
    """A request being served (:class:`~tether.transports.cluster.Incoming`)."""

    __slots__ = ("_message", "data")

    def __init__(self, message: Msg) -> None:
        self._message = message
        self.data: bytes = message.data

    async def respond(self, body: bytes) -> None:
        if self._message.reply:
            with contextlib.suppress(Exception):  # the connection went away meanwhile
                await self._message.respond(body)


class _Served:
    __slots__ = ("_subscription",)

    def __init__(self, subscription: Any) -> None:
        self._subscription = subscription

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self._subscription.unsubscribe()


_KV_DELETED = frozenset({"DEL", "PURGE"})


class JetStreamRegistry:
    """:class:`~tether.transports.cluster.Registry` over a KV bucket (history 1: its
    stream holds each key's last value or delete marker, in the order they were set)."""

    def __init__(self, kv: KeyValue, name: str, channel: JetStreamChannel) -> None:
        self.kv = kv
        self.name = name
        self._channel = channel

    async def put(self, key: str, value: bytes) -> None:
        from nats.errors import Error as NatsError

        try:
            await self.kv.put(key, value)
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"put of {key!r} in {self.name} failed: {error!r}") from None

    async def get(self, key: str) -> bytes | None:
        from nats.errors import Error as NatsError
        from nats.js.errors import KeyNotFoundError

        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:  # never set, or deleted
            return None
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"get of {key!r} in {self.name} failed: {error!r}") from None
        return entry.value or None

    async def delete(self, key: str) -> None:
        from nats.errors import Error as NatsError

        try:
            await self.kv.delete(key)
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"delete of {key!r} in {self.name} failed: {error!r}") from None

    async def keys(self) -> list[str]:
        from nats.errors import Error as NatsError
        from nats.js.errors import NoKeysError

        try:
            return list(await self.kv.keys())
        except NoKeysError:
            return []
        except (NatsError, TimeoutError) as error:
            raise TransportError(f"listing {self.name} failed: {error!r}") from None

    async def watch(self) -> AsyncIterator[tuple[str, bytes | None]]:
        """The bucket's stream read from its start with the channel's tail (one ordered
        consumer that subscribes again past its last message after a gap): history 1
        leaves only each key's last value or delete marker, so the start is the current
        view, and what follows is each change in order."""
        prefix = f"$KV.{self.name}."
        async for message in self._channel.follow(f"{prefix}>", None, f"KV_{self.name}"):
            headers = message.headers or {}
            deleted = headers.get("KV-Operation") in _KV_DELETED or bool(
                headers.get("Nats-Marker-Reason")
            )
            yield message.subject[len(prefix) :], None if deleted else message.data


if TYPE_CHECKING:  # mypy checks that the interfaces are met

    def _implements(
        cluster: JetStreamCluster, registry: JetStreamRegistry, incoming: _Incoming
    ) -> tuple[Cluster, Registry, Incoming]:
        return cluster, registry, incoming
