"""``agent.answer``: the answer to a question in an agent's inbox reaches the agent.

``agent.answer {name, key, text?, decision?: approve|deny, scope?: once|always}`` looks
the question up in the inbox store (``key`` is its ``msg_key``; it must be a
``clarification`` or an ``approval_request`` of that agent's run), records the answer
beside it (once: a second answer is ``invalid_status``), and sends it as an ``answer``
control (wire v1's extension: it reaches what waits for the key, never the
conversation); a child that does not know it, or a question nothing waits for in the
child (the agent wrote it to its inbox itself), gets it as a ``steer`` when the agent is
running, a ``follow-up`` when it is idle, quoting the question
(:func:`tether.inbox.answers.answer_text`). A question the child closed (a rule or its
timeout decided it, it was withdrawn) is ``invalid_status``. Answers ``{name, key, kind,
answer, sent_as, seq, ack, state}``.

:meth:`AnswerDesk.questions` lists the unanswered questions of some runs, for ``agent.list``,
``agent.status`` and the dashboard. SQLite work runs in a thread. What it read is kept per
run under a *stamp*: the caller's inbox version for that run (bumped after every drain of
its inbox into the store) and this desk's own count of answers recorded or released for
it. While both are unchanged the store cannot hold other open questions for the run, so
:meth:`AnswerDesk.cached` answers from memory: a status or a list of 1,000 agents costs no
SQLite read and no thread hop once each run was read once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from tether import jsondepth
from tether.daemon.fleet.replies import AnswerReply, ControlReply
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.inbox.answers import (
    MAX_ANSWER_CHARS,
    AnswerRefused,
    answer_text,
    claim,
    decision_text,
    question_of,
)
from tether.inbox.store import InboxStore, StoredMessage, open_store
from tether.runtime.parent.answering import answer_fields
from tether.wire.text import ELLIPSIS, cut_text


class AnswerParams(msgspec.Struct, frozen=True):
    name: str
    key: str
    text: str = ""
    decision: Literal["approve", "deny"] | None = None
    scope: Literal["once", "always"] | None = None


# (the answer control's fields, the steer text, the question's kind) -> (sent as, reply)
SendControl = Callable[[dict[str, Any], str, str], Awaitable[tuple[str, ControlReply]]]
Questions = list[dict[str, Any]]
READ_CHUNK = 500  # run ids per SQLite query (far below its bound-parameter limit)
# What a list shows of each question, which the agent wrote: one agent's flood of long
# questions must not make every agent.list too large to answer (the store keeps them whole).
QUESTION_BYTES = 4096
FIELD_BYTES = 256  # an approval request's agent, tool, kind, summary (the desk's: 200)


class AnswerDesk:
    """Questions and answers over tether's database (``db``: None is the default one)."""

    def __init__(self, db: Path | None) -> None:
        self.db = db
        self._store: InboxStore | None = None
        self._lock = threading.Lock()  # one thread at a time on the one connection
        self._cache: dict[str, tuple[tuple[int, int], Questions]] = {}
        self._answers: dict[str, int] = {}  # run_id -> answers recorded/released here

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

    async def answer(self, run_id: str, args: AnswerParams, send: SendControl) -> AnswerReply:
        text = decision_text(args.decision, args.text.strip())
        if not text:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, "give an answer text or a decision")
        if len(text) > MAX_ANSWER_CHARS:
            raise RpcFailure(ErrorCode.INVALID_PARAMS, f"answers are at most {MAX_ANSWER_CHARS}")
        try:
            kind, question = await asyncio.to_thread(self._claim, run_id, args, text)
        finally:
            self._changed(run_id)
        fields = answer_fields(args.key, args.text, args.decision, args.scope)
        try:
            sent_as, result = await send(fields, answer_text(args.key, kind, question, text), kind)
            if result.ack == "rejected" and kind == "approval_request":
                why = f"approval {args.key} was not answered: {result.reason}"
                raise RpcFailure(ErrorCode.INVALID_STATUS, why)
        except BaseException:
            try:
                await asyncio.to_thread(self._release, args.key)
            finally:
                self._changed(run_id)
            raise
        await asyncio.to_thread(self._sent, args.key, result.seq)
        return AnswerReply(
            name=result.name,
            key=args.key,
            kind=kind,
            answer=text,
            sent_as=sent_as,
            seq=result.seq,
            ack=result.ack,
            reason=result.reason,
            state=result.state,
        )

    def cached(self, versions: Mapping[str, int]) -> tuple[dict[str, Questions], list[str]]:
        """What memory holds for ``versions`` (run_id -> its inbox version), and the run ids
        that must be read (:meth:`questions`). The lists returned are shared: do not change
        them."""
        found: dict[str, Questions] = {}
        missing: list[str] = []
        cache, answers = self._cache, self._answers
        for run_id, version in versions.items():
            hit = cache.get(run_id)
            if hit is not None and hit[0] == (version, answers.get(run_id, 0)):
                found[run_id] = hit[1]
            else:
                missing.append(run_id)
        return found, missing

    def cached_one(self, run_id: str, version: int) -> Questions | None:
        """:meth:`cached` for one run: its questions, or None when they must be read."""
        hit = self._cache.get(run_id)
        if hit is not None and hit[0] == (version, self._answers.get(run_id, 0)):
            return hit[1]
        return None

    async def questions(self, versions: Mapping[str, int]) -> dict[str, Questions]:
        """run_id -> its unanswered questions ``[{key, type, text, at}]``, for the runs of
        ``versions`` (run_id -> its inbox version); read from the store when not cached."""
        found, missing = self.cached(versions)
        if not missing:
            return found
        stamps = {run_id: (versions[run_id], self._answers.get(run_id, 0)) for run_id in missing}
        read = self._parse(await asyncio.to_thread(self._questions, missing))
        for run_id, stamp in stamps.items():  # the stamps taken before the read
            found[run_id] = self._cache_put(run_id, stamp, read.get(run_id, []))
        return found

    def forget(self, run_id: str) -> None:
        """Drop what is kept for ``run_id`` (its agent was removed)."""
        self._cache.pop(run_id, None)
        self._answers.pop(run_id, None)

    def _changed(self, run_id: str) -> None:
        self._answers[run_id] = self._answers.get(run_id, 0) + 1

    def _cache_put(self, run_id: str, stamp: tuple[int, int], found: Questions) -> Questions:
        current = self._cache.get(run_id)
        if current is None or current[0] <= stamp:  # never replace a newer read
            self._cache[run_id] = (stamp, found)
        return found

    @staticmethod
    def _parse(rows: list[StoredMessage]) -> dict[str, Questions]:
        out: dict[str, Questions] = {}
        for row in rows:
            try:
                body = jsondepth.loads(row.body or "null")
            except ValueError:
                continue
            text = question_of(row.type, body) if isinstance(body, dict) else None
            if text is not None:
                text = shown(text, QUESTION_BYTES, row.msg_key)
                item = {"key": row.msg_key, "type": row.type, "text": text, "at": row.received_at}
                item.update(_approval_fields(body))
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
        rows: list[StoredMessage] = []
        with self._open() as store:
            for start in range(0, len(run_ids), READ_CHUNK):
                rows += store.open_questions(run_ids[start : start + READ_CHUNK])
        return rows


def _approval_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """What an approval request says beside its reason (the desk's fields, as strings,
    each cut to FIELD_BYTES: the agent wrote them)."""
    fields = ("agent", "tool", "kind", "summary")
    return {
        name: cut_text(body[name], FIELD_BYTES)[0]
        for name in fields
        if isinstance(body.get(name), str)
    }


def shown(text: str, limit: int, key: str) -> str:
    """``text`` cut to ``limit`` bytes, saying where the whole of it is."""
    cut, changed = cut_text(text, limit)
    if not changed:
        return text
    run = key.rpartition(":")[0]
    return f"{cut}{ELLIPSIS} [cut: {len(text)} characters; tether inbox {run} shows it whole]"


__all__ = ["FIELD_BYTES", "QUESTION_BYTES", "AnswerDesk", "AnswerParams", "shown"]
