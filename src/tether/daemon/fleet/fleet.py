"""The fleet: every agent of this daemon behind one interface, whatever drives it.

Theory of operation. An agent is a :class:`FleetAgent`: a wire agent (a child on the v1
wire, :class:`~tether.daemon.fleet.wire_agent.WireAgent`) or a PTY agent (an interactive
program on a pseudo-terminal, :mod:`tether.daemon.pty.agent`). Each kind lives in an
:class:`AgentFamily` (the wire agents' :class:`~tether.daemon.fleet.supervisor.Supervisor`,
the PTY agents' fleet), and the :class:`Fleet` holds the families the composition root
hands it: the ``agent.*`` verbs ask the fleet for an agent by name, for all of them in
creation order, to remove one or to reconcile, and never merge families by hand.
Names are unique across families (a spawn checks every family) and, in a cluster, across
its hosts: the fleet's :class:`~tether.daemon.fleet.elsewhere.Elsewhere` knows the names
the other hosts run (:meth:`Fleet.host_of`), and the verbs forward a call naming one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tether.daemon.fleet.replies import AgentStatus, ReconcileReport, RmReply, StopReply
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode

if TYPE_CHECKING:
    from tether.daemon.fleet.elsewhere import Elsewhere
    from tether.daemon.fleet.registry import AgentRecord
    from tether.daemon.fleet.wire_agent import WireAgent

__all__ = ["AgentChannels", "AgentFamily", "Fleet", "FleetAgent"]


class FleetAgent(Protocol):
    """What every agent offers the verbs."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def record(self) -> AgentRecord: ...

    @property
    def run_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def ended(self) -> bool: ...

    def status(self) -> AgentStatus:
        """Its row in ``agent.status`` and ``agent.list``."""
        ...

    async def stop(self, mode: str, timeout_s: float, note: str | None) -> StopReply:
        """End it the way ``mode`` says (``close``, ``finalize``, ``cancel``), waiting up to
        ``timeout_s`` for the end."""
        ...

    def wire(self) -> WireAgent:
        """The agent as a wire agent, for the verbs that drive a run (``ask``, ``steer``,
        ``events``...); raises ``invalid_status`` for one that has no run."""
        ...


class AgentFamily(Protocol):
    """One kind of agent: where they live, how they go, how they come back."""

    def get(self, name: str) -> FleetAgent | None: ...

    def members(self) -> Iterable[FleetAgent]: ...

    def spawning(self, name: str) -> bool:
        """A spawn of ``name`` is under way in this family."""
        ...

    async def remove(self, name: str, *, force: bool) -> RmReply: ...

    async def reconcile(self) -> ReconcileReport: ...


class Fleet:
    """Every agent of the daemon, by name; see the module docstring."""

    def __init__(self, families: Sequence[AgentFamily], elsewhere: Elsewhere | None = None) -> None:
        self.families = tuple(families)
        self.elsewhere = elsewhere  # the cluster's other hosts, when in one
        self._members: list[FleetAgent] = []  # as the families gave them last
        self._ordered: list[FleetAgent] = []  # the same, oldest first

    def get(self, name: str) -> FleetAgent | None:
        """The agent of this daemon named ``name``."""
        for family in self.families:
            agent = family.get(name)
            if agent is not None:
                return agent
        return None

    def require(self, name: str) -> FleetAgent:
        agent = self.get(name)
        if agent is None:
            raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name!r}")
        return agent

    def host_of(self, name: str) -> str | None:
        """The other host of the cluster that runs ``name`` (None: here, or nowhere)."""
        if self.elsewhere is None or self.get(name) is not None:
            return None
        return self.elsewhere.host_of(name)

    def taken(self, name: str) -> bool:
        """The name belongs to an agent here or on another host, or to a spawn under way."""
        return (
            self.get(name) is not None
            or any(f.spawning(name) for f in self.families)
            or self.host_of(name) is not None
        )

    def all(self) -> list[FleetAgent]:
        """Every agent, oldest first (then by name). The order is kept while the members
        are the same (every ``agent.list`` asks; an agent's name and creation time never
        change), so a list does not sort a thousand agents each time."""
        agents = [agent for family in self.families for agent in family.members()]
        if agents != self._members:  # identity first: no agent compares equal to another
            self._members = agents
            self._ordered = sorted(agents, key=lambda agent: (agent.record.created_at, agent.name))
        return list(self._ordered)

    async def remove(self, name: str, *, force: bool) -> RmReply:
        for family in self.families:
            if family.get(name) is not None:
                return await family.remove(name, force=force)
        raise RpcFailure(ErrorCode.AGENT_NOT_FOUND, f"no agent named {name!r}")

    async def reconcile(self) -> ReconcileReport:
        report = ReconcileReport()
        for family in self.families:
            report = report + await family.reconcile()
        return report


class AgentChannels(Protocol):
    """The channel side the verbs use (:class:`tether.daemon.channels.wiring.ChannelWiring`,
    handed in by the composition root)."""

    def claude_channel(
        self, name: str, socket: str, *, to_agent: bool
    ) -> tuple[list[str], str]: ...

    def deliver_to(self, agent: WireAgent) -> None: ...

    def status_fields(self, agent: WireAgent) -> dict[str, Any]: ...

    def forget(self, name: str) -> None: ...
