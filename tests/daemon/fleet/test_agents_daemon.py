"""``agent.*`` against a real daemon process with real ``tether child`` agents (scripted)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import AgentDaemon, agentd, alive, kill_agents
from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_until

from tether.daemon.channels.hub import ENVELOPE_METHOD, META_KEY, envelope_problem
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonCallError, DaemonClient
from tether.daemon.rpc.protocol import ErrorCode, Request
from tether.inbox import append_inbox
from tether.inbox.store import InboxStore
from tether.paths import db_path

__all__ = ["agentd"]

E = ErrorCode


def test_spawn_ask_status_list_stop_rm(agentd: AgentDaemon) -> None:
    replies = [{"text": "one", "usage": {"input": 3, "output": 1}}, {"text": "two"}]
    spawned = agentd.spawn("a1", replies, task="first", wait=True)
    assert spawned["answer"]["text"] == "one"
    assert spawned["answer"]["turn"] == 1
    assert spawned["answer"]["usage"] == {"input": 3, "output": 1}
    assert (spawned["state"], spawned["turn"]) == ("ready", 1)
    pid = spawned["pid"]
    assert alive(pid)
    assert os.getsid(pid) == pid  # its own session: not in the daemon's group
    assert "agent_exists" in str(agentd.error("agent.spawn", {"name": "a1"}))

    status = agentd.status("a1")
    assert status["state"] == "ready"
    assert status["last_seq"] > 5
    assert status["usage"]["input"] >= 3
    assert status["started_at"] >= status["created_at"] > 0
    assert [a["name"] for a in agentd.call("agent.list")["agents"]] == ["a1"]

    answer = agentd.call("agent.ask", {"name": "a1", "text": "second"})
    assert (answer["text"], answer["turn"], answer["timed_out"]) == ("two", 2, False)
    assert answer["usage"]["output"] > 0
    assert agentd.status("a1")["turn"] == 2

    agentd.expect(E.INVALID_STATUS, "agent.rm", {"name": "a1"})
    stopped = agentd.call("agent.stop", {"name": "a1"})
    assert (stopped["ack"], stopped["state"], stopped["ended"]) == ("accepted", "done", True)
    agentd.expect(E.INVALID_STATUS, "agent.ask", {"name": "a1", "text": "x"})
    agentd.expect(E.INVALID_STATUS, "agent.steer", {"name": "a1", "text": "x"})
    # stopping what already ended answers as fno-agents' daemon does
    assert agentd.call("agent.stop", {"name": "a1"})["already_exited"] is True
    assert not alive(pid)
    ended = agentd.status("a1")
    assert (ended["state"], ended["exit_code"]) == ("done", 0)
    removed = agentd.call("agent.rm", {"name": "a1"})
    assert removed["removed"] is True
    assert Path(removed["run_dir"], "events.jsonl").exists()  # history stays
    agentd.expect(E.AGENT_NOT_FOUND, "agent.status", {"name": "a1"})
    assert agentd.call("agent.list")["agents"] == []


def test_status_answers_follow_every_change(agentd: AgentDaemon) -> None:
    """``agent.status`` is answered from its cached encoding while nothing it shows has
    changed: every answer equals the agent's freshly built ``agent.list`` row (plus
    ``final_text`` once ended), before and after a turn and after the end."""

    def settled() -> dict[str, Any]:
        for _ in range(100):  # until no event lands between the two status calls
            before = agentd.status("s1")
            (row,) = agentd.call("agent.list")["agents"]
            after = agentd.status("s1")
            if before == after:
                assert {k: v for k, v in after.items() if k != "final_text"} == row
                return after
        raise AssertionError("the agent never settled")

    agentd.spawn("s1", [{"text": "one"}, {"text": "two"}], task="first", wait=True)
    first = settled()
    assert (first["state"], first["turn"]) == ("ready", 1)
    agentd.call("agent.ask", {"name": "s1", "text": "second"})
    second = settled()
    assert second["turn"] == 2
    assert second["last_seq"] > first["last_seq"]
    agentd.call("agent.stop", {"name": "s1"})
    ended = settled()
    assert (ended["state"], ended["status"], ended["final_text"]) == ("done", "exited", "two")
    agentd.call("agent.rm", {"name": "s1"})


def test_names_and_params_are_checked(agentd: AgentDaemon) -> None:
    for bad in ("", "a b", "x" * 65, "é", "a/b"):
        agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": bad})
        agentd.expect(E.INVALID_PARAMS, "agent.status", {"name": bad})
    agentd.expect(E.AGENT_NOT_FOUND, "agent.status", {"name": "x" * 64})
    agentd.expect(E.AGENT_NOT_FOUND, "agent.ask", {"name": "nobody", "text": "hi"})
    agentd.expect(E.INVALID_PARAMS, "agent.status", {"name": 3})
    agentd.expect(E.INVALID_PARAMS, "agent.ask", {"name": "a"})
    agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "cwd": "relative"})
    agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "deadline_s": -1})
    # numbers out of any sane range are refused here, not a spawn that fails later
    for huge in (1e308, 0, 10**30):
        agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "deadline_s": huge})
    agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "timeout_s": 1e308})
    agentd.expect(E.INVALID_PARAMS, "agent.ask", {"name": "a", "text": "x", "timeout": 1e300})
    agentd.expect(E.INVALID_PARAMS, "agent.stop", {"name": "a", "timeout_s": 1e300})
    agentd.expect(E.INVALID_PARAMS, "agent.stop", {"name": "a", "mode": "explode"})
    agentd.expect(E.INVALID_PARAMS, "agent.events", {"name": "a", "after_seq": -1})
    agentd.expect(E.CHANNEL_UNKNOWN, "agent.spawn", {"name": "a", "channel_id": "ch_nope"})
    # a spawn on another host: a host name, and a daemon in a cluster
    agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "host": "../b"})
    message = agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "host": "b"})
    assert "in no cluster" in message
    agentd.expect(E.INVALID_PARAMS, "agent.events", {"name": "a", "wait_s": 1e300})


def test_a_cli_that_is_not_installed_is_spawn_failed_and_leaves_nothing(
    agentd: AgentDaemon,
) -> None:
    """fno-agents' provider: "codex" with no codex on PATH: spawn_failed at once, no row
    (the reference answers so; tether answered live and failed a moment later)."""
    env = {"PATH": "/nonexistent", "TETHER_CI_CACHE": ""}
    params = {"name": "cx", "provider": "codex", "cwd": str(agentd.root), "env": env}
    message = agentd.expect(E.SPAWN_FAILED, "agent.spawn", params)
    assert "codex is not on PATH" in message
    assert agentd.call("agent.list")["agents"] == []


def test_stop_and_rm_right_after_the_exit_see_the_end(agentd: AgentDaemon) -> None:
    """The child said exit and lingers (its grace runs): stop answers already_exited with
    the run's final state, not running; rm without force removes it (#28 item 12: it
    answered {already_exited, state: running} and rm refused 'is running')."""
    double = Path(__file__).parents[2] / "parent" / "doubles" / "wire_child.py"
    argv = [sys.executable, str(double), "--mode", "linger", "--turn-ms", "10"]
    params = {"name": "l", "argv": argv, "task": "go", "cwd": str(agentd.root)}
    agentd.call("agent.spawn", {**params, "close_when_idle": True})  # exits after its turn
    agentd.wait_for("l", lambda s: any(e["type"] == "exit" for e in agentd.events("l")))
    stopped = agentd.call("agent.stop", {"name": "l"})
    assert (stopped.get("already_exited"), stopped["state"]) == (True, "done")
    assert agentd.call("agent.rm", {"name": "l"})["removed"] is True


def test_spawn_failures_free_the_name(agentd: AgentDaemon) -> None:
    root = str(agentd.root)
    message = agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "a", "provider": "nope"})
    assert "unknown provider" in message
    message = agentd.expect(
        E.SPAWN_FAILED, "agent.spawn", {"name": "a", "argv": ["/nonexistent/prog"], "cwd": root}
    )
    assert "No such file" in message
    crash = [sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"]
    message = agentd.expect(E.SPAWN_FAILED, "agent.spawn", {"name": "a", "argv": crash})
    assert "boom" in message  # the tail of its stderr
    os.mkfifo(agentd.root / "fifo.json")  # nobody writes it: refused, never waited on
    fifo = {"name": "a", "script": str(agentd.root / "fifo.json")}
    assert "not a regular file" in agentd.expect(E.INVALID_PARAMS, "agent.spawn", fifo)
    (agentd.root / "bad.json").write_text('{"not": "a list"}')
    bad = {"name": "a", "script": str(agentd.root / "bad.json")}
    assert "list" in agentd.expect(E.INVALID_PARAMS, "agent.spawn", bad)  # bad input
    assert agentd.call("agent.list")["agents"] == []
    assert agentd.spawn("a", [{"text": "fine"}])["state"] == "ready"


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"env": {"K": "a\x00b"}}, "env['K']"),
        ({"env": {"K\x00": "v"}}, "env has a key"),
        ({"argv": [sys.executable, "-c\x00", "pass"]}, "argv[1]"),
        ({"model": "m\x00"}, "model"),
        ({"cwd": "/tmp\x00"}, "cwd"),
    ],
    ids=["env-value", "env-key", "argv", "model", "cwd"],
)
def test_a_nul_byte_bound_for_exec_is_invalid_params_and_leaves_no_row(
    agentd: AgentDaemon, params: dict[str, object], where: str
) -> None:
    message = agentd.expect(E.INVALID_PARAMS, "agent.spawn", {"name": "nul", **params})
    assert where in message
    assert "NUL byte" in message
    assert agentd.call("agent.list")["agents"] == []
    assert agentd.spawn("nul", [{"text": "fine"}])["state"] == "ready"  # the name is free


def test_ask_on_a_running_agent_is_a_follow_up(agentd: AgentDaemon) -> None:
    replies = [{"text": "slow", "delay_ms": 800}, {"text": "follow answer"}, {"text": "three"}]
    agentd.spawn("f", replies, task="go")
    agentd.wait_for("f", lambda s: s["state"] == "running")
    answer = agentd.call("agent.ask", {"name": "f", "text": "and also"})
    assert (answer["text"], answer["turn"]) == ("follow answer", 1)
    kinds = {(e["type"], e.get("ref")) for e in agentd.events("f")}
    assert ("follow-up-injected", answer["seq"]) in kinds
    assert agentd.call("agent.ask", {"name": "f", "text": "ready again"})["text"] == "three"


def test_ask_timeout_is_a_result_and_the_turn_goes_on(agentd: AgentDaemon) -> None:
    agentd.spawn("t", [{"text": "late", "delay_ms": 600}])
    result = agentd.call("agent.ask", {"name": "t", "text": "hurry", "timeout_s": 0.05})
    assert result["timed_out"] is True
    assert result["state"] in ("ready", "running")  # the child may not have read it yet
    agentd.wait_for("t", lambda s: s["state"] == "ready" and s["turn"] == 1)
    texts = [e.get("text") for e in agentd.events("t") if e["type"] == "assistant-text"]
    assert texts == ["late"]


def test_controls_and_their_acks(agentd: AgentDaemon) -> None:
    agentd.spawn("c", [{"text": "a", "delay_ms": 400}, {"text": "b"}, {"text": "final"}])
    agentd.expect(E.INVALID_PARAMS, "agent.finalize", {"name": "c", "note": 5})
    steer = agentd.call("agent.steer", {"name": "c", "text": "start"})
    assert (steer["ack"], steer["seq"]) == ("accepted", 1)
    follow = agentd.call("agent.follow_up", {"name": "c", "text": "then"})
    assert follow["ack"] == "accepted"
    final = agentd.call("agent.finalize", {"name": "c", "note": "wrap up"})
    assert final["ack"] == "accepted"
    agentd.wait_for("c", lambda s: s["state"] == "done")
    agentd.expect(E.INVALID_STATUS, "agent.cancel", {"name": "c"})


def test_cancel_and_rm_force(agentd: AgentDaemon) -> None:
    agentd.spawn("k", [{"text": "never", "delay_ms": 60_000}], task="wait")
    agentd.wait_for("k", lambda s: s["state"] == "running")
    stopped = agentd.call("agent.stop", {"name": "k", "mode": "cancel"})
    assert (stopped["state"], stopped["ended"]) == ("cancelled", True)
    pid = agentd.spawn("r", [{"text": "never", "delay_ms": 60_000}], task="wait")["pid"]
    removed = agentd.call("agent.rm", {"name": "r", "force": True})
    assert removed["removed"] is True
    assert not alive(pid)
    assert [a["name"] for a in agentd.call("agent.list")["agents"]] == ["k"]


def test_events_replay_then_follow_until_the_end(agentd: AgentDaemon) -> None:
    agentd.spawn("e", [{"text": "x" * 300, "chunk_ms": 5}, {"text": "y", "delay_ms": 300}])
    agentd.call("agent.ask", {"name": "e", "text": "go"})
    recorded = agentd.events("e")
    middle = recorded[len(recorded) // 2]["seq"]
    streamed: list[dict[str, Any]] = []
    batches: list[int] = []

    def on_request(request: Request) -> Any:
        assert request.method == "agent.event"
        assert request.params["name"] == "e"
        batches.append(len(request.params["events"]))
        streamed.extend(request.params["events"])
        return {}

    outcome: dict[str, Any] = {}

    def follow() -> None:
        with DaemonClient.connect(agentd.process.socket, timeout=None) as client:
            client.on_request = on_request
            params = {"name": "e", "after_seq": middle, "follow": True}
            outcome.update(client.call("agent.events", params))

    thread = threading.Thread(target=follow)
    thread.start()
    agentd.call("agent.ask", {"name": "e", "text": "more"})
    agentd.call("agent.stop", {"name": "e"})
    thread.join(20)
    assert not thread.is_alive()
    seqs = [e["seq"] for e in streamed]
    assert seqs == list(range(middle + 1, seqs[-1] + 1))  # every event once, in order
    assert streamed[-1]["type"] == "exit"
    assert outcome == {
        "name": "e",
        "last_seq": seqs[-1],
        "count": len(seqs),
        "state": "done",
        "ended": True,
    }
    assert [e["seq"] for e in agentd.events("e", middle)] == seqs
    page = agentd.call("agent.events", {"name": "e", "limit": 3})
    assert [e["seq"] for e in page["events"]] == [1, 2, 3]
    assert (page["last_seq"], page["more"]) == (3, True)


def test_inbox_messages_are_pushed_to_the_agents_channel(agentd: AgentDaemon) -> None:
    received: list[dict[str, Any]] = []
    got_two = threading.Event()
    channel = DaemonClient.connect(agentd.process.socket, timeout=None)

    def on_request(request: Request) -> Any:
        assert request.method == "channel.deliver"
        received.append(request.params["envelope"])
        if len(received) == 2:
            got_two.set()
        return {}

    channel.on_request = on_request
    channel_id = channel.call("channel.register_channel", {"session_id": "s1"})["channel_id"]
    serving = threading.Thread(target=_serve_quietly, args=(channel,), daemon=True)
    serving.start()
    try:
        spawned = agentd.spawn("ch", [{"text": "ok"}], channel_id=channel_id)
        inbox = Path(spawned["run_dir"], "inbox.jsonl")
        append_inbox(inbox, {"type": "progress", "text": "step 1"})
        append_inbox(inbox, {"type": "custom", "payload": [1, 2]})
        assert got_two.wait(15), received
        # the count moves once the daemon has read the answer to the second delivery
        agentd.wait_for("ch", lambda status: status["channel"]["pushed"] == 2)
    finally:
        channel.close()
    first, second = received
    for envelope in received:
        assert envelope_problem(envelope) is None
        assert envelope["method"] == ENVELOPE_METHOD
        meta = envelope["params"]["meta"]
        assert all(META_KEY.fullmatch(k) and isinstance(v, str) for k, v in meta.items())
        assert (meta["agent"], meta["run_id"]) == ("ch", spawned["run_id"])
    assert first["params"]["content"] == "step 1"
    assert first["params"]["meta"]["type"] == "progress"
    assert second["params"]["meta"]["type"] == "custom"
    assert '"payload": [1, 2]' in second["params"]["content"]


def test_inbox_lines_longer_than_a_slice_are_drained_and_the_daemon_goes_idle(
    agentd: AgentDaemon,
) -> None:
    """An agent's inbox gets a 1.1 MB and a 2 MiB line (over the 1 MiB drain slice) and a
    small one: the daemon stores all three (it once read the first slice again for ever,
    at 98% CPU, and never reached the third), then reads nothing more of the inbox while
    it keeps answering (its own read accounting, /proc/PID/io, says so)."""
    spawned = agentd.spawn("long", [{"text": "ok"}])
    inbox = Path(spawned["run_dir"], "inbox.jsonl")
    for size in (1_100_000, 2 << 20):
        append_inbox(inbox, {"type": "progress", "text": "x" * size})
    append_inbox(inbox, {"type": "progress", "text": "after"})
    db = db_path(agentd.env)
    with InboxStore(db) as store:

        def stored() -> list[str] | None:  # until the third line is in
            rows = store.messages(spawned["run_id"])
            texts = [json.loads(m.body or "{}").get("text", "") for m in rows]
            return texts if texts[-1:] == ["after"] else None

        texts = wait_until(stored, "the inbox's third line")  # (a database: polled)
        assert [len(t) for t in texts] == [1_100_000, 2 << 20, 5]
    pid = agentd.process.proc.pid  # type: ignore[union-attr]
    agentd.status("long")  # the loop has turned since: any drain pass it owed is done
    before = _bytes_read(pid)
    for _ in range(20):
        assert agentd.status("long")["state"] == "ready"
    assert _bytes_read(pid) - before < 256 * 1024  # no 1 MiB slice read again


def _bytes_read(pid: int) -> int:
    """The bytes process ``pid`` has read (files, pipes and sockets), by the kernel's count."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "rchar":
            return int(value)
    raise AssertionError(f"/proc/{pid}/io has no rchar")


def _serve_quietly(client: DaemonClient) -> None:
    try:
        client.serve_forever()
    except Exception:  # the test closes it at the end
        return


def test_200_concurrent_clients_read_status(agentd: AgentDaemon) -> None:
    agentd.spawn("busy", [{"text": "ok"}])

    async def one(index: int) -> list[str]:
        client = await AsyncDaemonClient.open(agentd.process.socket)
        try:
            answers = await asyncio.gather(
                *(client.call("agent.status", {"name": "busy"}) for _ in range(5))
            )
            return [answer["state"] for answer in answers]
        finally:
            await client.close()

    async def main() -> list[list[str]]:
        return await asyncio.gather(*(one(i) for i in range(200)))

    results = asyncio.run(main())
    assert results == [["ready"] * 5] * 200


def test_a_recovered_agent_takes_pushes_to_its_own_channel_as_steers(
    agentd: AgentDaemon,
) -> None:
    # an agent's own channel (session tether-agent-NAME, as channel: true reserves it) sends
    # its pushes to the agent as steers, and still does after a daemon restart
    own = {"cc_session_id": "tether-agent-own", "name": "own"}
    channel_id = agentd.call("channel.register_channel", own)["channel_id"]
    replies = [{"text": "ok"}, {"text": "steered"}]
    agentd.spawn("own", replies, task="start", channel_id=channel_id, wait=True)
    assert agentd.process.stop() == 0
    agentd.restart()
    params = {"content": "ping", "meta": {"agent": "ci"}}
    envelope = {"jsonrpc": "2.0", "method": ENVELOPE_METHOD, "params": params}
    route = {"mcp_channel_id": channel_id, "envelope": envelope}
    assert agentd.call("channel.push_to_channel", route) == {"routed": True, "delivered": True}
    agentd.wait_for("own", lambda status: status["turn"] == 2 and status["state"] == "ready")
    texts = [event.get("text") for event in agentd.events("own")]
    assert '<channel source="tether" agent="ci">\nping\n</channel>' in texts
    agentd.call("agent.stop", {"name": "own", "mode": "close"})
    ended = agentd.call("channel.push_to_channel", route)
    assert ended["delivered"] is False
    assert "own" in ended["reason"]


def test_a_follower_that_never_takes_a_batch_is_dropped(daemon_env: DaemonProcess) -> None:
    """A client that follows and never answers a streamed batch (connected, not reading)
    is answered busy once the delivery timeout passes, so the stream and what it holds go
    (before: it was held with no limit)."""
    daemon_env.start("--deliver-timeout", "0.5")
    agentd = AgentDaemon(daemon_env)
    agentd.spawn("quiet", [{"text": "hi"}], task="go")
    agentd.wait_for("quiet", lambda s: s["state"] == "ready")

    async def follow_without_reading() -> DaemonCallError:
        client = await AsyncDaemonClient.open(agentd.process.socket)
        never = asyncio.Event()

        async def on_request(request: Request) -> Any:
            await never.wait()  # takes the batch, never answers it

        client.on_request = on_request
        try:
            with pytest.raises(DaemonCallError) as info:
                await client.call("agent.events", {"name": "quiet", "follow": True})
            return info.value
        finally:
            await client.close()

    try:
        error = asyncio.run(follow_without_reading())
        assert error.code is E.BUSY
        assert "did not take a batch" in error.message
    finally:
        daemon_env.stop(signal.SIGKILL)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


def test_a_follow_whose_client_hung_up_ends(agentd: AgentDaemon) -> None:
    """A client that follows an idle agent's events, acks the first batch, then closes
    its end (as the dashboard does when a tab goes): the daemon ends the follow and the
    connection at once (before: the follow waited for events that never came, and a
    half-closed connection with a call in flight stayed open for ever)."""
    agentd.spawn("quiet", [{"text": "hi"}], task="go")
    agentd.wait_for("quiet", lambda s: s["state"] == "ready")
    baseline = agentd.call("daemon.status")["connections"]

    async def follow_then_hang_up() -> None:
        client = await AsyncDaemonClient.open(agentd.process.socket)
        first = asyncio.Event()

        async def on_request(request: Request) -> Any:
            first.set()
            return {}

        client.on_request = on_request
        stream = asyncio.ensure_future(
            client.call("agent.events", {"name": "quiet", "follow": True})
        )
        await asyncio.wait_for(first.wait(), 20)
        # answered in order after our ack of the batch: the follow is live and waiting
        await client.call("agent.status", {"name": "quiet"})
        await client.close()
        stream.cancel()

    asyncio.run(follow_then_hang_up())
    wait_until(  # (the daemon's count: no event to wait on)
        lambda: agentd.call("daemon.status")["connections"] <= baseline, "the connection's end"
    )
