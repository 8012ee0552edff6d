"""A killed daemon leaves its agents running; a restarted one re-adopts them, nothing lost."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

from tests.event_files import wait_for_event
from tests.support.agentd import AgentDaemon, agent_pids, agentd, alive
from tests.support.daemon import frame
from tests.support.waits import spin_until, wait_gone, wait_until
from tests.wake_probe import blocked_without_timer, inotify_instances

from tether.daemon.rpc.client import DaemonClientError

__all__ = ["agentd"]


def _registry_row(agentd: AgentDaemon, name: str) -> dict[str, Any]:
    db = sqlite3.connect(Path(agentd.env["TETHER_HOME"]) / "tether.db")
    db.row_factory = sqlite3.Row
    try:
        row = db.execute("SELECT * FROM daemon_agents WHERE name = ?", (name,)).fetchone()
        return dict(row)
    finally:
        db.close()


def _check_log(events: list[dict[str, Any]]) -> None:
    seqs = [event["seq"] for event in events]
    assert seqs == list(range(1, len(seqs) + 1))  # every event exactly once, in order


def test_sigkill_mid_turn_then_restart_recovers_everything(agentd: AgentDaemon) -> None:
    names = ["r0", "r1", "r2"]
    pids = {}
    for index, name in enumerate(names):
        # r0's turn outlasts the kill below by a wide margin, so its ask is cut off
        delay_ms = 700 if index else 5000
        replies = [
            {"text": f"answer {index} " + "word " * 40, "delay_ms": delay_ms, "chunk_ms": 20},
            {"text": f"second {index}"},
        ]
        pids[name] = agentd.spawn(name, replies, task=f"task {index}")["pid"]
    before = {n: agentd.wait_for(n, lambda s: s["state"] == "running")["last_seq"] for n in names}
    lost: list[BaseException] = []

    def ask_in_flight() -> None:
        try:
            agentd.call("agent.ask", {"name": "r0", "text": "cut off"}, timeout=None)
        except DaemonClientError as exc:
            lost.append(exc)

    asker = threading.Thread(target=ask_in_flight)
    asker.start()
    _wait_acked(agentd, "r0", 2)
    agentd.kill()
    asker.join(10)
    assert lost, "the ask in flight should see the daemon go away"
    assert all(alive(pid) for pid in pids.values())  # children survive the daemon

    agentd.restart()
    report = agentd.call("agent.reconcile")
    assert sorted(report["recovered"]) == names
    assert (report["orphaned"], report["skipped"], report["errors"]) == ([], [], [])
    assert report["scanned"] == 3
    assert agentd.call("agent.reconcile") == report  # idempotent
    for name in names:
        status = agentd.wait_for(name, lambda s: s["state"] == "ready" and s["turn"] >= 1)
        assert status["adopted"] is True
        assert status["pid"] == pids[name]
        events = agentd.events(name)
        _check_log(events)
        tail = agentd.events(name, after_seq=before[name])
        assert [e["seq"] for e in tail] == [e["seq"] for e in events[before[name] :]]
        kinds = [e["type"] for e in events]
        assert "turn-complete" in kinds
        assert _registry_row(agentd, name)["event_offset"] > 0
    # r0's cut-off follow-up was written before the kill: its turn still ran, once.
    r0 = agentd.events("r0")
    assert [e.get("ref") for e in r0 if e["type"] == "follow-up-injected"] == [2]
    assert agentd.call("agent.ask", {"name": "r1", "text": "after"})["text"] == "second 1"
    assert agentd.call("agent.stop", {"name": "r2"})["state"] == "done"
    _check_log(agentd.events("r2"))


def test_dead_children_are_orphaned_and_ended(agentd: AgentDaemon) -> None:
    victim = agentd.spawn("victim", [{"text": "x"}])["pid"]
    survivor = agentd.spawn("survivor", [{"text": "still here"}])["pid"]
    timer = Path(agentd.spawn("timer", [{"text": "x"}], deadline_s=1)["run_dir"], "events.jsonl")
    agentd.kill()
    os.killpg(victim, signal.SIGKILL)
    wait_gone([victim], "the victim")
    # the timer's deadline passes while no daemon runs: it writes its exit itself
    wait_for_event(timer, lambda e: e["type"] == "exit", proc=None, describe=timer.read_text)
    agentd.restart()
    report = agentd.call("agent.reconcile")
    assert report["recovered"] == ["survivor"], (report, agentd.process.log.read_text()[-3000:])
    assert sorted(report["orphaned"]) == ["timer", "victim"]
    assert report["errors"] == []
    dead = agentd.status("victim")
    assert dead["state"] == "stopped"  # gone while no daemon watched: stopped, resumable
    assert "gone" in dead["error"]
    assert agentd.status("timer")["state"] == "timed-out"  # it wrote its exit itself
    assert agentd.call("agent.ask", {"name": "survivor", "text": "hi"})["text"] == "still here"
    assert alive(survivor)
    assert agentd.call("agent.reconcile")["orphaned"] == report["orphaned"]


def test_graceful_stop_leaves_agents_for_the_next_daemon(agentd: AgentDaemon) -> None:
    pid = agentd.spawn("calm", [{"text": "one"}, {"text": "two"}], task="go", wait=True)["pid"]
    agentd.process.stop(signal.SIGTERM)
    assert alive(pid)
    agentd.restart()
    assert agentd.status("calm")["adopted"] is True
    assert agentd.call("agent.ask", {"name": "calm", "text": "again"})["text"] == "two"
    _check_log(agentd.events("calm"))


def test_sigkill_then_readoption_still_acks_and_wakes_through_the_fifo(
    agentd: AgentDaemon,
) -> None:
    replies = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    pid = agentd.spawn("woken", replies, task="go", wait=True)["pid"]
    assert inotify_instances(pid) == 0  # woken through its pipe, not watching its file
    agentd.kill()  # the pipe's write end dies with the daemon: the child reads EOF
    wait_until(lambda: inotify_instances(pid) == 1, "the orphaned child watches its file")
    agentd.restart()
    assert agentd.status("woken")["adopted"] is True
    assert agentd.call("agent.ask", {"name": "woken", "text": "again"})["text"] == "two"
    # the new daemon opened the run's wake FIFO: the child dropped its watcher again
    wait_until(lambda: inotify_instances(pid) == 0, "the adopted child is woken, not watching")
    assert agentd.call("agent.ask", {"name": "woken", "text": "more"})["text"] == "three"
    _check_log(agentd.events("woken"))


def _wait_acked(agentd: AgentDaemon, name: str, seq: int) -> None:
    """Until the child has acknowledged control ``seq`` in its log (read as it grows)."""
    log = Path(agentd.status(name)["run_dir"], "events.jsonl")
    wait_for_event(
        log,
        lambda e: e["type"] == "control-ack" and e.get("ref") == seq,
        proc=None,
        describe=log.read_text,
    )


def _agent_processes(home: Path, name: str) -> list[int]:
    """Live processes started for agent ``name`` (gated or running its command)."""
    marker = f"TETHER_AGENT_NAME={name}".encode()
    return [p for p in agent_pids(home) if marker in _environ(p)]


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def test_sigkill_right_after_the_fork_never_leaves_a_child_nobody_owns(
    agentd: AgentDaemon,
) -> None:
    # The test takes the database's write lock the moment the name is reserved, so the
    # daemon forks the child but cannot record its pid yet; then it kills the daemon.
    home = Path(agentd.env["TETHER_HOME"])
    script = agentd.script("g", [{"text": "hi"}])
    db = sqlite3.connect(home / "tether.db", isolation_level=None, timeout=30)
    try:
        name, sock = _reserve_unrecorded(agentd, db, script)
        with sock:
            wait_until(lambda: _agent_processes(home, name), "the fork")  # (a /proc state)
            agentd.kill()
    finally:
        db.close()
    agentd.restart()  # reconcile: a row without a pid is failed
    row = _registry_row(agentd, name)
    assert row["pid"] is None
    assert row["state"] == "failed"
    wait_gone(_agent_processes(home, name), "no child")


def _reserve_unrecorded(
    agentd: AgentDaemon, db: sqlite3.Connection, script: str
) -> tuple[str, socket.socket]:
    """Spawn agents until the lock lands between a reservation and its pid."""
    for attempt in range(20):
        name = f"g{attempt}"
        request = {"name": name, "script": script, "cwd": str(agentd.root)}
        sock = agentd.process.connect()
        sock.sendall(frame({"id": 1, "method": "agent.spawn", "params": request}))
        spin_until(lambda: _row_exists(db, name), "the reservation")  # noqa: B023
        db.execute("BEGIN IMMEDIATE")  # the pid update now waits on us
        pid = db.execute("SELECT pid FROM daemon_agents WHERE name = ?", (name,)).fetchone()[0]
        if pid is None:
            return name, sock  # (the call stays open: the daemon is killed next)
        db.execute("ROLLBACK")
        sock.close()
    raise AssertionError("the lock never landed between a reservation and its pid")


def _row_exists(db: sqlite3.Connection, name: str) -> bool:
    row = db.execute("SELECT 1 FROM daemon_agents WHERE name = ?", (name,)).fetchone()
    return row is not None


def _settled(pid: int, row: dict[str, Any]) -> bool:
    """A process of the agent may live on only as the child its row recorded (adopted)."""
    if not alive(pid):
        return True
    assert row["pid"] == pid, (row, pid)
    assert row["state"] != "failed", row
    return True


def test_idle_agents_leave_the_daemon_no_timer(agentd: AgentDaemon) -> None:
    """Idle agents wait on events only: the daemon's loop sleeps with no timeout (a timer
    per agent, a sweep or a safety tick would show as a finite one)."""
    replies = [{"text": "first"}, {"text": "ok"}]
    pids = [agentd.spawn(f"calm{i}", replies, task="go", wait=True)["pid"] for i in "ab"]
    assert agentd.process.proc is not None
    daemon = agentd.process.proc.pid
    wait_until(lambda: blocked_without_timer(daemon), "the idle daemon sleeps with no timeout")
    for pid in pids:
        wait_until(lambda p=pid: blocked_without_timer(p), "the idle child sleeps too")
    assert agentd.call("agent.ask", {"name": "calma", "text": "again"})["text"] == "ok"
