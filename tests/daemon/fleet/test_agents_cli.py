"""``tether agent ...`` as users run it: real CLI processes, a daemon started on demand."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess

from tether.daemon.rpc.lifecycle import stop_daemon


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def cli_env(daemon_env: DaemonProcess) -> Iterator[dict[str, str]]:
    """An environment whose daemon is started by ``tether agent spawn`` (and stopped here)."""
    try:
        yield daemon_env.env
    finally:
        stop_daemon(daemon_env.socket, timeout=5, force=True)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def test_agent_cli_round_trip_and_exit_codes(cli_env: dict[str, str], short_tmp: Path) -> None:
    script = short_tmp / "replies.json"
    script.write_text(
        json.dumps([{"text": "one"}, {"text": "two"}, {"text": "late", "delay_ms": 800}])
    )

    down = tether(cli_env, "list")
    assert down.returncode == 3
    assert "tether daemon start" in down.stderr

    spawned = tether(cli_env, "spawn", "cli1", "--task", "hi", "--script", str(script), "--wait")
    assert spawned.returncode == 0, spawned.stderr
    assert spawned.stdout == "one\n"  # started the daemon on demand, printed the answer
    assert "spawned cli1" in spawned.stderr

    again = tether(cli_env, "spawn", "cli1", "--script", str(script))
    assert (again.returncode, "agent_exists" in again.stderr) == (2, True)
    assert tether(cli_env, "spawn", "bad name").returncode == 2
    assert tether(cli_env, "spawn", "x", "--provider", "nope").returncode == 2  # usage
    assert tether(cli_env, "spawn", "p", "--", "/nonexistent/prog").returncode == 4
    assert tether(cli_env, "status", "nobody").returncode == 2

    asked = tether(cli_env, "ask", "cli1", "again")
    assert (asked.returncode, asked.stdout) == (0, "two\n")
    slow = tether(cli_env, "ask", "cli1", "hurry", "--timeout", "0.05")
    assert slow.returncode == 5
    assert "events cli1 --follow" in slow.stderr

    listed = json.loads(tether(cli_env, "list", "--json").stdout)
    assert [a["name"] for a in listed["agents"]] == ["cli1"]
    table = tether(cli_env, "list").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "STATE", "TURN"]
    assert table[1].split()[0] == "cli1"
    status = tether(cli_env, "status", "cli1")
    assert "state:" in status.stdout
    assert "run_dir:" in status.stdout

    follow = subprocess.Popen(
        [sys.executable, "-m", "tether", "agent", "events", "cli1", "--follow", "--json"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    busy = tether(cli_env, "rm", "cli1")
    assert busy.returncode == 2
    assert "tether agent rm --force cli1" in busy.stderr  # the flag as the CLI spells it
    stopped = tether(cli_env, "stop", "cli1", "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["ended"] is True
    out, _ = follow.communicate(timeout=30)
    assert follow.returncode == 0
    seqs = [json.loads(line)["seq"] for line in out.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert json.loads(out.splitlines()[-1])["type"] == "exit"

    page = tether(cli_env, "events", "cli1", "--after-seq", "3", "--limit", "2", "--json")
    assert [json.loads(line)["seq"] for line in page.stdout.splitlines()] == [4, 5]
    assert tether(cli_env, "ask", "cli1", "late").returncode == 2
    removed = tether(cli_env, "rm", "cli1")
    assert (removed.returncode, removed.stdout.startswith("removed cli1")) == (0, True)
    assert "no agents" in tether(cli_env, "list").stdout
    reconciled = json.loads(tether(cli_env, "reconcile", "--json").stdout)
    assert reconciled["scanned"] == 0


def test_a_failed_turn_is_exit_4_with_its_error(cli_env: dict[str, str], short_tmp: Path) -> None:
    """An ask (or spawn --wait) whose turn failed says why and exits 4, not 0 with an
    empty answer (a CLI that is not logged in, a model server that refuses)."""
    script = short_tmp / "replies.json"
    script.write_text(json.dumps([{"error": "the model is down"}, {"text": "back"}]))
    spawned = tether(cli_env, "spawn", "sick", "--task", "hi", "--script", str(script), "--wait")
    assert spawned.returncode == 4, spawned.stderr
    assert "sick's turn 1 failed: " in spawned.stderr
    assert "the model is down" in spawned.stderr
    assert spawned.stdout == "\n"
    asked = tether(cli_env, "ask", "sick", "again", "--json")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["text"] == "back"
