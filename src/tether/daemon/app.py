"""The daemon's composition root: the one place that builds its parts and wires them.

Who installs what, read top to bottom in :func:`build_daemon`::

    Daemon(config)                          socket server, method registry    rpc/server.py
    ChannelHub(...).install(daemon)         channel.* (stored: channels/store) channels/hub.py
    ChannelWiring(hub)                      inbox -> channel, Claude's channel channels/wiring.py
    Queues(notify)                          queued controls, --notify pages    fleet/queues.py
    Supervisor(extensions=[wiring, queues]) the wire agents, their registry    fleet/supervisor.py
    PtyFleet(registry)                      PTY agents and their holders       pty/fleet.py
    Fleet([supervisor, ptys], elsewhere)    every agent behind one interface   fleet/fleet.py
                                            (in a cluster: the other hosts')   hosts/agents.py
    AgentVerbs(fleet, ...).register(daemon) agent.*                            fleet/verbs.py
    Workspaces(fleet, supervisor)           agent.diff|merge|fork, rm's worktree fleet/workspaces.py
    daemon.methods.register("agent.drive")  a PTY agent's terminal             pty/drive.py
    daemon.on_start(hub.start)              read the stored channels back
    daemon.on_start(supervisor.start)       recover agents before serving
    daemon.on_start(wiring.rewire)          the recovered -p Claude Code agents' channels
    daemon.on_start(ptys.start)             re-attach to PTY holders
    daemon.on_shutdown(supervisor.shutdown) stop supervising (children live on)

:func:`run_daemon` adds the process around it: a short scheduler slice
(:mod:`tether.sched`), the private socket directory, the lock,
the socket (:mod:`tether.daemon.rpc.lifecycle`), the event loop, the signals, the fork
server's end at exit and, when asked, the link to a cluster of hosts
(:mod:`tether.daemon.hosts.link`). Nothing is
discovered and no part writes itself into another: each is handed what it needs here.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether import paths
from tether.daemon.channels.hub import ChannelHub
from tether.daemon.channels.store import ChannelStore
from tether.daemon.channels.wiring import ChannelWiring
from tether.daemon.fleet.fleet import Fleet
from tether.daemon.fleet.queues import Queues
from tether.daemon.fleet.supervisor import Supervisor
from tether.daemon.fleet.verbs import AgentVerbs
from tether.daemon.fleet.workspaces import Workspaces
from tether.daemon.pty.drive import drive_handler
from tether.daemon.pty.fleet import PtyFleet
from tether.daemon.rpc.config import ServerConfig
from tether.daemon.rpc.lifecycle import (
    DaemonLock,
    DaemonSetupError,
    bind_socket,
    ensure_socket_dir,
    lock_path_for,
    raise_open_files_limit,
)
from tether.daemon.rpc.server import Daemon
from tether.runtime.parent.forkserver import shared_forkserver
from tether.sched import request_short_slice

if TYPE_CHECKING:
    from tether.daemon.fleet.elsewhere import Elsewhere
    from tether.daemon.hosts.agents import ClusterAgents
    from tether.daemon.hosts.names import ClusterOptions

__all__ = ["FleetOptions", "build_daemon", "run_daemon"]

log = logging.getLogger("tether.daemon")


@dataclass(frozen=True, slots=True)
class FleetOptions:
    """How the daemon runs its agents: ``max_running`` wire agents at once (the rest wait
    as ``queued``, started in spawn order; None: no limit); ``notify``: a shell command
    run each time an agent starts waiting on a person (the request as JSON on stdin);
    ``policy``: the approval policy file of every wire agent whose spawn names none."""

    max_running: int | None = None
    notify: str | None = None
    policy: str | None = None


def build_daemon(
    config: ServerConfig,
    fleet_options: FleetOptions | None = None,
    *,
    elsewhere: Elsewhere | None = None,
) -> Daemon:
    """A daemon serving ``daemon.status``, ``channel.*`` and ``agent.*``, not yet serving;
    ``elsewhere``: the other hosts' agents, for a daemon that joins a cluster."""
    options = fleet_options or FleetOptions()
    daemon = Daemon(config)
    hub = ChannelHub(
        deliver_timeout_s=config.deliver_timeout_s,
        max_channels=config.max_channels,
        open_store=ChannelStore.open,
    )
    hub.install(daemon)
    wiring = ChannelWiring(hub, paths.state_dir() / "mcp")
    queues = Queues(options.notify)
    supervisor = Supervisor(
        extensions=(wiring, queues), max_running=options.max_running, policy=options.policy
    )
    ptys = PtyFleet(lambda: supervisor.registry, supervisor.runs_root)
    fleet = Fleet([supervisor, ptys], elsewhere)
    workspaces = Workspaces(fleet, supervisor)
    workspaces.register(daemon)
    verbs = AgentVerbs(
        fleet, supervisor, ptys, channels=wiring, workspaces=workspaces, queues=queues
    )
    verbs.register(daemon)
    daemon.methods.register("agent.drive", drive_handler(ptys, fleet))
    daemon.on_start(hub.start)  # before the agents: a recovered agent may forward to one

    async def rewire() -> None:
        await wiring.rewire(supervisor)

    daemon.on_start(supervisor.start)
    daemon.on_start(rewire)  # after: the recovered -p Claude Code agents
    daemon.on_start(ptys.start)
    daemon.on_shutdown(ptys.shutdown)
    daemon.on_shutdown(supervisor.shutdown)
    daemon.on_shutdown(wiring.close)
    daemon.on_shutdown(hub.close)
    return daemon


def run_daemon(
    config: ServerConfig,
    *,
    use_uvloop: bool = True,
    cluster: ClusterOptions | None = None,
    fleet_options: FleetOptions | None = None,
) -> int:
    """Run a daemon in the foreground until SIGTERM, SIGINT or SIGHUP (a closed terminal):
    a graceful stop, the agents live on. Returns the exit status.

    With ``cluster`` it also joins a cluster of hosts over NATS (:mod:`tether.daemon.hosts.link`);
    a cluster it cannot reach is a :class:`DaemonSetupError`.
    """
    import asyncio

    socket_path = config.socket_path
    # Before any thread or child exists, so they all inherit it (tether.sched).
    log.info("scheduler slice %s ns", request_short_slice() or "unchanged")
    limit = raise_open_files_limit()  # each agent holds a few descriptors
    log.info("descriptor limit %d", limit)
    ensure_socket_dir(socket_path.parent)
    lock = DaemonLock.acquire(lock_path_for(socket_path))
    try:
        lock.write_info(socket_path)
        sock = bind_socket(socket_path, backlog=config.listen_backlog)
        agents = None if cluster is None else _cluster_agents(cluster)
        daemon = build_daemon(config, fleet_options, elsewhere=agents)
        daemon.on_start(_freeze_heap)  # after the parts' own start hooks

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(signum, daemon.request_stop)
            if cluster is not None and agents is not None:
                await _join(daemon, cluster, agents)
            log.info("tether daemon %d listening on %s", os.getpid(), socket_path)
            await daemon.serve(sock)

        with asyncio.Runner(loop_factory=_loop_factory(use_uvloop)) as runner:
            runner.run(main())
        log.info("tether daemon %d stopped", os.getpid())
        return 0
    finally:
        shared_forkserver().close()  # its template ends with it (the agents live on)
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        lock.release()


async def _freeze_heap() -> None:
    """What start-up built (imports, recovered agents) lives as long as the daemon: out of
    the collector's view, so a full collection walks only what came later."""
    gc.collect()
    gc.freeze()


def _cluster_agents(cluster: ClusterOptions) -> ClusterAgents:
    from tether.daemon.hosts.agents import ClusterAgents

    return ClusterAgents(cluster.host)


async def _join(daemon: Daemon, cluster: ClusterOptions, agents: ClusterAgents) -> None:
    from tether.daemon.hosts.link import open_host_link
    from tether.transports.channel import TransportError

    try:
        link = await open_host_link(cluster, daemon)
    except TransportError as exc:
        raise DaemonSetupError(f"cannot join the cluster: {exc}") from None

    async def watch_the_others() -> None:
        await agents.start(link.cluster)

    daemon.on_start(link.start)  # after the agents are recovered (the hooks run in order)
    daemon.on_start(watch_the_others)
    daemon.on_shutdown(agents.aclose)  # before the link closes the connection they share
    daemon.on_shutdown(link.aclose)
    log.info("host %s joined the cluster", cluster.host)


def _loop_factory(use_uvloop: bool) -> Callable[[], Any] | None:
    if use_uvloop and not os.environ.get("TETHER_NO_UVLOOP"):
        try:
            import uvloop
        except ImportError:
            return None
        factory: Callable[[], Any] = uvloop.new_event_loop
        return factory
    return None
