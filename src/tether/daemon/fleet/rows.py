"""The rows of ``agent.list``, ``agent.status`` and ``agent.approvals``: each agent's
status with its open questions, what it waits on and its channel, in a cluster with its
host; a wire agent's row encoded once per change (:meth:`AgentRows.status_of` and
:meth:`AgentRows.list_agents` reuse it), the other hosts' rows beside this one's.

Plain functions: answered inline from memory, and only when the questions of some run are
not cached do they return a coroutine (the server awaits it in a task).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

import msgspec
from msgspec import UNSET

from tether.daemon.fleet.answers import AnswerDesk, Questions
from tether.daemon.fleet.elsewhere import Elsewhere
from tether.daemon.fleet.fleet import AgentChannels, Fleet, FleetAgent
from tether.daemon.fleet.fno_shapes import FIELDS_OMITTED, daemon_status
from tether.daemon.fleet.params import ListParams, StatusParams, check_name
from tether.daemon.fleet.queues import approvals_reply
from tether.daemon.fleet.replies import (
    ROW_QUESTIONS,
    AgentStatus,
    ApprovalsReply,
    DaemonStatus,
    EncodedList,
    Question,
    Waiting,
)
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.fleet.wire_agent import WireAgent
from tether.daemon.rpc.methods import RpcFailure, decode_params

if TYPE_CHECKING:
    from tether.daemon.rpc.server import CallContext

__all__ = ["AgentRows"]

APPROVALS_WAIT_S: Final = 5.0  # each other host's agent.approvals, at most
StatusReply = AgentStatus | DaemonStatus | msgspec.Raw
Reply = EncodedList | Coroutine[Any, Any, EncodedList]
_NO_QUESTIONS: Final[Questions] = []
_NO_FILTERS: Final = ListParams()
_ENCODER: Final = msgspec.json.Encoder()


class AgentRows:
    """Rows of one :class:`Fleet` (see the module docstring)."""

    def __init__(
        self,
        fleet: Fleet,
        supervisor: Supervisor,
        answers: AnswerDesk,
        channels: AgentChannels | None = None,
    ) -> None:
        self.fleet = fleet
        self.sup = supervisor
        self.answers = answers
        self.channels = channels

    @property
    def host(self) -> str | None:
        """This daemon's host in its cluster (None: in none)."""
        return None if self.fleet.elsewhere is None else self.fleet.elsewhere.host

    def list_agents(self, context: CallContext, params: Any) -> Reply:
        """This daemon's agents and, in a cluster, every other host's (a call relayed from
        another host: this daemon's only), oldest first."""
        args = decode_params(params, ListParams)
        agents = self.fleet.all()
        if args != _NO_FILTERS:
            agents = [agent for agent in agents if _matches(agent, args)]
        far = [] if context.relayed else self._elsewhere_rows(args)
        versions = _versions(agents)
        found, missing = self.answers.cached(versions)
        if not missing:
            return self._listed(args, agents, found, far)

        async def read() -> EncodedList:
            found = await self.answers.questions(versions)
            return self._listed(args, agents, found, far)

        return read()

    def approvals(
        self, context: CallContext, params: Any
    ) -> ApprovalsReply | Coroutine[Any, Any, ApprovalsReply]:
        """Every approval that waits in a live wire agent, oldest first; in a cluster, the
        other hosts' too (a call relayed from another host: this host's alone)."""
        agents = {a.run_id: a for a in self.fleet.all() if isinstance(a, WireAgent) and not a.ended}
        versions = _versions(list(agents.values()))
        elsewhere = None if context.relayed else self.fleet.elsewhere
        found, missing = self.answers.cached(versions)
        if not missing and elsewhere is None:
            return approvals_reply(agents, found)

        async def read() -> ApprovalsReply:
            here = approvals_reply(agents, await self.answers.questions(versions))
            if elsewhere is None:
                return here
            return await _with_other_hosts(here, elsewhere)

        return read()

    def _elsewhere_rows(self, args: ListParams) -> list[AgentStatus]:
        if self.fleet.elsewhere is None:
            return []
        return [row for row in self.fleet.elsewhere.rows() if _row_matches(row, args)]

    def _listed(
        self,
        args: ListParams,
        agents: list[FleetAgent],
        questions: dict[str, Questions],
        far: list[AgentStatus],
    ) -> EncodedList:
        """This daemon's rows (:meth:`_rows`) and, oldest first among them, another host's."""
        rows = self._rows(agents, questions)
        if far:
            local = zip(agents, rows, strict=True)
            keyed = [((a.record.created_at, a.name), row) for a, row in local]
            keyed += [((row.created_at, row.name), row) for row in far]
            keyed.sort(key=lambda item: item[0])
            rows = [row for _, row in keyed]
        filters = {"cwd": args.cwd, "provider": args.provider, "status": args.status}
        return EncodedList(rows, filters, list(FIELDS_OMITTED))

    def _rows(
        self, agents: list[FleetAgent], questions: dict[str, Questions]
    ) -> list[AgentStatus | msgspec.Raw]:
        """Each agent's row; a wire agent's as it was encoded last while it has not changed."""
        rows: list[AgentStatus | msgspec.Raw] = []
        for agent in agents:
            if isinstance(agent, WireAgent):
                asked = questions.get(agent.run_id, _NO_QUESTIONS)
                rows.append(self._encoded_row(agent, asked, final=False))
            else:
                rows.append(agent.status())
        return rows

    def status_of(
        self, context: CallContext, params: Any
    ) -> StatusReply | Coroutine[Any, Any, StatusReply]:
        name = _status_name(params)
        if name is None:
            return daemon_status(context.daemon.statistics(), self.fleet.all())
        agent = self.fleet.require(check_name(name))
        if not isinstance(agent, WireAgent):
            return self.row(agent)
        questions = self.answers.cached_one(agent.run_id, agent.inbox_version)
        if questions is None:

            async def read() -> StatusReply:
                found = await self.answers.questions({agent.run_id: agent.inbox_version})
                return self._encoded_row(agent, found.get(agent.run_id, []), final=True)

            return read()
        return self._encoded_row(agent, questions, final=True)

    def _encoded_row(
        self, agent: WireAgent, questions: Questions, *, final: bool
    ) -> AgentStatus | msgspec.Raw:
        """The agent's row (with its final text when ``final``), encoded once per change:
        equal stamps and equal questions, equal rows (see :meth:`WireAgent.status_stamp`);
        a row whose stamp cannot be told cheaply is built each time."""
        stamp = agent.status_stamp()
        if stamp is None:
            return self.row(agent, {agent.run_id: questions}, final=final)
        final = final and agent.ended and bool(agent.final_text)  # the text rides along
        key = (stamp, questions)  # tuple equality: equal questions, equal answer
        hit = agent.row_cache.get(final)
        if hit is not None and hit[0] == key:
            return hit[1]
        raw = msgspec.Raw(_ENCODER.encode(self.row(agent, {agent.run_id: questions}, final=final)))
        agent.row_cache[final] = (key, raw)
        return raw

    def row(
        self,
        agent: FleetAgent,
        questions: dict[str, Questions] | None = None,
        *,
        final: bool = False,
    ) -> AgentStatus:
        row = agent.status()
        extra: dict[str, Any] = {} if self.host is None else {"host": self.host}
        if not isinstance(agent, WireAgent):
            return msgspec.structs.replace(row, **extra) if extra else row
        if agent.queued:
            extra["queue_position"] = self.sup.queue_position(agent.name) or UNSET
        if questions is not None:
            mine = questions.get(agent.run_id, [])
            shown = mine[:ROW_QUESTIONS]
            extra["questions"] = [Question(q["key"], q["type"], q["text"], q["at"]) for q in shown]
            if mine and not agent.ended:
                first = mine[0]
                kind = "approval" if first["type"] == "approval_request" else "question"
                extra["waiting"] = Waiting(kind, first["key"], first["at"], first.get("tool"))
        if self.channels is not None:
            extra.update(self.channels.status_fields(agent))
        if final and agent.ended and agent.final_text:  # the whole answer, once read
            extra["final_text"] = agent.final_text
        return msgspec.structs.replace(row, **extra) if extra else row


def _status_name(params: Any) -> str | None:
    """``agent.status``'s ``name`` (None: the daemon's own status); ``{"name": str}``, the
    common call, without a conversion."""
    if type(params) is dict and len(params) == 1:
        name = params.get("name")
        if type(name) is str:
            return name
    return decode_params(params, StatusParams).name


async def _with_other_hosts(here: ApprovalsReply, elsewhere: Elsewhere) -> ApprovalsReply:
    """``here`` and every other host's approvals (asked at once, each bounded), each with
    its host, oldest first; a host that does not answer is named in ``unreachable``."""
    hosts = sorted({row.host for row in elsewhere.rows() if isinstance(row.host, str)})

    async def ask(host: str) -> ApprovalsReply | None:
        try:
            async with asyncio.timeout(APPROVALS_WAIT_S):
                return await elsewhere.call(host, "agent.approvals", {}, ApprovalsReply)
        except (RpcFailure, TimeoutError):
            return None

    answers = await asyncio.gather(*(ask(host) for host in hosts))
    rows, more = list(here.approvals), here.more
    unreachable = []
    for host, answer in zip(hosts, answers, strict=True):
        if answer is None:
            unreachable.append(host)
            continue
        rows += [msgspec.structs.replace(row, host=host) for row in answer.approvals]
        more += answer.more
    return ApprovalsReply.capped(rows, unreachable, more)


def _versions(agents: list[FleetAgent]) -> dict[str, int]:
    return {a.run_id: a.inbox_version for a in agents if isinstance(a, WireAgent)}


def _matches(agent: FleetAgent, args: ListParams) -> bool:
    """fno-agents' list filters: cwd, provider (the harness or tether's provider), status."""
    record = agent.record
    if args.cwd is not None and record.cwd != args.cwd:
        return False
    if args.provider is not None:
        harness = agent.status().harness
        if args.provider not in (harness, record.provider):
            return False
    return args.status is None or args.status in (agent.status().status, agent.state)


def _row_matches(row: AgentStatus, args: ListParams) -> bool:
    """:func:`_matches` for another host's row."""
    if args.cwd is not None and row.cwd != args.cwd:
        return False
    if args.provider is not None and args.provider not in (row.harness, row.provider):
        return False
    return args.status is None or args.status in (row.status, row.state)
