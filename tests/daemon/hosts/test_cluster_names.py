"""Names are unique across a cluster, and every verb naming an agent reaches it through the
local daemon, wherever it runs (issue 28 item 14).

Real daemons as hosts A and B over a real nats-server. Host A's CLI has no cluster URL: it
talks to A's own socket only, and A's daemon forwards each call naming B's agent to B and
answers with B's typed reply. ``--host`` is needed only to spawn on another host. Every
wait is for an event (a row in the registry, a line in a log), bounded, never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_hosts import hosts, nats, tether  # noqa: F401  (fixtures)
from tests.nats_server import NatsServer
from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_until

from tether.daemon.hosts import remote
from tether.daemon.rpc.client import DaemonCallError, DaemonClient
from tether.daemon.rpc.protocol import ErrorCode


def _local(daemon: DaemonProcess) -> dict[str, str]:
    """The daemon's environment without the cluster's URL: its CLI talks to its socket."""
    env = dict(daemon.env)
    env.pop("TETHER_NATS_URL", None)
    return env


def _rows(env: dict[str, str]) -> dict[str, dict[str, object]]:
    done = tether(env, "list", "--json")
    assert done.returncode == 0, done.stderr
    return {str(row["name"]): row for row in json.loads(done.stdout)["agents"]}


def _wait_row(env: dict[str, str], name: str) -> dict[str, object]:
    """Until the local daemon lists ``name`` (another host's row reached its registry; a
    state only a call shows: polled in tests/support/waits.py)."""
    row: dict[str, object] = wait_until(lambda: _rows(env).get(name), f"{name} listed")
    return row


def test_every_verb_naming_an_agent_reaches_it_through_the_local_daemon(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    a, b = _local(hosts["A"]), _local(hosts["B"])
    script = tmp_path / "replies.json"
    replies = [{"text": "from B"}, {"text": "second"}, {"text": "third"}, {"text": "fourth"}]
    script.write_text(json.dumps(replies))
    spawned = tether(b, "spawn", "w1", "--task", "hi", "--script", str(script), "--wait")
    assert (spawned.returncode, spawned.stdout) == (0, "from B\n"), spawned.stderr
    assert tether(a, "spawn", "a1", "--script", str(script)).returncode == 0

    row = _wait_row(a, "w1")  # A's list shows every host's agents, each with its host
    assert row["host"] == "B"
    assert _rows(a)["a1"]["host"] == "A"

    asked = tether(a, "ask", "w1", "again")
    assert (asked.returncode, asked.stdout) == (0, "second\n"), asked.stderr
    steered = tether(a, "steer", "w1", "nudge", "--json")
    assert steered.returncode == 0, steered.stderr
    assert json.loads(steered.stdout)["ack"] in ("accepted", "applied")
    status = json.loads(tether(a, "status", "w1", "--json").stdout)
    assert status["host"] == "B"
    assert status["run_dir"].startswith(hosts["B"].env["TETHER_HOME"])
    page = tether(a, "events", "w1", "--after-seq", "0", "--json")
    assert page.returncode == 0, page.stderr
    seqs = [json.loads(line)["seq"] for line in page.stdout.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))

    queued = tether(a, "queue", "w1", "--json")
    assert queued.returncode == 0, queued.stderr
    assert json.loads(queued.stdout)["name"] == "w1"
    diff = tether(a, "diff", "w1", "--json")  # B's answer: w1 has no worktree there
    assert diff.returncode == 2
    assert json.loads(diff.stdout)["error"]["code"] == "invalid_status", diff.stdout
    assert "no worktree" in diff.stderr
    with DaemonClient.connect(hosts["A"].socket) as client:  # the raw verb, as fno-agents sends it
        sent = client.call("agent.steer", {"name": "w1", "text": "and this"})
        assert (sent["name"], sent["ack"]) == ("w1", "accepted")

    taken = tether(a, "spawn", "w1", "--script", str(script), "--json")  # B runs w1
    assert taken.returncode == 2, taken.stderr
    assert json.loads(taken.stdout)["error"]["code"] == "agent_exists"
    assert "host 'B'" in taken.stderr
    assert _wait_row(b, "a1")["host"] == "A"
    taken_on_b = tether(b, "spawn", "a1", "--script", str(script))  # and A runs a1
    assert taken_on_b.returncode == 2
    assert "agent_exists" in taken_on_b.stderr

    # --host only to spawn elsewhere, through A's own daemon (no URL given to the CLI)
    there = tether(a, "--host", "B", "spawn", "w2", "--task", "t", "--script", str(script))
    assert there.returncode == 0, there.stderr
    assert json.loads(tether(a, "status", "w2", "--json").stdout)["host"] == "B"
    assert tether(b, "status", "w2").returncode == 0  # it is B's own agent

    following = subprocess.Popen(
        [sys.executable, "-m", "tether", "agent", "events", "w1", "--after-seq", "2",
         "--follow", "--json"],
        env=a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stopped = tether(a, "stop", "w1", "--mode", "cancel")
        assert stopped.returncode == 0, stopped.stderr
        out, err = following.communicate(timeout=90)
    finally:
        if following.poll() is None:
            following.kill()
            following.communicate()
    assert following.returncode == 0, err
    followed = [json.loads(line) for line in out.splitlines()]
    assert [e["seq"] for e in followed] == list(range(3, 3 + len(followed)))  # once, in order
    assert (followed[-1]["type"], followed[-1]["status"]) == ("exit", "cancelled")

    removed = tether(a, "rm", "w1")
    assert removed.returncode == 0, removed.stderr
    gone = tether(a, "status", "w1", "--json")
    assert gone.returncode == 2
    assert json.loads(gone.stdout)["error"]["code"] == "agent_not_found"


def test_unknown_names_relayed_calls_and_another_hosts_terminal(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    nats: NatsServer,  # noqa: F811
) -> None:
    """A name nobody runs is agent_not_found; a call relayed from another host is answered
    by its host alone (B knows A runs p0 and still answers agent_not_found: no call goes
    back and forth); another host's PTY agent shows in the list and its terminal is
    driven on its host."""
    a = _local(hosts["A"])
    assert tether(a, "spawn", "p0", "--pty", "--", sys.executable, "-c", "input()").returncode == 0
    _wait_row(_local(hosts["B"]), "p0")

    async def relayed() -> None:
        cluster = await remote.connect(nats.url)
        try:
            with pytest.raises(DaemonCallError) as refused:
                await remote.call_host(cluster, "B", "agent.status", {"name": "p0"})
            assert refused.value.code is ErrorCode.AGENT_NOT_FOUND
        finally:
            await cluster.aclose()

    asyncio.run(relayed())
    missing = tether(a, "ask", "nobody", "hi", "--json")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["error"]["code"] == "agent_not_found"
    spawned = tether(
        _local(hosts["B"]), "spawn", "p1", "--pty", "--", sys.executable, "-c", "input()"
    )
    assert spawned.returncode == 0, spawned.stderr
    _wait_row(a, "p1")
    with DaemonClient.connect(hosts["A"].socket) as client:
        status = client.call("agent.status", {"name": "p1"})
        assert (status["kind"], status["host"]) == ("pty", "B")
    drive = tether(a, "attach", "p1")
    assert drive.returncode == 2
    assert "runs on host 'B'" in drive.stderr


def test_approvals_are_listed_and_answered_cluster_wide(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    """An approval that waits in B's agent is listed by A's `tether agent approvals`, with
    its host, and answered through A: the call runs on B, once."""
    a, b = _local(hosts["A"]), _local(hosts["B"])
    work = tmp_path / "work"
    work.mkdir()
    touch = {"name": "bash", "arguments": {"command": f"touch {work / 'done'}"}}
    script = tmp_path / "asking.json"
    script.write_text(json.dumps([{"text": "Touching.", "tool_calls": [touch]}, {"text": "Ok."}]))
    spawned = tether(
        b, "spawn", "asker", "--task", "touch it", "--script", str(script),
        "--approval", "ask", "--cwd", str(work),
    )  # fmt: skip
    assert spawned.returncode == 0, spawned.stderr
    _wait_row(a, "asker")

    def listed() -> list[dict[str, object]]:
        done = tether(a, "approvals", "--json")
        assert done.returncode == 0, done.stderr
        return [row for row in json.loads(done.stdout)["approvals"] if row["name"] == "asker"]

    rows = wait_until(listed, what="B's approval listed on A")
    assert rows[0]["host"] == "B"
    assert not (work / "done").exists()  # nothing ran while nobody answered
    key = str(rows[0]["key"])
    answered = tether(a, "answer", "asker", key, "--approve")
    assert answered.returncode == 0, answered.stderr
    wait_until((work / "done").exists, files=[work / "done"], what="the call ran")
    again = tether(a, "answer", "asker", key, "--approve")
    assert again.returncode != 0  # answered once
