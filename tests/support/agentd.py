"""Helpers for the ``agent.*`` tests (no tests here): a real daemon and its agents' cleanup.

Agents are real ``tether child`` processes in their own sessions; they outlive a killed
daemon on purpose, so every fixture here ends them at teardown by scanning ``/proc`` for
processes whose environment carries this test's ``TETHER_HOME``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_until
from tether.daemon.rpc.client import DaemonCallError, DaemonClient
from tether.daemon.rpc.protocol import ErrorCode


@dataclass
class AgentDaemon:
    """A daemon process for agent tests, with a few conveniences."""

    process: DaemonProcess

    @property
    def root(self) -> Path:
        return self.process.root

    @property
    def env(self) -> dict[str, str]:
        env: dict[str, str] = self.process.env
        return env

    def client(self, timeout: float | None = 30.0) -> DaemonClient:
        return DaemonClient.connect(self.process.socket, timeout=timeout)

    def call(self, method: str, params: Any = None, *, timeout: float | None = 30.0) -> Any:
        with self.client(timeout) as client:
            return client.call(method, params)

    def error(self, method: str, params: Any = None) -> DaemonCallError:
        with pytest.raises(DaemonCallError) as info:
            self.call(method, params)
        return info.value

    def expect(self, code: ErrorCode, method: str, params: Any = None) -> str:
        error = self.error(method, params)
        assert error.code is code, error
        return error.message

    def script(self, name: str, replies: list[dict[str, Any]]) -> str:
        path = self.root / f"{name}.json"
        path.write_text(json.dumps(replies))
        return str(path)

    def spawn(self, name: str, replies: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        params.setdefault("cwd", str(self.root))
        result: dict[str, Any] = self.call(
            "agent.spawn", {"name": name, "script": self.script(name, replies), **params}
        )
        return result

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("agent.status", {"name": name})
        return result

    def wait_for(self, name: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The agent's status once ``check`` holds. The status is the daemon's view, which
        moves with the run's events but also without one (a run re-adopted after a
        restart, a queued one started, a terminal resized), and only a call shows it: it
        is polled, in tests/support/waits.py."""
        last: list[dict[str, Any]] = []

        def reached() -> dict[str, Any] | None:
            last[:] = [self.status(name)]
            return last[0] if check(last[0]) else None

        status: dict[str, Any] = wait_until(
            reached, f"agent {name}'s status", describe=lambda: str(last)
        )
        return status

    def events(self, name: str, after_seq: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            page = self.call("agent.events", {"name": name, "after_seq": after_seq})
            out += page["events"]
            after_seq = page["last_seq"]
            if not page["more"]:
                return out

    def restart(self) -> None:
        self.process.start()

    def kill(self) -> None:
        self.process.stop(signal.SIGKILL)


def home_processes(home: Path) -> dict[int, bool]:
    """Every process whose environment carries ``TETHER_HOME=home`` (the daemon, its agents,
    their CLIs and tools; this process left out): pid -> whether it was started for an
    agent (``TETHER_AGENT_NAME``)."""
    marker = f"TETHER_HOME={home}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found[int(entry)] = any(v.startswith(b"TETHER_AGENT_NAME=") for v in environ)
    return found


def agent_pids(home: Path) -> list[int]:
    """Processes started for agents of the daemon whose state lives in ``home``."""
    return [pid for pid, agent in home_processes(home).items() if agent]


def kill_agents(home: Path) -> None:
    for pid in agent_pids(home):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def agentd(daemon_env: DaemonProcess) -> Iterator[AgentDaemon]:
    """A running daemon; its agents are killed at teardown (they outlive the daemon)."""
    daemon_env.start()
    try:
        yield AgentDaemon(daemon_env)
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))
