"""tether's public Python API: start child agents, talk to them, get their results.

Asyncio::

    handle = await tether.spawn("summarise README.md", provider="scripted", ...)
    async for update in handle.updates(): ...
    result = await handle.wait()

Blocking::

    result = tether.run("summarise README.md", provider="scripted", ...)
    with tether.open_run("...") as run:
        run.steer("be brief")
        print(run.wait().final_text)

On another host of a cluster (see docs/scale-out.md)::

    handle = await tether.spawn_remote("run the tests", host="build1", provider="scripted")

Both handles are a ``tether.RunHandle`` (the controls, acks, updates and result, typed
once); ``tether.LocalRunHandle`` (``spawn``) adds the local process (``pid``, ``answer``),
``tether.RemoteRunHandle`` (``spawn_remote``) its host and connections.
"""

from __future__ import annotations

from tether.daemon.remote_run import RemoteRunHandle, spawn_remote
from tether.runtime.mirror import ChannelError, RunMirror
from tether.runtime.parent import (
    ControlRefused,
    InboxItem,
    LocalRunHandle,
    ParentError,
    RunEnded,
    RunEvent,
    RunHandle,
    RunResult,
    SpawnError,
    TetherError,
    Timeouts,
    Update,
    spawn,
)
from tether.runtime.sync import SyncRunHandle, open_run, run

__all__ = [
    "ChannelError",
    "ControlRefused",
    "InboxItem",
    "LocalRunHandle",
    "ParentError",
    "RemoteRunHandle",
    "RunEnded",
    "RunEvent",
    "RunHandle",
    "RunMirror",
    "RunResult",
    "SpawnError",
    "SyncRunHandle",
    "TetherError",
    "Timeouts",
    "Update",
    "open_run",
    "run",
    "spawn",
    "spawn_remote",
]
