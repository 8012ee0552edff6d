"""``RunHandle.answer``: the parent API's way to answer a question in its run's inbox.

The same rules as the daemon's ``agent.answer`` (:mod:`tether.inbox.answers`): the answer
is recorded beside the question once, then sent as a ``steer`` while the run is running,
else as a ``follow-up``, with text that quotes the question and carries its key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

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
) -> ControlAck:
    answer = decision_text(decision, text.strip())
    if not answer:
        raise AnswerRefused("give an answer text or a decision")
    key, kind, question = await asyncio.to_thread(
        _claim, db, handle.run_id, message, answer, decision
    )
    running = handle.state is State.RUNNING
    control = ControlKind.STEER if running else ControlKind.FOLLOW_UP
    try:
        ack = await handle.send(control, text=answer_text(key, kind, question, answer))
    except BaseException:
        await asyncio.to_thread(_forget, db, key)
        raise
    if isinstance(ack.ref, int):
        await asyncio.to_thread(_sent, db, key, ack.ref)
    return ack


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


__all__ = ["answer_run"]
