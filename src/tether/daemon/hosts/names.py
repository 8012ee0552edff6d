"""The cluster's names, one place: a host's name and the subjects, channels and registry
every host and client derives from it (``tether.host.HOST.rpc``, ``h.HOST.run.RUN.*``,
``_INBOX_HOST``), and how a daemon joins (:class:`ClusterOptions`). Pure; the link, the
remote clients and the cluster's agents all name things through here."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from tether.numbers import REPLICAS, from_env
from tether.transports.cluster import ClusterSettings

__all__ = [
    "HOST_NAME",
    "PENDING_METHOD",
    "REGISTRY_BUCKET",
    "ClusterOptions",
    "check_host",
    "control_channel",
    "events_channel",
    "host_inbox",
    "inbox_channel",
    "rpc_subject",
    "run_channels",
]

HOST_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
REGISTRY_BUCKET = "tether_agents"
# A caller's probe while its call is in flight (tether.daemon.hosts.remote.call_host): answered
# by the link itself, never by the daemon's method table (the socket has no use for it).
PENDING_METHOD = "host.pending"


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    """How a daemon joins a cluster: ``tether daemon --nats URL --host NAME``."""

    url: str
    host: str
    replicas: int = 1
    creds: str | None = None  # a NATS .creds file (JWT + NKEY seed) for this host
    ca: str | None = None  # the CA that signed the servers' TLS certificates

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        *,
        url: str | None = None,
        host: str | None = None,
        replicas: int | None = None,
        creds: str | None = None,
        ca: str | None = None,
    ) -> ClusterOptions | None:
        """Flags first, then ``TETHER_NATS_URL``, ``TETHER_HOST``, ``TETHER_NATS_REPLICAS``,
        ``TETHER_NATS_CREDS``, ``TETHER_NATS_CA``; ``None`` when no URL is given. A URL no
        transport takes is :class:`~tether.transports.cluster.BadClusterURL` (a
        ``ValueError``), as is a bad host name."""
        from tether.transports.opener import check_url

        url = url or env.get("TETHER_NATS_URL")
        if not url:
            return None
        check_url(url)
        host = host or env.get("TETHER_HOST") or socket.gethostname().split(".")[0]
        replicas = replicas or int(from_env(env, "TETHER_NATS_REPLICAS", REPLICAS, 1))
        return cls(
            url=url,
            host=check_host(host),
            replicas=replicas,
            creds=creds or env.get("TETHER_NATS_CREDS") or None,
            ca=ca or env.get("TETHER_NATS_CA") or None,
        )

    def settings(self) -> ClusterSettings:
        """This host's connection: its credentials and its own reply prefix."""
        return ClusterSettings(creds=self.creds, ca=self.ca, reply_prefix=host_inbox(self.host))


def check_host(name: str) -> str:
    if not HOST_NAME.fullmatch(name):
        raise ValueError(f"bad host name {name!r}: 1-64 of [A-Za-z0-9_-]")
    return name


def host_inbox(host: str) -> str:
    """The reply-subject prefix of a host daemon's connection, ``_INBOX_<host>``: its
    permissions may then let it subscribe to its own replies only (never ``_INBOX.>``,
    which would show it every client's replies and consumer deliveries)."""
    return f"_INBOX_{check_host(host)}"


def rpc_subject(host: str) -> str:
    return f"tether.host.{check_host(host)}.rpc"


def events_channel(host: str, run_id: str) -> str:
    return f"h.{check_host(host)}.run.{run_id}.events"


def inbox_channel(host: str, run_id: str) -> str:
    return f"h.{check_host(host)}.run.{run_id}.inbox"


def control_channel(host: str, run_id: str) -> str:
    return f"h.{check_host(host)}.run.{run_id}.control"


def run_channels(host: str, run_id: str) -> str:
    """The pattern matching a run's three channels (for ``tail_matching``)."""
    return f"h.{check_host(host)}.run.{run_id}.*"
