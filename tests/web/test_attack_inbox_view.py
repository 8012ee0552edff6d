"""The dashboard's view of an agent's inbox, attacked by the agent: long lines and many.

An agent may write 16 MiB inbox lines, as many as it likes. The page shows the last 200
messages; the dashboard must read only those, and each bounded, never the whole inbox
(a real daemon, a real dashboard process, the real store).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.agentd import AgentDaemon, agentd
from tests.support.dashboard import DashboardProcess, dashboard
from tests.support.waits import wait_until
from tests.web.test_dashboard_api import request, token

from tether.inbox.store import InboxStore
from tether.paths import db_path

__all__ = ["agentd", "dashboard"]

LONG = 4_000_000  # characters of each long line


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_attack_the_inbox_view_reads_only_the_last_messages_each_bounded(
    agentd: AgentDaemon, dashboard: DashboardProcess
) -> None:
    spawned = agentd.spawn("loud", [{"text": "ok"}])
    small = json.dumps({"type": "progress", "text": "p" * 1000}) + "\n"
    long = json.dumps({"type": "progress", "text": "h" * LONG}) + "\n"
    lines = [small] * 100_000 + [long] * 30  # 100 MB of small lines, then 120 MB of long
    with Path(spawned["run_dir"], "inbox.jsonl").open("a") as inbox:
        inbox.write("".join(lines))
    db = db_path(agentd.env)
    last_offset = sum(map(len, lines[:-1]))
    with InboxStore(db) as store:

        def stored() -> bool:
            newest = store.recent(spawned["run_id"], limit=1, max_chars=10)
            return bool(newest) and newest[0].offset == last_offset

        wait_until(stored, "the inbox stored")  # (a database: polled)
    before = _peak_kib(dashboard.proc.pid)

    status, _, body = request(dashboard, "GET", "/api/agents/loud/inbox", headers=token(dashboard))
    assert status == 200
    messages = json.loads(body)["messages"]
    assert len(messages) == 200
    assert len(body) < 2_000_000  # before: the 30 long lines whole, 120 MB
    last = messages[-1]["body"]
    assert last["cut"] == len(long) - 1  # the body's length
    assert len(last["text"]) <= 8192
    grown = _peak_kib(dashboard.proc.pid) - before
    assert grown < 100 * 1024, f"the dashboard's peak grew by {grown} KiB"  # before: ~1 GB
