"""Helpers for the daemon tests: real daemon processes and raw frames.

Each ``daemon`` fixture starts ``python -m tether daemon --foreground`` with
``TETHER_HOME``, ``XDG_RUNTIME_DIR`` and ``TETHER_SOCKET`` inside a short private tmp dir
(a Unix socket path must stay under 108 bytes) and stops it afterwards.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support.waits import HANG_S, wait_until
from tether.daemon.rpc.client import DaemonClient
from tether.daemon.rpc.lifecycle import probe


@dataclass
class DaemonProcess:
    root: Path
    socket: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)
    wrapper: list[str] = field(default_factory=list)  # e.g. ip netns exec NS (which execs)

    def __post_init__(self) -> None:
        self.log = self.root / "daemon.stderr"

    def start(self, *extra: str, wait: bool = True) -> DaemonProcess:
        argv = [*self.wrapper, sys.executable, "-m", "tether", "daemon", "--foreground", *extra]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = HANG_S) -> None:
        """Until the daemon answers (see :func:`wait_answering`); fails if it exits first."""
        assert self.proc is not None
        wait_answering(self.socket, self.proc, describe=self.stderr, timeout=timeout)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"daemon ignored signal {sig}:\n{self.stderr()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def connect(self, timeout: float = 5.0) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(str(self.socket))
        return sock


def wait_answering(
    socket_path: Path,
    proc: subprocess.Popen[Any],
    *,
    describe: Callable[[], str] = str,
    timeout: float = HANG_S,
) -> None:
    """Until the daemon ``proc`` answers on ``socket_path``: a request that connects waits
    for its answer (the daemon listens before it serves); one refused (no socket yet, a
    stale one, bound but not yet listening: a state no file event marks) is tried again
    in tests/support/waits.py's poll."""
    wait_until(
        lambda: probe(socket_path, timeout=timeout),
        "the daemon to answer",
        proc=proc,
        describe=describe,
        timeout=timeout,
    )


def make_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TETHER_HOME=str(root / "home"),
        XDG_RUNTIME_DIR=str(root / "rt"),
        TETHER_SOCKET=str(root / "rt" / "d.sock"),
    )
    env.pop("XDG_STATE_HOME", None)
    return env


# -- raw frame helpers --------------------------------------------------------------------------


def frame(obj: object) -> bytes:
    body = msgspec.json.encode(obj)
    return struct.pack("<I", len(body)) + body


def read_frame(sock: socket.socket) -> dict[str, object] | None:
    """One frame decoded as JSON, or None on a clean EOF."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack("<I", head)
    body = _read_exactly(sock, size)
    assert body is not None, "EOF inside a frame"
    decoded: dict[str, object] = msgspec.json.decode(body)
    return decoded


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            assert not data, "EOF inside a frame"
            return None
        data += chunk
    return data


def call(sock: socket.socket, id: int, method: str, params: object = None) -> dict[str, object]:
    sock.sendall(frame({"id": id, "method": method, "params": params}))
    reply = read_frame(sock)
    assert reply is not None
    return reply


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def connect_answering(socket_path: Path, proc: subprocess.Popen[Any]) -> DaemonClient:
    """A client of the daemon ``proc``, once it answers (see :func:`wait_answering`)."""
    wait_answering(socket_path, proc)
    return DaemonClient.connect(socket_path)
