"""The parent API's approvals: the requests a run's agent waits on, as they come, and the
calls that were denied.

Theory of operation. :class:`ApprovalFeed` is an :class:`~tether.runtime.parent.observer.
Observer` every local run handle has: it reads the run's inbox messages (the child's
approval desk writes an ``approval_request`` for each call a person must decide, and an
``approval_decision`` for every decision, see :mod:`tether.agent.desk`), queues each
request as an :class:`Approval` until :meth:`LocalRunHandle.approvals` hands it out (one
decided meanwhile, by a timeout or elsewhere, is skipped), and keeps every denial for the
run's result (:class:`Denial`: which call, by whom: the person, a rule, the timeout, no
one to ask, withdrawn). ``Approval.approve()`` / ``deny()`` answer through
``RunHandle.answer`` (recorded once in SQLite, then the ``answer`` control).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

from tether.runtime.parent.observer import Observer
from tether.runtime.parent.outcome import Denial

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tether.wire import ControlAck

__all__ = ["MAX_DENIALS", "Approval", "ApprovalFeed", "Denial"]

MAX_DENIALS: Final = 1000  # kept for the result (the inbox and SQLite keep every one)
MAX_WAITING: Final = 10_000  # requests queued for a reader that does not read


class _Answers(Protocol):
    async def answer(
        self,
        message: str | Mapping[str, Any],
        text: str = "",
        *,
        decision: str | None = None,
        scope: str | None = None,
    ) -> ControlAck: ...


class Approval:
    """One call an agent waits on a person for; answer it with :meth:`approve` or
    :meth:`deny` (once: a second answer raises ``AnswerRefused``)."""

    def __init__(self, handle: _Answers, message: Mapping[str, Any]) -> None:
        self._handle = handle
        self.message = dict(message)  # the inbox's approval_request, as written
        self.key: str = str(message.get("msg_key"))
        self.agent: str = _text(message.get("agent"))
        self.tool: str = _text(message.get("tool"))
        self.kind: str = _text(message.get("kind"))
        self.summary: str = _text(message.get("summary")) or _text(message.get("reason"))
        self.input: Any = message.get("input")
        choices = message.get("choices")
        self.choices: list[Any] = list(choices) if isinstance(choices, list) else []

    def __repr__(self) -> str:
        return f"Approval({self.key!r}, {self.agent!r} {self.tool!r}: {self.summary!r})"

    async def approve(self, text: str = "", *, always: bool = False) -> ControlAck:
        """Let the call run (``always``: and calls of its kind for the rest of the run)."""
        scope = "always" if always else None
        return await self._handle.answer(self.key, text, decision="approve", scope=scope)

    async def deny(self, text: str = "") -> ControlAck:
        """Keep the call from running; ``text`` tells the agent why (where it can hear)."""
        return await self._handle.answer(self.key, text, decision="deny")


class ApprovalFeed(Observer):
    """The run's approval requests and denials (see the module docstring)."""

    def __init__(self, handle: _Answers) -> None:
        self._handle = handle
        self._waiting: deque[Approval] = deque()
        self._decided: set[str] = set()
        self._changed = asyncio.Event()
        self._ended = False
        self.denied: list[Denial] = []

    def on_inbox(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            kind = message.get("type")
            if kind == "approval_request" and isinstance(message.get("msg_key"), str):
                if len(self._waiting) < MAX_WAITING:
                    self._waiting.append(Approval(self._handle, message))
            elif kind == "approval_decision":
                self._decision(message)
        self._changed.set()

    def _decision(self, message: Mapping[str, Any]) -> None:
        key = message.get("key")
        if isinstance(key, str):
            self._decided.add(key)
        if message.get("decision") == "deny" and len(self.denied) < MAX_DENIALS:
            rule = message.get("rule")
            self.denied.append(
                Denial(
                    _text(message.get("tool")),
                    _text(message.get("summary")),
                    _text(message.get("by")),
                    key if isinstance(key, str) else None,
                    rule if isinstance(rule, str) else None,
                    _text(message.get("text")),
                )
            )

    async def on_end(self, result: Any) -> str | None:
        self._ended = True
        self._changed.set()
        return None

    async def next(self) -> Approval | None:
        """The next request still waiting; None once the run has ended."""
        while True:
            while self._waiting:
                approval = self._waiting.popleft()
                if approval.key not in self._decided:
                    return approval
            if self._ended:
                return None
            self._changed.clear()
            await self._changed.wait()


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
