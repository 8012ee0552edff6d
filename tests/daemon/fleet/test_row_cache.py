"""``agent.list`` and ``agent.status`` answer a wire agent's row from its encoding kept
while nothing the row shows has changed (``WireAgent.row_cache``, keyed by its status
stamp and its questions): the list reuses what the status encoded, and every answer equals
the row built afresh, before and after a turn, after a note and after the end. Decided by
the agent's own futures, in this process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.support.agentd import kill_agents

from tether.daemon.fleet.fleet import Fleet
from tether.daemon.fleet.params import SpawnParams
from tether.daemon.fleet.replies import AgentStatus, ListReply
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.fleet.verbs import AgentVerbs
from tether.daemon.fleet.wire_agent import WireAgent
from tether.daemon.pty.fleet import PtyFleet
from tether.daemon.rpc.protocol import Request
from tether.daemon.rpc.server import CallContext
from tether.wire.session import ControlKind


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "home"
    try:
        yield path
    finally:
        kill_agents(path)


async def _answered(reply: Any) -> Any:
    return await reply if asyncio.iscoroutine(reply) else reply


def _json(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


# a call made in this process (as a host link makes one): this daemon's agents only
IN_PROCESS = CallContext(None, None, Request(0, "agent.list", {}))  # type: ignore[arg-type]


async def _check(verbs: AgentVerbs, agent: WireAgent) -> dict[str, Any]:
    """The list row and the status answer, each equal to the row built afresh."""
    listed = await _answered(verbs.rows.list_agents(IN_PROCESS, {}))
    status = await _answered(verbs.rows.status_of(IN_PROCESS, {"name": agent.name}))
    questions = await verbs.answers.questions({agent.run_id: agent.inbox_version})
    fresh = verbs.rows.row(agent, questions)
    fresh_final = verbs.rows.row(agent, questions, final=True)
    (row,) = msgspec.convert(_json(listed), ListReply).agents
    assert row == msgspec.convert(_json(fresh), AgentStatus)
    assert _json(status) == _json(fresh_final)
    return _json(status)  # type: ignore[no-any-return]


def test_list_rows_reuse_the_status_encoding_and_follow_every_change(home: Path) -> None:
    async def go() -> None:
        root = home.parent
        script = root / "replies.json"
        script.write_text(json.dumps([{"text": "one"}, {"text": "two"}]))
        supervisor = Supervisor(db=root / "tether.db", runs_root=root / "runs")
        ptys = PtyFleet(lambda: supervisor.registry, supervisor.runs_root)
        verbs = AgentVerbs(Fleet([supervisor, ptys]), supervisor, ptys)
        params = SpawnParams(
            name="r",
            provider="scripted",
            script=str(script),
            cwd=str(root),
            task="first",
            wait=True,
            env={"TETHER_HOME": str(home)},
        )
        try:
            agent, answer = await supervisor.spawn(params)
            assert answer is not None
            await answer
            first = await _check(verbs, agent)
            assert (first["state"], first["turn"]) == ("ready", 1)
            # a live agent's list row is the very encoding agent.status made
            listed = await _answered(verbs.rows.list_agents(IN_PROCESS, {}))
            assert listed.agents[0] is agent.row_cache[False][1]
            _, asked = agent.ask(ControlKind.PROMPT, "second")
            await asked
            second = await _check(verbs, agent)
            assert (second["turn"], second["last_seq"] > first["last_seq"]) == (2, True)
            assert agent.handle is not None
            agent.handle.note("a problem noticed on the way")  # the row changes in place
            noted = await _check(verbs, agent)
            assert noted["notes"] == ["a problem noticed on the way"]
            await agent.stop("close", 10, None)
            ended = await _check(verbs, agent)
            assert (ended["state"], ended["final_text"]) == ("done", "two")
            assert "final_text" not in _json(agent.row_cache[False][1])
        finally:
            await supervisor.shutdown()

    asyncio.run(go())
