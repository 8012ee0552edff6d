"""The ``ask`` tool: put a question to the person supervising the run and wait for the answer.

``ask {question, timeout_s?}`` appends ``{"type": "clarification", "q": question}`` to the
run's inbox (``$TETHER_INBOX_PATH``) and then blocks the turn until the answer arrives or
``timeout_s`` passes (default 300 s, at most 3600). Its result says which.

The answer comes the way every answer does (:mod:`tether.inbox.answers`): the host records
it beside the question and sends a ``steer`` (``follow-up`` when idle) whose text carries
the question's key. The tool reads the run's control file (``$FEN_WIRE_CONTROL_PATH``)
from where it stood when the question was written and returns the first such answer; the
child still acks and injects that control as usual, so the agent also sees it in the
conversation. Cancel and finalize interrupt the tool like any other (asyncio cancellation).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from tether.agent.tools import ToolContext, ToolOutput

DEFAULT_TIMEOUT_S: Final = 300.0
MAX_TIMEOUT_S: Final = 3600.0
MAX_QUESTION_CHARS: Final = 16_000
POLL_S: Final = 0.1
_CONTROL_ENV: Final = ("FEN_WIRE_CONTROL_PATH", "TETHER_WIRE_CONTROL_PATH")


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
        from tether.inbox.writer import append_inbox, inbox_path_from_env, run_id_for_inbox

        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return "ask: 'question' must be a non-empty string", True
        if len(question) > MAX_QUESTION_CHARS:
            return f"ask: 'question' is longer than {MAX_QUESTION_CHARS} characters", True
        timeout = _timeout(arguments.get("timeout_s"))
        inbox = inbox_path_from_env(context.env)
        control = next((context.env[k] for k in _CONTROL_ENV if context.env.get(k)), None)
        if inbox is None or control is None:
            return "ask: this run has no inbox or control file to ask through", True
        start = _size(Path(control))
        try:
            offset = append_inbox(inbox, {"type": "clarification", "q": question})
        except OSError as exc:
            return f"ask: cannot write to the inbox: {exc.strerror or exc}", True
        key = f"{run_id_for_inbox(inbox)}:{offset}"
        answer = await wait_for_answer(Path(control), key, start, timeout)
        if answer is None:
            return (
                f"no answer within {timeout:g} s (question {key} stays in the inbox; "
                "an answer that comes later arrives as a steer)",
                False,
            )
        return f"answer: {answer}", False


async def wait_for_answer(control: Path, key: str, offset: int, wait_s: float) -> str | None:
    """The answer to ``key`` in controls appended after ``offset``, or None at the timeout."""
    from tether.inbox.answers import find_answer
    from tether.transports.tail import FileTail
    from tether.wire import Rejection, TooLarge, decode

    deadline = time.monotonic() + wait_s
    with FileTail(control, offset=offset) as tail:
        while True:
            read = tail.read()
            for item in read.items:
                if isinstance(item, TooLarge):
                    continue
                message = decode(item.data, "control")
                text = getattr(message, "text", None)
                if not isinstance(message, Rejection) and isinstance(text, str):
                    answer = find_answer(text, key)
                    if answer is not None:
                        return answer
            if read.more:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(POLL_S, left))


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _timeout(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return min(float(value), MAX_TIMEOUT_S)
    return DEFAULT_TIMEOUT_S


__all__ = ["AskTool", "wait_for_answer"]
