"""What waits in each wire agent's queues (``agent.queue``), and what a person is paged for.

The verbs' replies are built here too: :func:`queue_reply` (``agent.queue``),
:func:`unqueue` (``agent.unqueue``) and :func:`approvals_reply` (``agent.approvals``).

Theory of operation. :class:`QueueBook` is an observer of one agent's run: a ``steer`` or
``follow-up`` the child accepted is queued until its ``steering-injected`` /
``follow-up-injected`` (naming its seq as ``ref``) says the agent took it in, an ``info``
lists it as dropped (finalize, the run's end), an ``unqueue`` withdrew it, or the run
exits. Which control a seq was is read from the run's control file (the daemon's own
lines), only when an ack names a seq the book has not read yet, so a restarted daemon
still knows the controls sent before it; items already queued then are not (the book
starts with the events it sees). Texts are kept cut to :data:`KEPT_TEXT_CHARS`.

:class:`Queues` is the :class:`~tether.daemon.fleet.supervisor.FleetExtension` that gives
every wire agent its book (and, with ``tether daemon --notify CMD``, a
:class:`Notifier`): the composition root hands it to the supervisor and the verbs.

:class:`Notifier` runs ``CMD`` (``/bin/sh -c CMD``) each time an agent starts waiting on
a person (an ``approval_request`` or a ``clarification`` reaches its inbox), the request
as JSON on its stdin (``{name, run_id, key, type, text, tool?, kind?, summary?}``); its
output is discarded, at most :data:`NOTIFY_AT_ONCE` run at once (more are dropped and
counted), each is killed after :data:`NOTIFY_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from tether.daemon.fleet.replies import (
    Approval,
    ApprovalsReply,
    ControlReply,
    QueuedItem,
    QueueReply,
)
from tether.daemon.fleet.supervisor import FleetExtension
from tether.daemon.fleet.wire_agent import send_control
from tether.runtime.parent.observer import Observer
from tether.wire import ControlAck, Exit, FollowUpInjected, Info, SteeringInjected
from tether.wire.session import ControlKind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tether.daemon.fleet.wire_agent import WireAgent
    from tether.wire import AnyEvent

__all__ = [
    "KEPT_TEXT_CHARS",
    "Notifier",
    "QueueBook",
    "Queued",
    "Queues",
    "approvals_reply",
    "queue_reply",
    "unqueue",
]

KEPT_TEXT_CHARS: Final = 4000
MAX_QUEUED: Final = 1000  # per agent (a child queues without bound; the listing does not)
MAX_SEEN: Final = 4096  # control seqs remembered per agent
NOTIFY_AT_ONCE: Final = 8
NOTIFY_TIMEOUT_S: Final = 30.0
_QUEUED_KINDS: Final = {"steer": "steer", "follow-up": "follow-up"}


class Queued(NamedTuple):
    ref: int  # the control's seq
    kind: str  # steer | follow-up
    text: str
    at: float
    truncated: bool = False


class QueueBook(Observer):
    """One agent's queued steers and follow-ups (see the module docstring)."""

    def __init__(self, control: Path) -> None:
        self._control = control
        self._offset = 0
        self._sent: OrderedDict[int, tuple[str, str, bool]] = OrderedDict()
        self.queued: OrderedDict[int, Queued] = OrderedDict()

    def items(self) -> list[Queued]:
        return list(self.queued.values())

    def withdrawn(self, ref: int) -> None:
        self.queued.pop(ref, None)

    def on_event(self, event: AnyEvent, raw: bytes) -> None:
        if isinstance(event, ControlAck):
            self._ack(event)
        elif isinstance(event, SteeringInjected | FollowUpInjected):
            if isinstance(event.ref, int):
                self.queued.pop(event.ref, None)
        elif isinstance(event, Info) and isinstance(event.refs, list):
            for ref in event.refs:
                self.queued.pop(ref, None)
        elif isinstance(event, Exit):
            self.queued.clear()

    def _ack(self, ack: ControlAck) -> None:
        if not isinstance(ack.ref, int):
            return
        if ack.ref not in self._sent:
            self._read_controls()
        sent = self._sent.pop(ack.ref, None)
        if sent is None or ack.status != "accepted" or len(self.queued) >= MAX_QUEUED:
            return
        kind, text, truncated = sent
        self.queued[ack.ref] = Queued(ack.ref, kind, text, time.time(), truncated)

    def _read_controls(self) -> None:
        """The control file's new lines: each steer and follow-up, by seq."""
        from tether.transports.tail import FileTail, TailStatus
        from tether.wire import Rejection, TooLarge, decode

        with FileTail(self._control, offset=self._offset) as tail:
            while True:
                read = tail.read()
                for item in read.items:
                    if isinstance(item, TooLarge):
                        continue
                    message = decode(item.data, "control")
                    if isinstance(message, Rejection):
                        continue
                    kind = _QUEUED_KINDS.get(str(type(message).__struct_config__.tag))
                    text = getattr(message, "text", None)
                    if kind is not None and isinstance(text, str):
                        cut = text[:KEPT_TEXT_CHARS]
                        self._sent[message.seq] = (kind, cut, len(text) > KEPT_TEXT_CHARS)
                        while len(self._sent) > MAX_SEEN:
                            self._sent.popitem(last=False)
                if read.status is not TailStatus.OK or not read.more:
                    break
            self._offset = tail.offset


class Notifier(Observer):
    """Runs ``command`` when the agent starts waiting on a person (module docstring)."""

    def __init__(self, queues: Queues, agent: WireAgent) -> None:
        self._queues = queues
        self._agent = agent

    def on_inbox(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            if message.get("type") in ("approval_request", "clarification"):
                self._queues.page(self._agent, message)


class Queues(FleetExtension):
    """Every wire agent's :class:`QueueBook`, and ``--notify`` (module docstring)."""

    def __init__(self, notify: str | None = None) -> None:
        self.notify = notify
        self.books: dict[str, QueueBook] = {}
        self.running: set[asyncio.Task[None]] = set()
        self.dropped = 0  # pages not sent: too many at once

    def observers(self, agent: WireAgent) -> list[Observer]:
        book = self.books[agent.name] = QueueBook(agent.run.control)
        found: list[Observer] = [book]
        if self.notify:
            found.append(Notifier(self, agent))
        return found

    def book(self, name: str) -> QueueBook | None:
        return self.books.get(name)

    def forget(self, name: str) -> None:
        self.books.pop(name, None)

    def page(self, agent: WireAgent, message: dict[str, Any]) -> None:
        if not self.notify:
            return
        if len(self.running) >= NOTIFY_AT_ONCE:
            self.dropped += 1
            return
        request = {
            "name": agent.name,
            "run_id": agent.run_id,
            "key": message.get("msg_key"),
            "type": message.get("type"),
            "text": message.get("reason") or message.get("q"),
        }
        for field in ("agent", "tool", "kind", "summary"):
            if isinstance(message.get(field), str):
                request[field] = message[field]
        task = asyncio.get_running_loop().create_task(_run(self.notify, request))
        self.running.add(task)
        task.add_done_callback(self.running.discard)


# How a tether child rejects an ``unqueue`` (any other rejection: it does not know it)
_UNQUEUE_REASONS: Final = ("control ", "no queued ", "run is ", "child is not ready")


def queue_reply(agent: WireAgent, book: QueueBook | None) -> QueueReply:
    """``agent.queue``: what waits in the agent's queues, oldest first."""
    items = [] if book is None or agent.ended else book.items()
    queue = [QueuedItem(i.ref, i.kind, i.text, i.at, i.truncated or msgspec.UNSET) for i in items]
    return QueueReply(agent.name, queue, agent.state)


async def unqueue(agent: WireAgent, book: QueueBook | None, ref: int) -> ControlReply:
    """``agent.unqueue``: the child's ack of the ``unqueue`` control (a child that does
    not know it: its queue cannot be edited, said in the reason)."""
    reply = await send_control(agent, ControlKind.UNQUEUE, {"ref": ref})
    if reply.ack == "applied" and book is not None:
        book.withdrawn(ref)
    reason = reply.reason
    if reply.ack == "rejected" and not (
        isinstance(reason, str) and reason.startswith(_UNQUEUE_REASONS)
    ):
        why = f"this child's queue cannot be edited ({reason})"
        return msgspec.structs.replace(reply, reason=why)
    return reply


def approvals_reply(
    agents: Mapping[str, WireAgent], found: Mapping[str, list[dict[str, Any]]]
) -> ApprovalsReply:
    """``agent.approvals``: the approval requests among ``found`` (run_id -> its open
    questions) of ``agents`` (run_id -> the agent), oldest first."""
    rows = [
        Approval(
            name=agents[run_id].name,
            key=q["key"],
            since=q["at"],
            reason=q["text"],
            agent=q.get("agent"),
            tool=q.get("tool"),
            kind=q.get("kind"),
            summary=q.get("summary"),
        )
        for run_id, questions in found.items()
        if run_id in agents
        for q in questions
        if q["type"] == "approval_request"
    ]
    return ApprovalsReply(sorted(rows, key=lambda row: (row.since, row.key)))


async def _run(command: str, request: dict[str, Any]) -> None:
    """``/bin/sh -c command`` with the request on stdin; bounded in time, output dropped."""
    with contextlib.suppress(OSError, ValueError):
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TETHER_NOTIFY_KEY": str(request.get("key"))},
        )
        try:
            async with asyncio.timeout(NOTIFY_TIMEOUT_S):
                await proc.communicate(json.dumps(request).encode() + b"\n")
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
