"""PTY agents through a real daemon: spawn, ``agent.drive`` (a raw RFC 6455 client and the
``websockets`` client), echo, resize, two viewers, detach, stop, and a daemon SIGKILL with
re-attach. Programs are real: ``bash``, ``cat`` and a small full-screen Python program."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Iterator

import pytest
from tests.support.agentd import AgentDaemon, agentd, alive
from tests.support.pty import BASH, spawn_pty
from tests.support.waits import wait_until
from tests.support.ws_raw import RawWs

from tether.daemon.rpc.protocol import ErrorCode, encode_call

__all__ = ["agentd"]

# A curses-like program: alternate screen, then "size C R" at start and on every SIGWINCH.
SCREEN = """
import os, signal, sys
def show(*_):
    c, r = os.get_terminal_size(0)
    sys.stdout.write(f"\\x1b[2J\\x1b[Hsize {c} {r}\\r\\n"); sys.stdout.flush()
signal.signal(signal.SIGWINCH, show)
sys.stdout.write("\\x1b[?1049h"); show()
for line in sys.stdin:
    if line.strip() == "quit":
        break
    sys.stdout.write("got " + line.strip() + "\\r\\n"); sys.stdout.flush()
sys.stdout.write("\\x1b[?1049l"); sys.stdout.flush()
"""


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def open_socket(agentd: AgentDaemon) -> socket.socket:
    sock = agentd.process.connect(timeout=20)
    _OPEN.append(sock)
    return sock


def drive(agentd: AgentDaemon, name: str) -> RawWs:
    ws, result = RawWs.drive(open_socket(agentd), name)
    assert result["upgrade"] == "websocket"
    assert ws.read_until_text("attached")["viewers"] >= 1
    return ws


def test_spawn_status_echo_resize_two_viewers_detach(agentd: AgentDaemon) -> None:
    status = spawn_pty(agentd, "sh", BASH, cols=100, rows=30)
    assert status["kind"] == "pty"
    assert status["state"] == "running"
    assert status["pty"]["cols"] == 100
    assert status["pty"]["rows"] == 30
    assert status["attached"] is False
    assert alive(status["pid"])
    assert alive(status["pty"]["holder_pid"])

    one = drive(agentd, "sh")
    one.type("echo hi-$((6*7))\r")
    one.read_until_output(b"hi-42")
    assert agentd.status("sh")["attached"] is True

    two = drive(agentd, "sh")  # a late viewer sees the ring first
    assert b"hi-42" in two.output
    two.type("echo two-$((1+1))\r")
    assert b"two-2" in one.read_until_output(b"two-2")  # keystrokes from any viewer
    two.read_until_output(b"two-2")
    assert agentd.status("sh")["pty"]["viewers"] == 2

    one.control(type="resize", cols=120, rows=40)
    assert two.read_until_text("resize") == {"type": "resize", "cols": 120, "rows": 40}
    one.type("stty size\r")
    two.read_until_output(b"40 120")
    assert agentd.status("sh")["pty"]["cols"] == 120

    one.control(type="bogus")
    assert "resize" in one.read_until_text("error")["message"]
    one.control(type="resize", cols=0, rows=5)
    assert "1..1000" in one.read_until_text("error")["message"]

    one.control(type="detach")
    assert one.read_until_close() == 1000
    two.type("echo still-$((2+3))\r")
    two.read_until_output(b"still-5")
    assert agentd.status("sh")["pty"]["viewers"] == 1

    stopped = agentd.call("agent.stop", {"name": "sh"})
    assert stopped["ended"] is True
    assert stopped["state"] == "cancelled"
    assert two.read_until_text("exit")["state"] == "cancelled"
    assert two.read_until_close() == 1000
    assert not alive(status["pid"])


def test_websockets_client_drives_cat_to_its_end(agentd: AgentDaemon) -> None:
    from websockets.sync.client import connect

    spawn_pty(agentd, "cat", ["cat"])
    sock = open_socket(agentd)
    sock.sendall(encode_call(1, "agent.drive", {"name": "cat"}))
    head = sock.recv(4)
    body = b""
    while len(body) < int.from_bytes(head, "little"):
        body += sock.recv(4096)
    assert json.loads(body)["result"]["upgrade"] == "websocket"
    with connect("ws://tether/agent/cat", sock=sock, open_timeout=20) as ws:
        assert json.loads(ws.recv(timeout=20))["type"] == "attached"
        ws.send(b"hello tether\r")
        seen = b""
        while seen.count(b"hello tether") < 2:  # the terminal's echo, then cat's copy
            message = ws.recv(timeout=20)
            seen += message if isinstance(message, bytes) else b""
        ws.send(b"\x04")  # end of input: cat exits 0
        for _ in ws:  # until the daemon closes (the exit text's order is checked raw)
            pass
        assert (ws.close_code, ws.close_reason) == (1000, "exit")
    assert agentd.status("cat")["state"] == "done"


def test_full_screen_program_gets_sigwinch(agentd: AgentDaemon) -> None:
    spawn_pty(agentd, "screen", [sys.executable, "-c", SCREEN], cols=90, rows=20)
    ws = drive(agentd, "screen")
    ws.read_until_output(b"size 90 20")
    ws.control(type="resize", cols=132, rows=43)
    ws.read_until_output(b"size 132 43")
    ws.type("ping\r")
    ws.read_until_output(b"got ping")
    ws.type("quit\r")
    assert ws.read_until_text("exit") == {"type": "exit", "state": "done", "exit_code": 0}


def test_daemon_sigkill_then_reattach(agentd: AgentDaemon) -> None:
    status = spawn_pty(agentd, "keep", BASH)
    ws = drive(agentd, "keep")
    ws.type("echo before-$((40+2))\r")
    ws.read_until_output(b"before-42")
    agentd.kill()
    while ws.sock.recv(65536):  # the daemon's end closed with it
        pass
    assert alive(status["pid"])
    assert alive(status["pty"]["holder_pid"])

    agentd.restart()
    again = agentd.status("keep")
    assert again["state"] == "running"
    assert again["adopted"] is True
    assert again["pid"] == status["pid"]
    report = agentd.call("agent.reconcile")
    assert "keep" in report["recovered"]
    view = drive(agentd, "keep")
    assert b"before-42" in view.output  # the holder's ring survived the daemon
    view.type("echo after-$((50+5))\r")
    view.read_until_output(b"after-55")

    removed = agentd.call("agent.rm", {"name": "keep", "force": True})
    assert removed["removed"] is True
    assert view.read_until_close() == 1000
    assert not alive(status["pid"])
    agentd.expect(ErrorCode.AGENT_NOT_FOUND, "agent.status", {"name": "keep"})


def test_holder_killed_hangs_up_the_program(agentd: AgentDaemon) -> None:
    import os

    status = spawn_pty(agentd, "hup", BASH)
    ws = drive(agentd, "hup")
    os.kill(status["pty"]["holder_pid"], signal.SIGKILL)
    assert ws.read_until_text("exit")["state"] == "failed"
    ended = agentd.status("hup")
    assert ended["state"] == "failed"
    assert "holder" in ended["error"]
    assert not alive(status["pid"])  # SIGHUP from the closed master


def test_refusals(agentd: AgentDaemon) -> None:
    message = agentd.expect(
        ErrorCode.SPAWN_FAILED,
        "agent.spawn",
        {"name": "nope", "pty": True, "argv": ["no-such-program-xyz"], "cwd": str(agentd.root)},
    )
    assert "not found" in message
    agentd.expect(ErrorCode.AGENT_NOT_FOUND, "agent.status", {"name": "nope"})
    agentd.expect(ErrorCode.INVALID_PARAMS, "agent.spawn", {"name": "x", "pty": True})
    agentd.expect(
        ErrorCode.INVALID_PARAMS,
        "agent.spawn",
        {"name": "x", "pty": True, "argv": ["cat"], "cols": 0},
    )
    spawn_pty(agentd, "p", ["cat"])
    exists = {"name": "p", "pty": True, "argv": ["cat"]}
    agentd.expect(ErrorCode.AGENT_EXISTS, "agent.spawn", exists)
    assert "agent.drive" in agentd.expect(
        ErrorCode.INVALID_STATUS, "agent.steer", {"name": "p", "text": "hi"}
    )
    agentd.spawn("w", [{"text": "ok"}])
    assert "wire agent" in agentd.expect(ErrorCode.INVALID_STATUS, "agent.drive", {"name": "w"})
    agentd.expect(ErrorCode.AGENT_NOT_FOUND, "agent.drive", {"name": "ghost"})
    names = {a["name"]: a.get("kind") for a in agentd.call("agent.list")["agents"]}
    assert names["p"] == "pty"
    assert "w" in names


def test_a_late_viewer_gets_at_most_the_last_mebibyte(agentd: AgentDaemon) -> None:
    flood = "head -c 2500000 /dev/zero | tr '\\0' x; echo; echo END-OF-FLOOD; exec cat"
    spawn_pty(agentd, "flood", ["sh", "-c", flood])
    first = drive(agentd, "flood")
    first.read_until_output(b"END-OF-FLOOD")  # all of it went by
    late, _ = RawWs.drive(open_socket(agentd), "flood")
    opcode, ring = late.read_frame()  # the first message is the ring
    assert opcode == 2
    assert len(ring) <= 1_048_576
    assert ring.rstrip().endswith(b"END-OF-FLOOD")
    assert agentd.status("flood")["pty"]["output_bytes"] > 2_500_000


@pytest.mark.parametrize("how", ["stop", "exit"])
def test_an_ended_agents_holder_is_reaped(agentd: AgentDaemon, how: str) -> None:
    """Its holder exits once the program has ended (stopped, or on its own); the daemon
    reaps it at once (before: a zombie of the daemon until `agent rm`). Seen from /proc:
    the pid is gone, not a zombie left behind."""
    status = spawn_pty(agentd, "z", BASH)
    holder = status["pty"]["holder_pid"]
    if how == "stop":
        agentd.call("agent.stop", {"name": "z"})
    else:
        ws = drive(agentd, "z")
        ws.type("exit\r")
        agentd.wait_for("z", lambda s: s["state"] != "running")
    # until it is reaped: its exit (pidfd), then its /proc entry gone (polled)
    wait_until(lambda: not os.path.exists(f"/proc/{holder}"), "the holder reaped", pids=[holder])
    assert agentd.status("z")["state"] in ("cancelled", "done")
