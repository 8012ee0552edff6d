"""A daemon SIGKILLed while a follow-up resumes an ended agent (a real daemon, real children).

The follow-up starts a new run of the agent; the daemon dies after the agent's row names
the new run and before its child is recorded (the test holds the database's write lock
there, as the spawn-gate test does). The next daemon shows that run failed: a follow-up
must still reach the agent's conversation, which is in the run it was resuming.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.agentd import AgentDaemon, agentd  # noqa: F401 (fixture)
from tests.support.daemon import frame
from tests.support.waits import spin_until


def _row(db: sqlite3.Connection, name: str) -> tuple[str, int | None]:
    run_dir, pid = db.execute(
        "SELECT run_dir, pid FROM daemon_agents WHERE name = ?", (name,)
    ).fetchone()
    return str(run_dir), pid


def test_attack_a_sigkill_as_a_follow_up_resumes_loses_no_conversation(
    agentd: AgentDaemon,  # noqa: F811
) -> None:
    replies = [{"text": "first answer"}, {"text": "resumed"}, {"text": "third"}]
    first = agentd.spawn("r", replies, task="remember 42")
    agentd.call("agent.stop", {"name": "r"})
    db = sqlite3.connect(Path(agentd.env["TETHER_HOME"]) / "tether.db", isolation_level=None)
    try:
        for _attempt in range(20):
            sock = agentd.process.connect()
            follow = {"name": "r", "text": "and now?"}
            sock.sendall(frame({"id": 1, "method": "agent.follow_up", "params": follow}))
            spin_until(lambda: _row(db, "r")[0] != first["run_dir"], "the new run's row")  # noqa: B023
            db.execute("BEGIN IMMEDIATE")  # the new child's pid now waits on us
            if _row(db, "r")[1] is None:
                break
            db.execute("ROLLBACK")  # too late: it started; end it and try again
            sock.close()
            agentd.call("agent.stop", {"name": "r"})
            first = {"run_dir": _row(db, "r")[0]}
        else:
            raise AssertionError("the lock never landed between the row and the pid")
        agentd.kill()
        sock.close()
    finally:
        db.close()
    agentd.restart()
    assert agentd.status("r")["state"] == "failed"
    reply = agentd.call("agent.follow_up", {"name": "r", "text": "still there?"})
    assert reply["ack"] == "accepted"  # before: "resume: no run ... in the run index"
    assert reply["resumed"] == Path(first["run_dir"]).name  # the run it was resuming
    done = agentd.wait_for("r", lambda row: row["state"] == "ready" and row["turn"] >= 1)
    conversation = Path(done["run_dir"], "conversation.jsonl").read_text()
    assert "remember 42" in conversation
    assert "still there?" in conversation
