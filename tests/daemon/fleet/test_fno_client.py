"""The fno-agents reference client's exact requests, one connection each, against tether.

The requests are the ones REFERENCE-FACTS §3 records for the reference client (footnote's
``crates/fno-agents`` at 5ab743b66): ``message`` where tether says ``task``/``text``,
``agent.status {}`` for the daemon's status, ``cc_session_id`` and ``mcp_channel_id`` for
channels. The daemon serves them on a socket named ``supervisor.sock`` (``--socket``), as
the reference's ``$FNO_AGENTS_HOME/supervisor.sock``.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import AgentDaemon, kill_agents
from tests.support.daemon import DaemonProcess, call, make_env

LIVE_KEYS = {"short_id", "harness", "status", "lane"}
LIST_ROW_KEYS = {
    "name",
    "harness",
    "short_id",
    "session_id",
    "cwd",
    "created_at",
    "last_message_at",
    "status",
    "live_status",
    "pid",
    "log_path",
}


@pytest.fixture
def supervisor(short_tmp: Path) -> Iterator[AgentDaemon]:
    env = make_env(short_tmp)
    sock = short_tmp / "fno" / "supervisor.sock"
    handle = DaemonProcess(short_tmp, sock, env)
    handle.start("--socket", str(sock))
    try:
        yield AgentDaemon(handle)
    finally:
        handle.stop(signal.SIGKILL)
        kill_agents(Path(env["TETHER_HOME"]))


def request(daemon: AgentDaemon, method: str, params: Any, id: int = 1) -> dict[str, Any]:
    """One request on a fresh connection; the flat ``{id, result}`` answer's result."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.process.socket))
        reply = call(sock, id, method, params)
    assert reply.get("id") == id
    assert "error" not in reply, reply
    result = reply["result"]
    assert isinstance(result, dict)
    return result


def test_the_socket_is_supervisor_sock(supervisor: AgentDaemon) -> None:
    sock = supervisor.process.socket
    assert sock.name == "supervisor.sock"
    assert (sock.parent / "supervisor.sock.lock").exists()
    assert sock.parent.stat().st_mode & 0o777 == 0o700


def test_the_reference_clients_requests(supervisor: AgentDaemon) -> None:
    cwd = str(supervisor.root)
    status = request(supervisor, "agent.status", {})
    assert status["schema_version"] == 1
    assert status["daemon"]["pid"] == supervisor.process.pid
    assert status["daemon"]["state"] == "serving"
    assert status["agents"] == {"total": 0, "by_status": {}}
    assert status["channels"] == {"registered": 0}

    spawned = request(supervisor, "agent.spawn", {"name": "w1", "message": "hello", "cwd": cwd})
    assert set(spawned) >= LIVE_KEYS
    assert spawned["status"] == "live"
    assert spawned["name"] == "w1"  # tether's own keys stay beside the reference's
    supervisor.wait_for("w1", lambda s: s["state"] == "ready" and s["turn"] == 1)

    asked = request(supervisor, "agent.ask", {"name": "w1", "message": "and again"})
    assert isinstance(asked["reply"], str)
    assert asked["reply"]
    assert asked["reply"] == asked["text"]
    assert asked["backend"]

    created = request(
        supervisor,
        "agent.ask",
        {"name": "w2", "message": "first contact", "provider": "scripted", "cwd": cwd},
    )
    assert created["created"] is True
    assert created["short_id"]
    supervisor.wait_for("w2", lambda s: s["state"] == "ready" and s["turn"] == 1)

    listed = request(supervisor, "agent.list", {})
    assert [row["name"] for row in listed["agents"]] == ["w1", "w2"]
    for row in listed["agents"]:
        assert set(row) >= LIST_ROW_KEYS
        assert row["status"] == "live"
        assert row["cwd"] == cwd
    assert listed["filters_applied"] == {"cwd": None, "provider": None, "status": None}
    assert isinstance(listed["fields_omitted"], list)
    assert request(supervisor, "agent.list", {"status": "exited"})["agents"] == []

    stopped = request(supervisor, "agent.stop", {"name": "w1"})
    assert stopped["stopped"] is True
    assert stopped["short_id"] == spawned["short_id"]
    assert request(supervisor, "agent.stop", {"name": "w1"})["already_exited"] is True

    removed = request(supervisor, "agent.rm", {"name": "w1", "force": False})
    assert removed["removed"] is True
    assert removed["registry_removed"] is True
    assert removed["harness"] == spawned["harness"]
    assert removed["was_orphaned"] is False

    reconciled = request(supervisor, "agent.reconcile", {})
    assert {"scanned", "orphaned", "recovered", "skipped", "errors"} <= set(reconciled)

    status = request(supervisor, "agent.status", {})
    assert status["agents"]["total"] == 1
    assert status["agents"]["by_status"] == {"live": 1}


def test_ask_of_an_unknown_name_without_a_provider_is_agent_not_found(
    supervisor: AgentDaemon,
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(supervisor.process.socket))
        reply = call(sock, 7, "agent.ask", {"name": "nobody", "message": "hi"})
    error = reply["error"]
    assert isinstance(error, dict)
    assert error["code"] == "agent_not_found"
