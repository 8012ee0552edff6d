"""tether's public Python API: start child agents, talk to them, get their results.

Asyncio::

    handle = await tether.spawn("summarise README.md", provider="scripted", ...)
    async for update in handle.updates(): ...
    result = await handle.wait()
    again = await tether.resume(result.run_id, "and now the tests")  # the same conversation

Blocking::

    result = tether.run("summarise README.md", provider="scripted", ...)
    with tether.open_run("...") as run:
        run.steer("be brief")
        print(run.wait().final_text)

On another host of a cluster (see docs/scale-out.md)::

    handle = await tether.spawn_remote("run the tests", host="build1", provider="scripted")

Both handles are a ``tether.RunHandle`` (the controls, acks, updates and result, typed
once); ``tether.LocalRunHandle`` (``spawn``) adds the local process (``pid``, ``answer``,
``approvals``), ``tether.RemoteRunHandle`` (``spawn_remote``) its host and connections.

Approvals (the calls an agent waits on a person for)::

    handle = await tether.spawn("tidy the repo", agent="claude", deny=["shell:rm *"])
    async for approval in handle.approvals():
        await (approval.approve() if approval.kind == "read" else approval.deny("not now"))
    print((await handle.wait()).denied)  # what did not run, and who said no
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.runtime.parent.approvals import Approval
from tether.runtime.parent.mirror import ChannelError, RunMirror
from tether.runtime.parent.outcome import Denial
from tether.runtime.parent.spawn import (
    ControlRefused,
    InboxItem,
    LocalRunHandle,
    ParentError,
    RunEnded,
    RunEvent,
    RunHandle,
    RunResult,
    SpawnError,
    SpawnOptions,
    TetherError,
    Timeouts,
    Update,
    resume,
    spawn,
)
from tether.runtime.parent.sync import SyncApproval, SyncRunHandle, open_run, run

if TYPE_CHECKING:
    from tether.daemon.hosts.remote_run import RemoteRunHandle, spawn_remote

_REMOTE = frozenset({"RemoteRunHandle", "spawn_remote"})

__all__ = [
    "Approval",
    "ChannelError",
    "ControlRefused",
    "Denial",
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
    "SpawnOptions",
    "SyncApproval",
    "SyncRunHandle",
    "TetherError",
    "Timeouts",
    "Update",
    "open_run",
    "resume",
    "run",
    "spawn",
    "spawn_remote",
]


def __getattr__(name: str) -> Any:
    """The remote handle and its spawn, loaded on first use: NATS's side of tether
    (``tether.daemon.hosts.remote_run`` and what it imports, ~20-30 ms here) is not a local
    run's start-up cost."""
    if name in _REMOTE:
        from tether.daemon.hosts import remote_run

        value = getattr(remote_run, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tether.api' has no attribute {name!r}")
