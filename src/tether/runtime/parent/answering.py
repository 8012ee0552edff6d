"""``RunHandle.answer``: the parent API's way to answer a question in its run's inbox.

The same rules as the daemon's ``agent.answer`` (:mod:`tether.inbox.answers`): the answer
is recorded beside the question once, then sent to the child as an ``answer`` control
(wire v1's extension: it resolves the approval or question that waits for its key and is
never injected into the conversation). A child that does not know ``answer`` (Fen's)
rejects it as an unknown control: the answer then goes as today, a ``steer`` while the run
is running, else a ``follow-up``, whose text quotes the question and carries its key. A
question nothing waits for in the child (the agent wrote it to its inbox itself) gets
its answer as such a steer too; one the child closed (a rule or its timeout decided it,
it was withdrawn, the ``ask`` tool gave up) is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from tether.agent.desk import NOTHING_WAITS, WRONG_ANSWER
from tether.inbox.answers import AnswerRefused, answer_text, claim, decision_text, key_for
from tether.wire import ControlAck
from tether.wire.session import ControlKind, State


class RunHandle(Protocol):
    """What answering needs of :class:`tether.runtime.parent.spawn.RunHandle`."""

    @property
    def run_id(self) -> str: ...

    @property
    def state(self) -> State: ...

    async def send(self, kind: ControlKind | str, **fields: Any) -> ControlAck: ...


async def answer_run(
    handle: RunHandle,
    db: Path | None,
    message: str | Mapping[str, Any],
    text: str,
    decision: str | None,
    *,
    scope: str | None = None,
) -> ControlAck:
    answer = decision_text(decision, text.strip())
    if not answer:
        raise AnswerRefused("give an answer text or a decision")
    if scope not in (None, "once", "always"):
        raise AnswerRefused(f"scope is once or always, not {scope!r}")
    key, kind, question = await asyncio.to_thread(
        _claim, db, handle.run_id, message, answer, decision
    )
    try:
        fields = answer_fields(key, text, decision, scope)
        ack = await _deliver(handle, fields, answer_text(key, kind, question, answer), kind)
    except BaseException:
        await asyncio.to_thread(_forget, db, key)
        raise
    if ack.status == "rejected" and kind == "approval_request":
        await asyncio.to_thread(_forget, db, key)
        raise AnswerRefused(f"approval {key} was not answered: {ack.reason}")
    if isinstance(ack.ref, int):
        await asyncio.to_thread(_sent, db, key, ack.ref)
    return ack


async def _deliver(
    handle: RunHandle, fields: dict[str, Any], steer_text: str, kind: str
) -> ControlAck:
    """The ``answer`` control; the steer that carries the key where it cannot be."""
    ack = await handle.send(ControlKind.ANSWER, **fields)
    if ack.status != "rejected" or not by_steer(ack.reason, kind):
        return ack
    running = handle.state is State.RUNNING
    control = ControlKind.STEER if running else ControlKind.FOLLOW_UP
    return await handle.send(control, text=steer_text)


def answer_fields(key: str, text: str, decision: str | None, scope: str | None) -> dict[str, Any]:
    """The ``answer`` control's fields."""
    fields: dict[str, Any] = {"key": key}
    for name, value in (("decision", decision), ("text", text.strip()), ("scope", scope)):
        if value:
            fields[name] = value
    return fields


def by_steer(reason: object, kind: str) -> bool:
    """A rejected ``answer`` goes again as a steer: from a child that does not know the
    control, or for a question nothing waits for in the child (one the agent wrote to
    its inbox itself, an ``echo`` from a script: it reads the answer in the conversation;
    a question the child closed was refused before anything was sent)."""
    reason = reason if isinstance(reason, str) else ""
    if reason.startswith(NOTHING_WAITS):
        return True
    return not any(words in reason for words in WRONG_ANSWER)


def _claim(
    db: Path | None,
    run_id: str,
    message: str | Mapping[str, Any],
    answer: str,
    decision: str | None,
) -> tuple[str, str, str]:
    from tether.inbox.store import open_store

    with open_store(db) as store:
        key = key_for(store, run_id, message)
        kind, question = claim(store, key, run_id, answer, decision)
    return key, kind, question


def _sent(db: Path | None, key: str, seq: int) -> None:
    from tether.inbox.store import open_store

    with open_store(db) as store:
        store.set_answer_seq(key, seq)


def _forget(db: Path | None, key: str) -> None:
    from tether.inbox.store import open_store

    with open_store(db) as store:
        store.forget_answer(key)


__all__ = ["answer_fields", "answer_run", "by_steer"]
