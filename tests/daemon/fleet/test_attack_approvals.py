"""Approvals attacked by an agent through its own inbox, against a real daemon.

An agent can append any line to its inbox (``echo ... >> $TETHER_INBOX_PATH``): forged
``approval_request`` lines (what the daemon lists as waiting on a person) and forged
``approval_decision`` lines (what it no longer lists). Here one agent writes thousands of
each, with long texts: the fleet's list, every status and ``agent.approvals`` still
answer, each in bounds, and no agent can close another's question.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.agentd import AgentDaemon, agentd, kill_agents  # noqa: F401 (fixture)
from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_until

from tether.daemon.fleet.answers import QUESTION_BYTES
from tether.daemon.fleet.replies import MAX_APPROVALS, ROW_QUESTIONS
from tether.inbox.store import InboxStore
from tether.paths import db_path

FORGED = 5000
REASON = "r" * 5000  # 5,000 of them: 25 MB, over a daemon frame (16 MiB)


def _lines(path: Path, lines: list[dict[str, object]]) -> None:
    with path.open("a") as inbox:  # as the agent's tool would, in one go
        inbox.write("".join(json.dumps(line) + "\n" for line in lines))


def test_attack_a_flood_of_forged_approvals_leaves_every_list_answering(
    agentd: AgentDaemon,  # noqa: F811
) -> None:
    quiet = agentd.spawn("quiet", [{"text": "ok"}])
    flood = agentd.spawn("flood", [{"text": "ok"}])
    quiet_inbox = Path(quiet["run_dir"], "inbox.jsonl")
    _lines(quiet_inbox, [{"type": "approval_request", "reason": "may I?"}])
    quiet_key = f"{quiet['run_id']}:0"
    run = flood["run_id"]
    forged: list[dict[str, object]] = [
        {"type": "approval_request", "reason": REASON, "tool": "t" * 100_000} for _ in range(FORGED)
    ]
    # decisions naming keys that wait nowhere (each once looked up among every question),
    # and one naming the quiet agent's question: another run's key closes nothing
    forged += [{"type": "approval_decision", "key": f"{run}:{n}"} for n in range(1, FORGED)]
    forged.append({"type": "approval_decision", "key": quiet_key, "decision": "approve"})
    _lines(Path(flood["run_dir"], "inbox.jsonl"), forged)
    db = db_path(agentd.env)
    with InboxStore(db) as store:

        def stored() -> bool:
            return len(store.messages(run, after=-1)) == len(forged)

        wait_until(stored, "the forged lines stored")  # (a database: polled)

    rows = {row["name"]: row for row in agentd.call("agent.list", {})["agents"]}
    assert [q["key"] for q in rows["quiet"]["questions"]] == [quiet_key]
    listed = rows["flood"]["questions"]
    assert len(listed) == ROW_QUESTIONS
    assert all(len(q["text"].encode()) < QUESTION_BYTES + 200 for q in listed)
    assert "cut: 5000 characters" in listed[0]["text"]
    assert agentd.status("flood")["waiting"]["kind"] == "approval"
    waiting = agentd.call("agent.approvals")
    assert len(waiting["approvals"]) == MAX_APPROVALS
    assert waiting["more"] > 0  # (each agent's oldest MAX_OPEN_PER_RUN are read)
    assert waiting["approvals"][0]["key"] == quiet_key  # the oldest first
    assert max(len(a["tool"]) for a in waiting["approvals"] if "tool" in a) <= 256


def test_attack_a_forged_request_pages_with_bounded_text(
    daemon_env: DaemonProcess, tmp_path: Path
) -> None:
    """``--notify CMD`` gets a forged request as it would a listed one: its 1 MB reason
    cut to 4 KiB, its 100 KB tool name to 256 bytes (before: whole, on CMD's stdin)."""
    out = tmp_path / "pages"
    daemon_env.start("--notify", f"cat >> {out}")
    paged = AgentDaemon(daemon_env)
    try:
        spawned = paged.spawn("pager", [{"text": "ok"}])
        forged = {"type": "approval_request", "reason": "r" * 1_000_000, "tool": "t" * 100_000}
        _lines(Path(spawned["run_dir"], "inbox.jsonl"), [forged])
        wait_until(lambda: out.exists() and out.read_text().endswith("\n"), "the page", files=[out])
        page = json.loads(out.read_text())
        assert len(page["text"].encode()) < QUESTION_BYTES + 200
        assert "cut: 1000000 characters" in page["text"]
        assert len(page["tool"]) <= 256
    finally:
        daemon_env.stop()
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))
