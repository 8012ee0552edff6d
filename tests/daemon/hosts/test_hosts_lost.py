"""A verb in flight when its host's daemon goes away fails at once, ``shutting_down``.

The caller probes a call that takes a while (``host.pending``, answered by the host's link
in order behind the calls before it): no daemon answering means the host is gone, one
that does not have the call restarted; a host that has it keeps the call waiting, however
long the verb takes. Every wait here is for an event (a control line in B's files, a
daemon answering), bounded by tests/support/waits.py's hang detector, never a sleep. The
reply the calls wait for comes after 10 minutes: a caller that learnt of the loss any
other way than the loss itself would still be waiting (and fail the hang detector); how
soon it learns is a figure, played by bench/chaos_hosts.py, not a bound here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_hosts import _start_when_cluster_ready, hosts, nats, tether  # noqa: F401  (fixtures)
from tests.nats_server import NatsServer, run_nats_cluster
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess, make_env
from tests.support.waits import HANG_S, wait_until

from tether.daemon.hosts import remote
from tether.daemon.hosts.remote_run import spawn_remote
from tether.daemon.rpc.client import DaemonCallError
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import ControlRefused

SLOW_REPLY_MS = 600_000  # a turn that outlasts every test here: the ask stays in flight


def _spawn_on_b(env_a: dict[str, str], name: str, script: Path, replies: list[object]) -> Path:
    """An agent on B whose first turn is done; its control log's path on B."""
    script.write_text(json.dumps(replies))
    spawned = tether(
        env_a, "--host", "B", "spawn", name, "--task", "hi", "--script", str(script), "--wait"
    )
    assert spawned.returncode == 0, spawned.stderr
    status = json.loads(tether(env_a, "--host", "B", "status", name, "--json").stdout)
    return Path(str(status["run_dir"])) / "control.jsonl"


def _wait_for_line(path: Path, text: bytes) -> None:
    """Until ``text`` is in ``path`` (B's daemon wrote the control: the verb is in flight),
    read as the file grows (inotify)."""
    wait_until(lambda: text in path.read_bytes(), f"{text!r} in {path}", files=[path])


def _on_b(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``tether agent --host B ARGS...`` started, its output piped."""
    argv = [sys.executable, "-m", "tether", "agent", "--host", "B", *args]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _record_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Probes every 50 ms from 50 ms on; the list fills with what each one found."""
    monkeypatch.setattr(remote, "PROBE_AFTER_S", 0.05)
    monkeypatch.setattr(remote, "PROBE_EVERY_S", 0.05)
    monkeypatch.setattr(remote, "GONE_RECHECK_S", 0.05)
    states: list[str] = []
    probe = remote._probe

    async def recorded(*args: object) -> str:
        state = await probe(*args)  # type: ignore[arg-type]
        states.append(state)
        return state

    monkeypatch.setattr(remote, "_probe", recorded)
    return states


def test_a_verb_in_flight_fails_promptly_when_its_hosts_daemon_is_killed(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``tether agent --host B ask`` waiting on a long turn and ``events --follow`` reading
    B's run from JetStream; B's daemon SIGKILLed: both exit 3 with ``shutting_down`` within
    seconds (the ask waited 60 s for a timeout before, the follow for ever), as their
    socket forms end when the daemon dies."""
    env_a = hosts["A"].env
    replies = [{"text": "ready"}, {"text": "too late", "delay_ms": SLOW_REPLY_MS}]
    control = _spawn_on_b(env_a, "k1", tmp_path / "replies.json", replies)
    asking = _on_b(env_a, "ask", "k1", "the slow one", "--json")
    following = _on_b(env_a, "events", "k1", "--after-seq", "0", "--follow", "--json")
    try:
        _wait_for_line(control, b"the slow one")
        assert following.stdout is not None
        assert json.loads(following.stdout.readline())["seq"] == 1  # it follows
        hosts["B"].stop(signal.SIGKILL)
        done = [(proc, *proc.communicate(timeout=HANG_S)) for proc in (asking, following)]
    finally:
        for proc in (asking, following):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, out, err in done:
        assert proc.returncode == 3, (out, err)
        assert "shutting_down" in err, err
    error = json.loads(done[0][1])["error"]
    assert error["code"] == "shutting_down", error
    assert "went away with the call in flight" in error["message"], error
    assert "may have been carried out" in error["message"], error  # not "retry": it landed
    assert "went away" in done[1][2], done[1][2]


def test_a_long_verb_waits_on_while_its_host_answers_the_probes(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    nats: NatsServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ask whose turn takes 1.5 s, probed every 50 ms: every probe answers that B has
    the call, and the ask returns its reply; a probe for a call B never got answers that
    it has not."""
    states = _record_probes(monkeypatch)
    replies = [{"text": "ready"}, {"text": "worth the wait", "delay_ms": 1500}]
    _spawn_on_b(hosts["A"].env, "p1", tmp_path / "replies.json", replies)

    async def main() -> None:
        client = await remote.connect(nats.url)
        try:
            answer = await remote.call_host(
                client, "B", "agent.ask", {"name": "p1", "message": "take your time"}
            )
            assert answer["reply"] == "worth the wait", answer
            assert len(states) >= 5, states  # probed all along (1.5 s at one per 50 ms)
            assert set(states) == {remote.PENDING}, states
            unknown = await remote._probe(client, "tether.host.B.rpc", 12345)
            assert unknown == remote.NOT_PENDING
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_verb_in_flight_fails_when_its_hosts_daemon_restarts(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    nats: NatsServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B's daemon killed and started again with an ask in flight: the new daemon answers
    the probe that it does not have the call, and the call fails ``shutting_down`` (the
    check for a host gone is held off here, so that the restart is what it meets)."""
    monkeypatch.setattr(remote, "PROBE_AFTER_S", 0.05)
    monkeypatch.setattr(remote, "PROBE_EVERY_S", 0.05)
    monkeypatch.setattr(remote, "GONE_AFTER_S", 600.0)
    monkeypatch.setattr(remote, "SILENT_S", 600.0)
    replies = [{"text": "ready"}, {"text": "too late", "delay_ms": SLOW_REPLY_MS}]
    control = _spawn_on_b(hosts["A"].env, "r1", tmp_path / "replies.json", replies)
    b = hosts["B"]

    async def main() -> None:
        client = await remote.connect(nats.url)
        try:
            call = asyncio.ensure_future(
                remote.call_host(client, "B", "agent.ask", {"name": "r1", "message": "slow"})
            )
            await asyncio.to_thread(_wait_for_line, control, b'"slow"')
            b.stop(signal.SIGKILL)
            await asyncio.to_thread(b.start, "--nats", nats.url, "--host", "B")
            with pytest.raises(DaemonCallError) as failed:
                await asyncio.wait_for(call, HANG_S)
            assert failed.value.code is ErrorCode.SHUTTING_DOWN
            # the new daemon's answer to the probe, not the gone check (held off: 600 s)
            assert "no longer has the call" in failed.value.message
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_verb_in_flight_survives_its_hosts_nats_node_dying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three NATS nodes; B's daemon knows only node 0, the caller is on node 1. With an
    ask in flight on B, node 0 is killed: B reconnects to another node (no responders
    for a moment), its reply still comes, and the call returns it: a node's failover is
    not a host lost. Probed every 50 ms, so the moment without responders is met (one
    "gone" among ~90 probes in one run of three)."""
    states = _record_probes(monkeypatch)
    killed_at: list[int] = []
    script = tmp_path / "replies.json"
    replies = [{"text": "ready"}, {"text": "after the failover", "delay_ms": 4000}]
    script.write_text(json.dumps(replies))
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="tfB"))
    env = make_env(root)
    b = DaemonProcess(root, Path(env["TETHER_SOCKET"]), env)
    try:
        with run_nats_cluster(tmp_path / "cluster", 3) as cluster:
            _start_when_cluster_ready(b, cluster.nodes[0].url, "B")

            async def main() -> None:
                client = await remote.connect(cluster.nodes[1].url)
                try:
                    spawn = {"name": "f1", "task": "hi", "provider": "scripted",
                             "script": str(script), "wait": True}  # fmt: skip
                    await remote.call_host(client, "B", "agent.spawn", spawn)
                    status = await remote.call_host(client, "B", "agent.status", {"name": "f1"})
                    control = Path(str(status["run_dir"])) / "control.jsonl"
                    ask = {"name": "f1", "message": "across the failover"}
                    call = asyncio.ensure_future(remote.call_host(client, "B", "agent.ask", ask))
                    await asyncio.to_thread(_wait_for_line, control, b"across the failover")
                    cluster.kill(0)  # the only server B knew when it connected
                    killed_at.append(len(states))
                    answer = await asyncio.wait_for(call, 60)
                    assert answer["reply"] == "after the failover", answer
                finally:
                    await client.aclose()

            asyncio.run(main())
    finally:
        b.stop(signal.SIGKILL)
        kill_agents(Path(b.env["TETHER_HOME"]))
        shutil.rmtree(root, ignore_errors=True)
    # B answered probes after its node died: it reconnected to another node meanwhile
    assert remote.PENDING in states[killed_at[0] :], states


def test_a_remote_steer_in_flight_when_its_host_dies_is_not_called_refused(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    nats: NatsServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RemoteRunHandle.steer`` waiting for the ack of a child that cannot answer (it is
    stopped), B's daemon SIGKILLed: the steer fails with the host's ``shutting_down``
    (a ``DaemonCallError``: the control may have landed), not ``ControlRefused``, which
    would say the control itself was refused."""
    states = _record_probes(monkeypatch)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "ready"}, {"text": "never", "delay_ms": 600_000}]))
    stopped: list[int] = []

    async def main() -> None:
        handle = await spawn_remote(
            "hi", host="B", nats_url=nats.url, provider="scripted", script=str(script)
        )
        try:
            status = await asyncio.to_thread(
                tether, hosts["A"].env, "--host", "B", "status", handle.name, "--json"
            )
            shown = json.loads(status.stdout)
            control = Path(str(shown["run_dir"])) / "control.jsonl"
            os.kill(int(shown["pid"]), signal.SIGSTOP)  # its ack cannot come
            stopped.append(int(shown["pid"]))
            steer = asyncio.ensure_future(handle.steer("are you there"))
            await asyncio.to_thread(_wait_for_line, control, b"are you there")
            hosts["B"].stop(signal.SIGKILL)
            with pytest.raises(DaemonCallError) as failed:
                await asyncio.wait_for(steer, 60)
            assert not isinstance(failed.value, ControlRefused)
            assert failed.value.code is ErrorCode.SHUTTING_DOWN, failed.value
            assert "went away" in failed.value.message, failed.value.message
            assert remote.GONE in states, states  # lost by its probes, not by a timeout
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await handle.release()

    asyncio.run(main())
