"""One daemon's membership in a cluster of hosts.

Theory of operation: ``tether daemon --nats URL --host NAME`` starts a :class:`HostLink`
beside the socket server, in the daemon's process, over the
:class:`~tether.transports.cluster.Cluster` its URL opens (NATS JetStream for ``nats://``
and ``tls://``; this module never names the transport). It hands every call to the daemon's own
dispatch (:meth:`~tether.daemon.rpc.server.Daemon.answer`: the method table, validation, caps
and error codes a socket connection gets), so it adds no second code path for any verb and
no second socket hop:

- **Verbs from other hosts.** It serves the requests on ``tether.host.<NAME>.rpc``: the
  payload is a request body exactly as on the socket (``{"id","method","params"}``), the
  reply a response body (``{"id","result"}`` or ``{"id","error"}``), with the daemon's own
  error codes. Each request is answered in a task of its own (a steer waiting for its ack
  holds up no other call). Verbs that need a live connection (``agent.events`` with
  ``follow``, ``channel.register_channel``, ``agent.drive``) answer ``invalid_params``
  (:meth:`~tether.daemon.rpc.server.CallContext.socket`); remote followers tail the run's
  event channel instead. A caller waiting long for an answer probes with
  ``host.pending {"id"}`` (answered by the link, in order behind the calls before it):
  "no responders" means this daemon is gone, ``pending: false`` that it restarted or
  never got the call, so the caller fails at once instead of waiting out its timeout.
- **One registry every host sees.** Every ``sync_every_s`` it lists its agents and puts
  each changed row into the registry ``tether_agents`` under ``<host>.<name>`` (with a
  ``host`` field), deletes rows of removed agents, and refreshes ``hosts.<NAME>``.
- **The lines themselves.** For every agent it forwards ``control.jsonl``,
  ``events.jsonl`` and ``inbox.jsonl`` into the channels ``h.<host>.run.<id>.control`` /
  ``.events`` / ``.inbox`` with
  :class:`~tether.daemon.hosts.bridge.Outbound` (``Nats-Msg-Id = run:offset``), woken by the
  process's one file watcher, so any host can tail a run from a sequence, and a restarted
  link resumes from its commits with nothing lost or doubled. A pass publishes the lines
  of every changed run together (each file's as one atomic batch: a run's control and
  inbox lines first, then its events up to where the event log ended before those were
  read, so no event reaches JetStream ahead of a line written before it) and gathers
  the acknowledgements after; each bridge
  commits at most every ``COMMIT_EVERY_S`` (a restart re-sends what came after, stored
  once by its message ids). A pass gathers changes for
  ``FORWARD_BATCH_S`` and then waits (at most ``FORWARD_DEFER_S``) until no call is in
  flight in the daemon, so a control's replication does not slow its own ack; lines
  reach JetStream that much later.

Agents keep running when the link or the daemon dies (they talk to local files); a
restarted daemon re-adopts them and its link resumes forwarding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from tether.daemon.hosts.bridge import Outbound
from tether.daemon.hosts.names import (
    PENDING_METHOD,
    REGISTRY_BUCKET,
    ClusterOptions,
    check_host,
    control_channel,
    events_channel,
    inbox_channel,
    rpc_subject,
)
from tether.daemon.rpc.client import result_of
from tether.daemon.rpc.protocol import (
    PREFIX_BYTES,
    ErrorCode,
    ProtocolError,
    Request,
    decode_request,
    decode_response,
    encode_failure,
    encode_ok,
    recover_id,
)
from tether.transports.channel import TransportError
from tether.transports.cluster import ClusterSettings

if TYPE_CHECKING:
    from tether.daemon.rpc.server import Daemon
    from tether.transports.cluster import Cluster, Incoming, Registry, Service
    from tether.transports.watch import FileWatcher

__all__ = ["HostLink", "init_cluster", "open_host_link"]

log = logging.getLogger("tether.daemon.hosts.link")

FORWARD_BATCH_S = 0.02  # a forwarding pass gathers what changed this long
FORWARD_DEFER_S = 0.01  # then waits at most this long for the calls in flight
# A bridge commits its progress at most this often (each commit is a JetStream round trip
# and a stored message, which cost more than the lines a steer forwards): a restart sends
# again what came after its last commit, and the message ids store it once.
COMMIT_EVERY_S = 1.0
CLOSE_COMMIT_S = 2.0  # a daemon leaving commits what it forwarded, within this long


async def open_host_link(options: ClusterOptions, daemon: Daemon) -> HostLink:
    """Connect to the cluster and make sure its registry exists (raises ``TransportError``
    if the cluster is away); :meth:`HostLink.start` once the daemon has recovered its
    agents."""
    from tether.transports.opener import open_cluster

    cluster = await open_cluster(
        options.url, settings=options.settings(), replicas=options.replicas
    )
    link = HostLink(host=options.host, cluster=cluster, daemon=daemon)
    try:
        await link.prepare()
    except BaseException:
        await link.aclose()
        raise
    return link


async def init_cluster(
    url: str, *, replicas: int = 1, settings: ClusterSettings | None = None
) -> list[str]:
    """Create the cluster's stream and its two registries if missing (``tether daemon
    --nats URL init-cluster``), with credentials that may: then the hosts' credentials need
    no right to create, change or delete a stream. Returns their names."""
    from tether.transports.opener import open_cluster

    cluster = await open_cluster(url, settings=settings, replicas=replicas)
    try:
        await cluster.open_registry(REGISTRY_BUCKET)
        return cluster.stores()
    finally:
        await cluster.aclose()


def _size(path: Path) -> int | None:
    """A file's size now (None: it cannot be read, and then no bound applies)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def failure(request_id: int, code: ErrorCode, message: str) -> bytes:
    """A response body (no frame prefix) answering ``code``."""
    return encode_failure(request_id, code, message)[PREFIX_BYTES:]


class HostLink:
    """See the module docstring. ``start`` after the daemon serves; ``aclose`` to leave."""

    def __init__(
        self, *, host: str, cluster: Cluster, daemon: Daemon, sync_every_s: float = 0.5
    ) -> None:
        self.host = check_host(host)
        self.cluster = cluster
        self.channel = cluster.channel
        self.daemon = daemon
        self.sync_every_s = sync_every_s
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bridges: dict[str, list[Outbound]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._uncommitted: dict[Outbound, float] = {}  # bridge -> since when
        self._rows: dict[str, bytes] = {}
        self._watcher: FileWatcher | None = None
        self._service: Service | None = None
        self._registry: Registry | None = None
        self._in_flight: dict[int, int] = {}  # request id -> calls of that id being answered

    async def prepare(self) -> None:
        """Open (or create) the registry."""
        self._registry = await self.cluster.open_registry(REGISTRY_BUCKET)

    async def start(self) -> None:
        """Answer this host's verbs and start publishing and forwarding (the daemon's
        ``on_start`` hook, after its agents are recovered)."""
        from tether.transports.watch import FileWatcher

        if self._registry is None:
            await self.prepare()
        self._watcher = FileWatcher(poll_interval=0.3)
        self._service = await self.cluster.serve(rpc_subject(self.host), self._on_request)
        self._spawn(self._sync_loop())
        self._spawn(self._forward_loop())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- verbs from other hosts ---------------------------------------------------------

    async def _on_request(self, message: Incoming) -> None:
        # The cluster serves a subject's requests one after another, in the order they
        # came: a call is counted in flight here, before any probe sent after it is
        # answered (inline, below), and then answered in a task of its own (the daemon's
        # in-flight cap bounds them, answering busy).
        request = decode_request(message.data)
        if isinstance(request, Request) and request.method == PENDING_METHOD:
            await message.respond(self._pending(request))
            return
        key = request.id if isinstance(request, Request) else None
        if key is not None:
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
        self._spawn(self._respond(message, request, key))

    async def _respond(
        self, message: Incoming, request: Request | ProtocolError, key: int | None
    ) -> None:
        try:
            await message.respond(await self.answer(message.data, request))
        finally:
            # after the reply is published: a probe answered "not pending" from here on
            # reaches the caller behind it (one connection's messages keep their order)
            if key is not None:
                left = self._in_flight.pop(key) - 1
                if left:
                    self._in_flight[key] = left

    def _pending(self, probe: Request) -> bytes:
        """The answer to ``host.pending {"id"}``: whether a call of that id is in flight
        here. A caller whose call is not (this daemon restarted, or never got it) and
        whose reply has not come knows it never will."""
        params = probe.params
        wanted = params.get("id") if isinstance(params, dict) else None
        if type(wanted) is not int:
            return failure(probe.id, ErrorCode.INVALID_PARAMS, "host.pending needs an int id")
        return encode_ok(probe.id, {"pending": wanted in self._in_flight})[PREFIX_BYTES:]

    async def answer(self, body: bytes, request: Request | ProtocolError | None = None) -> bytes:
        """The reply body to one request body (``request``: the body decoded already);
        never raises."""
        if request is None:
            request = decode_request(body)
        if isinstance(request, ProtocolError):
            return failure(recover_id(body), ErrorCode.MALFORMED_FRAME, request.message)
        reply = await self.daemon.answer(request)
        limit = self.cluster.max_payload
        if len(reply) > limit:
            message = (
                f"the answer ({len(reply)} bytes) is over the cluster's limit {limit}; page it"
            )
            return failure(request.id, ErrorCode.INTERNAL, message)
        return reply

    async def call(self, method: str, params: Any = None) -> Any:
        """Call one of this daemon's verbs in-process; its result, or ``DaemonCallError``."""
        response = decode_response(await self.daemon.answer(Request(0, method, params)))
        if isinstance(response, ProtocolError):
            raise TransportError(f"unreadable answer to {method}: {response.message}")
        return result_of(response)

    # -- the registry every host sees ---------------------------------------------------

    async def _sync_loop(self) -> None:
        while True:
            try:
                await self.sync_once()
            except (TransportError, TimeoutError) as error:
                # the cluster away or its stream not up yet (starting, a node lost):
                # expected, said in one line, retried
                log.warning("host %s: registry sync failed (%r); retrying", self.host, error)
            except Exception:
                log.exception("host %s: registry sync failed; retrying", self.host)
            await asyncio.sleep(self.sync_every_s)

    async def sync_once(self) -> None:
        """Publish changed agent rows, drop removed ones, attach forwarders to new runs."""
        assert self._registry is not None, "prepare() first"
        listed = await self.call("agent.list", {})
        agents = listed.get("agents", []) if isinstance(listed, dict) else []
        seen: set[str] = set()
        for agent in agents:
            name = str(agent.get("name"))
            seen.add(name)
            row = msgspec.json.encode({**agent, "host": self.host})
            if self._rows.get(name) != row:
                await self._registry.put(f"{self.host}.{name}", row)
                self._rows[name] = row
            self._attach(agent)
        for name in set(self._rows) - seen:
            with contextlib.suppress(TransportError):
                await self._registry.delete(f"{self.host}.{name}")
            del self._rows[name]
            self._detach(name)
        beat = {"host": self.host, "agents": len(seen), "at": time.time()}
        await self._registry.put(f"hosts.{self.host}", msgspec.json.encode(beat))

    # -- forwarding the lines -----------------------------------------------------------

    def _attach(self, agent: dict[str, Any]) -> None:
        name, run_id, run_dir = agent.get("name"), agent.get("run_id"), agent.get("run_dir")
        if not (isinstance(name, str) and isinstance(run_id, str) and isinstance(run_dir, str)):
            return
        if name in self._bridges or self._watcher is None:
            return
        directory = Path(run_dir)
        channels = (
            (control_channel(self.host, run_id), "control.jsonl"),
            (events_channel(self.host, run_id), "events.jsonl"),
            (inbox_channel(self.host, run_id), "inbox.jsonl"),
        )
        bridges = [Outbound(self.channel, channel, directory / file) for channel, file in channels]
        self._bridges[name] = bridges
        for bridge in bridges:
            self._watcher.watch(bridge.path)
        self._spawn(self._pump_run(bridges))

    def _detach(self, name: str) -> None:
        for bridge in self._bridges.pop(name, []):
            self._uncommitted.pop(bridge, None)
            if self._watcher is not None:
                self._watcher.unwatch(bridge.path)
            bridge.close()

    async def _forward_loop(self) -> None:
        assert self._watcher is not None
        while True:
            changed = await self._watcher.wait(timeout=1.0)
            # Gather a batch, and let calls waiting on a child (a steer waiting for its
            # ack) finish first: forwarding each control line at once competed with the
            # child and the call for the CPU and made every control-to-ack on a host about
            # 2 ms slower (bench/scale_out.py, "steer->ack, no cluster" beside it). A
            # 20 ms gather (5 ms before) took cross-host steer->ack p50 from 2.0-2.4 to
            # 1.3-1.9 ms at load 5-6 (fewer passes, each landing in fewer calls).
            await asyncio.sleep(FORWARD_BATCH_S)
            await self.daemon.quiet(FORWARD_DEFER_S)
            # every file of a run whose files changed (an ack written meanwhile goes in
            # this pass beside its control line), all at once: their lines leave in one
            # write to NATS and their acknowledgements come back together
            due = [
                bridges
                for bridges in list(self._bridges.values())
                if not changed or any(bridge.path in changed for bridge in bridges)
            ]
            await asyncio.gather(*(self._pump_run(bridges) for bridges in due))
            await self._commit_due(time.monotonic() - COMMIT_EVERY_S)

    async def _commit_due(self, before: float) -> None:
        """Commit the bridges with progress whose last commit is older than ``before``."""
        due = [bridge for bridge, at in self._uncommitted.items() if at <= before]
        await asyncio.gather(*(self._commit(bridge) for bridge in due))

    async def _commit(self, bridge: Outbound) -> None:
        async with self._locks.setdefault(bridge.name, asyncio.Lock()):
            try:
                await bridge.commit()
            except TransportError as error:  # kept as due: the next pass tries again
                log.warning("host %s: committing %s failed: %s", self.host, bridge.name, error)
                return
            self._uncommitted.pop(bridge, None)

    async def _pump_run(self, bridges: list[Outbound]) -> None:
        """One run's control and inbox lines, then its events up to where its event log
        ended before those were read: an event (its ``exit`` above all) never reaches
        JetStream ahead of a control or inbox line written before it. A remote parent
        ends at the exit and reads nothing after it (the three files went at once
        before, and a burst's inbox lines could land behind the exit and never be read)."""
        control, events, inbox = bridges
        limit = _size(events.path)
        sent = await asyncio.gather(self._pump(control), self._pump(inbox))
        if all(sent):  # else the next pass sends them first
            await self._pump(events, limit)

    async def _pump(self, bridge: Outbound, limit: int | None = None) -> bool:
        """Forward what ``bridge``'s file has (up to ``limit``); False if that failed."""
        lock = self._locks.setdefault(bridge.name, asyncio.Lock())
        async with lock:  # one pump at a time per file, or two would interleave its lines
            if not bridge.started:
                # it reads its committed offset from NATS: while NATS is away this fails
                # and the next pass tries again (a bridge left unstarted forwarded nothing)
                try:
                    await bridge.start()
                except (TransportError, OSError) as error:
                    log.warning("host %s: forwarding %s failed: %s", self.host, bridge.name, error)
                    return False
            return await self._pump_locked(bridge, limit)

    async def _pump_locked(self, bridge: Outbound, limit: int | None) -> bool:
        # Any failure leaves the bridge rewound to its first unsent line and is retried on
        # the next pass (at least once a second); it must never end the forwarding loop,
        # which pumps inline: one escaped error there stopped a host's forwarding for good.
        sent = False
        try:
            while await bridge.pump(limit):
                pass
            sent = True
        except (TransportError, OSError) as error:
            log.warning("host %s: forwarding %s failed: %s", self.host, bridge.name, error)
        except Exception:
            log.exception("host %s: forwarding %s failed; retrying", self.host, bridge.name)
        if bridge.uncommitted:  # due a second after the commit before it
            self._uncommitted.setdefault(bridge, time.monotonic())
        return sent

    # -- leaving ------------------------------------------------------------------------

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(Exception):  # leave the progress for the next daemon
            async with asyncio.timeout(CLOSE_COMMIT_S):
                await self._commit_due(math.inf)
        if self._service is not None:
            await self._service.stop()
        for name in list(self._bridges):
            self._detach(name)
        if self._watcher is not None:
            self._watcher.close()
        await self.cluster.aclose()
