"""tether: supervise live AI agents over a strict line protocol.

The parent API is re-exported here and loaded on first use, so that ``import tether``
(and a child's start-up) stays fast::

    import tether

    result = tether.run("summarise README.md", provider="scripted")   # blocking
    handle = await tether.spawn("...", provider="anthropic")           # asyncio

The protocol core lives in :mod:`tether.wire`.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (~10-20 ms): `import tether` starts every
# child, reaper and CLI of the package
TYPE_CHECKING = False

__version__ = "0.1.0"

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
    "RunResult",
    "SpawnError",
    "SpawnOptions",
    "SyncApproval",
    "SyncRunHandle",
    "TetherError",
    "Timeouts",
    "Update",
    "__version__",
    "open_run",
    "resume",
    "run",
    "spawn",
    "spawn_remote",
]
_API = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from typing import Any

    from tether.api import (
        Approval,
        ChannelError,
        ControlRefused,
        Denial,
        InboxItem,
        LocalRunHandle,
        ParentError,
        RemoteRunHandle,
        RunEnded,
        RunEvent,
        RunHandle,
        RunResult,
        SpawnError,
        SpawnOptions,
        SyncApproval,
        SyncRunHandle,
        TetherError,
        Timeouts,
        Update,
        open_run,
        resume,
        run,
        spawn,
        spawn_remote,
    )


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(importlib.import_module("tether.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tether' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
