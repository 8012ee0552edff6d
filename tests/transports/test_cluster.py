"""The cluster interface (tether.transports.cluster) and its opener, over a real nats-server.

The opener picks the implementation by the URL's scheme and refuses every other URL as a
usage error before anything connects; the JetStream cluster answers requests and serves
them in order, tells "no responders" from "timed out", keeps registries (put, get,
delete, keys, a watch that gives the current view and then each change) and reports its
payload limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.channels import nats_server
from tests.support.waits import loop_pass

from tether.transports.channel import TransportError
from tether.transports.cluster import (
    BadClusterURL,
    Cluster,
    Incoming,
    NoResponders,
    RequestTimedOut,
)
from tether.transports.opener import check_url, open_cluster

__all__ = ["nats_server"]  # fixture

JETSTREAM = "tether.transports.jetstream"


@pytest.mark.parametrize(
    "url",
    [
        "nats://127.0.0.1:4222",
        "tls://nats.example:4222",
        "NATS://a:1",
        "nats://a:1, nats://b:2,tls://c:3",
        "nats://user:pass@a:1",
    ],
)
def test_nats_and_tls_urls_are_jetstream(url: str) -> None:
    assert check_url(url) == JETSTREAM


@pytest.mark.parametrize(
    "url",
    ["", " , ", "127.0.0.1:4222", "http://a:1", "redis://a:1", "nats://a:1,ws://b:2", "nats:/a"],
)
def test_other_urls_are_a_usage_error_naming_the_schemes(url: str) -> None:
    with pytest.raises(BadClusterURL) as refused:
        check_url(url)
    assert isinstance(refused.value, ValueError)  # the CLI's usage error (exit 2)
    assert isinstance(refused.value, TransportError)


def test_a_refused_url_hides_its_password() -> None:
    with pytest.raises(BadClusterURL) as refused:
        check_url("http://op:hunter2@a:1")
    assert "hunter2" not in str(refused.value)
    assert "nats://HOST:PORT" in str(refused.value)


@given(st.text(max_size=200))
def test_check_url_is_total(url: str) -> None:
    with contextlib.suppress(BadClusterURL):
        assert check_url(url) == JETSTREAM


def test_a_bad_url_connects_to_nothing() -> None:
    async def main() -> None:
        with pytest.raises(BadClusterURL):
            await open_cluster("ftp://127.0.0.1:1")

    asyncio.run(main())


async def _open(url: str) -> Cluster:
    return await open_cluster(url, prefix=f"t{os.urandom(4).hex()}")


def test_requests_are_served_in_the_order_they_came(nats_server: object) -> None:
    served: list[bytes] = []
    active = 0

    async def handler(request: Incoming) -> None:
        nonlocal active
        active += 1
        assert active == 1  # one after another, never two at once
        await loop_pass()  # a second request served meanwhile would find active == 1
        served.append(request.data)
        await request.respond(b"re:" + request.data)
        active -= 1

    async def main() -> None:
        cluster = await _open(nats_server.url)  # type: ignore[attr-defined]
        try:
            assert cluster.max_payload >= 1024 * 1024  # the server's default is 1 MiB
            service = await cluster.serve("t.svc", handler)
            bodies = [b"%d" % i for i in range(50)]
            async with asyncio.timeout(30):
                replies = await asyncio.gather(
                    *(cluster.request("t.svc", body, wait_s=20) for body in bodies)
                )
            assert replies == [b"re:" + body for body in bodies]
            assert served == bodies
            await service.stop()
            with pytest.raises(NoResponders):  # nobody serves it any more
                await cluster.request("t.svc", b"x", wait_s=20)
        finally:
            await cluster.aclose()

    asyncio.run(main())


def test_no_responders_and_timed_out_are_told_apart(nats_server: object) -> None:
    async def silent(request: Incoming) -> None:
        pass  # never answers

    async def main() -> None:
        cluster = await _open(nats_server.url)  # type: ignore[attr-defined]
        try:
            with pytest.raises(NoResponders):
                await cluster.request("t.nobody", b"x", wait_s=20)
            await cluster.serve("t.silent", silent)
            with pytest.raises(RequestTimedOut):
                await cluster.request("t.silent", b"x", wait_s=0.2)
        finally:
            await cluster.aclose()
        with pytest.raises(TransportError):  # a closed connection is a TransportError
            await cluster.request("t.silent", b"x", wait_s=1)

    asyncio.run(main())


def test_a_registry_keeps_values_and_a_watch_sees_every_change(nats_server: object) -> None:
    async def main() -> None:
        cluster = await _open(nats_server.url)  # type: ignore[attr-defined]
        name = f"reg_{os.urandom(4).hex()}"
        try:
            assert await cluster.find_registry(name) is None  # nothing is created
            registry = await cluster.open_registry(name)
            assert f"KV_{name}" in cluster.stores()
            assert await registry.keys() == []
            assert await registry.get("B.w1") is None
            await registry.put("B.w1", b"one")
            await registry.put("hosts.B", b"beat")
            assert await registry.get("B.w1") == b"one"
            assert sorted(await registry.keys()) == ["B.w1", "hosts.B"]
            found = await cluster.find_registry(name)
            assert found is not None
            assert await found.get("hosts.B") == b"beat"

            watch = registry.watch()
            async with asyncio.timeout(20):
                first = {await anext(watch), await anext(watch)}
                assert first == {("B.w1", b"one"), ("hosts.B", b"beat")}
                await registry.delete("B.w1")
                await registry.put("C.w2", b"two")
                assert await anext(watch) == ("B.w1", None)
                assert await anext(watch) == ("C.w2", b"two")
            await watch.aclose()
            assert await registry.get("B.w1") is None
            assert sorted(await registry.keys()) == ["C.w2", "hosts.B"]
        finally:
            await cluster.aclose()

    asyncio.run(main())


def test_a_client_that_only_calls_opens_no_streams(nats_server: object) -> None:
    async def main() -> None:
        prefix = f"t{os.urandom(4).hex()}"
        url = nats_server.url  # type: ignore[attr-defined]
        caller = await open_cluster(url, prefix=prefix, streams=False)
        try:
            with pytest.raises(TransportError, match="not set up"):
                await caller.channel.committed("run.x.events", "reader")
        finally:
            await caller.aclose()
        host = await open_cluster(url, prefix=prefix)
        try:
            offset = await host.channel.append("run.x.events", b"{}")
            await host.channel.commit("run.x.events", "reader", offset)
            assert await host.channel.committed("run.x.events", "reader") == offset
        finally:
            await host.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(
    "argv",
    [
        ["agent", "--nats", "http://op:hunter2@x:1", "--host", "B", "status", "w1"],
        ["daemon", "--nats", "http://op:hunter2@x:1", "--foreground"],
        ["daemon", "--nats", "redis://op:hunter2@x:1", "init-cluster"],
    ],
)
def test_the_cli_refuses_a_bad_cluster_url_as_usage(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_SOCKET": str(tmp_path / "none.sock")}
    env.pop("TETHER_NATS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "nats://HOST:PORT" in done.stderr
    assert "hunter2" not in done.stderr
    assert "Traceback" not in done.stderr
