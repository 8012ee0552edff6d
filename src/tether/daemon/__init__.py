"""tether's daemon: one Unix socket, length-prefixed JSON, ``agent.*`` and ``channel.*``.

- :mod:`tether.daemon.app`: the composition root: builds the daemon and installs its parts.
- :mod:`tether.daemon.protocol`: the sans-IO frame codec and message types (cheap to import).
- :mod:`tether.daemon.server`: the asyncio server; :mod:`tether.daemon.methods`, its registry.
- :mod:`tether.daemon.channels`: ``channel.*`` handlers and MCP channel envelopes.
- :mod:`tether.daemon.agents`: ``agent.*`` verbs over :mod:`tether.daemon.supervisor`.
- :mod:`tether.daemon.registry`: the SQLite agent registry (``daemon_*`` tables).
- :mod:`tether.daemon.client`: blocking and asyncio clients.
- :mod:`tether.daemon.lifecycle`: socket directory checks, the lock file, start/stop.

Nothing is imported here, so ``import tether.daemon.protocol`` stays cheap.
"""
