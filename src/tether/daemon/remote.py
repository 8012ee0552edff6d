"""Calling another host's daemon over NATS, and the cluster-wide agent list.

:func:`call_host` sends a request body exactly as on the socket to
``tether.host.<HOST>.rpc`` and returns the result, raising the same errors as the socket
client (:class:`~tether.daemon.client.DaemonCallError` with the daemon's code, or
:class:`~tether.daemon.client.DaemonUnavailable` when no daemon of that host is in the
cluster). :class:`RemoteClient` wraps it in the sync client's shape for the CLI.
:func:`cluster_agents` reads every host's rows from the registry bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether import jsondepth
from tether.daemon.client import DaemonCallError, DaemonUnavailable, result_of
from tether.daemon.hosts import REGISTRY_BUCKET, rpc_subject
from tether.daemon.protocol import ErrorCode, ProtocolError, Request, decode_response
from tether.wire.limits import MAX_LINE_BYTES

if TYPE_CHECKING:
    from nats.aio.client import Client

__all__ = ["RemoteClient", "call_host", "cluster_agents", "connect"]

DEFAULT_TIMEOUT_S = 60.0


async def connect(url: str, connect_options: dict[str, Any] | None = None) -> Client:
    import nats

    from tether.transports.jetstream import (
        CONNECT_TIMEOUT_S,
        on_nats_error,
        redacted,
        server_list,
    )

    options: dict[str, Any] = {
        "connect_timeout": 5,
        "max_reconnect_attempts": 3,
        "error_cb": on_nats_error,
    }
    options.update(connect_options or {})
    try:
        return await asyncio.wait_for(nats.connect(server_list(url), **options), CONNECT_TIMEOUT_S)
    except TimeoutError:
        raise DaemonUnavailable(f"cannot reach NATS at {redacted(url)}: timed out") from None
    except Exception as error:  # nats raises many unrelated types here
        raise DaemonUnavailable(f"cannot reach NATS at {redacted(url)}: {error}") from error


async def call_host(
    client: Client,
    host: str,
    method: str,
    params: Any = None,
    *,
    wait_s: float | None = DEFAULT_TIMEOUT_S,
    prefix: str = "tether",
) -> Any:
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    body = msgspec.json.encode(Request(1, method, params))
    try:
        reply = await client.request(
            rpc_subject(host, prefix),
            body,
            timeout=DEFAULT_TIMEOUT_S if wait_s is None else wait_s,
        )
    except NoRespondersError:
        raise DaemonUnavailable(f"no daemon of host {host!r} is in the cluster") from None
    except NatsTimeout:
        raise DaemonCallError(ErrorCode.BUSY, f"host {host!r} did not answer in time") from None
    response = decode_response(reply.data)
    if isinstance(response, ProtocolError):
        raise DaemonCallError(
            ErrorCode.INTERNAL, f"unreadable answer from {host}: {response.message}"
        )
    return result_of(response)


async def cluster_agents(client: Client) -> list[dict[str, Any]]:
    """Every host's agents (each row has a ``host`` field), sorted by host and name."""
    from nats.js.errors import BucketNotFoundError, NoKeysError

    try:
        kv = await client.jetstream().key_value(REGISTRY_BUCKET)
        keys = await kv.keys()
    except (BucketNotFoundError, NoKeysError):
        return []
    rows: list[dict[str, Any]] = []
    for key in keys:
        if key.startswith("hosts."):
            continue
        with contextlib.suppress(Exception):
            entry = await kv.get(key)
            if entry.value:
                row = jsondepth.decode_any(entry.value)
                if isinstance(row, dict):
                    rows.append(row)
    return sorted(rows, key=lambda row: (str(row.get("host")), str(row.get("name"))))


class RemoteClient:
    """The CLI's sync client shape (``call``, ``settimeout``, a context manager) over NATS."""

    def __init__(self, url: str, host: str, connect_options: dict[str, Any] | None = None) -> None:
        self.host = host
        self._timeout: float | None = DEFAULT_TIMEOUT_S
        self._loop = asyncio.new_event_loop()
        try:
            self._client = self._loop.run_until_complete(connect(url, connect_options))
        except BaseException:
            self._loop.close()
            raise

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def call(self, method: str, params: Any = None) -> Any:
        if method == "agent.list":
            return {"agents": self._loop.run_until_complete(cluster_agents(self._client))}
        call = call_host(self._client, self.host, method, params, wait_s=self._timeout)
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
        from tether.daemon.hosts import events_channel
        from tether.transports.channel import Entry
        from tether.transports.jetstream import JetStreamChannel

        status = await call_host(self._client, self.host, "agent.status", {"name": name})
        channel = JetStreamChannel(self._client, prefix="tether", max_line_bytes=MAX_LINE_BYTES)
        last = after_seq
        async for item in channel.tail(events_channel(self.host, str(status["run_id"]))):
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
            self._loop.run_until_complete(self._client.close())
        self._loop.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
