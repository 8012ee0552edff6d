"""``agent.answer``: the answer to a question in an agent's inbox reaches the agent.

``agent.answer {name, key, text?, decision?: approve|deny}`` looks the question up in the
inbox store (``key`` is its ``msg_key``; it must be a ``clarification`` or an
``approval_request`` of that agent's run), records the answer beside it (once: a second
answer is ``invalid_status``), and sends it as a ``steer`` when the agent is running, a
``follow-up`` when it is idle, quoting the question (:func:`tether.inbox.answers.answer_text`).
Answers ``{name, key, kind, answer, sent_as, seq, ack, state}``.

:meth:`AnswerDesk.questions` lists the unanswered questions of some runs, for ``agent.list``,
``agent.status`` and the dashboard. SQLite work runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from tether import jsondepth
from tether.daemon.methods import RpcFailure
from tether.daemon.protocol import ErrorCode
from tether.inbox.answers import (
    MAX_ANSWER_CHARS,
    AnswerRefused,
    answer_text,
    claim,
    decision_text,
    question_of,
)
from tether.inbox.store import InboxStore, StoredMessage, open_store


class AnswerParams(msgspec.Struct, frozen=True):
    name: str
    key: str
    text: str = ""
    decision: Literal["approve", "deny"] | None = None


SendControl = Callable[[str], Awaitable[dict[str, Any]]]


class AnswerDesk:
    """Questions and answers over tether's database (``db``: None is the default one)."""

    def __init__(self, db: Path | None) -> None:
        self.db = db
        self._store: InboxStore | None = None
        self._lock = threading.Lock()  # one thread at a time on the one connection

    @contextlib.contextmanager
    def _open(self) -> Iterator[InboxStore]:
        """The one long-lived connection, for reads (questions on every list/status)."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self.db)
            yield self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    async def answer(self, run_id: str, args: AnswerParams, send: SendControl) -> dict[str, Any]:
        text = decision_text(args.decision, args.text.strip())
        if not text:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "give an answer text or a decision")
        if len(text) > MAX_ANSWER_CHARS:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"answers are at most {MAX_ANSWER_CHARS}")
        kind, question = await asyncio.to_thread(self._claim, run_id, args, text)
        try:
            result = await send(answer_text(args.key, kind, question, text))
        except BaseException:
            await asyncio.to_thread(self._release, args.key)
            raise
        await asyncio.to_thread(self._sent, args.key, int(result["seq"]))
        return {**result, "key": args.key, "kind": kind, "answer": text}

    async def questions(self, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """run_id -> its unanswered questions ``[{key, type, text, at}]``."""
        if not run_ids:
            return {}
        rows = await asyncio.to_thread(self._questions, run_ids)
        out: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            try:
                body = jsondepth.loads(row.body or "null")
            except ValueError:
                continue
            text = question_of(row.type, body) if isinstance(body, dict) else None
            if text is not None:
                item = {"key": row.msg_key, "type": row.type, "text": text, "at": row.received_at}
                out.setdefault(row.run_id, []).append(item)
        return out

    # -- in a thread ------------------------------------------------------------------

    def _claim(self, run_id: str, args: AnswerParams, text: str) -> tuple[str, str]:
        with open_store(self.db) as store:  # writes on a connection of their own, closed
            try:
                return claim(store, args.key, run_id, text, args.decision)
            except AnswerRefused as exc:
                code = ErrorCode.INVALID_STATUS if exc.answered else ErrorCode.INVALID_PARAMS
                raise RpcFailure(code, str(exc)) from None

    def _release(self, key: str) -> None:
        with open_store(self.db) as store:
            store.forget_answer(key)

    def _sent(self, key: str, seq: int) -> None:
        with open_store(self.db) as store:
            store.set_answer_seq(key, seq)

    def _questions(self, run_ids: list[str]) -> list[StoredMessage]:
        with self._open() as store:
            return store.open_questions(run_ids)


__all__ = ["AnswerDesk", "AnswerParams"]
