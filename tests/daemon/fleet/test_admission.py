"""``tether daemon --max-running N``: spawns beyond N wait as ``queued`` and start in spawn
order as running agents end; a stop or rm of a queued agent takes it out of the queue;
the queue survives a daemon SIGKILL (issue 27 item 7). The queue itself is sans-IO and
property-tested."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.support.agentd import AgentDaemon, kill_agents
from tests.support.daemon import DaemonProcess
from tests.support.gates import ToolGate
from tests.support.waits import wait_until

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


def test_agents_spawned_close_when_idle_free_their_place_by_themselves(
    daemon_env: DaemonProcess, short_tmp: Path, tool_gate: Callable[[Path], ToolGate]
) -> None:
    """``tether agent spawn --close-when-idle``: the run ends once its task is answered, so
    the next in line starts without a stop (a daemon agent is long-lived otherwise)."""
    daemon_env.start("--max-running", "1")
    agentd = AgentDaemon(daemon_env)
    gate = tool_gate(short_tmp / "gate")
    first, second = _scripts(short_tmp, gate, "second done")

    def spawn(name: str, script: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tether", "agent", "spawn", name, "--task", "go"]
        argv += ["--script", str(script), "--cwd", str(short_tmp), "--close-when-idle"]
        done = subprocess.run(
            argv, env=daemon_env.env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        return done

    try:
        spawn("c1", first)
        agentd.wait_for("c1", lambda s: s["state"] == "running")
        queued = spawn("c2", second)
        assert queued.stdout.startswith("spawned c2: queued #1 ("), queued.stdout
        gate.open()
        ended = agentd.wait_for("c1", lambda s: s["state"] == "done")
        assert ended["resumable"] is True
        agentd.wait_for("c2", lambda s: s["state"] == "done")  # started, answered, ended
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def test_a_spawn_that_waits_waits_through_the_queue(
    daemon_env: DaemonProcess, short_tmp: Path, tool_gate: Callable[[Path], ToolGate]
) -> None:
    """``spawn --wait`` of an agent that has to queue prints its task's answer once it has
    run (it returned at once with no answer), or says why it never ran (exit 2)."""
    daemon_env.start("--max-running", "1")
    agentd = AgentDaemon(daemon_env)
    gate = tool_gate(short_tmp / "gate")
    first, second = _scripts(short_tmp, gate, "second answers")

    def spawn(name: str, script: Path, *extra: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "tether", "agent", "spawn", name, "--task", "go"]
        argv += ["--script", str(script), "--cwd", str(short_tmp), *extra]
        return subprocess.Popen(
            argv, env=daemon_env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    try:
        started = spawn("w1", first, "--close-when-idle")
        _, err = started.communicate(timeout=60)
        assert started.returncode == 0, err
        agentd.wait_for("w1", lambda s: s["state"] == "running")
        waiting = spawn("w2", second, "--wait")
        wait_until(lambda: _queued(agentd, "w2"), "w2 in line")
        doomed = spawn("w3", second, "--wait")
        wait_until(lambda: _queued(agentd, "w3"), "w3 in line")
        agentd.call("agent.stop", {"name": "w3"})  # leaves the line: its spawn is told
        _, err = doomed.communicate(timeout=60)
        assert doomed.returncode == 2, err
        assert "before it started" in err
        assert waiting.poll() is None  # still in line behind w1
        gate.open()
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert out == "second answers\n"
        assert "spawned w2 (pid " in err
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def _scripts(tmp: Path, gate: ToolGate, answer: str) -> tuple[Path, Path]:
    """A first agent's script whose tool holds until ``gate`` opens, and a second one that
    answers ``answer`` at once."""
    held = {"name": "bash", "arguments": {"command": gate.command}}
    first = tmp / "first.json"
    first.write_text(json.dumps([{"tool_calls": [held]}, {"text": "first done"}]))
    second = tmp / "second.json"
    second.write_text(json.dumps([{"text": answer}]))
    return first, second


def _queued(agentd: AgentDaemon, name: str) -> bool:
    rows = {row["name"]: row for row in agentd.call("agent.list")["agents"]}
    return name in rows and rows[name]["state"] == "queued"
