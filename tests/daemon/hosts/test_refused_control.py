"""A control the run's state refuses behaves the same locally, through the daemon and across
hosts (issue 25 item 1, issue 28 item 14).

One refusal, a steer to a closing run (the state table: "run is closing"), sent four ways:
``LocalRunHandle.steer`` (``tether.spawn``), ``agent.steer`` on the agent's own daemon,
``RemoteRunHandle.steer`` (``tether.spawn_remote``, host B), and ``agent.steer`` on host
A's daemon for B's agent (forwarded). Each answers the child's own ``rejected`` ack with
its reason, never an error; once the run has ended, the handles raise ``RunEnded`` and the
daemons answer ``invalid_status``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from test_hosts import hosts, nats  # noqa: F401  (fixtures)
from tests.nats_server import NatsServer
from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_until

import tether as tether_api
from tether.daemon.rpc.client import DaemonCallError, DaemonClient
from tether.daemon.rpc.protocol import ErrorCode
from tether.errors import RunEnded
from tether.wire import TurnStarted

REFUSED = ("rejected", "run is closing")
TURN = [{"text": "never", "delay_ms": 600_000}]  # the first turn runs on: close leaves it closing


async def _turn_started(handle: tether_api.RunHandle) -> None:
    async with asyncio.timeout(60):
        async for event in handle.events():
            if isinstance(event, TurnStarted):
                return


async def _refused_by_a_handle(handle: tether_api.RunHandle) -> tuple[str, str | None]:
    await _turn_started(handle)
    closed = await handle.close()
    assert closed.status == "accepted", closed
    refused = await handle.steer("too late")
    await handle.cancel()
    async with asyncio.timeout(60):
        await handle.wait()
    with pytest.raises(RunEnded):
        await handle.steer("after the end")
    return refused.status, refused.reason


def _turn_started_on(client: DaemonClient, name: str) -> None:
    """Until the agent's events show its turn started (long polls, no sleep)."""
    last = 0
    for _ in range(60):
        page = client.call("agent.events", {"name": name, "after_seq": last, "wait_s": 5})
        if any(event["type"] == "turn-started" for event in page["events"]):
            return
        last = page["last_seq"]
    raise AssertionError(f"{name}'s turn never started")


def _listed_on(client: DaemonClient, name: str) -> None:
    """Until the daemon lists ``name`` (its host's row reached the registry; polled)."""
    wait_until(
        lambda: name in {row["name"] for row in client.call("agent.list")["agents"]},
        f"{name} listed",
    )


def _steer(client: DaemonClient, name: str) -> Any:
    return client.call("agent.steer", {"name": name, "text": "too late"})


def test_a_refused_control_is_the_same_locally_through_the_daemon_and_across_hosts(
    hosts: dict[str, DaemonProcess],  # noqa: F811
    nats: NatsServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    script = tmp_path / "turn.json"
    script.write_text(json.dumps(TURN))

    async def handles() -> list[tuple[str, str | None]]:
        local = await tether_api.spawn(
            "t", provider="scripted", child_args=["--script", str(script)],
            runs_root=tmp_path / "runs", db=tmp_path / "runs.db", close_when_idle=False,
        )  # fmt: skip
        try:
            remote = await tether_api.spawn_remote(
                "t", host="B", nats_url=nats.url, provider="scripted", script=str(script)
            )
            try:
                return [await _refused_by_a_handle(h) for h in (local, remote)]
            finally:
                await remote.release()
        finally:
            await local.aclose()

    local, across = asyncio.run(handles())

    with (
        DaemonClient.connect(hosts["B"].socket) as on_b,
        DaemonClient.connect(hosts["A"].socket) as on_a,
    ):
        on_b.call("agent.spawn", {"name": "d1", "task": "t", "provider": "scripted",
                                  "script": str(script)})  # fmt: skip
        _turn_started_on(on_b, "d1")
        _listed_on(on_a, "d1")
        closed = on_b.call("agent.stop", {"name": "d1", "mode": "close", "timeout_s": 0.1})
        assert closed["ack"] == "accepted", closed
        daemon = _steer(on_b, "d1")
        forwarded = _steer(on_a, "d1")  # A's daemon, B's agent
        ended = on_b.call("agent.stop", {"name": "d1", "mode": "cancel", "timeout_s": 60})
        assert ended["ended"] is True, ended
        for client in (on_b, on_a):
            with pytest.raises(DaemonCallError) as refused:
                _steer(client, "d1")
            assert refused.value.code is ErrorCode.INVALID_STATUS

    assert local == REFUSED
    assert across == REFUSED
    assert (daemon["ack"], daemon.get("reason")) == REFUSED
    assert (forwarded["ack"], forwarded.get("reason")) == REFUSED
    for answer in (daemon, forwarded):  # the child's own ack, as the child wrote it
        assert (answer["event"]["type"], answer["event"]["status"]) == ("control-ack", "rejected")
