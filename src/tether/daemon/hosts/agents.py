"""The other hosts' agents, for this daemon's fleet (the
:class:`~tether.daemon.fleet.elsewhere.Elsewhere` a daemon in a cluster has).

Theory of operation: every host's link publishes its agents' rows under
``<host>.<name>`` in the cluster's registry (:mod:`tether.daemon.hosts.link`).
:class:`ClusterAgents` watches that registry (every row, then each change, resuming past
a lost connection) and keeps the other hosts' rows by name, so finding where a name runs
is a dict lookup. A verb naming one of them is sent to its host with
:func:`~tether.daemon.hosts.remote.call_host_as`, with no bound of its own (an ask takes
as long as its turn; a host lost with the call in flight is found by the call's probes
within seconds), and its answer comes back decoded into the verb's reply Struct; the
host's error code becomes this daemon's answer. A spawn it forwarded is known at once,
and an agent it removed forgotten at once (the registry says the same within the link's
sync, half a second later). A row another host wrote is checked as any input is
(:func:`~tether.daemon.hosts.remote.decode_row`), and its host is the key's, not what
the row says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from tether.daemon.fleet.replies import AgentStatus
from tether.daemon.hosts.names import HOST_NAME, REGISTRY_BUCKET, check_host
from tether.daemon.hosts.remote import call_host_as, decode_row
from tether.daemon.rpc.client import DaemonCallError, DaemonClientError
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode

if TYPE_CHECKING:
    from tether.transports.cluster import Cluster, Registry

__all__ = ["ClusterAgents"]

log = logging.getLogger("tether.daemon.hosts.agents")
R = TypeVar("R")
WATCH_RETRY_S = 1.0  # a watch that failed starts again after this long
MAX_ROWS = 100_000  # other hosts' rows kept; past it a new name is not learnt (logged once)


class ClusterAgents:
    """See the module docstring; ``start`` once the daemon joined, ``aclose`` to leave."""

    def __init__(self, host: str) -> None:
        self._host = check_host(host)
        self._rows: dict[str, dict[str, AgentStatus]] = {}  # name -> host -> row
        self._cluster: Cluster | None = None
        self._watching: asyncio.Task[None] | None = None
        self._count = 0  # rows kept
        self._full = False  # MAX_ROWS was reached (said once)

    @property
    def host(self) -> str:
        return self._host

    async def start(self, cluster: Cluster) -> None:
        """Watch ``cluster``'s registry and call its hosts from now on."""
        registry = await cluster.open_registry(REGISTRY_BUCKET)
        self._cluster = cluster
        self._watching = asyncio.ensure_future(self._watch(registry))

    async def aclose(self) -> None:
        if self._watching is not None:
            self._watching.cancel()
            with contextlib.suppress(BaseException):
                await self._watching
        self._cluster = None

    # -- the registry's view ----------------------------------------------------------

    def host_of(self, name: str) -> str | None:
        hosts = self._rows.get(name)
        return next(iter(hosts), None) if hosts else None

    def rows(self) -> list[AgentStatus]:
        return [row for hosts in self._rows.values() for row in hosts.values()]

    async def _watch(self, registry: Registry) -> None:
        while True:
            try:
                async for key, value in registry.watch():
                    self.apply(key, value)
            except Exception:
                log.exception("host %s: watching the registry failed; again", self._host)
            await asyncio.sleep(WATCH_RETRY_S)

    def apply(self, key: str, value: bytes | None) -> None:
        """One registry change: ``<host>.<name>`` set to ``value`` (None: deleted)."""
        host, _, name = key.partition(".")
        if host in ("hosts", self._host) or not name or not HOST_NAME.fullmatch(host):
            return  # a host's heartbeat, this daemon's own agents (its fleet has them)
        row = None if value is None else decode_row(value)
        if row is None or row.name != name:
            self._forget(host, name)
        else:
            self._keep(host, row)

    def _keep(self, host: str, row: AgentStatus) -> None:
        hosts = self._rows.setdefault(row.name, {})
        if host not in hosts:
            if self._count >= MAX_ROWS:
                if not self._full:
                    log.warning(
                        "host %s: over %d rows of other hosts; ignoring more", self._host, MAX_ROWS
                    )
                    self._full = True
                if not hosts:
                    del self._rows[row.name]
                return
            self._count += 1
        hosts[host] = msgspec.structs.replace(row, host=host)

    def _forget(self, host: str, name: str) -> None:
        hosts = self._rows.get(name)
        if hosts is not None and hosts.pop(host, None) is not None:
            self._count -= 1
            if not hosts:
                del self._rows[name]

    # -- calling their hosts ------------------------------------------------------------

    async def call(self, host: str, method: str, params: Any, reply: type[R]) -> R:
        cluster = self._cluster
        if cluster is None:
            raise RpcFailure(ErrorCode.SHUTTING_DOWN, "this daemon is not in its cluster now")
        try:
            answer = await call_host_as(cluster, host, method, params, reply, wait_s=None)
        except DaemonCallError as error:
            raise RpcFailure(error.code, _on(host, error.message)) from None
        except DaemonClientError as error:  # no daemon of that host, or no connection
            raise RpcFailure(ErrorCode.SHUTTING_DOWN, _on(host, str(error))) from None
        self._learn(host, method, params, answer)
        return answer

    def _learn(self, host: str, method: str, params: Any, answer: object) -> None:
        """What a forwarded spawn or rm did, known before the registry says it."""
        if method == "agent.spawn" and isinstance(answer, AgentStatus):
            self._keep(host, answer)
        elif method == "agent.rm" and isinstance(params, dict):
            name = params.get("name")
            if isinstance(name, str):
                self._forget(host, name)


def _on(host: str, message: str) -> str:
    """The message, saying which host answered it (once)."""
    return message if f"host {host!r}" in message else f"{message} (on host {host!r})"
