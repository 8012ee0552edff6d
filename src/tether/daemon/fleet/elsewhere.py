"""The agents of the other hosts of this daemon's cluster: names unique across the cluster,
and every verb naming an agent answered through the local daemon, wherever it runs.

Theory of operation. A daemon that joined a cluster has an :class:`Elsewhere` (built by
:mod:`tether.daemon.hosts.agents`, handed to the :class:`~tether.daemon.fleet.fleet.Fleet`
by the composition root): it knows which other host runs each name (the cluster's
registry, watched) and can call a verb on that host, decoding its answer into the verb's
reply Struct. Then:

- :func:`forwarding` wraps each verb naming an agent (the ``FORWARDED`` table): a call
  whose agent is not here but on another host is sent there as it came, and that host's
  typed reply (or error code) is the answer; ``agent.events`` with ``follow`` streams the
  host's pages (:func:`tether.daemon.fleet.events.stream_pages`);
- a spawn checks the whole cluster (``agent_exists`` for a name another host runs), and
  ``agent.spawn {host}`` starts the agent on that host;
- ``agent.list`` shows every host's agents, each row with its ``host``.

A call relayed from another host (it has no socket connection:
:attr:`~tether.daemon.rpc.server.CallContext.relayed`) is answered by this host alone and
never forwarded again, so two hosts whose views of the registry disagree for a moment
cannot pass a call back and forth.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from tether.daemon.fleet.replies import (
    AgentStatus,
    AnswerReply,
    AskReply,
    ControlReply,
    EventsReply,
    QueueReply,
    RmReply,
    StopReply,
)

if TYPE_CHECKING:
    from tether.daemon.rpc.server import CallContext

__all__ = ["FIRST_CONTACT", "FORWARDED", "Elsewhere", "forwarding", "pages"]

R = TypeVar("R")
Handler = Callable[["CallContext", Any], Any]
Follow = Callable[["CallContext", str, Any], Any]

# verb -> the reply Struct its answer decodes into, for the ``agent.*`` verbs of
# :mod:`tether.daemon.fleet.verbs` that name an agent (``agent.diff``, ``merge`` and
# ``fork`` are forwarded by :mod:`tether.daemon.fleet.workspaces` the same way)
FORWARDED: Final[dict[str, type[Any]]] = {
    "ask": AskReply,
    "status": AgentStatus,
    "stop": StopReply,
    "rm": RmReply,
    "events": EventsReply,
    "steer": ControlReply,
    "follow_up": ControlReply,
    "finalize": ControlReply,
    "cancel": ControlReply,
    "answer": AnswerReply,
    "queue": QueueReply,
    "unqueue": ControlReply,
}
# ask's keys that create the agent on first contact: a name another host runs exists
FIRST_CONTACT: Final = frozenset({"provider", "agent", "cwd"})
FOLLOW_WAIT_S: Final = 20.0  # each page of a follow waits this long on its host


class Elsewhere(Protocol):
    """The other hosts' agents (see the module docstring)."""

    @property
    def host(self) -> str:
        """This daemon's own host name in the cluster."""
        ...

    def host_of(self, name: str) -> str | None:
        """The other host that runs ``name``, or None."""
        ...

    def rows(self) -> list[AgentStatus]:
        """Every other host's agents, as their hosts last published them."""
        ...

    async def call(self, host: str, method: str, params: Any, reply: type[R]) -> R:
        """``method`` on ``host``'s daemon, its answer as ``reply``; the host's error code
        as an ``RpcFailure``, a host that cannot be reached as ``shutting_down``."""
        ...


def forwarding(
    method: str,
    reply: type[Any],
    handler: Handler,
    elsewhere: Elsewhere,
    *,
    where: Callable[[str], str | None],
    follow: Follow | None = None,
) -> Handler:
    """``handler`` for ``method``, with a call that names another host's agent
    (``where(name)``: that host, None when it runs here or nowhere) forwarded there and
    its answer decoded as ``reply``. ``follow(context, host, params)`` streams
    ``agent.events`` with ``follow``. Keeps the handler's kind (inline, or ``async``)."""

    def host_of(context: CallContext, params: Any) -> str | None:
        if context.relayed or type(params) is not dict:
            return None
        name = params.get("name")
        return where(name) if type(name) is str else None

    async def forward(context: CallContext, host: str, params: dict[str, Any]) -> Any:
        if follow is not None and params.get("follow"):
            return await follow(context, host, params)
        if method == "agent.ask":
            params = {key: value for key, value in params.items() if key not in FIRST_CONTACT}
        return await elsewhere.call(host, method, params, reply)

    if inspect.iscoroutinefunction(handler):

        async def handle_async(context: CallContext, params: Any) -> Any:
            host = host_of(context, params)
            if host is None:
                return await handler(context, params)
            return await forward(context, host, params)

        return handle_async

    def handle(context: CallContext, params: Any) -> Any:
        host = host_of(context, params)
        return handler(context, params) if host is None else forward(context, host, params)

    return handle


async def pages(
    elsewhere: Elsewhere, host: str, name: str, after_seq: int, limit: int
) -> AsyncGenerator[EventsReply, None]:
    """The pages of ``name``'s events on ``host`` from ``after_seq`` on, each a long poll
    (``wait_s``) so that a quiet run costs one call per ``FOLLOW_WAIT_S``."""
    while True:
        params = {"name": name, "after_seq": after_seq, "limit": limit, "wait_s": FOLLOW_WAIT_S}
        page = await elsewhere.call(host, "agent.events", params, EventsReply)
        yield page
        after_seq = page.last_seq
