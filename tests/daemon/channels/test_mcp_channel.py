"""``tether mcp-channel`` driven by the official MCP SDK's client, against a real daemon.

The client starts ``tether mcp-channel`` over stdio as Claude Code would, sees the
``claude/channel`` capability, receives a daemon push as a ``notifications/claude/channel``
notification, and calls the ``reply`` tool: once to an agent (a follow-up it reads) and
once to another channel (pushed there with ``reply_to``).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

import anyio
import pytest
from tests.support.agentd import AgentDaemon, agentd
from tests.support.daemon import call, frame, read_frame

if os.environ.get("CI") != "true":  # under CI a missing SDK fails at the import below
    pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install tether[mcp])")

from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from pydantic import BaseModel

__all__ = ["agentd"]


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str] = {}


def envelope(content: str, **meta: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/claude/channel",
        "params": {"content": content, "meta": meta},
    }


def one_shot(agentd: AgentDaemon, method: str, params: Any) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(agentd.process.socket))
        reply = call(sock, 1, method, params)
    assert "result" in reply, reply
    result = reply["result"]
    assert isinstance(result, dict)
    return result


class Receiver:
    """Another channel's server: a raw connection that answers every delivery."""

    def __init__(self, agentd: AgentDaemon) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(agentd.process.socket))
        result = call(self.sock, 1, "channel.register_channel", {"cc_session_id": "peer"})
        assert isinstance(result["result"], dict)
        self.channel_id = str(result["result"]["mcp_channel_id"])
        self.deliveries: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._serve_one)
        self.thread.start()

    def _serve_one(self) -> None:
        delivery = read_frame(self.sock)
        assert delivery is not None
        self.deliveries.append(delivery)
        self.sock.sendall(frame({"id": delivery["id"], "result": {}}))

    def close(self) -> None:
        self.thread.join(30)
        self.sock.close()


def test_an_sdk_client_gets_pushes_and_replies(agentd: AgentDaemon) -> None:
    agentd.spawn("w1", [{"text": "one"}, {"text": "got your reply"}], task="start")
    agentd.wait_for("w1", lambda s: s["state"] == "ready" and s["turn"] == 1)
    # fno-agents' order: the session is registered, then its channel server attaches
    channel_id = one_shot(agentd, "channel.register_channel", {"cc_session_id": "cc-7"})[
        "mcp_channel_id"
    ]
    peer = Receiver(agentd)
    got: list[ChannelParams] = []
    arrived = anyio.Event()

    async def on_channel(params: ChannelParams) -> None:
        got.append(params)
        arrived.set()

    async def scenario() -> tuple[Any, Any, Any]:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tether", "mcp-channel", "--session-id", "cc-7", "--name", "w1"],
            env=agentd.env,
        )
        binding = NotificationBinding(
            method="notifications/claude/channel", params_type=ChannelParams, handler=on_channel
        )
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write, notification_bindings=[binding]) as session,
        ):
            init = await session.initialize()
            pushed = await anyio.to_thread.run_sync(
                one_shot,
                agentd,
                "channel.push_to_channel",
                {
                    "mcp_channel_id": channel_id,
                    "envelope": envelope("please summarise", agent="w1", run_id="r"),
                },
            )
            # held, not written: the client is not listening before it lists the tools
            # (a notification written before this ping would be read before its answer)
            await session.send_ping()
            assert got == []
            tools = await session.list_tools()
            with anyio.fail_after(30):
                await arrived.wait()
            to_agent = await session.call_tool("reply", {"text": "here is my answer"})
            to_peer = await session.call_tool(
                "reply", {"text": "hello peer", "to": peer.channel_id}
            )
            return init, pushed, (tools, to_agent, to_peer)

    init, pushed, (tools, to_agent, to_peer) = anyio.run(scenario)
    peer.close()

    assert init.capabilities.experimental == {"claude/channel": {}}
    assert init.instructions
    assert pushed == {"routed": True, "delivered": True}
    assert [(p.content, p.meta) for p in got] == [
        ("please summarise", {"agent": "w1", "run_id": "r"})
    ]
    assert [tool.name for tool in tools.tools] == ["reply"]
    assert to_agent.is_error is False
    assert to_agent.structured_content["to"] == "w1"
    assert to_agent.structured_content["ack"] == "accepted"
    # the reply reached the agent as a follow-up, and it answered it
    status = agentd.wait_for("w1", lambda s: s["turn"] == 2 and s["state"] == "ready")
    assert status["turn"] == 2
    follow = [e for e in agentd.events("w1") if e["type"] == "follow-up-injected"]
    assert [e["text"] for e in follow] == ["here is my answer"]
    assert to_peer.is_error is False
    assert to_peer.structured_content["delivered"] is True
    (delivery,) = peer.deliveries
    assert delivery["method"] == "channel.deliver"
    params = delivery["params"]
    assert isinstance(params, dict)
    assert params["envelope"]["params"]["content"] == "hello peer"
    assert params["envelope"]["params"]["meta"]["reply_to"] == channel_id


def test_the_channel_server_registers_again_after_a_daemon_restart(agentd: AgentDaemon) -> None:
    got: list[ChannelParams] = []
    arrived = anyio.Event()

    async def on_channel(params: ChannelParams) -> None:
        got.append(params)
        arrived.set()

    async def scenario() -> tuple[str, dict[str, Any]]:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tether", "mcp-channel", "--session-id", "cc-restart"],
            env=agentd.env,
        )
        binding = NotificationBinding(
            method="notifications/claude/channel", params_type=ChannelParams, handler=on_channel
        )
        async with (
            stdio_client(server) as (read, write),
            ClientSession(read, write, notification_bindings=[binding]) as session,
        ):
            await session.initialize()
            await session.list_tools()  # as Claude Code does: from here on it listens
            # its session's channel (registering the same session returns the same one)
            channel_id = await anyio.to_thread.run_sync(
                one_shot, agentd, "channel.register_channel", {"cc_session_id": "cc-restart"}
            )
            await anyio.to_thread.run_sync(agentd.process.stop)
            await anyio.to_thread.run_sync(agentd.process.start)
            pushed = await anyio.to_thread.run_sync(
                one_shot,
                agentd,
                "channel.push_to_channel",
                {
                    "mcp_channel_id": channel_id["mcp_channel_id"],
                    "envelope": envelope("after the restart", agent="w9"),
                },
            )
            with anyio.fail_after(30):  # held until it registers again, or delivered
                await arrived.wait()
            return str(channel_id["mcp_channel_id"]), pushed

    _, pushed = anyio.run(scenario)
    assert pushed["routed"] is True
    assert [(p.content, p.meta) for p in got] == [("after the restart", {"agent": "w9"})]
