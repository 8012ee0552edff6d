"""What the ``agent.*`` verbs answer: one msgspec Struct per reply, beside its params.

The daemon encodes these; every client (the CLI, the dashboard, another host, the Python
client) decodes the same Structs (:func:`decode_reply`), so a field is named once. The
fno-agents reference client's keys (REFERENCE-FACTS §3: ``short_id``, ``harness``,
``status`` live/exited/orphaned/unknown, ``reply``/``backend``, ``stopped``,
``already_exited``, ``registry_removed``...) are fields of the same Structs, filled from
tether's own values: one encoding, not a second set of dicts.

Optional fields default to ``UNSET`` and are left out of the encoding; the rest are always
present (``null`` where there is no value), as the daemon has always answered them.
Imports nothing from the daemon but the server's own status Struct, so a client loads it
cheaply.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from tether.daemon.rpc.status import ServerStatus
from tether.wire import ControlAck

__all__ = [
    "AgentStatus",
    "AnswerReply",
    "AskReply",
    "ChannelStats",
    "ControlReply",
    "DaemonInfo",
    "DaemonStatus",
    "EncodedList",
    "EventsReply",
    "ListReply",
    "PtyInfo",
    "Question",
    "ReconcileError",
    "ReconcileReport",
    "RmReply",
    "StopReply",
    "StreamEnd",
    "Waiting",
    "decode_reply",
]

R = TypeVar("R")

LANE: Final = "wire"  # tether drives every wire agent over the v1 wire
PTY_MIN_SIZE: Final = 1  # a pseudo-terminal's smallest and largest side (cols, rows)
PTY_MAX_SIZE: Final = 1000
MAX_APPROVALS: Final = 1000  # approvals one agent.approvals lists (the oldest)
ROW_QUESTIONS: Final = 16  # open questions a status row lists (the oldest)


class Question(msgspec.Struct, frozen=True):
    """An unanswered question or approval request in an agent's inbox."""

    key: str
    type: str
    text: str
    at: float


class Waiting(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a run is blocked on: a person's answer to ``key``."""

    kind: str  # approval | question
    key: str
    since: float
    tool: str | None = None


class Approval(msgspec.Struct, frozen=True, omit_defaults=True):
    """One call an agent waits on a person for (``agent.approvals``)."""

    name: str  # the agent's name in the fleet
    key: str
    since: float
    reason: str
    agent: str | None = None  # who asks: claude, codex, builtin, ...
    tool: str | None = None
    kind: str | None = None
    summary: str | None = None
    host: str | None = None  # in a cluster: the host the agent runs on (None: this one)


class ApprovalsReply(msgspec.Struct, frozen=True):
    """``agent.approvals``: every approval that waits, fleet-wide (in a cluster: on every
    host that answered), oldest first, at most MAX_APPROVALS (``more``: how many others
    were read, each agent's oldest 1,000 at most: more wait); ``unreachable``: the hosts
    that did not answer."""

    approvals: list[Approval]
    unreachable: list[str] = msgspec.field(default_factory=list)
    more: int = 0

    @classmethod
    def capped(cls, rows: list[Approval], unreachable: list[str], more: int) -> ApprovalsReply:
        """The oldest MAX_APPROVALS of ``rows``, the rest counted in ``more``."""
        rows = sorted(rows, key=lambda row: (row.since, row.key))
        return cls(rows[:MAX_APPROVALS], unreachable, more + max(0, len(rows) - MAX_APPROVALS))


class QueuedItem(msgspec.Struct, frozen=True, omit_defaults=True):
    """A steer or follow-up the agent has not taken in yet (``ref``: its seq)."""

    ref: int
    kind: str
    text: str
    at: float
    truncated: bool | UnsetType = UNSET


class QueueReply(msgspec.Struct, frozen=True):
    """``agent.queue``: what waits in the agent's queues, oldest first."""

    name: str
    queue: list[QueuedItem]
    state: str


class ChannelStats(msgspec.Struct, frozen=True, omit_defaults=True):
    pushed: int = 0
    failed: int = 0
    last_error: str | None = None


class PtyInfo(msgspec.Struct, frozen=True):
    cols: int
    rows: int
    attached: bool
    viewers: int
    holder_pid: int | None
    output_bytes: int


class AgentStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One agent, as ``agent.status {name}`` and each row of ``agent.list`` give it.

    ``state`` is tether's run state (``starting`` ... ``done``/``failed``...); ``status`` and
    ``live_status`` are the reference's (``live``, ``exited``, ``orphaned``, ``unknown``);
    ``short_id``/``session_id`` are the run id, ``harness`` the agent CLI, ``log_path`` the
    event log.
    """

    name: str
    kind: str = "wire"
    state: str
    turn: int = 0
    pid: int | None = None
    run_id: str
    run_dir: str
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    created_at: float
    started_at: float | None = None
    last_seq: int = 0
    provider: str | None = None
    model: str | None = None
    channel_id: str | None = None
    adopted: bool = False
    # the reference's names
    status: str
    live_status: str
    short_id: str
    harness: str
    lane: str = LANE
    session_id: str
    cwd: str | None = None
    last_message_at: float | None = None
    log_path: str
    # present only when they apply
    ended_at: float | UnsetType | None = UNSET
    exit_code: int | UnsetType | None = UNSET
    error: str | UnsetType | None = UNSET
    final_text: str | UnsetType = UNSET
    waiting: Waiting | UnsetType = UNSET
    queue_position: int | UnsetType = UNSET  # state "queued": its place, 1 first
    questions: list[Question] | UnsetType = UNSET
    channel: ChannelStats | UnsetType = UNSET
    notes: list[str] | UnsetType = UNSET
    argv: list[str] | UnsetType | None = UNSET
    attached: bool | UnsetType = UNSET
    pty: PtyInfo | UnsetType = UNSET
    host: str | UnsetType = UNSET  # the cluster's list: the host it runs on
    answer: AskReply | UnsetType = UNSET  # agent.spawn {wait}
    created: bool | UnsetType = UNSET  # the reference's agent.ask on first contact
    resumable: bool | UnsetType = UNSET  # an ended agent: a follow-up resumes it
    worktree: str | UnsetType = UNSET  # its git worktree (agent.spawn {worktree})
    branch: str | UnsetType = UNSET  # ... its branch
    base: str | UnsetType = UNSET  # ... the branch its work merges into


class ListReply(msgspec.Struct, frozen=True):
    """``agent.list``: every agent, oldest first (the cluster's list: of every host, each
    row with its ``host``); the filters the reference client sent, and what it omits."""

    agents: list[AgentStatus]
    filters_applied: dict[str, str | None] = msgspec.field(default_factory=dict)
    fields_omitted: list[str] = msgspec.field(default_factory=list)


class EncodedList(msgspec.Struct, frozen=True):
    """:class:`ListReply` as the daemon sends it: each row an :class:`AgentStatus` or that
    row already encoded (``msgspec.Raw``, kept per agent while it does not change). The
    same JSON: clients decode it as :class:`ListReply`."""

    agents: list[AgentStatus | msgspec.Raw]
    filters_applied: dict[str, str | None]
    fields_omitted: list[str]


class AskReply(msgspec.Struct, frozen=True, kw_only=True):
    """``agent.ask``: the answer of the turn that read the message, or ``timed_out``."""

    name: str | UnsetType = UNSET
    seq: int
    turn: int
    state: str | UnsetType = UNSET
    timed_out: bool = False
    text: str | UnsetType = UNSET
    usage: dict[str, Any] | UnsetType = UNSET
    stop_reason: str | UnsetType = UNSET
    error: str | UnsetType = UNSET  # stop_reason "error": what the turn's failure said
    truncated: bool | UnsetType = UNSET
    reply: str | UnsetType = UNSET  # the reference's name for text
    backend: str | UnsetType = UNSET


class ControlReply(msgspec.Struct, frozen=True, kw_only=True):
    """``agent.steer|follow_up|finalize|cancel``: the child's ack of the control.

    ``ack`` is ``accepted``, ``applied`` or ``rejected`` (then ``reason`` says why: a
    control the run's state refuses is answered, not an error); ``event`` is the child's
    ``control-ack`` line itself.
    """

    name: str
    seq: int
    ack: str
    state: str
    reason: str | UnsetType = UNSET
    event: ControlAck | UnsetType = UNSET
    resumed: str | UnsetType = UNSET  # a follow-up to an ended agent: the run it continues


class StopReply(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    mode: str | UnsetType = UNSET
    seq: int | UnsetType = UNSET
    ack: str | UnsetType = UNSET
    reason: str | UnsetType = UNSET
    state: str
    ended: bool | UnsetType = UNSET
    stopped: bool | UnsetType = UNSET
    short_id: str | UnsetType = UNSET
    already_exited: bool | UnsetType = UNSET


class RmReply(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    removed: bool
    state: str
    run_dir: str
    registry_removed: bool
    harness: str | None = None
    was_orphaned: bool = False


class ReconcileError(msgspec.Struct, frozen=True):
    name: str
    error: str


class ReconcileReport(msgspec.Struct, frozen=True):
    scanned: int = 0
    recovered: list[str] = msgspec.field(default_factory=list)
    orphaned: list[str] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)
    errors: list[ReconcileError] = msgspec.field(default_factory=list)

    def __add__(self, other: ReconcileReport) -> ReconcileReport:
        return ReconcileReport(
            self.scanned + other.scanned,
            [*self.recovered, *other.recovered],
            [*self.orphaned, *other.orphaned],
            [*self.skipped, *other.skipped],
            [*self.errors, *other.errors],
        )


class AnswerReply(msgspec.Struct, frozen=True, kw_only=True):
    """``agent.answer``: how the answer was sent (a control and its ack)."""

    name: str
    key: str
    kind: str
    answer: str
    sent_as: str
    seq: int
    ack: str
    state: str
    reason: str | UnsetType = UNSET


class EventsReply(msgspec.Struct, frozen=True):
    """``agent.events`` without ``follow``: the event lines with seq > ``after_seq``, as
    the run's log holds them (the daemon sends each line as it is; a client validates
    them with :func:`tether.wire.decode`). ``ended``: the run had ended before they were
    read (with ``more`` false, the page holds its last events, its ``exit`` too)."""

    name: str
    events: list[Any]
    last_seq: int
    more: bool
    state: str
    ended: bool | UnsetType = UNSET


class StreamEnd(msgspec.Struct, frozen=True):
    """``agent.events {follow}``'s answer once the stream ends."""

    name: str
    last_seq: int
    count: int
    state: str
    ended: bool


class DaemonInfo(ServerStatus, frozen=True, kw_only=True):
    """The server's statistics (``daemon.status``) in the reference's ``daemon`` object."""

    state: str  # serving
    uptime_secs: int


class DaemonStatus(msgspec.Struct, frozen=True):
    """``agent.status {}``: the daemon's own status, in the reference's status-v1 shape."""

    schema_version: int
    daemon: DaemonInfo
    agents: dict[str, Any]
    drives: dict[str, int]
    restarts: dict[str, int]
    channels: dict[str, int]


def decode_reply(result: Any, kind: type[R]) -> R:
    """A verb's result (as a client received it: decoded JSON) as its reply Struct.
    Raises ``msgspec.ValidationError`` when it does not fit."""
    return msgspec.convert(result, kind)
