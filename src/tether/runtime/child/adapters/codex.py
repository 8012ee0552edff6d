"""Codex (``codex app-server``): its JSON-RPC over stdio translated to the wire, sans-IO.

Theory of operation (:class:`CodexTranslator`). The hand-shake is ``initialize``, the
``initialized`` notification and ``thread/start {cwd, model?}`` (the run's model, when
one is given), all three at once (:func:`~.commands.codex_handshake`: ``tether child``
writes them as soon as Codex starts); the thread id is the CLI's session id. A run that
resumes a thread (``tether child --resume THREAD``) sends ``thread/resume {threadId}``
instead of ``thread/start``, one that forks it ``thread/fork {threadId}`` (a new thread
with the same history; Codex reads both from its rollout under ``CODEX_HOME``).
A tether turn is one or more Codex turns:

- the opening message: ``turn/start {threadId, input: [{type: text, text}]}``;
- steer: ``turn/steer {threadId, expectedTurnId, input}``, native; shown as
  ``steering-injected`` when Codex accepts it. When Codex refuses it (its turn has just
  ended, whether or not its ``turn/completed`` came first), the text opens the next Codex
  turn of the same tether turn instead;
- follow-up: not a Codex request; the driver opens the next Codex turn with it when the
  current one completes;
- interrupt (finalize) and abort (cancel, deadline): ``turn/interrupt {threadId,
  turnId}``; the turn completes ``interrupted``. Codex has no way to run a turn without
  its tools, so finalize's last turn only asks for an answer without them.

Events. Codex reports one model call as items followed by ``thread/tokenUsage/updated``
(whose ``last`` is that call's usage), so a call is shown as ``llm-start`` at its first
item, deltas as they stream (``item/agentMessage/delta`` -> ``assistant-text-delta``,
``item/reasoning/summaryTextDelta`` and ``textDelta`` -> ``assistant-thinking-delta``),
its whole text and reasoning blocks (from ``item/completed``) with
``assistant-stream-end`` and ``llm-end`` at the usage update, or (``tool-use``, without
usage: Codex reports it after the tools ran) when its first tool starts. Tool items
(``commandExecution``, ``fileChange``, ``mcpToolCall``,
``dynamicToolCall``, ``webSearch``, ...) become ``tool-call`` at ``item/started`` and
``tool-result`` at ``item/completed``. ``turn/completed`` ends the Codex turn:
``completed`` -> ``stop``, ``interrupted`` -> ``aborted``, ``failed`` -> ``error`` with
its message; ``error``, ``warning`` and the like are shown as ``error`` / ``info``.

Requests from Codex: approvals go to the run's approval desk (:mod:`tether.agent.desk`:
rules, else an inbox ``approval_request`` that waits for a person) and are answered with
the verdict: ``item/commandExecution/requestApproval`` and
``item/fileChange/requestApproval`` with ``{"decision": "accept"}`` (``"acceptForSession"``
when the answer is for the rest of the run), ``"decline"``, or ``"cancel"`` when the turn
ended first; the legacy ``execCommandApproval`` / ``applyPatchApproval`` with
``approved`` / ``approved_for_session`` / ``denied`` / ``abort``;
``item/permissions/requestApproval`` grants the permissions asked for, or none. The
paths of a file change come from its ``fileChange`` item (``item/started``). Codex runs
with its own approval policy (``on-request`` unless its config or ``--agent-arg`` says
otherwise: it asks when the model wants out of its sandbox). Questions
(``item/tool/requestUserInput``, MCP elicitations) are declined; any other request gets a
JSON-RPC "method not found" error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tether.agent.desk import Request as ToolRequest
from tether.agent.desk import Verdict
from tether.agent.runner import EmitFn, Injection, TurnRunner
from tether.agent.usage import Usage
from tether.runtime.child.adapters.commands import Resume, codex_handshake
from tether.runtime.child.adapters.jsonrpc import (
    METHOD_NOT_FOUND,
    Notification,
    Outbox,
    Request,
    Response,
    classify,
    error_message,
)
from tether.runtime.child.adapters.translate import (
    Action,
    Ask,
    Broken,
    Ended,
    Send,
    Show,
    Started,
    count,
    field,
    mapping,
    text_of,
)

if TYPE_CHECKING:
    from tether.runtime.child.adapters import AdapterOptions

__all__ = ["CodexRunner", "CodexTranslator"]

_THREAD_OPENERS: Final = {
    "thread/start": "start a thread",
    "thread/resume": "resume the thread (thread/resume)",
    "thread/fork": "fork the thread (thread/fork)",
}
_STATUS_STOPS: Final = {"completed": "stop", "interrupted": "aborted", "failed": "error"}
_TEXT_ITEMS: Final = frozenset({"agentMessage", "reasoning", "plan"})
_SILENT_ITEMS: Final = frozenset({"userMessage", "hookPrompt", "contextCompaction"})
_NOTES: Final = frozenset({"warning", "configWarning", "deprecationNotice", "guardianWarning"})
# approval request -> (the tool it is for, its decisions: once, for the session, deny, abort)
_APPROVALS: Final = {
    "item/commandExecution/requestApproval": (
        "commandExecution",
        ("accept", "acceptForSession", "decline", "cancel"),
    ),
    "item/fileChange/requestApproval": (
        "fileChange",
        ("accept", "acceptForSession", "decline", "cancel"),
    ),
    "execCommandApproval": ("execCommand", ("approved", "approved_for_session", "denied", "abort")),
    "applyPatchApproval": ("applyPatch", ("approved", "approved_for_session", "denied", "abort")),
}
PERMISSIONS: Final = "item/permissions/requestApproval"
# questions tether does not put to a person (declined)
_DECLINED: Final = {
    "mcpServer/elicitation/request": {"action": "decline", "content": None},
    "item/tool/requestUserInput": {"answers": {}},
}


class _Call:
    """One model call as Codex reports it: its whole blocks until it is closed."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, str]] = []  # (wire type, text)


class CodexTranslator:
    """Codex app-server <-> wire (see the module docstring)."""

    def __init__(self, cwd: str, *, model: str | None = None, resume: Resume | None = None) -> None:
        self.cwd = cwd
        self.model = model  # the run's model: thread/start {model}
        self.resume = resume  # the thread it resumes or forks (thread/resume, thread/fork)
        self.rpc = Outbox(jsonrpc=False)
        self.thread: str | None = None
        self.turn: str | None = None  # the Codex turn in progress
        self.turn_open = False
        self.final_text = ""
        self._call: _Call | None = None
        self._usage = Usage()
        self._stop = "stop"
        self._error: str | None = None
        self._shown_error: str | None = None  # Codex sends a failed turn's error twice
        self._steers: dict[int | str, Injection] = {}
        self._held: list[Injection] = []  # steers waiting for the turn id
        self._next_opening: list[Injection] = []  # refused steers: the next Codex turn
        self._interrupt = False
        self._asked: dict[int | str, tuple[str, Any]] = {}  # request id -> (method, params)
        self._file_paths: dict[str, list[str]] = {}  # fileChange item id -> its paths

    # -- commands -----------------------------------------------------------------------

    def handshake(self) -> list[Action]:
        return [Send(m) for m in codex_handshake(self.rpc, self.cwd, self.model, self.resume)]

    def start_turn(self, opening: Injection) -> list[Action]:
        """Open a Codex turn with ``opening`` (announced by the driver)."""
        self.turn_open, self.turn, self._interrupt = True, None, False
        self._usage, self._stop, self._error = Usage(), "stop", None
        self._shown_error = None
        return [self._turn_start(opening.text)]

    def _turn_start(self, text: str) -> Send:
        params = {"threadId": self.thread, "input": [{"type": "text", "text": text}]}
        return Send(self.rpc.request("turn/start", params))

    def inject(self, item: Injection) -> list[Action]:
        """A steer during the turn (Codex has no follow-up request: see the driver)."""
        if self.turn is None:
            self._held.append(item)
            return []
        return [self._steer(item)]

    def _steer(self, item: Injection) -> Send:
        params = {
            "threadId": self.thread,
            "expectedTurnId": self.turn,
            "input": [{"type": "text", "text": item.text}],
        }
        send = Send(self.rpc.request("turn/steer", params))
        self._steers[send.message["id"]] = item
        return send

    def interrupt(self) -> list[Action]:
        self._interrupt = True
        self._next_opening.clear()
        if self.turn is None:
            return []
        params = {"threadId": self.thread, "turnId": self.turn}
        return [Send(self.rpc.request("turn/interrupt", params))]

    # -- Codex's output -------------------------------------------------------------------

    def receive(self, message: object) -> list[Action]:
        """One line from Codex's stdout."""
        got = classify(message)
        if isinstance(got, Response):
            return self._response(got, self.rpc.settle(got))
        if isinstance(got, Notification):
            return self._notification(got.method, got.params)
        if isinstance(got, Request):
            return self._request(got)
        return []

    def _response(self, got: Response, method: str | None) -> list[Action]:
        failure = error_message(got.error) if got.error is not None else None
        if method == "initialize":
            return [] if failure is None else [Broken(f"codex refused initialize: {failure}")]
        if method in _THREAD_OPENERS:
            self.thread = text_of(field(got.result, "thread", "id")) or None
            if failure is not None or self.thread is None:
                what = _THREAD_OPENERS[method]
                return [Broken(f"codex could not {what}: {failure or 'no thread id'}")]
            return [Started(self.thread)]
        if method == "turn/start":
            return self._turn_started_reply(got, failure)
        if method == "turn/steer":
            return self._steer_reply(got.id, failure)
        if failure is not None and method is not None:
            return [Show({"type": "error", "error": f"codex refused {method}: {failure}"})]
        return []

    def _turn_started_reply(self, got: Response, failure: str | None) -> list[Action]:
        if failure is not None:
            self.turn_open = False
            error = f"codex refused turn/start: {failure}"
            return [Show({"type": "error", "error": error}), Ended("error", self._usage, error)]
        return self._known_turn(text_of(field(got.result, "turn", "id")))

    def _known_turn(self, turn: str) -> list[Action]:
        if not turn or self.turn == turn:
            return []
        self.turn = turn
        if self._interrupt:
            return self.interrupt()
        held, self._held = self._held, []
        return [self._steer(item) for item in held]

    def _steer_reply(self, ident: int | str, failure: str | None) -> list[Action]:
        item = self._steers.pop(ident, None)
        if item is None:
            return []
        if failure is None:
            return [Show(item.event())]
        note = f"codex refused steer {item.ref}: {failure}"
        if self._interrupt:  # finalize or cancel: queued lines are dropped (the spec)
            return [Show({"type": "info", "summary": note})]
        # Its turn ended first (Codex may refuse before its turn/completed arrives): the
        # steer opens the next Codex turn of this tether turn, never lost.
        self._next_opening.append(item)
        if self.turn is None:
            return self._maybe_end()
        return [Show({"type": "info", "summary": f"{note}; it opens the next Codex turn"})]

    def _request(self, got: Request) -> list[Action]:
        if got.method in _DECLINED:
            what = _approval_subject(got.params) or got.method
            note = f"codex asks {got.method}: {what}; declined (tether answers approvals only)"
            answer = _DECLINED[got.method]
            return [Send(self.rpc.answer(got.id, answer)), Show({"type": "info", "summary": note})]
        if got.method not in _APPROVALS and got.method != PERMISSIONS:
            refusal = self.rpc.refuse(got.id, METHOD_NOT_FOUND, f"tether has no {got.method}")
            return [Send(refusal)]
        self._asked[got.id] = (got.method, got.params)
        return [Ask(self._ask(got.method, got.params), got.id)]

    def _ask(self, method: str, params: Mapping[str, Any]) -> ToolRequest:
        if method == PERMISSIONS:
            arguments = {"permissions": params.get("permissions"), "reason": params.get("reason")}
            choices = ("grant", "deny")
            return ToolRequest("codex", "codex", "permissions", arguments, choices=choices)
        tool, decisions = _APPROVALS[method]
        command = params.get("command")
        arguments = {k: params[k] for k in ("command", "cwd", "reason") if params.get(k)}
        paths: list[str] = []
        if tool == "fileChange":
            paths = self._file_paths.get(text_of(params.get("itemId")), [])
        elif tool == "applyPatch":
            paths = [str(p) for p in mapping(params.get("fileChanges"))]
        if paths:
            arguments["paths"] = paths
        summary = " ".join(command) if isinstance(command, list) else text_of(command)
        return ToolRequest(
            "codex",
            "codex",
            tool,
            arguments,
            summary=summary,
            paths=tuple(paths),
            choices=decisions,
        )

    def answered(self, token: Any, verdict: Verdict) -> list[Action]:
        """The answer to approval request ``token`` (its JSON-RPC id), as Codex takes it."""
        asked = self._asked.pop(token, None)
        if asked is None:
            return []
        method, params = asked
        if method == PERMISSIONS:
            granted = params.get("permissions") if verdict.approved else {}
            return [Send(self.rpc.answer(token, {"permissions": granted or {}}))]
        once, session, deny, abort = _APPROVALS[method][1]
        if verdict.approved:
            decision = session if verdict.scope == "always" else once
        else:
            decision = abort if verdict.by == "withdrawn" else deny
        return [Send(self.rpc.answer(token, {"decision": decision}))]

    # -- notifications --------------------------------------------------------------------

    def _notification(self, method: str, params: Mapping[str, Any]) -> list[Action]:
        if method in _NOTES:
            message = text_of(params.get("message")) or text_of(params.get("summary"))
            return [Show({"type": "info", "summary": f"codex {method}: {message}"})]
        handler = _NOTIFICATIONS.get(method)
        return handler(self, params) if handler is not None else []

    def _turn_started(self, params: Mapping[str, Any]) -> list[Action]:
        return self._known_turn(text_of(field(params, "turn", "id")))

    def _item_started(self, params: Mapping[str, Any]) -> list[Action]:
        item = mapping(params.get("item"))
        kind = text_of(item.get("type"))
        if kind in _SILENT_ITEMS:
            return []
        if kind in _TEXT_ITEMS:
            return self._open_call()
        if kind == "fileChange" and isinstance(ident := item.get("id"), str):
            changes = item.get("changes")
            paths = (
                [text_of(field(c, "path")) for c in changes or []]
                if isinstance(changes, list)
                else []
            )
            self._file_paths[ident] = [p for p in paths if p][:1000]
        return [*self._close_call("tool-use", None), Show(_tool_call(item))]

    def _open_call(self) -> list[Action]:
        if self._call is not None:
            return []
        self._call = _Call()
        return [Show({"type": "llm-start", "provider": "codex"})]

    def _text_delta(self, params: Mapping[str, Any]) -> list[Action]:
        delta = text_of(params.get("delta"))
        return (
            [*self._open_call(), Show({"type": "assistant-text-delta", "delta": delta})]
            if delta
            else []
        )

    def _thinking_delta(self, params: Mapping[str, Any]) -> list[Action]:
        delta = text_of(params.get("delta"))
        event = {"type": "assistant-thinking-delta", "delta": delta}
        return [*self._open_call(), Show(event)] if delta else []

    def _item_completed(self, params: Mapping[str, Any]) -> list[Action]:
        item = mapping(params.get("item"))
        kind = text_of(item.get("type"))
        if kind in _SILENT_ITEMS:
            return []
        if kind not in _TEXT_ITEMS:
            self._file_paths.pop(text_of(item.get("id")), None)
            return [Show(_tool_result(item))]
        text = text_of(item.get("text")) if kind == "agentMessage" else _reasoning_text(item)
        if kind == "plan" or not text:
            return []
        out = self._open_call()
        assert self._call is not None
        wire = "assistant-text" if kind == "agentMessage" else "assistant-thinking"
        self._call.blocks.append((wire, text))
        if kind == "agentMessage":
            self.final_text = text
        return out

    def _token_usage(self, params: Mapping[str, Any]) -> list[Action]:
        usage = _usage(field(params, "tokenUsage", "last"))
        self._usage += usage
        return self._close_call("stop", usage)

    def _close_call(self, stop: str, usage: Usage | None) -> list[Action]:
        """The open model call's blocks, ``assistant-stream-end`` and ``llm-end``.

        A call that asked for tools is closed when its first tool starts, before Codex
        reports its usage (which then counts for the turn only).
        """
        call, self._call = self._call, None
        if call is None:
            return []
        final = stop != "tool-use"
        out: list[Action] = [
            Show({"type": kind, "final?": final, "content-index": index, "text": text})
            for index, (kind, text) in enumerate(call.blocks)
        ]
        end: dict[str, Any] = {"type": "llm-end", "stop-reason": stop}
        if usage is not None:
            end["usage"] = usage.to_wire()
        out.append(Show({"type": "assistant-stream-end", "final?": final}))
        out.append(Show(end))
        return out

    def _turn_completed(self, params: Mapping[str, Any]) -> list[Action]:
        turn = mapping(params.get("turn"))
        if self.turn is not None and text_of(turn.get("id")) not in ("", self.turn):
            return []
        status = text_of(turn.get("status"))
        self._stop = _STATUS_STOPS.get(status, status or "stop")
        out = self._close_call(self._stop, None)
        if self._stop == "error":
            self._error = text_of(field(turn, "error", "message")) or "codex: the turn failed"
            if self._error != self._shown_error:
                out.append(Show({"type": "error", "error": self._error, "source": "agent"}))
        self.turn = None
        return out + self._maybe_end()

    def _maybe_end(self) -> list[Action]:
        if not self.turn_open or self.turn is not None or self._steers:
            return []
        if self._next_opening and not self._interrupt:
            item = self._next_opening.pop(0)
            return [Show(item.event()), self._turn_start(item.text)]
        self.turn_open = False
        return [Ended(self._stop, self._usage, self._error)]

    def _error_note(self, params: Mapping[str, Any]) -> list[Action]:
        message = text_of(field(params, "error", "message")) or "codex reported an error"
        if params.get("willRetry") is True:
            return [Show({"type": "info", "summary": f"codex will retry: {message}"})]
        self._shown_error = message
        return [Show({"type": "error", "error": message, "source": "agent"})]


def _approval_subject(params: Mapping[str, Any]) -> str:
    command = params.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    return text_of(command) or text_of(params.get("reason")) or text_of(params.get("message"))


def _reasoning_text(item: Mapping[str, Any]) -> str:
    parts = [*(item.get("summary") or []), *(item.get("content") or [])]
    return "\n".join(p if isinstance(p, str) else text_of(field(p, "text")) for p in parts)


def _tool_name(item: Mapping[str, Any]) -> str:
    kind = text_of(item.get("type"))
    tool = text_of(item.get("tool"))
    if kind == "mcpToolCall":
        return f"{text_of(item.get('server'))}.{tool}" if tool else kind
    return tool or {"commandExecution": "exec_command", "fileChange": "apply_patch"}.get(kind, kind)


def _tool_call(item: Mapping[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "tool-call", "name": _tool_name(item)}
    if isinstance(ident := item.get("id"), str):
        event["id"] = ident
    keys = ("command", "cwd", "arguments", "changes", "query", "path")
    arguments = {k: item[k] for k in keys if item.get(k) is not None}
    if arguments:
        event["arguments"] = arguments
    return event


def _tool_result(item: Mapping[str, Any]) -> dict[str, Any]:
    status = text_of(item.get("status"))
    exit_code = item.get("exitCode")
    failed = status in ("failed", "declined") or (isinstance(exit_code, int) and exit_code != 0)
    output = item.get("aggregatedOutput")
    # the output as content (what a display shows), the rest as details
    result: dict[str, Any] = {"content": output if isinstance(output, str) else ""}
    keys = ("exitCode", "result", "error", "contentItems")
    details = {key: item[key] for key in keys if item.get(key) is not None}
    if details:
        result["details"] = details
    event: dict[str, Any] = {
        "type": "tool-result",
        "name": _tool_name(item),
        "is-error?": failed,
        "result": result,
    }
    if isinstance(ident := item.get("id"), str):
        event["id"] = event["tool-call-id"] = ident
    duration = item.get("durationMs")
    if isinstance(duration, int) and not isinstance(duration, bool) and duration >= 0:
        event["duration-seconds"] = duration / 1000
    return event


def _usage(value: object) -> Usage:
    usage = mapping(value)
    cached = count(usage.get("cachedInputTokens"))
    total_input = count(usage.get("inputTokens"))
    return Usage(
        max(total_input - cached, 0),
        count(usage.get("outputTokens")),
        cached,
        count(usage.get("cacheWriteInputTokens")),
    )


_NOTIFICATIONS: Final = {
    "turn/started": CodexTranslator._turn_started,
    "turn/completed": CodexTranslator._turn_completed,
    "item/started": CodexTranslator._item_started,
    "item/completed": CodexTranslator._item_completed,
    "item/agentMessage/delta": CodexTranslator._text_delta,
    "item/reasoning/summaryTextDelta": CodexTranslator._thinking_delta,
    "item/reasoning/textDelta": CodexTranslator._thinking_delta,
    "thread/tokenUsage/updated": CodexTranslator._token_usage,
    "error": CodexTranslator._error_note,
}


class CodexRunner:
    """``--agent codex``: ``codex app-server`` through :class:`CodexTranslator`."""

    @staticmethod
    def for_agent(options: AdapterOptions, emit: EmitFn) -> TurnRunner:
        from tether.runtime.child.adapters.driver import Traits, TranslatingRunner

        traits = Traits("codex", steer=True, follow_up=False)
        translator = CodexTranslator(options.cwd, model=options.model, resume=options.resume)
        return TranslatingRunner(translator, traits, emit, options)
