"""The one way to open a cluster: :func:`open_cluster` picks the implementation of
:class:`~tether.transports.cluster.Cluster` by the URL's scheme.

``nats://`` and ``tls://`` servers, alone or as a comma-separated list of one cluster's
seed servers, are NATS JetStream (:mod:`tether.transports.jetstream`); anything else is
:class:`~tether.transports.cluster.BadClusterURL` (a usage error: exit 2), said before
anything is imported or connected. The implementation is imported only here, and only
when asked for, so a URL never loads a client library it does not name.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable
from typing import Final

from tether.transports.cluster import (
    BadClusterURL,
    Cluster,
    ClusterSettings,
    redacted,
    server_list,
)
from tether.wire.limits import MAX_LINE_BYTES

__all__ = ["IMPLEMENTATIONS", "check_url", "open_cluster"]

# scheme -> the module implementing it (its ``open_cluster``)
IMPLEMENTATIONS: Final = {
    "nats": "tether.transports.jetstream",
    "tls": "tether.transports.jetstream",
}
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def check_url(url: str) -> str:
    """The module implementing ``url``'s scheme, or :class:`BadClusterURL`: every server
    of the list names its scheme, and all of them the same implementation."""
    found: set[str] = set()
    for server in server_list(url):
        scheme = _SCHEME.match(server)
        module = IMPLEMENTATIONS.get(scheme.group(1).lower() if scheme else "")
        if module is None:
            known = " or ".join(f"{name}://HOST:PORT" for name in IMPLEMENTATIONS)
            raise BadClusterURL(
                f"cannot use the cluster URL {redacted(server)!r}: name each server as "
                f"{known} (several: comma-separated)"
            )
        found.add(module)
    if len(found) > 1:
        raise BadClusterURL(f"the servers of {redacted(url)!r} name different transports")
    return found.pop()


async def open_cluster(
    url: str,
    *,
    settings: ClusterSettings | None = None,
    replicas: int = 1,
    streams: bool = True,
    prefix: str = "tether",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Cluster:
    """Connect to the cluster at ``url`` with the implementation its scheme names.

    ``streams``: look up the stream and the commit bucket the channel needs to append and
    commit, creating what is missing (when the credentials may); a client that only sends
    requests and tails (the CLI, a remote parent) passes False. ``replicas`` applies to
    what is created. Raises :class:`BadClusterURL` for a URL no implementation takes,
    :class:`~tether.transports.channel.TransportError` when the cluster cannot be reached
    or set up. Close the result with ``aclose``.
    """
    module = importlib.import_module(check_url(url))
    opener: Callable[..., Awaitable[Cluster]] = module.open_cluster
    return await opener(
        url,
        settings=settings or ClusterSettings(),
        replicas=replicas,
        streams=streams,
        prefix=prefix,
        max_line_bytes=max_line_bytes,
    )
