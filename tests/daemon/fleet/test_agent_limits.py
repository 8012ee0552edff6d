"""The daemon's descriptor limit: it raises its soft ``RLIMIT_NOFILE`` to the hard limit at
start, and a spawn that would leave too few descriptors for its clients is refused
``spawn_failed`` with the limit named, the daemon still serving (it never runs out halfway
through a spawn or stops accepting connections)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentd import AgentDaemon, kill_agents
from tests.support.daemon import DaemonProcess

from tether.daemon.rpc.client import DaemonCallError
from tether.daemon.rpc.protocol import ErrorCode

SOFT, HARD = 40, 120
LIMITED = (  # starts the daemon with a low soft and hard descriptor limit
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({SOFT}, {HARD})); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.fixture
def limited(daemon_env: DaemonProcess) -> Iterator[AgentDaemon]:
    daemon_env.wrapper = [sys.executable, "-c", LIMITED]
    daemon_env.start()
    try:
        yield AgentDaemon(daemon_env)
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


def test_spawns_stop_short_of_the_descriptor_limit(limited: AgentDaemon) -> None:
    assert open_files_limit(limited.process.pid) == (HARD, HARD)  # raised to the hard limit
    spawned: list[str] = []
    refusal: DaemonCallError | None = None
    for index in range(HARD):  # every agent takes at least one descriptor: bounded
        try:
            limited.spawn(f"a{index}", [{"text": "ok"}])
        except DaemonCallError as exc:
            refusal = exc
            break
        spawned.append(f"a{index}")
    assert refusal is not None, f"{len(spawned)} agents and no refusal"
    assert refusal.code is ErrorCode.SPAWN_FAILED
    assert f"descriptor limit ({HARD};" in refusal.message
    assert "ulimit -n" in refusal.message
    assert spawned, "the limit left room for no agent at all"
    listed = [row["name"] for row in limited.call("agent.list")["agents"]]
    assert listed == spawned  # the refused one left nothing behind
    assert "pid" in limited.call("daemon.status")
    assert len(spawned) >= 3
    for name in spawned[:3]:  # an agent holds ~3 descriptors, a spawn asks for 8 to be free
        limited.call("agent.rm", {"name": name, "force": True})
    limited.spawn("again", [{"text": "ok"}])  # room again once some are removed
