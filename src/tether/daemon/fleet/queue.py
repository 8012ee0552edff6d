"""``tether daemon --max-running N``: which wire agents run and which wait, and starting
the waiting ones in spawn order as places free.

A spawn beyond the limit becomes a row in state ``queued`` that keeps its spawn
parameters (so the queue survives a daemon restart) and an agent with no run yet; when a
running agent ends, or a queued one is stopped or removed, :meth:`AgentQueue.released`
hands the places that freed to the next in line, each started by the supervisor's
``start`` in a task of its own. Which names run and in what order is the sans-IO
:class:`~tether.daemon.fleet.admission.Admission`. A spawn that waits for its task's
answer (``agent.spawn {wait}``) of an agent that had to queue gets :meth:`AgentQueue.answer`:
settled with that answer once the agent has started and answered, or with why not (it
was stopped or removed in line, or could not start).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.daemon.fleet.admission import Admission
from tether.daemon.fleet.registry import AgentExists, AgentNotFound, AgentRecord, AgentRegistry
from tether.daemon.fleet.turns import AskFailed, Outcome
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode

if TYPE_CHECKING:
    from tether.daemon.fleet.params import SpawnParams
    from tether.daemon.fleet.wire_agent import WireAgent

__all__ = ["AgentQueue", "kept_params"]

log = logging.getLogger("tether.daemon.fleet")

MakeAgent = Callable[..., "WireAgent"]
# starts a queued agent (wait: track its task's answer); that answer's future, or None
Start = Callable[["WireAgent", bool], Awaitable["asyncio.Future[Outcome] | None"]]


class AgentQueue:
    """The fleet's admission and its queued agents; see the module docstring."""

    def __init__(
        self,
        limit: int | None,
        *,
        registry: Callable[[], AgentRegistry],
        agents: dict[str, WireAgent],
        make_agent: MakeAgent,
        start: Start,
    ) -> None:
        self.admission = Admission(limit)
        self._registry = registry
        self._agents = agents
        self._make_agent = make_agent
        self._start = start
        self._starting: set[asyncio.Task[None]] = set()
        self._answers: dict[str, asyncio.Future[Outcome]] = {}  # spawns that wait, by name

    def request(self, name: str) -> bool:
        """True when ``name`` may run now (it then counts), else it waits in line."""
        return self.admission.request(name)

    def adopt(self, name: str) -> None:
        """A running agent found again after a restart counts, whatever the limit."""
        self.admission.adopt(name)

    def position(self, name: str) -> int | None:
        return self.admission.position(name)

    def hold(self, p: SpawnParams, argv: list[str], cwd: str) -> WireAgent:
        """A new row that waits its turn (its spawn parameters kept in it), and its agent."""
        record = AgentRecord(
            name=p.name,
            run_dir="",
            state="queued",
            task=p.task,
            provider=p.provider,
            model=p.model,
            cwd=cwd,
            argv=argv,
            channel_id=p.channel_id,
            created_at=time.time(),
            spawn=kept_params(p),
        )
        try:
            self._registry().insert(record)
        except AgentExists:
            self.admission.release(p.name)
            message = f"an agent named {p.name!r} already exists"
            raise RpcFailure(ErrorCode.AGENT_EXISTS, message) from None
        return self._hold(record)

    def hold_again(self, p: SpawnParams) -> WireAgent:
        """An ended agent resumed while every place is taken: its row waits again."""
        record = self._registry().update(p.name, state="queued", spawn=kept_params(p), detail=None)
        return self._hold(record)

    def answer(self, name: str) -> asyncio.Future[Outcome]:
        """The answer of queued ``name``'s task, for a spawn that waits for it."""
        future = self._answers.get(name)
        if future is None or future.done():
            future = self._answers[name] = asyncio.get_running_loop().create_future()
        return future

    def _settle(self, name: str, outcome: asyncio.Future[Outcome] | str) -> None:
        """Hand a waiting spawn its queued agent's answer (or why there is none)."""
        waiting = self._answers.pop(name, None)
        if waiting is None or waiting.done():
            return
        if isinstance(outcome, str):
            waiting.set_result(AskFailed(1, outcome))
            return

        def settled(done: asyncio.Future[Outcome]) -> None:
            if waiting.done():
                return
            if done.cancelled():
                waiting.set_result(AskFailed(1, "the wait for its answer was given up"))
            else:
                waiting.set_result(done.result())

        outcome.add_done_callback(settled)

    def _hold(self, record: AgentRecord) -> WireAgent:
        agent = self._agents[record.name] = self._make_agent(record, None, queued=True)
        return agent

    def released(self, name: str) -> None:
        """``name`` no longer runs (or waits): start those that may run now, in order."""
        for admitted in self.admission.release(name):
            self.begin(admitted)

    def begin(self, name: str) -> None:
        """Start the admitted queued agent ``name`` in a task of its own."""
        task = asyncio.get_running_loop().create_task(self._begin(name))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def leave(self, agent: WireAgent) -> None:
        """A queued agent stopped before it ran: it ends ``cancelled``, its place freed."""
        self._end(agent, "cancelled", "stopped while queued")

    async def _begin(self, name: str) -> None:
        agent = self._agents.get(name)
        if agent is None or not agent.queued:
            self.released(name)
            return
        try:
            answer = await self._start(agent, name in self._answers)
            if answer is not None:
                self._settle(name, answer)
        except (RpcFailure, msgspec.ValidationError) as exc:
            self._end(agent, "failed", exc.message if isinstance(exc, RpcFailure) else str(exc))
        except Exception as exc:  # one failed start must not stop the queue
            log.exception("agent %s: cannot start from the queue", name)
            self._end(agent, "failed", f"cannot start: {exc!r}")

    def _end(self, agent: WireAgent, state: str, detail: str) -> None:
        self._settle(agent.name, f"it ended {state} before it started: {detail}")
        with contextlib.suppress(AgentNotFound):
            record = self._registry().update(agent.name, state=state, detail=detail)
            self._agents[agent.name] = self._make_agent(record, None)
        self.released(agent.name)


def kept_params(p: SpawnParams) -> Any:
    """What the row keeps of a spawn: its parameters, the caller's wait aside."""
    return msgspec.to_builtins(msgspec.structs.replace(p, wait=False))
