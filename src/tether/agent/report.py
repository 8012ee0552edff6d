"""The ``report`` tool: tell the host something now, through the run's inbox.

``report {type, text}`` appends one JSON line to ``$TETHER_INBOX_PATH`` (the spec's
``RUNEX_INBOX_PATH`` works too), exactly as a shell agent would with ``echo >>``. The
host drains it into SQLite and shows it live: ``progress`` as the status line,
``clarification`` and ``approval_request`` prominently. The line carries the spec's
field for each type: progress ``text``, clarification ``q``, result_partial ``note``,
done ``summary``, approval_request ``reason``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tether.agent.tools import ToolContext, ToolOutput

FIELDS: Final = {
    "progress": "text",
    "clarification": "q",
    "result_partial": "note",
    "done": "summary",
    "approval_request": "reason",
}
MAX_TEXT_CHARS: Final = 64_000


class ReportTool:
    """The tool object (see :class:`tether.agent.tools.Tool`)."""

    name = "report"
    description = (
        "Send a message to the person supervising you without stopping: progress updates, "
        "a clarification question, a partial result, a done signal, or a request for "
        "approval. It does not wait for an answer."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 (read-only by convention)
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(FIELDS)},
            "text": {"type": "string", "description": "what to tell the supervisor"},
        },
        "required": ["type", "text"],
    }

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        from tether.inbox.writer import append_inbox, inbox_path_from_env

        kind, text = arguments.get("type"), arguments.get("text")
        if kind not in FIELDS:
            return f"report: 'type' must be one of {', '.join(FIELDS)}", True
        if not isinstance(text, str) or not text:
            return "report: 'text' must be a non-empty string", True
        if len(text) > MAX_TEXT_CHARS:
            return f"report: 'text' is longer than {MAX_TEXT_CHARS} characters", True
        path = inbox_path_from_env(context.env)
        if path is None:
            return "report: this run has no inbox (TETHER_INBOX_PATH is not set)", True
        try:
            append_inbox(path, {"type": kind, FIELDS[str(kind)]: text})
        except OSError as exc:
            return f"report: cannot write to the inbox: {exc.strerror or exc}", True
        return f"reported {kind}", False
