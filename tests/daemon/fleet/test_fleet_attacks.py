"""The fleet attacked from outside (issue 16's fleet check, bench/fleet_outside.py), small.

Each test is one failure the outside driver found, decided by events (the registry's
rows, the agent's own futures), never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess, wait_answering

from tether.daemon.fleet.params import SpawnParams
from tether.daemon.fleet.registry import AgentRecord
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.rpc.client import DaemonCallError, DaemonClient
from tether.daemon.rpc.protocol import ErrorCode


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """The agents' marker (``TETHER_HOME``); whatever they left is killed at teardown."""
    path = tmp_path / "home"
    try:
        yield path
    finally:
        kill_agents(path)


def _params(home: Path, name: str) -> SpawnParams:
    script = home.parent / "replies.json"
    script.write_text(json.dumps([{"text": "ok"}] * 4))
    env = {"TETHER_HOME": str(home)}
    cwd = str(home.parent)
    return SpawnParams(name=name, provider="scripted", script=str(script), cwd=cwd, env=env)


def _on_insert(supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set once a spawn has reserved its row (it then starts the child, in a thread)."""
    inserted = asyncio.Event()
    insert = supervisor.registry.insert

    def insert_and_say(record: AgentRecord) -> None:
        insert(record)
        inserted.set()

    monkeypatch.setattr(supervisor.registry, "insert", insert_and_say)
    return inserted


def test_a_spawn_whose_caller_goes_away_still_ends_as_an_agent(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that disconnects mid-spawn cancels its call: the name must not be left
    reserved by a row no agent serves (spawn says agent_exists, rm agent_not_found), with
    a child waiting at its gate for good."""

    async def go() -> None:
        root = home.parent
        supervisor = Supervisor(db=root / "tether.db", runs_root=root / "runs")
        try:
            inserted = _on_insert(supervisor, monkeypatch)
            call = asyncio.ensure_future(supervisor.spawn(_params(home, "a")))
            await inserted.wait()
            call.cancel()  # as the server does when the client's connection is lost
            with pytest.raises(asyncio.CancelledError):
                await call
            agent = await supervisor.wait_spawned("a")
            assert agent is not None, "the cancelled spawn left no agent"
            assert agent.state == "ready", agent.state
            assert [row.name for row in supervisor.registry.list()] == ["a"]
            await supervisor.remove("a", force=True)
            again, _ = await supervisor.spawn(_params(home, "a"))
            assert again.state == "ready"
            await supervisor.remove("a", force=True)
        finally:
            await supervisor.shutdown()

    asyncio.run(go())


# A subreaper (the parent a dying daemon's children are given to) that runs the daemon in
# argv, stops it when stdin says so, then says whether any child came to it: every
# process the daemon left alive would have.
_SUBREAPER = r"""
import ctypes, os, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
daemon = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
print(daemon.pid, flush=True)
sys.stdin.readline()
daemon.terminate()
daemon.wait()
try:
    pid, _ = os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    print("none left", flush=True)
else:
    print("left", pid, flush=True)
    os.waitpid(-1, 0)
"""


def test_a_stopped_daemon_leaves_no_fork_server_behind(daemon_env: DaemonProcess) -> None:
    """``tether daemon stop`` returned (and freed the lock) while its fork server's template
    was still exiting, reparented: an outside check right after the stop saw it alive."""
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
    command = [sys.executable, "-c", _SUBREAPER, *argv]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    with subprocess.Popen(command, env=daemon_env.env, text=True, **pipes) as helper:
        assert helper.stdout is not None
        try:
            int(helper.stdout.readline())
            wait_answering(daemon_env.socket, helper)
            # it answers: its start hooks ran, the template is started
            said, _ = helper.communicate("stop\n", timeout=60)
        finally:
            if helper.poll() is None:
                helper.kill()
    assert said.strip() == "none left"


def test_a_client_over_the_connection_cap_reads_busy(daemon_env: DaemonProcess) -> None:
    """Over ``max_connections`` the daemon answered ``busy`` (id 0) and closed the socket
    whole: the client's request then met EPIPE, and a fleet's 700 clients at once saw
    "connection lost" 188 times, never ``busy``."""
    daemon_env.start("--max-connections", "1")
    with DaemonClient.connect(daemon_env.socket) as held:
        assert held.call("daemon.status", None)["pid"] == daemon_env.pid  # the one slot
        sock = daemon_env.connect()
        poller = select.poll()
        poller.register(sock, select.POLLRDHUP)
        assert poller.poll(10_000), "no answer to the connection over the cap"
        with DaemonClient(sock, daemon_env.socket) as over, pytest.raises(DaemonCallError) as info:
            over.call("daemon.status", None)  # sent after the daemon answered and hung up
        assert info.value.code is ErrorCode.BUSY
