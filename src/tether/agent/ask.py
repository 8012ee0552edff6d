"""The ``ask`` tool: put a question to the person supervising the run and wait for the answer.

``ask {question, timeout_s?}`` appends ``{"type": "clarification", "q": question}`` to the
run's inbox (``$TETHER_INBOX_PATH``) and then blocks the turn until the answer arrives or
``timeout_s`` passes (default 300 s, at most 3600). Its result says which; a question
that timed out is closed (a later answer is refused: the agent asks again if it must).

The question waits at the run's approval desk (:mod:`tether.agent.desk`): the answer
comes as an ``answer`` control naming the question's key (never injected into the
conversation), or, from a parent that does not send ``answer``, as a steer or follow-up
whose text carries the key (:mod:`tether.inbox.answers`; the child still acks and injects
that control as usual, so the agent also sees it in the conversation). Cancel and
finalize interrupt the tool like any other (asyncio cancellation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tether.agent.tools import ToolContext, ToolOutput

DEFAULT_TIMEOUT_S: Final = 300.0
MAX_TIMEOUT_S: Final = 3600.0
MAX_QUESTION_CHARS: Final = 16_000


class AskTool:
    """The tool object (see :class:`tether.agent.tools.Tool`)."""

    name = "ask"
    description = (
        "Ask the person supervising you a question and wait for the answer (use it when "
        "you cannot go on without a decision or a fact only they have). Returns the answer, "
        "or says that none came within the timeout."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 (read-only by convention)
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "the question, self-contained"},
            "timeout_s": {"type": "number", "description": "how long to wait (default 300)"},
        },
        "required": ["question"],
    }

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return "ask: 'question' must be a non-empty string", True
        if len(question) > MAX_QUESTION_CHARS:
            return f"ask: 'question' is longer than {MAX_QUESTION_CHARS} characters", True
        timeout = _timeout(arguments.get("timeout_s"))
        desk = context.desk
        if desk is None:
            return "ask: this run has no one to ask (no approval desk)", True
        try:
            key, answer = await desk.question(question, timeout)
        except LookupError as exc:
            return f"ask: {exc}", True
        except OSError as exc:
            return f"ask: cannot write to the inbox: {exc.strerror or exc}", True
        if answer is None:
            return (
                f"no answer within {timeout:g} s (question {key} is closed: an answer "
                "that comes later is refused; ask again if you still need one)",
                False,
            )
        return f"answer: {answer}", False


def _timeout(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return min(float(value), MAX_TIMEOUT_S)
    return DEFAULT_TIMEOUT_S


__all__ = ["AskTool"]
