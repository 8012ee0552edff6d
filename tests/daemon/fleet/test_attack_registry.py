"""The daemon's registry attacked: rows with values of the wrong type (SQLite keeps any
type in any column: a damaged database, another version's, a hand edit). A real daemon
is stopped, its rows are damaged, and the next one must list, show and remove every
agent; before, one such row made every ``agent.list`` an ``internal`` error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.agentd import AgentDaemon, agentd  # noqa: F401 (fixture)

DAMAGE = {
    "spawn": "spawn = '[1, 2]'",
    "worktree": "worktree = '\"x\"'",
    "argv": "argv = '{\"a\": 1}'",
    "snapshot": "snapshot = 'not json'",
    "usage": "usage = '" + "[" * 50_000 + "'",
    "created": "created_at = 'yesterday', turn = -5, last_seq = 'x'",
}


def test_attack_damaged_registry_rows_leave_every_verb_answering(
    agentd: AgentDaemon,  # noqa: F811
) -> None:
    for name in DAMAGE:
        agentd.spawn(name, [{"text": "ok"}])
    agentd.process.stop()
    db = sqlite3.connect(Path(agentd.env["TETHER_HOME"]) / "tether.db", isolation_level=None)
    try:
        for name, damage in DAMAGE.items():
            db.execute(f"UPDATE daemon_agents SET {damage} WHERE name = ?", (name,))
    finally:
        db.close()
    agentd.restart()
    listed = {row["name"] for row in agentd.call("agent.list", {})["agents"]}
    assert listed == set(DAMAGE)  # before: internal (AttributeError, TypeError)
    for name in DAMAGE:
        assert agentd.status(name)["name"] == name
        agentd.call("agent.rm", {"name": name, "force": True})
    assert agentd.call("agent.list", {})["agents"] == []
