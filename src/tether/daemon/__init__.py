"""tether's daemon: one Unix socket, length-prefixed JSON, ``agent.*`` and ``channel.*``.

- :mod:`tether.daemon.app`: the composition root: builds the daemon and installs its parts.
- :mod:`tether.daemon.rpc.protocol`: the sans-IO frame codec and message types (cheap to import).
- :mod:`tether.daemon.rpc.server`: the asyncio server;
  :mod:`tether.daemon.rpc.methods`, its registry.
- :mod:`tether.daemon.channels.hub`: ``channel.*`` handlers and MCP channel envelopes.
- :mod:`tether.daemon.fleet.verbs`: ``agent.*`` verbs over :mod:`tether.daemon.fleet.supervisor`.
- :mod:`tether.daemon.fleet.registry`: the SQLite agent registry (``daemon_*`` tables).
- :mod:`tether.daemon.rpc.client`: blocking and asyncio clients.
- :mod:`tether.daemon.rpc.lifecycle`: socket directory checks, the lock file, start/stop.

Nothing is imported here, so ``import tether.daemon.rpc.protocol`` stays cheap.
"""
