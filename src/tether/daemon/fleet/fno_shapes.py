"""What the fno-agents reference client reads, beside tether's own result keys.

The reference daemon's verbs (REFERENCE-FACTS §3) answer in their own words: an agent has a
``short_id``, a ``harness`` and a ``status`` of ``live``, ``exited``, ``orphaned`` or
``unknown``; ``agent.status {}`` is the daemon's own status in its ``status-v1`` shape. The
verb handlers (:mod:`tether.daemon.fleet.verbs`) add these keys to what tether returns, never
replacing a key of tether's own, so one answer serves both clients.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from tether.daemon.fleet.replies import DaemonInfo, DaemonStatus
from tether.daemon.rpc.status import ServerStatus

if TYPE_CHECKING:
    from tether.daemon.fleet.registry import AgentRecord


class Agent(Protocol):
    """What these shapes read of an agent (a ``WireAgent`` or a ``PtyAgent``; the
    optional ``run_id``, ``orphaned`` and ``reference`` are looked up by name)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def record(self) -> AgentRecord: ...


SCHEMA_VERSION: Final = 1
_LIVE: Final = frozenset({"starting", "ready", "running", "closing", "finalizing"})
_EXITED: Final = frozenset({"done", "cancelled", "failed", "timed-out", "stopped"})
# The keys the reference's agent.list projection leaves out (it returns them elsewhere).
FIELDS_OMITTED: Final = ("task", "argv", "snapshot")


def wire_status(state: str, *, orphaned: bool = False) -> str:
    """The reference's agent status for a tether run state."""
    if orphaned:
        return "orphaned"
    if state in _LIVE:
        return "live"
    if state in _EXITED:
        return "exited"
    return "unknown"


def harness(argv: Iterable[str] | None) -> str:
    """The agent a child runs (``--agent NAME`` in its command), else ``tether``."""
    args = list(argv or ())
    for index, arg in enumerate(args[:-1]):
        if arg == "--agent":
            return args[index + 1]
    return "tether"


def reference_base(record: AgentRecord, run_id: str) -> dict[str, Any]:
    """The reference's fields that depend on the registry row only (not on the run's state);
    an agent, whose row never changes, keeps them as ``reference``."""
    return {
        "short_id": run_id,
        "harness": harness(record.argv),
        "session_id": run_id,
        "cwd": record.cwd,
        "last_message_at": record.updated_at or None,
        "log_path": os.path.join(record.run_dir, "events.jsonl"),  # run_dir: absolute
    }


def daemon_status(stats: ServerStatus, agents: Iterable[Agent]) -> DaemonStatus:
    """``agent.status {}``: the daemon's own status, in the reference's ``status-v1`` shape
    (plus tether's ``daemon.status`` statistics inside ``daemon``)."""
    by_status: dict[str, int] = {}
    rows = list(agents)
    for agent in rows:
        key = wire_status(agent.state, orphaned=getattr(agent, "orphaned", False))
        by_status[key] = by_status.get(key, 0) + 1
    fields = msgspec.structs.asdict(stats)
    info = DaemonInfo(**fields, state="serving", uptime_secs=int(time.time() - stats.started_at))
    return DaemonStatus(
        schema_version=SCHEMA_VERSION,
        daemon=info,
        agents={"total": len(rows), "by_status": by_status},
        drives={"active": 0},
        restarts={"queue_depth": 0, "consecutive_failures_max_seen": 0},
        channels={"registered": stats.channels},
    )
