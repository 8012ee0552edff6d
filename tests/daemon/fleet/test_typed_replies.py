"""Every ``agent.*`` verb answers a msgspec Struct, and every client decodes the same
Struct: the blocking and the asyncio Python clients here (the CLI and the dashboard decode
them too). No handler is typed to return a dict."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import msgspec
import pytest
from tests.support.agentd import AgentDaemon

from tether.daemon.fleet import replies
from tether.daemon.fleet.verbs import AgentVerbs
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonClient


def test_no_verb_handler_is_typed_to_return_a_dict() -> None:
    from tether.daemon.fleet.rows import AgentRows

    handlers = [
        getattr(kind, name)
        for kind in (AgentVerbs, AgentRows)
        for name in dir(kind)
        if not name.startswith("_") and name not in ("register", "host")
    ]
    annotations = {h.__name__: inspect.signature(h).return_annotation for h in handlers}
    assert annotations, "no handlers found"
    for name, annotation in annotations.items():
        assert "dict" not in str(annotation), (name, annotation)


def test_the_other_verbs_answer_structs_too() -> None:
    """``daemon.status``, ``channel.*`` and the worktree verbs (``agent.diff``, ``merge``,
    ``fork``): their handlers are typed to return a Struct, not a dict."""
    from tether.daemon.channels.hub import ChannelHub
    from tether.daemon.fleet.workspaces import Workspaces
    from tether.daemon.rpc.server import Daemon

    handlers = [
        Daemon._status,
        ChannelHub._register,
        ChannelHub._unregister,
        ChannelHub._push,
        Workspaces.diff,
        Workspaces.merge,
        Workspaces.fork,
    ]
    for handler in handlers:
        annotation = str(inspect.signature(handler).return_annotation)
        assert "dict" not in annotation, (handler, annotation)
        assert "Any" not in annotation, (handler, annotation)


def test_every_verb_decodes_into_its_struct_through_both_clients(agentd: AgentDaemon) -> None:
    root = str(agentd.root)
    script = agentd.root / "replies.json"
    script.write_text(msgspec.json.encode([{"text": "one"}, {"text": "two"}]).decode())
    sync = DaemonClient.connect(agentd.process.socket)
    try:
        _drive(sync, agentd, root, script)
    finally:
        sync.close()


def _drive(sync: DaemonClient, agentd: AgentDaemon, root: str, script: Any) -> None:
    spawned = sync.call_as(
        "agent.spawn",
        {"name": "t", "script": str(script), "task": "go", "wait": True, "cwd": root},
        replies.AgentStatus,
    )
    assert spawned.answer is not msgspec.UNSET
    assert spawned.answer.text == "one"
    assert spawned.short_id == spawned.run_id
    assert spawned.status == "live"

    async def typed() -> list[Any]:
        client = await AsyncDaemonClient.open(agentd.process.socket)
        try:
            return [
                await client.call_as("agent.status", {"name": "t"}, replies.AgentStatus),
                await client.call_as("agent.list", None, replies.ListReply),
                await client.call_as("agent.status", {}, replies.DaemonStatus),
                await client.call_as("agent.ask", {"name": "t", "text": "more"}, replies.AskReply),
                await client.call_as("agent.events", {"name": "t"}, replies.EventsReply),
                await client.call_as("agent.reconcile", None, replies.ReconcileReport),
            ]
        finally:
            await client.close()

    status, listed, daemon, asked, events, report = asyncio.run(typed())
    assert status.state == "ready"
    assert [a.name for a in listed.agents] == ["t"]
    assert daemon.agents["total"] == 1
    assert (asked.text, asked.reply) == ("two", "two")
    assert events.last_seq >= 1
    assert not events.more
    assert report.scanned >= 1
    steer = sync.call_as("agent.steer", {"name": "t", "text": "x"}, replies.ControlReply)
    assert steer.ack in ("accepted", "rejected")
    assert steer.event is not msgspec.UNSET
    stopped = sync.call_as("agent.stop", {"name": "t", "mode": "cancel"}, replies.StopReply)
    assert stopped.state == "cancelled"
    removed = sync.call_as("agent.rm", {"name": "t"}, replies.RmReply)
    assert removed.removed
    assert removed.registry_removed


@pytest.mark.parametrize("kind", [replies.AgentStatus, replies.ControlReply, replies.ListReply])
def test_a_reply_that_does_not_fit_is_refused(kind: type[Any]) -> None:
    with pytest.raises(msgspec.ValidationError):
        replies.decode_reply({"name": 5}, kind)
