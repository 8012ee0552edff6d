"""Hosts authenticate to NATS, and per-subject permissions keep each to its own runs.

A real nats-server with the users and permissions of ``docs/scale-out.md``: a client
without credentials is refused; host A may append to its own runs' channels and not to
host B's; host A may not answer host B's verb requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.nats_server import NatsServer, run_nats_server

from tether.daemon.hosts.link import init_cluster
from tether.transports.channel import TransportError
from tether.transports.jetstream import open_jetstream

USERS = ("A", "B")


def host_permissions(host: str) -> str:
    """The host daemon role docs/scale-out.md gives a host (kept in step with it): publish
    its own runs' lines and registry rows, answer its own verbs, read its own replies,
    read the registry (one consumer on its bucket: where each name runs) and call the
    other hosts' verbs (a verb naming their agent, forwarded); no consumer on the runs'
    stream, no message read there, so nothing of another host's runs; no stream
    created, changed or deleted (the operator's ``tether daemon init-cluster`` makes
    them)."""
    return f"""{{
        publish: {{ allow: [
          "tether.ch.h.{host}.>",
          "$KV.tether_agents.{host}.>", "$KV.tether_agents.hosts.{host}",
          "$KV.tether_offsets.*.h.{host}.>",
          "$JS.API.STREAM.INFO.TETHER_TETHER", "$JS.API.STREAM.INFO.KV_tether_agents",
          "$JS.API.STREAM.INFO.KV_tether_offsets", "$JS.API.STREAM.MSG.GET.KV_tether_offsets",
          "$JS.API.CONSUMER.CREATE.KV_tether_agents", "tether.host.*.rpc"
        ] }}
        subscribe: {{ allow: ["tether.host.{host}.rpc", "_INBOX_{host}.>"] }}
        allow_responses: true
      }}"""


# The operator role: the CLI and the Python API of whoever runs the cluster, driving any
# host and reading any run (consumers on the stream and the registry).
OPERATOR_PERMISSIONS = """{
        publish: { allow: ["tether.host.*.rpc", "$JS.API.>"] }
        subscribe: { allow: ["_INBOX.>"] }
      }"""


def server_config() -> str:
    users = [
        f'{{ user: "host{h}", password: "secret-{h}", permissions: {host_permissions(h)} }}'
        for h in USERS
    ]
    users.append(
        f'{{ user: "operator", password: "secret-op", permissions: {OPERATOR_PERMISSIONS} }}'
    )
    joined = ",\n".join(users)
    return f"""
jetstream: enabled
accounts {{
  TETHER {{
    jetstream: enabled
    users: [
      {joined}
    ]
  }}
}}
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    root = tmp_path_factory.mktemp("nats-auth")
    config = root / "server.conf"
    config.write_text(server_config())
    with run_nats_server(root / "js", extra=["-c", str(config)]) as server:
        asyncio.run(init_cluster(url_for(server, "op")))
        yield server


def url_for(server: NatsServer, host: str | None) -> str:
    """``host`` A or B: that host daemon's login; ``"op"``: the operator's; None: none."""
    if host is None:
        return server.url
    if host == "op":
        return f"nats://operator:secret-op@127.0.0.1:{server.port}"
    return f"nats://host{host}:secret-{host}@127.0.0.1:{server.port}"


def host_options(host: str) -> dict[str, object]:
    """What ``tether daemon --host`` connects with (its own reply-subject prefix)."""
    from tether.daemon.hosts.names import host_inbox

    return {"inbox_prefix": host_inbox(host)}


def test_a_client_without_credentials_is_refused(secured: NatsServer) -> None:
    async def main() -> None:
        with pytest.raises(TransportError, match="cannot reach NATS"):
            await open_jetstream(url_for(secured, None))

    asyncio.run(main())


def test_a_wrong_password_is_refused_and_not_echoed(secured: NatsServer) -> None:
    async def main() -> None:
        url = f"nats://hostA:wrong-password@127.0.0.1:{secured.port}"
        with pytest.raises(TransportError, match="cannot reach NATS") as refused:
            await open_jetstream(url)
        assert "wrong-password" not in str(refused.value)

    asyncio.run(main())


def test_a_host_appends_to_its_own_runs_only(secured: NatsServer) -> None:
    async def main() -> None:
        channel = await open_jetstream(url_for(secured, "A"), connect_options=host_options("A"))
        try:
            offset = await channel.append("h.A.run.r1.events", b'{"seq":0}')
            assert offset >= 1
            with pytest.raises(TransportError):
                await channel.append("h.B.run.r1.events", b'{"seq":0,"forged":true}')
        finally:
            await channel.aclose()
        reader = await open_jetstream(url_for(secured, "op"))
        try:
            info = await reader.js.stream_info(reader.stream)
            assert info.state.messages == 1  # the forged line never reached the stream
        finally:
            await reader.aclose()

    asyncio.run(main())


def test_a_host_may_not_create_change_or_delete_the_streams(tmp_path: Path) -> None:
    """On a cluster nobody initialised, a host daemon's login cannot make the stream and
    says how to (the operator's ``init-cluster``); once made, it can use the stream and
    still not change or delete it, nor create another."""

    async def main(server: NatsServer) -> None:
        import nats
        from nats.errors import Error as NatsError
        from nats.js.api import StreamConfig

        with pytest.raises(TransportError, match="init-cluster"):
            await open_jetstream(url_for(server, "A"), connect_options=host_options("A"))
        await init_cluster(url_for(server, "op"))
        channel = await open_jetstream(url_for(server, "A"), connect_options=host_options("A"))
        try:
            assert await channel.append_many(
                "h.A.run.r.events", [(b"{}", "a:0"), (b"{}", "a:3")]
            ) == [1, 2]
            assert channel.atomic  # the operator made the stream with atomic batches
        finally:
            await channel.aclose()
        client = await nats.connect(url_for(server, "A"), **host_options("A"))
        try:
            js = client.jetstream(timeout=1.0)
            info = await js.stream_info("TETHER_TETHER")
            with pytest.raises((NatsError, TimeoutError)):
                await js.update_stream(info.config)
            with pytest.raises((NatsError, TimeoutError)):
                await js.delete_stream("TETHER_TETHER")
            with pytest.raises((NatsError, TimeoutError)):
                await js.add_stream(StreamConfig(name="HOSTA", subjects=["tether.ch.h.A.x"]))
        finally:
            await client.close()

    config = tmp_path / "server.conf"
    config.write_text(server_config())
    with run_nats_server(tmp_path / "js", extra=["-c", str(config)]) as server:
        asyncio.run(main(server))


def test_a_jetstream_request_unanswered_at_start_is_a_transport_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JetStream API request that gets no answer while a channel is set up (here: a
    host whose login may not look up the commit bucket, so the server drops the request;
    a busy server looks the same) is a ``TransportError`` naming what could not be read,
    which ``tether daemon`` reports as "cannot join the cluster: ..."; it escaped as
    nats-py's bare "nats: timeout" before (seen when a bench started three daemons at
    load 5.5); after asking again for ``LOOKUP_WAIT_S`` (1 s here, 30 s by default)."""
    from tether.transports import jetstream

    monkeypatch.setattr(jetstream, "LOOKUP_WAIT_S", 1.0)
    limited = host_permissions("C").replace('"$JS.API.STREAM.INFO.KV_tether_offsets", ', "")
    assert limited != host_permissions("C")
    config = tmp_path / "server.conf"
    config.write_text(
        server_config().replace(
            "users: [",
            f'users: [\n      {{ user: "hostC", password: "secret-C", permissions: {limited} }},',
        )
    )

    async def main(server: NatsServer) -> None:
        await init_cluster(url_for(server, "op"))
        with pytest.raises(TransportError, match="cannot read the bucket tether_offsets"):
            await open_jetstream(url_for(server, "C"), connect_options=host_options("C"))

    with run_nats_server(tmp_path / "js", extra=["-c", str(config)]) as server:
        asyncio.run(main(server))


def test_a_host_cannot_answer_another_hosts_verbs(secured: NatsServer) -> None:
    async def main() -> None:
        import nats
        from nats.aio.msg import Msg
        from nats.errors import NoRespondersError

        impostor = await nats.connect(url_for(secured, "A"), **host_options("A"))
        caller = await nats.connect(url_for(secured, "op"))
        try:

            async def forge(message: Msg) -> None:
                await message.respond(b"forged")

            await impostor.subscribe("tether.host.B.rpc", cb=forge)
            await impostor.flush()
            with pytest.raises(NoRespondersError):
                await caller.request("tether.host.B.rpc", b"{}", timeout=2)
        finally:
            await impostor.close()
            await caller.close()

    asyncio.run(main())


def test_a_hosts_credentials_cannot_read_another_hosts_runs(secured: NatsServer) -> None:
    """Host A holds its daemon's credentials: B's run lines are in the stream, yet A can
    open no consumer on them (nor on its own), read no message by sequence, subscribe to
    no channel subject and see no other client's replies; the operator reads them."""

    async def main() -> None:
        import nats
        from nats.errors import Error as NatsError
        from nats.js.api import ConsumerConfig

        b_host = await open_jetstream(url_for(secured, "B"), connect_options=host_options("B"))
        try:
            await b_host.append("h.B.run.secret.events", b'{"seq":0,"text":"private"}')
        finally:
            await b_host.aclose()
        denied: list[str] = []
        reported = asyncio.Event()

        async def on_error(error: Exception) -> None:
            denied.append(str(error))
            reported.set()

        want = [
            f"permissions violation for publish to {subject}"
            for subject in (
                '"$js.api.consumer.create.tether_tether"',  # the ordered consumer's create
                '"$js.api.consumer.create.tether_tether.snoop.tether.ch.h.b.run.secret.events"',
                '"$js.api.stream.msg.get.tether_tether"',
                '"$js.api.direct.get.tether_tether"',
            )
        ] + [
            f"permissions violation for subscription to {subject}"
            for subject in ('"tether.ch.h.b.>"', '"_inbox.>"')
        ]

        a_host = await nats.connect(url_for(secured, "A"), error_cb=on_error, **host_options("A"))
        try:
            js = a_host.jetstream(timeout=1.0)
            for subject in ("tether.ch.h.B.run.secret.events", "tether.ch.h.A.>"):
                with pytest.raises(NatsError):
                    await js.subscribe(subject, stream="TETHER_TETHER", ordered_consumer=True)
                with pytest.raises(NatsError):
                    await js.pull_subscribe(subject, "snoop", stream="TETHER_TETHER")
                with pytest.raises(NatsError):
                    await js.add_consumer(
                        "TETHER_TETHER", ConsumerConfig(name="snoop", filter_subject=subject)
                    )
            with pytest.raises(NatsError):
                await js.get_msg("TETHER_TETHER", seq=1)
            with pytest.raises(NatsError):
                await js.get_msg("TETHER_TETHER", seq=1, direct=True)
            seen: list[bytes] = []

            async def snoop(message: object) -> None:
                seen.append(message.data)  # type: ignore[attr-defined]

            await a_host.subscribe("tether.ch.h.B.>", cb=snoop)
            await a_host.subscribe("_INBOX.>", cb=snoop)
            await a_host.flush()
            async with asyncio.timeout(20):  # the server reports each refusal on its own
                while not all(any(w in e for e in denied) for w in want):
                    reported.clear()
                    await reported.wait()
        finally:
            await a_host.close()
        operator = await open_jetstream(url_for(secured, "op"))
        try:
            tail = operator.tail("h.B.run.secret.events")
            async with asyncio.timeout(20):
                entry = await anext(tail)
            await tail.aclose()
            assert b"private" in entry.data  # type: ignore[union-attr]
        finally:
            await operator.aclose()
        assert not seen  # a late delivery of B's line or of the operator's replies to A

    asyncio.run(main())


def _make_tls(root: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for 127.0.0.1 (openssl)."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed to make the test certificates")
    ca_key, ca, key, csr, cert = (root / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem"))
    ext = root / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "1", "-subj", "/CN=tether test CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


def test_tls_servers_are_reached_with_the_hosts_ca_and_refused_without(tmp_path: Path) -> None:
    from tether.transports.cluster import ClusterSettings
    from tether.transports.jetstream import nats_options

    ca, cert, key = _make_tls(tmp_path)
    extra = ["--tls", "--tlscert", str(cert), "--tlskey", str(key)]
    with run_nats_server(tmp_path / "js", extra=extra) as server:
        url = f"tls://127.0.0.1:{server.port}"

        async def main() -> None:
            options = nats_options(ClusterSettings(ca=str(ca)))
            channel = await open_jetstream(url, connect_options=options)
            try:
                assert await channel.append("h.A.run.t.events", b"{}") >= 1
            finally:
                await channel.aclose()
            with pytest.raises(TransportError, match="cannot reach NATS"):
                await open_jetstream(url)  # the system trust store does not know this CA

        asyncio.run(main())
