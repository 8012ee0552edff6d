"""The adapters forked from the fork server, imported ahead by its template.

The fork server (:mod:`tether.runtime.parent.forkserver`) forks ``tether child`` for the agents
in :data:`~tether.runtime.child.adapters.commands.LAUNCHES` as for the built-in agent. Its
template calls :func:`preload`, so a forked adapter child imports nothing while its CLI
starts: ~50 ms of CPU per child on a loaded machine, spent while the CLI needs the cores.
"""

from __future__ import annotations

import importlib

from tether.runtime.child.adapters.commands import LAUNCHES
from tether.runtime.child.adapters.registry import get_agent

__all__ = ["preload"]


def preload() -> None:
    """Import the driver and the runner module of every agent in ``LAUNCHES``."""
    runners = [get_agent(agent).runner.partition(":")[0] for agent in LAUNCHES]
    for module in ("tether.runtime.child.adapters.driver", *runners):
        importlib.import_module(module)
