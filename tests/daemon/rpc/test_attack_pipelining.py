"""A client that pipelines requests and never reads its answers, against a real daemon.

The daemon stops taking up a connection's frames once its answers pile up unread (the
transport's high-water mark), so one read of such a client costs it an answer or two, not
one answer per request; and a client that still reads nothing after ``--frame-timeout``
is cut off, its slot freed.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

from tests.support.agentd import AgentDaemon
from tests.support.daemon import DaemonProcess, frame
from tests.support.waits import wait_until

from tether.inbox.store import InboxStore
from tether.paths import db_path

REQUESTS = 4000  # ~45 bytes each: one read of the daemon's takes them all


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no VmRSS")


def _connections(daemon: AgentDaemon) -> int:
    return int(daemon.call("daemon.status")["connections"])


def test_attack_a_client_that_pipelines_and_never_reads_holds_no_answers(
    daemon_env: DaemonProcess,
) -> None:
    daemon = AgentDaemon(daemon_env.start("--frame-timeout", "1"))
    # one agent whose row is large (16 open questions of 4 KiB as listed): ~66 KB a list
    spawned = daemon.spawn("big", [{"text": "ok"}])
    inbox = Path(spawned["run_dir"], "inbox.jsonl")
    forged = [{"type": "approval_request", "reason": "r" * 5000} for _ in range(16)]
    with inbox.open("a") as file:
        file.write("".join(json.dumps(line) + "\n" for line in forged))
    db = db_path(daemon.env)
    with InboxStore(db) as store:
        wait_until(lambda: len(store.messages(spawned["run_id"])) == 16, "stored")
    daemon.call("agent.list", {})  # the questions read once, the list warm
    pid = daemon_env.pid
    before = _rss_kib(pid)

    greedy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    greedy.connect(str(daemon_env.socket))
    requests = b"".join(
        frame({"id": n, "method": "agent.list", "params": {}}) for n in range(1, REQUESTS + 1)
    )
    greedy.sendall(requests)  # and never a read
    assert _connections(daemon) == 2  # (the loop has read the requests meanwhile)
    grown = _rss_kib(pid) - before
    # before: every request of the read answered and held, ~4,000 x 66 KB (260 MB)
    assert grown < 64 * 1024, f"the daemon grew by {grown} KiB"

    wait_until(lambda: _connections(daemon) == 1, "the stalled client cut off")
    greedy.setblocking(False)
    seen = b""
    try:
        while chunk := greedy.recv(1 << 20):
            seen += chunk
    except (BlockingIOError, ConnectionResetError):
        pass
    greedy.close()
    assert len(seen) < len(requests) * 66  # far from one answer per request
    (size,) = struct.unpack("<I", seen[:4])
    assert json.loads(seen[4 : 4 + size])["id"] >= 1  # (async answers come as they end)
    assert daemon.call("agent.status", {"name": "big"})["name"] == "big"
