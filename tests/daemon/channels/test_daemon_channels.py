"""channel.*: register, push, deliver, unregister; the envelope shape; the channel CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from tests.support.daemon import DaemonProcess, call, read_frame

from tether.daemon.channels.hub import envelope_problem, make_channel_envelope
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonCallError
from tether.daemon.rpc.protocol import ErrorCode, Request


def envelope(content: str = "build failed on main", **meta: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {"content": content, "meta": dict(meta)},
    }


# -- the envelope -------------------------------------------------------------------------------


def test_make_channel_envelope_builds_the_pinned_shape() -> None:
    built = make_channel_envelope("build failed on main", {"severity": "high", "run_id": "1234"})
    assert built == envelope(severity="high", run_id="1234")
    assert list(built) == ["jsonrpc", "method", "params"]
    assert list(built["params"]) == ["content", "meta"]
    assert make_channel_envelope("x") == envelope("x")


@pytest.mark.parametrize(
    ("candidate", "problem"),
    [
        ([], "JSON object"),
        ({**envelope(), "id": 1}, "exactly jsonrpc, method, params"),
        ({**envelope(), "jsonrpc": "1.0"}, "jsonrpc"),
        ({**envelope(), "method": "notifications/other"}, "method"),
        ({**envelope(), "params": "x"}, "params must be an object"),
        ({**envelope(), "params": {"content": 1, "meta": {}}}, "content must be a string"),
        ({**envelope(), "params": {"content": "x", "meta": {}, "z": 1}}, "unexpected keys"),
        ({**envelope(), "params": {"content": "x", "meta": []}}, "meta must be an object"),
        ({**envelope(), "params": {"content": "x", "meta": {"a-b": "v"}}}, "[A-Za-z0-9_]+"),
        ({**envelope(), "params": {"content": "x", "meta": {"": "v"}}}, "[A-Za-z0-9_]+"),
        ({**envelope(), "params": {"content": "x", "meta": {"k": 1}}}, "must be a string"),
    ],
)
def test_envelope_problems(candidate: object, problem: str) -> None:
    found = envelope_problem(candidate)
    assert found is not None
    assert problem in found


def test_envelope_without_meta_is_accepted() -> None:
    assert envelope_problem({**envelope(), "params": {"content": "x"}}) is None


def test_make_channel_envelope_refuses_bad_meta() -> None:
    with pytest.raises(ValueError, match="meta key"):
        make_channel_envelope("x", {"bad key": "v"})


# -- against a real daemon ----------------------------------------------------------------------


def test_register_push_deliver_round_trip(daemon: DaemonProcess) -> None:
    async def main() -> None:
        receiver = await AsyncDaemonClient.open(daemon.socket)
        seen: list[Any] = []

        async def on_request(request: Request) -> Any:
            assert request.method == "channel.deliver"
            seen.append(request.params)
            return {"received": True}

        receiver.on_request = on_request
        result = await receiver.call("channel.register_channel", {"session_id": "s1", "name": "n"})
        channel_id = result["channel_id"]
        async with await AsyncDaemonClient.open(daemon.socket) as pusher:
            sent = envelope(severity="high")
            pushed = await pusher.call(
                "channel.push_to_channel", {"channel_id": channel_id, "envelope": sent}
            )
            assert pushed == {"routed": True, "delivered": True}
            assert seen == [{"channel_id": channel_id, "envelope": sent}]
            status = await pusher.call("daemon.status")
            assert status["channels"] == 1

            unregistered = await pusher.call(
                "channel.unregister_channel", {"channel_id": channel_id}
            )
            assert unregistered == {"unregistered": True}
            with pytest.raises(DaemonCallError) as info:
                await pusher.call(
                    "channel.push_to_channel", {"channel_id": channel_id, "envelope": sent}
                )
            assert info.value.code is ErrorCode.CHANNEL_UNKNOWN
            with pytest.raises(DaemonCallError) as info:
                await pusher.call("channel.unregister_channel", {"channel_id": channel_id})
            assert info.value.code is ErrorCode.CHANNEL_UNKNOWN
        await receiver.close()

    asyncio.run(main())


def _one_shot(daemon: DaemonProcess, method: str, params: object) -> dict[str, Any]:
    """One request on its own connection, as the fno-agents reference client sends it."""
    with daemon.connect() as sock:
        reply = call(sock, 1, method, params)
    assert set(reply) == {"id", "result"}, reply
    result = reply["result"]
    assert isinstance(result, dict)
    return result


def test_a_channel_outlives_its_registering_connection(daemon: DaemonProcess) -> None:
    # the reference client's exact requests, one connection each
    registered = _one_shot(daemon, "channel.register_channel", {"cc_session_id": "cc-1"})
    channel_id = registered["mcp_channel_id"]
    assert registered["channel_id"] == channel_id
    route = {"mcp_channel_id": channel_id}
    assert _one_shot(daemon, "channel.push_to_channel", route) == {"routed": True}
    held = _one_shot(daemon, "channel.push_to_channel", {**route, "envelope": envelope("one")})
    assert held["routed"] is True
    assert held["delivered"] is False
    assert "no receiver" in held["reason"]
    # the channel server registers the same session: it receives what was held, then more
    with daemon.connect() as server:
        again = call(server, 1, "channel.register_channel", {"cc_session_id": "cc-1"})
        assert again["result"] == registered
        delivery = read_frame(server)
        assert delivery is not None
        assert delivery["method"] == "channel.deliver"
        assert delivery["params"] == {"channel_id": channel_id, "envelope": envelope("one")}
        server.sendall(_result_frame(delivery["id"]))
        with daemon.connect() as pusher:
            pusher.sendall(_frame(2, "channel.push_to_channel", {**route, "envelope": envelope()}))
            live = read_frame(server)
            assert live is not None
            server.sendall(_result_frame(live["id"]))
            assert read_frame(pusher) == {"id": 2, "result": {"routed": True, "delivered": True}}
    gone = _one_shot(daemon, "channel.unregister_channel", route)
    assert gone == {"unregistered": True}
    with daemon.connect() as sock:
        reply = call(sock, 1, "channel.push_to_channel", {**route, "envelope": envelope()})
    assert reply["error"] == {
        "code": "channel_unknown",
        "message": f"no channel with id {channel_id!r}",
    }


def test_channels_and_held_pushes_survive_a_daemon_restart(daemon: DaemonProcess) -> None:
    # as in the reference daemon, whose registry holds the channel
    registered = _one_shot(daemon, "channel.register_channel", {"cc_session_id": "cc-r"})
    route = {"mcp_channel_id": registered["mcp_channel_id"]}
    for text in ("first", "second"):
        held = _one_shot(daemon, "channel.push_to_channel", {**route, "envelope": envelope(text)})
        assert held["delivered"] is False
    assert daemon.stop() == 0
    daemon.start("--deliver-timeout", "2")
    assert _one_shot(daemon, "channel.push_to_channel", route) == {"routed": True}
    assert _one_shot(daemon, "daemon.status", {})["channels"] == 1
    with daemon.connect() as server:  # the channel server registers again after the restart
        again = call(server, 1, "channel.register_channel", {"cc_session_id": "cc-r"})
        assert again["result"] == registered
        for text in ("first", "second"):  # what was held, in order
            delivery = read_frame(server)
            assert delivery is not None
            assert delivery["params"]["envelope"] == envelope(text)
            server.sendall(_result_frame(delivery["id"]))
        # handed over: nothing is held any more, across another restart either
        assert _one_shot(daemon, "channel.unregister_channel", route) == {"unregistered": True}
    assert daemon.stop() == 0
    daemon.start("--deliver-timeout", "2")
    with daemon.connect() as sock:
        reply = call(sock, 1, "channel.push_to_channel", route)
    assert reply["error"]["code"] == "channel_unknown"


def test_refusal_and_timeout_are_reported_as_not_delivered(daemon: DaemonProcess) -> None:
    with daemon.connect() as receiver, daemon.connect() as pusher:
        result = call(receiver, 1, "channel.register_channel", {"session_id": "s"})["result"]
        assert isinstance(result, dict)
        params = {"channel_id": result["channel_id"], "envelope": envelope()}

        pusher.sendall(_frame(1, "channel.push_to_channel", params))
        delivery = read_frame(receiver)
        assert delivery is not None
        receiver.sendall(_error_frame(delivery["id"], "busy", "inbox full"))
        assert read_frame(pusher) == {
            "id": 1,
            "result": {
                "routed": True,
                "delivered": False,
                "reason": "the channel refused: inbox full",
            },
        }

        pusher.sendall(_frame(2, "channel.push_to_channel", params))
        assert read_frame(receiver) is not None  # never answered: the 2 s deliver timeout
        reply = read_frame(pusher)
        assert reply is not None
        assert reply["result"] == {
            "routed": True,
            "delivered": False,
            "reason": "the channel did not answer within 2s",
        }


def test_invalid_envelope_is_invalid_params(daemon: DaemonProcess) -> None:
    with daemon.connect() as sock:
        reply = call(
            sock, 1, "channel.push_to_channel", {"channel_id": "ch_x", "envelope": {"a": 1}}
        )
        assert reply["error"]["code"] == "invalid_params"  # type: ignore[index]


def _frame(id: int, method: str, params: object) -> bytes:
    from tests.support.daemon import frame

    return frame({"id": id, "method": method, "params": params})


def _result_frame(id: object) -> bytes:
    from tests.support.daemon import frame

    return frame({"id": id, "result": {}})


def _error_frame(id: object, code: str, message: str) -> bytes:
    from tests.support.daemon import frame

    return frame({"id": id, "error": {"code": code, "message": message}})


# -- the CLI ------------------------------------------------------------------------------------


def tether(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_channel_cli_register_push_unregister(daemon: DaemonProcess) -> None:
    argv = [sys.executable, "-m", "tether", "channel", "register", "--session-id", "sess"]
    with subprocess.Popen(
        argv, env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as register:
        try:
            assert register.stdout is not None
            first = json.loads(register.stdout.readline())
            assert first["session_id"] == "sess"
            channel_id = first["channel_id"]

            pushed = tether(
                daemon, "channel", "push", channel_id, "--content", "hi", "--meta", "k=v"
            )
            assert (pushed.returncode, pushed.stdout) == (0, f"delivered to {channel_id}\n")
            delivery = json.loads(register.stdout.readline())
            assert delivery == {"channel_id": channel_id, "envelope": envelope("hi", k="v")}

            raw = json.dumps(envelope("raw"))
            pushed = tether(daemon, "channel", "push", channel_id, raw, "--json")
            assert pushed.returncode == 0
            assert json.loads(pushed.stdout) == {"routed": True, "delivered": True}
            assert json.loads(register.stdout.readline())["envelope"] == envelope("raw")

            gone = tether(daemon, "channel", "unregister", channel_id, "--json")
            assert (gone.returncode, json.loads(gone.stdout)) == (0, {"unregistered": True})
            unknown = tether(daemon, "channel", "push", channel_id, "--content", "x")
            assert unknown.returncode == 2
            assert "channel_unknown" in unknown.stderr
        finally:
            register.terminate()
            assert register.wait(10) == 0


def test_channel_cli_rejects_bad_input(daemon: DaemonProcess) -> None:
    bad_meta = tether(daemon, "channel", "push", "ch_x", "--content", "x", "--meta", "a-b=1")
    assert bad_meta.returncode == 2
    assert "meta key" in bad_meta.stderr
    both = tether(daemon, "channel", "push", "ch_x")
    assert both.returncode == 2
    invalid = tether(daemon, "channel", "push", "ch_x", '{"a": 1}')
    assert invalid.returncode == 2
    assert "invalid_params" in invalid.stderr


def test_channel_cli_without_a_daemon_gives_a_hint(daemon_env: DaemonProcess) -> None:
    result = tether(daemon_env, "channel", "push", "ch_x", "--content", "x")
    assert result.returncode == 3
    assert "not running" in result.stderr
    assert "tether daemon start" in result.stderr


# -- a channel whose pushes go to its agent (a -p Claude Code agent) ------------------------------


def test_an_agent_channel_holds_pushes_until_its_agent_is_ready_then_delivers_in_order() -> None:
    from tether.daemon.channels.hub import ChannelHub, PushResult

    async def scenario() -> None:
        hub = ChannelHub()
        channel = hub.reserve("tether-agent-cc", "cc", to_agent=True)
        got: list[str] = []

        async def deliver(sent: Any) -> PushResult:
            got.append(sent["params"]["content"])
            if sent["params"]["content"] == "refused":
                return PushResult(routed=True, delivered=False, reason="agent 'cc' rejected")
            return PushResult(routed=True, delivered=True)

        for text in ("one", "two"):
            held = await hub.push(channel.channel_id, envelope(text))
            assert held.delivered is False
            assert held.reason == "the agent is not ready; held until it is"
        # registering (the channel server starting) does not send them to the receiver
        assert hub.reserve("tether-agent-cc", "cc").to_agent
        await hub.deliver_by(channel.channel_id, deliver)
        assert got == ["one", "two"]
        assert not channel.held
        assert await hub.push(channel.channel_id, envelope("three")) == PushResult(
            routed=True, delivered=True
        )
        refused = await hub.push(channel.channel_id, envelope("refused"))
        assert refused == PushResult(routed=True, delivered=False, reason="agent 'cc' rejected")
        assert got == ["one", "two", "three", "refused"]

    asyncio.run(scenario())
