"""What a run ends with (:class:`RunResult`) and how long the parent waits (:class:`Timeouts`).

The errors the parent raises are in :mod:`tether.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from tether.wire.session import RunStatus


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a parent (the API or the daemon) waits before it decides a child stopped
    keeping its promises (see :mod:`tether.runtime.parent.supervise`)."""

    start_s: float = 20.0  # spawn -> ready
    ack_s: float = 30.0  # control -> control-ack, once the child is ready
    cancel_grace_s: float = 3.0  # cancel (or the deadline) -> exit, before SIGTERM
    kill_grace_s: float = 2.0  # SIGTERM -> SIGKILL of the process group
    exit_grace_s: float = 3.0  # exit event -> the process is gone
    # Re-check the files and the process at least this often; None: only when something
    # happens (a driver whose watchers cannot miss anything: the daemon with pidfds).
    tick_s: float | None = 1.0


class Denial(NamedTuple):
    """A call the agent asked to make that did not run: what it was and who said no
    (``by``: ``person``, ``rule``, ``timeout``, ``no-one``, ``withdrawn``)."""

    tool: str
    summary: str
    by: str
    key: str | None = None  # the inbox key of its request (None: never asked)
    rule: str | None = None
    text: str = ""  # the person's words, or why no one could be asked


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended and its answer.

    ``final_text`` is the complete answer for ``done`` runs (read from final-text-path
    when the child had to cut it). ``truncated`` is true only when the full text could
    not be recovered; the text then ends with a note saying so. ``error`` explains any
    status but ``done`` (and problems the parent noticed on the way). ``denied`` lists
    the calls the agent asked to make that were denied, and by whom.
    """

    status: RunStatus
    final_text: str = ""
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    truncated: bool = False
    error: str | None = None
    run_id: str = ""
    elapsed_s: float = 0.0
    denied: tuple[Denial, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "done"
