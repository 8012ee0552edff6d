"""What waits in each wire agent's queues (``agent.queue``), and what a person is paged for.

The verbs' replies are built here too: :func:`queue_reply` (``agent.queue``),
:func:`unqueue` (``agent.unqueue``) and :func:`approvals_reply` (``agent.approvals``).

Theory of operation. Each wire agent's run gets a
:class:`~tether.runtime.parent.queue.QueueBook` (what its child accepted and has not
injected yet; a restarted daemon's book first reads back the events before where it
resumes, so what was queued before the restart is listed too).
:class:`Queues` is the :class:`~tether.daemon.fleet.supervisor.FleetExtension` that gives
every wire agent its book (and, with ``tether daemon --notify CMD``, a
:class:`Notifier`): the composition root hands it to the supervisor and the verbs.

:class:`Notifier` runs ``CMD`` (``/bin/sh -c CMD``) each time an agent starts waiting on
a person (an ``approval_request`` or a ``clarification`` reaches its inbox), the request
as JSON on its stdin (``{name, run_id, key, type, text, tool?, kind?, summary?}``); its
output is discarded, at most :data:`NOTIFY_AT_ONCE` run at once (more are dropped and
counted), each is killed after :data:`NOTIFY_TIMEOUT_S`. The text is cut as a listed
question's is (4 KiB, saying where it is whole), the other fields to 256 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import TYPE_CHECKING, Any, Final

import msgspec

from tether.daemon.fleet.answers import FIELD_BYTES, QUESTION_BYTES, shown
from tether.daemon.fleet.assembly import FleetExtension
from tether.daemon.fleet.replies import (
    Approval,
    ApprovalsReply,
    ControlReply,
    QueuedItem,
    QueueReply,
)
from tether.daemon.fleet.wire_agent import send_control
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.queue import QueueBook
from tether.wire.session import ControlKind
from tether.wire.text import cut_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tether.daemon.fleet.wire_agent import WireAgent

__all__ = [
    "Notifier",
    "Queues",
    "approvals_reply",
    "queue_reply",
    "unqueue",
]

NOTIFY_AT_ONCE: Final = 8
NOTIFY_TIMEOUT_S: Final = 30.0


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
        if agent.handle is not None and agent.handle.event_offset > 0:  # re-adopted
            book.replay(agent.run.events, agent.handle.event_offset)
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
        key = message.get("msg_key")
        text = message.get("reason") or message.get("q")
        request = {
            "name": agent.name,
            "run_id": agent.run_id,
            "key": key,
            "type": message.get("type"),
            # the agent wrote these: a page is as bounded as a listed question
            "text": shown(text, QUESTION_BYTES, str(key)) if isinstance(text, str) else None,
        }
        for field in ("agent", "tool", "kind", "summary"):
            if isinstance(message.get(field), str):
                request[field] = cut_text(message[field], FIELD_BYTES)[0]
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
    return ApprovalsReply.capped(rows, [], 0)


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
