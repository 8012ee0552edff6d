"""``tether daemon --max-running N``: spawns beyond N wait as ``queued`` and start in spawn
order as running agents end; a stop or rm of a queued agent takes it out of the queue;
the queue survives a daemon SIGKILL (issue 27 item 7). The queue itself is sans-IO and
property-tested."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.support.agentd import AgentDaemon, kill_agents
from tests.support.daemon import DaemonProcess

from tether.daemon.fleet.admission import Admission

SLOW = [{"text": "never soon", "delay_ms": 120_000}]


@given(
    limit=st.integers(1, 4),
    steps=st.lists(st.tuples(st.sampled_from(["request", "release"]), st.integers(0, 7))),
)
def test_the_queue_keeps_the_limit_and_the_order(limit: int, steps: list[tuple[str, int]]) -> None:
    admission = Admission(limit)
    started: list[str] = []
    for action, number in steps:
        name = f"a{number}"
        if action == "request":
            queue_before = admission.queued
            if admission.request(name) and name not in started:
                assert not queue_before or name in admission.running
                started.append(name)
        else:
            before = admission.queued
            admitted = admission.release(name)
            started += admitted
            assert admitted == [n for n in before if n != name][: len(admitted)]
        assert len(admission.running) <= limit
        assert not set(admission.running) & set(admission.queued)
        for index, queued in enumerate(admission.queued, 1):
            assert admission.position(queued) == index


def _states(agentd: AgentDaemon) -> dict[str, tuple[str, Any]]:
    return {
        row["name"]: (row["state"], row.get("queue_position"))
        for row in agentd.call("agent.list")["agents"]
    }


def test_max_running_queues_spawns_and_starts_them_in_order(daemon_env: DaemonProcess) -> None:
    daemon_env.start("--max-running", "2")
    agentd = AgentDaemon(daemon_env)
    try:
        _play(agentd, daemon_env)
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def _play(agentd: AgentDaemon, daemon: DaemonProcess) -> None:
    for n in range(5):
        spawned = agentd.spawn(f"q{n}", SLOW, task="go")
        assert spawned["state"] in (("ready", "running") if n < 2 else ("queued",))
    states = _states(agentd)
    assert [states[f"q{n}"][1] for n in range(2, 5)] == [1, 2, 3]
    assert agentd.call("agent.stop", {"name": "q3"})["state"] == "cancelled"  # leaves the queue
    assert _states(agentd)["q4"] == ("queued", 2)
    assert "queued" in agentd.error("agent.steer", {"name": "q2", "text": "x"}).message
    agentd.call("agent.stop", {"name": "q0", "mode": "cancel"})  # a place frees: q2 starts
    agentd.wait_for("q2", lambda s: s["state"] in ("ready", "running"))
    assert _states(agentd)["q4"] == ("queued", 1)
    daemon.stop(signal.SIGKILL)  # the queue is in the registry: it survives
    daemon.start("--max-running", "2")
    assert _states(agentd)["q4"] == ("queued", 1)
    agentd.call("agent.stop", {"name": "q1", "mode": "cancel"})
    agentd.wait_for("q4", lambda s: s["state"] in ("ready", "running"))
    agentd.spawn("q5", SLOW, task="go")
    assert _states(agentd)["q5"] == ("queued", 1)
    assert agentd.call("agent.rm", {"name": "q5"})["removed"] is True  # rm: out of the queue
    assert "q5" not in _states(agentd)
