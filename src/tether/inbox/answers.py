"""Answers to the questions agents ask through their inbox, and how they reach the agent.

A ``clarification`` (``q``) or an ``approval_request`` (``reason``) in a run's inbox is
answered once: the answer is recorded beside the question (``inbox_answers``, see
:mod:`tether.inbox.store`) and sent to the agent as a ``steer`` (a ``follow-up`` when it is
idle) whose text quotes the question and carries its key::

    [tether answer 20261201T101500-ab12cd:120] Your question: "which model?"
    Answer: the small one

:func:`answer_text` builds that text; :func:`find_answer` reads the answer back out of a
control's text (the built-in agent's ``ask`` tool waits for it). :func:`claim` records an
answer in the store (whoever sends it: the daemon's ``agent.answer``, the parent API's
``RunHandle.answer``); :func:`key_for` finds a question's key from what a caller holds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tether import jsondepth
from tether.errors import ParentError

if TYPE_CHECKING:
    from tether.inbox.store import InboxStore

QUESTION_TYPES: Final = {"clarification": "q", "approval_request": "reason"}
MAX_ANSWER_CHARS: Final = 64_000
_MARK: Final = "[tether answer {key}] "
_ANSWER: Final = "\nAnswer: "


def question_of(kind: str | None, body: dict[str, object]) -> str | None:
    """The question's text when ``body`` is a question an answer can go to."""
    field = QUESTION_TYPES.get(kind or "")
    value = body.get(field) if field else None
    return value if isinstance(value, str) else None


def decision_text(decision: str | None, text: str) -> str:
    """What an approval decision says (``approve`` / ``deny``), with any note after it."""
    if decision is None:
        return text
    verdict = "Approved." if decision == "approve" else "Denied."
    return f"{verdict} {text}".strip()


def answer_text(key: str, kind: str, question: str, answer: str) -> str:
    """The steer text that carries ``answer`` to the agent (see the module docstring)."""
    label = "Your question" if kind == "clarification" else "Your approval request"
    quoted = question if len(question) <= 2000 else question[:2000] + "…"
    return f'{_MARK.format(key=key)}{label}: "{quoted}"{_ANSWER}{answer}'


def find_answer(text: str, key: str) -> str | None:
    """The answer in a control's ``text`` when it answers question ``key``, else None."""
    if not text.startswith(_MARK.format(key=key)):
        return None
    _, found, answer = text.partition(_ANSWER)
    return answer if found else None


class AnswerRefused(ParentError, ValueError):
    """The question cannot take this answer: not found, not a question, or answered."""

    def __init__(self, message: str, *, answered: bool = False) -> None:
        super().__init__(message)
        self.answered = answered


def claim(
    store: InboxStore, key: str, run_id: str, answer: str, decision: str | None
) -> tuple[str, str]:
    """Record ``answer`` to question ``key`` of ``run_id``; returns (kind, question text).
    A question the child closed (decided by a rule or its timeout, withdrawn, given up
    by the ``ask`` tool) is refused like an answered one.

    Raises :class:`AnswerRefused`. Undo with ``store.forget_answer(key)`` if sending fails.
    """
    message = store.message(key)
    if message is None or message.run_id != run_id:
        raise AnswerRefused(f"no inbox message {key!r} in this run")
    try:
        body = jsondepth.loads(message.body or "null")
    except ValueError:
        body = None
    question = question_of(message.type, body) if isinstance(body, dict) else None
    if question is None:
        raise AnswerRefused(
            f"inbox message {key!r} is a {message.type or 'rejected line'}, not a question "
            "(clarification or approval_request)"
        )
    closed = store.closing(key, run_id)
    if closed is not None and closed.get("by") != "person":  # a person's: answered below
        by = closed.get("by") or closed.get("why") or "the child"
        raise AnswerRefused(f"question {key!r} was closed already ({by})", answered=True)
    if not store.record_answer(key, run_id, answer, decision, time.time()):
        raise AnswerRefused(f"question {key!r} is answered already", answered=True)
    return str(message.type), question


def key_for(store: InboxStore, run_id: str, message: str | Mapping[str, Any]) -> str:
    """The key of the question ``message`` names: a key itself, a mapping with
    ``msg_key``, or the message object as received (the first unanswered question of the
    run with the same type and text). Raises :class:`AnswerRefused`."""
    if isinstance(message, str):
        return message
    if isinstance(message.get("msg_key"), str):
        return str(message["msg_key"])
    kind = message.get("type")
    text = question_of(kind if isinstance(kind, str) else None, dict(message))
    for row in store.open_questions([run_id]):
        if row.type == kind and text is not None and text in (row.body or ""):
            body = jsondepth.loads(row.body or "{}")
            if question_of(row.type, body) == text:
                return row.msg_key
    raise AnswerRefused(f"no unanswered {kind or 'question'} like that in run {run_id}")


__all__ = [
    "MAX_ANSWER_CHARS",
    "QUESTION_TYPES",
    "AnswerRefused",
    "answer_text",
    "claim",
    "decision_text",
    "find_answer",
    "key_for",
    "question_of",
]
