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

from tether.transports.channel import TransportError
from tether.transports.jetstream import open_jetstream

USERS = ("A", "B")


def host_permissions(host: str) -> str:
    """The permissions block docs/scale-out.md gives a host (kept in step with it)."""
    return f"""{{
        publish: {{ allow: [
          "tether.ch.h.{host}.>", "tether.host.*.rpc", "$JS.API.>",
          "$KV.tether_agents.{host}.>", "$KV.tether_agents.hosts.{host}",
          "$KV.tether_offsets.>", "_INBOX.>"
        ] }}
        subscribe: {{ allow: ["tether.host.{host}.rpc", "_INBOX.>"] }}
      }}"""


def server_config() -> str:
    users = ",\n".join(
        f'{{ user: "host{h}", password: "secret-{h}", permissions: {host_permissions(h)} }}'
        for h in USERS
    )
    return f"""
jetstream: enabled
accounts {{
  TETHER {{
    jetstream: enabled
    users: [
      {users}
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
        yield server


def url_for(server: NatsServer, host: str | None) -> str:
    if host is None:
        return server.url
    return f"nats://host{host}:secret-{host}@127.0.0.1:{server.port}"


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
        channel = await open_jetstream(url_for(secured, "A"))
        try:
            offset = await channel.append("h.A.run.r1.events", b'{"seq":0}')
            assert offset >= 1
            with pytest.raises(TransportError):
                await channel.append("h.B.run.r1.events", b'{"seq":0,"forged":true}')
        finally:
            await channel.aclose()
        reader = await open_jetstream(url_for(secured, "B"))
        try:
            info = await reader.js.stream_info(reader.stream)
            assert info.state.messages == 1  # the forged line never reached the stream
        finally:
            await reader.aclose()

    asyncio.run(main())


def test_a_host_cannot_answer_another_hosts_verbs(secured: NatsServer) -> None:
    async def main() -> None:
        import nats
        from nats.aio.msg import Msg
        from nats.errors import NoRespondersError

        impostor = await nats.connect(url_for(secured, "A"))
        caller = await nats.connect(url_for(secured, "B"))
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
    from tether.transports.jetstream import connect_options

    ca, cert, key = _make_tls(tmp_path)
    extra = ["--tls", "--tlscert", str(cert), "--tlskey", str(key)]
    with run_nats_server(tmp_path / "js", extra=extra) as server:
        url = f"tls://127.0.0.1:{server.port}"

        async def main() -> None:
            channel = await open_jetstream(url, connect_options=connect_options(ca=str(ca)))
            try:
                assert await channel.append("h.A.run.t.events", b"{}") >= 1
            finally:
                await channel.aclose()
            with pytest.raises(TransportError, match="cannot reach NATS"):
                await open_jetstream(url)  # the system trust store does not know this CA

        asyncio.run(main())
