"""The cluster interface: what the hosts of a cluster need from the network between them,
and the one opener that picks its implementation by URL.

Theory of operation: a host daemon (:mod:`tether.daemon.hosts`) needs four things of its
cluster, and nothing else:

- **streams**: the :class:`~tether.transports.channel.Channel` every transport offers
  (append, tail from an offset, commit), plus ``tail_matching`` (one reader for every
  channel whose name matches a pattern: a parent following a run's three channels);
- **request/reply**: :meth:`Cluster.request` sends a body to a subject and returns the
  reply's body, or raises :class:`NoResponders` (nobody serves the subject: there is no
  daemon of that host) or :class:`RequestTimedOut`; :meth:`Cluster.serve` hands each
  request on a subject to a handler, **one after another in the order they came**, so a
  handler that answers a request inline answers it behind every request before it (the
  host link's ``host.pending`` probe relies on this);
- **a key-value registry** (:class:`Registry`): put, get, delete, keys, and a watch that
  gives every key's value and then each change, resuming after a lost connection with
  nothing missed;
- **the payload limit** (:attr:`Cluster.max_payload`): a request or reply body longer than
  this cannot be sent.

:func:`tether.transports.opener.open_cluster` picks the implementation by the URL's
scheme: ``nats://`` and ``tls://`` URLs, and comma-separated lists of them (a cluster's
seed servers), are NATS JetStream (:mod:`tether.transports.jetstream`, ``pip install
'tether[nats]'``); anything else is :class:`BadClusterURL`, a usage error. Nothing here
imports a client library: only the implementation does.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from tether.transports.channel import Channel, Entry, TransportError

__all__ = [
    "BadClusterURL",
    "Cluster",
    "ClusterChannel",
    "ClusterSettings",
    "Incoming",
    "NoResponders",
    "Registry",
    "RequestTimedOut",
    "Service",
    "redacted",
    "server_list",
]


class BadClusterURL(TransportError, ValueError):
    """The URL names no cluster transport tether has (a usage error)."""


class NoResponders(TransportError):
    """Nobody serves the subject a request was sent to (nothing was delivered)."""


class RequestTimedOut(TransportError):
    """No reply came within the request's timeout (it may have been carried out)."""


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    """How to connect, whatever the transport: a credentials file (for NATS a ``.creds``
    file, JWT and NKEY seed), the CA that signed the servers' TLS certificates (the system
    trust store otherwise), and the prefix of this client's reply subjects (a host
    daemon's own, so its permissions may let it read its own replies only). A user and
    password go in the URL itself (``nats://user:pass@host:4222``)."""

    creds: str | None = None
    ca: str | None = None
    reply_prefix: str | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, creds: str | None = None, ca: str | None = None
    ) -> ClusterSettings:
        """The arguments first, then ``TETHER_NATS_CREDS`` and ``TETHER_NATS_CA``."""
        return cls(
            creds=creds or env.get("TETHER_NATS_CREDS") or None,
            ca=ca or env.get("TETHER_NATS_CA") or None,
        )


class ClusterChannel(Channel, Protocol):
    """The cluster's streams: a :class:`Channel` that can also follow many channels."""

    def tail_matching(
        self, pattern: str, *, after: int | None = None
    ) -> AsyncIterator[tuple[str, Entry]]:
        """``(channel name, entry)`` for every channel whose name matches ``pattern`` (``*``
        one token, a last ``>`` the rest), in the stream's order, after ``after``."""
        ...


class Incoming(Protocol):
    """One request being served."""

    @property
    def data(self) -> bytes: ...

    async def respond(self, body: bytes) -> None:
        """Send the reply (nothing when the sender wants none); never raises: a sender
        that went away meanwhile simply gets nothing."""
        ...


Handler = Callable[[Incoming], Awaitable[None]]


class Service(Protocol):
    """A subject being served (:meth:`Cluster.serve`)."""

    async def stop(self) -> None: ...


class Registry(Protocol):
    """A key-value bucket every host sees. Keys are dot-separated tokens of
    ``[A-Za-z0-9_-]``; values are bytes. Failures are :class:`TransportError`."""

    async def put(self, key: str, value: bytes) -> None: ...

    async def get(self, key: str) -> bytes | None:
        """The key's value; None when it has none (never set, or deleted)."""
        ...

    async def delete(self, key: str) -> None: ...

    async def keys(self) -> list[str]: ...

    def watch(self) -> AsyncIterator[tuple[str, bytes | None]]:
        """``(key, value)`` for every key that has one, then ``(key, new value)`` for each
        change as it happens (None: deleted), until cancelled; after a lost connection it
        goes on from the last change it gave, so a reader's view misses nothing."""
        ...


class Cluster(Protocol):
    """See the module docstring. Close with :meth:`aclose`."""

    @property
    def channel(self) -> ClusterChannel: ...

    @property
    def max_payload(self) -> int:
        """The largest request or reply body the cluster carries, in bytes."""
        ...

    async def request(self, subject: str, body: bytes, *, wait_s: float | None) -> bytes:
        """The reply's body; :class:`NoResponders`, :class:`RequestTimedOut` after
        ``wait_s`` (None: no bound), or :class:`TransportError` when the connection failed."""
        ...

    async def serve(self, subject: str, handler: Handler) -> Service: ...

    async def open_registry(self, name: str) -> Registry:
        """The registry ``name``, created if missing (and the credentials may)."""
        ...

    async def find_registry(self, name: str) -> Registry | None:
        """The registry ``name``; None when it does not exist (nothing is created)."""
        ...

    def stores(self) -> list[str]:
        """The names of the stores this cluster keeps its streams and registries in (what
        ``tether daemon init-cluster`` reports)."""
        ...

    async def aclose(self) -> None: ...


def server_list(url: str) -> list[str]:
    """``nats://a:4222,nats://b:4222`` (a cluster's seed servers) as a list."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise BadClusterURL("no cluster URL given")
    return servers


def redacted(url: str) -> str:
    """The URL without a password (errors are shown and logged)."""
    return re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", url)
