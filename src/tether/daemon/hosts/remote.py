"""Calling another host's daemon through the cluster, and the cluster-wide agent list.

:func:`call_host` sends a request body exactly as on the socket to
``tether.host.<HOST>.rpc`` (a :class:`~tether.transports.cluster.Cluster` request) and
returns the result, raising the same errors as the socket client
(:class:`~tether.daemon.rpc.client.DaemonCallError` with the daemon's code,
:class:`~tether.daemon.rpc.client.DaemonUnavailable` when no daemon of that host is in the
cluster, :class:`~tether.daemon.rpc.client.DaemonConnectionLost` when the connection to the
cluster failed). :class:`RemoteClient` wraps it in the sync client's shape for the CLI.
:func:`cluster_agents` reads every host's rows from the registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from tether import jsondepth
from tether.daemon.fleet.fno_shapes import FIELDS_OMITTED
from tether.daemon.fleet.replies import AgentStatus, ListReply
from tether.daemon.hosts.names import PENDING_METHOD, REGISTRY_BUCKET, rpc_subject
from tether.daemon.rpc.client import (
    DaemonCallError,
    DaemonConnectionLost,
    DaemonUnavailable,
    result_of,
)
from tether.daemon.rpc.protocol import (
    ErrorCode,
    ProtocolError,
    Request,
    RpcError,
    decode_response,
)
from tether.transports.channel import TransportError
from tether.transports.cluster import (
    BadClusterURL,
    ClusterSettings,
    NoResponders,
    RequestTimedOut,
)

if TYPE_CHECKING:
    from tether.transports.cluster import Cluster, ClusterChannel

__all__ = ["RemoteClient", "call_host", "call_host_as", "cluster_agents", "connect", "decode_row"]

R = TypeVar("R")

DEFAULT_TIMEOUT_S = 60.0
# A call in flight is probed (call_host) from PROBE_AFTER_S on, every PROBE_EVERY_S, each
# probe answered within PROBE_TIMEOUT_S or counted silent; the host is lost when no
# daemon answers its probes for GONE_AFTER_S (asked again every GONE_RECHECK_S: a host
# whose NATS node died has none while it reconnects to another, and its reply still
# comes), or none of its answers came for SILENT_S.
PROBE_AFTER_S = 0.5
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0
GONE_AFTER_S = 1.0
GONE_RECHECK_S = 0.25
SILENT_S = 6.0
REPLY_GRACE_S = 0.5  # a reply that came before "not pending" is handed on within this
PENDING, NOT_PENDING, GONE, SILENT = "pending", "not pending", "gone", "silent"


async def connect(url: str, settings: ClusterSettings | None = None) -> Cluster:
    """A caller's connection to the cluster (it opens no stream: it calls and tails);
    :class:`DaemonUnavailable` when the cluster cannot be reached,
    :class:`~tether.transports.cluster.BadClusterURL` for a URL no transport takes."""
    from tether.transports.opener import open_cluster

    try:
        return await open_cluster(url, settings=settings, streams=False)
    except BadClusterURL:
        raise
    except TransportError as error:
        raise DaemonUnavailable(str(error)) from None


async def call_host(
    cluster: Cluster,
    host: str,
    method: str,
    params: Any = None,
    *,
    wait_s: float | None = DEFAULT_TIMEOUT_S,
) -> Any:
    """``method`` on ``host``'s daemon: its result, or the error the socket client raises.

    ``wait_s`` bounds the whole call (None: as long as the host says it is working on
    it). A call not answered within ``PROBE_AFTER_S`` is probed every ``PROBE_EVERY_S``
    (``host.pending``, see :mod:`tether.daemon.hosts.link`, by a :class:`_Watch`), so a host
    whose daemon died fails it within seconds, ``shutting_down`` as a daemon that stops
    answers the calls it cuts, while a verb that takes long (a steer waiting for its ack
    on a busy host, an ask) waits on: its host answers the probes.
    """
    reply = await _exchange(cluster, host, method, params, wait_s)
    response = decode_response(reply)
    if isinstance(response, ProtocolError):
        raise DaemonCallError(
            ErrorCode.INTERNAL, f"unreadable answer from {host}: {response.message}"
        )
    return result_of(response)


async def call_host_as(
    cluster: Cluster,
    host: str,
    method: str,
    params: Any,
    reply: type[R],
    *,
    wait_s: float | None = DEFAULT_TIMEOUT_S,
) -> R:
    """:func:`call_host`, its answer decoded into the verb's reply Struct (an answer that
    does not fit is ``internal``)."""
    body = await _exchange(cluster, host, method, params, wait_s)
    try:
        answer = jsondepth.decode(_typed(reply), body)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise DaemonCallError(
            ErrorCode.INTERNAL, f"unreadable answer from {host} to {method}: {error}"
        ) from None
    if isinstance(answer.error, RpcError):
        raise DaemonCallError(answer.error.code, answer.error.message)
    if answer.result is UNSET:
        raise DaemonCallError(ErrorCode.INTERNAL, f"host {host!r} answered {method} with nothing")
    result: R = answer.result
    return result


class _Answer(msgspec.Struct, Generic[R]):
    """A response body whose result is the verb's reply Struct."""

    id: int = 0
    result: R | UnsetType = UNSET
    error: RpcError | UnsetType = UNSET


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


def _typed(reply: type[R]) -> msgspec.json.Decoder[_Answer[R]]:
    decoder = _DECODERS.get(reply)
    if decoder is None:
        decoder = _DECODERS[reply] = msgspec.json.Decoder(_Answer[reply])  # type: ignore[valid-type]
    return decoder


async def _exchange(
    cluster: Cluster, host: str, method: str, params: Any, wait_s: float | None
) -> bytes:
    """The reply body to one call on ``host`` (see :func:`call_host`)."""
    call_id = _call_id()
    subject = rpc_subject(host)
    body = msgspec.json.encode(Request(call_id, method, params))
    watch = _Watch(cluster, subject, call_id)
    try:
        return await cluster.request(subject, body, wait_s=wait_s)
    except asyncio.CancelledError:
        lost = watch.taken_back(host)
        if lost is not None:
            raise lost from None
        raise
    except NoResponders:
        raise DaemonUnavailable(f"no daemon of host {host!r} is in the cluster") from None
    except RequestTimedOut:
        raise DaemonCallError(ErrorCode.BUSY, f"host {host!r} did not answer in time") from None
    except TransportError as error:  # the connection to the cluster failed meanwhile
        raise DaemonConnectionLost(f"host {host!r}: {error}") from None
    finally:
        watch.stop()


def _call_id() -> int:
    """A request id no other caller's call in flight on that host has (48 random bits;
    not a secret, only unlikely to collide): the key its probes ask about."""
    return random.getrandbits(48) or 1


class _Watch:
    """Probes a call that waits (from ``PROBE_AFTER_S`` on) and cancels the calling task
    once it is sure the answer will never come, with ``lost`` saying why: the host's
    daemon is gone (no responders for ``GONE_AFTER_S``: a daemon moving to another NATS
    node has a moment with none), no longer has the call (it restarted),
    or answered no probe for ``SILENT_S`` (a host cut off; or this client's own
    connection). The cancel is the one ``asyncio.timeout`` makes: a call answered at
    once pays for one timer, not for a task and a wait."""

    def __init__(self, cluster: Cluster, subject: str, call_id: int | None) -> None:
        # call_id None: no call to ask about, only whether the host is there (a follow)
        self.cluster = cluster
        self.subject = subject
        self.call_id = call_id
        self.lost: str | None = None
        self._caller = asyncio.current_task()
        self._probing: asyncio.Task[None] | None = None
        self._cancelled = False
        loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = loop.call_later(PROBE_AFTER_S, self._start)

    def _start(self) -> None:
        self._timer = None
        self._probing = asyncio.ensure_future(self._probe_until_lost())

    def stop(self) -> None:
        """The call ended (answered, failed or cancelled): no more probes. A cancel that
        came too late to interrupt the call is taken back."""
        if self._timer is not None:
            self._timer.cancel()
        if self._probing is not None:
            self._probing.cancel()
        if self._cancelled and self.lost is not None and self._caller is not None:
            self._cancelled = False
            self._caller.uncancel()

    def taken_back(self, host: str) -> DaemonCallError | None:
        """On the caller's CancelledError: the error to raise instead when the cancel was
        ours (the host lost) and nobody else's is pending; None to let it propagate."""
        if self.lost is None or self._caller is None:
            return None
        self._cancelled = False
        if self._caller.uncancel():
            return None
        # "retry" said before: a steer or an ask resent after it had landed runs twice
        # (bench/chaos_hosts.py saw asks and steers that failed so and had landed)
        return DaemonCallError(
            ErrorCode.SHUTTING_DOWN,
            f"host {host!r}: {self.lost}; it may have been carried out: "
            "read the run's events before sending it again",
        )

    async def _probe_until_lost(self) -> None:
        loop = asyncio.get_running_loop()
        heard = loop.time()  # when the host last said it has the call
        gone_since: float | None = None
        while self.lost is None:
            state = await _probe(self.cluster, self.subject, self.call_id or 0)
            if self.call_id is None and state is NOT_PENDING:
                state = PENDING  # it answered: it is there
            now = loop.time()
            wait = PROBE_EVERY_S
            if state is GONE:
                gone_since = now if gone_since is None else gone_since
                if now - gone_since >= GONE_AFTER_S:
                    self.lost = "its daemon went away with the call in flight (no responders)"
                wait = min(GONE_RECHECK_S, PROBE_EVERY_S)
            else:
                gone_since = None
            if state is PENDING:
                heard = now
            elif state is NOT_PENDING:  # its reply, if sent, came before this answer
                await asyncio.sleep(REPLY_GRACE_S)
                self.lost = "its daemon no longer has the call (it restarted, or never got it)"
            elif state is SILENT and now - heard >= SILENT_S:
                self.lost = f"no answer to the call nor to a probe for {now - heard:.0f} s"
            if self.lost is None:
                await asyncio.sleep(wait)
        if self._caller is not None:
            self._cancelled = True
            self._caller.cancel()


async def _probe(cluster: Cluster, subject: str, call_id: int) -> str:
    """``host.pending`` for ``call_id``: PENDING, NOT_PENDING, GONE or SILENT."""
    body = msgspec.json.encode(Request(call_id, PENDING_METHOD, {"id": call_id}))
    try:
        answer = await cluster.request(subject, body, wait_s=PROBE_TIMEOUT_S)
    except NoResponders:
        return GONE
    except TransportError:  # timed out, or the connection is away
        return SILENT
    response = decode_response(answer)
    if isinstance(response, ProtocolError) or not isinstance(response.result, dict):
        return PENDING  # alive, but cannot tell (an older host): its answer may yet come
    return PENDING if response.result.get("pending") else NOT_PENDING


_decode_row = msgspec.json.Decoder(AgentStatus)


def decode_row(value: bytes) -> AgentStatus | None:
    """A registry row (another host wrote it: checked as any input is), or None when it
    is not one."""
    try:
        return jsondepth.decode(_decode_row, value)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


async def cluster_agents(cluster: Cluster) -> list[AgentStatus]:
    """Every host's agents (each row has its ``host``), sorted by host and name."""
    registry = await cluster.find_registry(REGISTRY_BUCKET)
    if registry is None:
        return []
    rows: list[AgentStatus] = []
    for key in await registry.keys():
        if key.startswith("hosts."):
            continue
        with contextlib.suppress(TransportError):
            value = await registry.get(key)
            row = None if value is None else decode_row(value)
            if row is not None and row.host is not UNSET:
                rows.append(row)
    return sorted(rows, key=lambda row: (str(row.host), row.name))


class RemoteClient:
    """The CLI's sync client shape (``call``, ``settimeout``, a context manager) over NATS."""

    def __init__(self, url: str, host: str, settings: ClusterSettings | None = None) -> None:
        self.host = host
        self._timeout: float | None = DEFAULT_TIMEOUT_S
        self._loop = asyncio.new_event_loop()
        try:
            self._cluster = self._loop.run_until_complete(connect(url, settings))
        except BaseException:
            self._loop.close()
            raise

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def call(self, method: str, params: Any = None) -> Any:
        if method == "agent.list":
            rows = self._loop.run_until_complete(cluster_agents(self._cluster))
            filters: dict[str, str | None] = {"cwd": None, "provider": None, "status": None}
            return msgspec.to_builtins(ListReply(rows, filters, list(FIELDS_OMITTED)))
        call = call_host(self._cluster, self.host, method, params, wait_s=self._timeout)
        return self._loop.run_until_complete(call)

    def follow_events(
        self, name: str, after_seq: int, on_event: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Hand each event of ``name`` after ``after_seq`` to ``on_event``, from the run's
        event channel in JetStream (what is recorded, then live), until its ``exit``.
        Returns ``{"state", "last_seq"}`` as the socket's ``agent.events --follow`` does."""
        return self._loop.run_until_complete(self._follow(name, after_seq, on_event))

    async def _follow(
        self, name: str, after_seq: int, on_event: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        status = await call_host(self._cluster, self.host, "agent.status", {"name": name})
        # ends as a socket follow ends when its daemon dies (new events would not come)
        watch = _Watch(self._cluster, rpc_subject(self.host), None)
        try:
            return await self._read(
                self._cluster.channel, str(status["run_id"]), after_seq, on_event, status
            )
        except asyncio.CancelledError:
            lost = watch.taken_back(self.host)
            if lost is not None:
                raise lost from None
            raise
        finally:
            watch.stop()

    async def _read(
        self,
        channel: ClusterChannel,
        run_id: str,
        after_seq: int,
        on_event: Callable[[dict[str, Any]], None],
        status: dict[str, Any],
    ) -> dict[str, Any]:
        from tether.daemon.hosts.names import events_channel
        from tether.transports.channel import Entry

        last = after_seq
        async for item in channel.tail(events_channel(self.host, run_id)):
            if not isinstance(item, Entry):
                continue
            try:
                event = jsondepth.decode_any(item.data)
            except ValueError:
                continue
            seq = event.get("seq") if isinstance(event, dict) else None
            if not isinstance(seq, int) or seq <= last:
                continue
            last = seq
            on_event(event)
            if event.get("type") == "exit":
                return {"state": event.get("status"), "last_seq": last}
        return {"state": status.get("state"), "last_seq": last}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._cluster.aclose())
        self._loop.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
