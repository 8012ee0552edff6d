"""pi (``pi --mode rpc``): its JSON-lines RPC translated to the wire, sans-IO.

Theory of operation: pi reads one JSON command per line on stdin and writes responses
(``{"type": "response", "id", "command", "success", "error"?}``) and events on stdout.
One pi *run* goes from ``agent_start`` to ``agent_end`` and spans several pi "turns"
(one model call plus its tools each); a tether turn is one or more pi runs.

Controls, all native (:class:`PiTranslator`):

- the opening message: ``prompt {message}``;
- steer: ``prompt {message, streamingBehavior: "steer"}``; pi delivers it after the
  current tool calls, before its next model call. Sent as a ``prompt`` (not ``steer``) so
  it is never lost: while pi runs it is queued, and if pi's run has just ended it starts
  a new one (pi keeps a bare ``steer`` sent to an idle agent queued until the next
  prompt);
- follow-up: ``prompt {message, streamingBehavior: "followUp"}``, delivered when pi
  would stop;
- interrupt (finalize) and abort (cancel, deadline): ``abort``; pi ends its run with
  ``stopReason: "aborted"``.

A steer or follow-up shows as ``steering-injected`` / ``follow-up-injected`` when pi
takes it in (its ``message_start`` of role ``user`` with the same text), not when sent.

The tether turn ends at an ``agent_end`` when no command is still unanswered and no
sent message is still waiting in pi's queue (``queue_update``); its stop reason is the
last assistant message's (``stop``, ``length``, ``toolUse`` -> ``tool-use``, ``error``,
``aborted``) and its usage the sum of the assistant messages' ``usage``.

Events: ``message_update`` text/thinking deltas -> ``assistant-*-delta``; an assistant
``message_end`` -> whole ``assistant-text`` / ``assistant-thinking`` blocks,
``assistant-stream-end`` and ``llm-end``; ``message_start`` (assistant) ->
``llm-start``; ``tool_execution_start`` / ``_end`` -> ``tool-call`` / ``tool-result``;
``auto_retry_start``, ``compaction_start`` -> ``info``; ``extension_error`` and a failed
response -> ``error``. Extension dialogs (``extension_ui_request`` with a ``select``,
``confirm``, ``input`` or ``editor`` method: an extension asking, e.g. a permission gate
before ``bash``) go to the run's approval desk (:mod:`tether.agent.desk`: rules, else an
inbox ``approval_request`` with the dialog's options, which waits for a person) and are
answered with ``extension_ui_response``: ``confirm`` -> ``confirmed`` true / false;
``select`` -> ``value``, the option the person named, else the first that reads as yes
(approve) or no (deny), else ``cancelled``; ``input`` / ``editor`` -> ``value`` the
person's text (approve) or ``cancelled`` (deny).

pi exits on stdin EOF, even mid-prompt: the driver keeps stdin open for the whole run.

pi saves its session to a file under its HOME (``~/.pi/agent/sessions``); ``get_state``
names it (``sessionFile``), and that path is the run's session: a later run resumes it
with ``pi --session FILE`` or forks it with ``pi --fork FILE``
(:mod:`~tether.runtime.child.adapters.commands`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

from tether.agent.desk import Request, Verdict
from tether.agent.runner import EmitFn, Injection, TurnRunner
from tether.agent.usage import Usage
from tether.runtime.child.adapters.translate import (
    Action,
    Ask,
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

__all__ = ["PiRunner", "PiTranslator", "wire_stop"]

STATE_ID: Final = "tether-state"
_STOPS: Final = {"stop": "stop", "length": "length", "toolUse": "tool-use"}
_DIALOGS: Final = frozenset({"select", "confirm", "input", "editor"})
_YES: Final = ("yes", "allow", "approve", "accept", "ok", "proceed", "continue", "confirm", "y")
_NO: Final = ("no", "block", "deny", "reject", "cancel", "abort", "stop", "n")
_DELTAS: Final = {
    "text_delta": "assistant-text-delta",
    "thinking_delta": "assistant-thinking-delta",
}


def wire_stop(reason: object) -> str:
    """pi's ``stopReason`` in the wire's words."""
    text = text_of(reason)
    return _STOPS.get(text, text or "stop")


class PiTranslator:
    """pi RPC <-> wire (see the module docstring)."""

    def __init__(self) -> None:
        self.session: str | None = None
        self.started = False
        self.turn_open = False
        self.running = False
        self.final_text = ""
        self._next = 0
        self._unanswered: dict[str, str] = {}  # command id -> its type
        self._waiting: deque[Injection] = deque()  # sent, not yet seen taken in
        self._injects: dict[str, Injection] = {}  # unanswered steer/follow-up prompts
        self._queue: list[str] = []  # the texts pi's last queue_update listed
        self._expect_run = False  # an injected prompt found pi idle: a new run follows
        self._usage = Usage()
        self._stop = "stop"
        self._error: str | None = None
        self._model: dict[str, str] = {}
        self._dialogs: dict[str, tuple[str, list[str]]] = {}  # id -> (method, options)

    # -- commands -----------------------------------------------------------------------

    def handshake(self) -> list[Action]:
        """Ask pi its state (its session id); :class:`Started` follows the response."""
        return [Send({"id": STATE_ID, "type": "get_state"})]

    def start_turn(self, opening: Injection) -> list[Action]:
        """A new tether turn opened by ``opening`` (already announced by the driver)."""
        self.turn_open, self._expect_run = True, True
        self._usage, self._stop, self._error = Usage(), "stop", None
        return [self._command("prompt", message=opening.text)]

    def inject(self, item: Injection) -> list[Action]:
        """A steer or follow-up taken from the presenter during the turn."""
        behavior = "steer" if item.kind == "steering" else "followUp"
        self._waiting.append(item)
        send = self._command("prompt", message=item.text, streamingBehavior=behavior)
        self._injects[send.message["id"]] = item
        return [send]

    def interrupt(self) -> list[Action]:
        return [self._command("abort")]

    def _command(self, kind: str, **fields: Any) -> Send:
        self._next += 1
        ident = f"tether-{self._next}"
        self._unanswered[ident] = kind
        return Send({"id": ident, "type": kind, **fields})

    # -- pi's output --------------------------------------------------------------------

    def receive(self, message: object) -> list[Action]:
        """One line from pi's stdout (a dict, or anything else the splitter gave)."""
        msg = mapping(message)
        kind = text_of(msg.get("type"))
        handler = _HANDLERS.get(kind)
        return handler(self, msg) if handler is not None else []

    def _response(self, msg: Any) -> list[Action]:
        ident = text_of(msg.get("id"))
        sent = self._unanswered.pop(ident, "")
        item = self._injects.pop(ident, None)
        out: list[Action] = []
        if item is not None and msg.get("success") is not False and not self.running:
            # not queued (pi was idle when it read it): it starts a new pi run
            self._expect_run = item in self._waiting and item.text not in self._queue
        if ident == STATE_ID and not self.started:
            self.started = True
            # its session file is what `pi --session FILE` resumes (and `--fork FILE` forks)
            data = field(msg, "data")
            found = text_of(field(data, "sessionFile")) or text_of(field(data, "sessionId"))
            self.session = found or None
            return [Started(self.session)]
        if msg.get("success") is False:
            error = text_of(msg.get("error")) or "(no reason given)"
            command = sent or text_of(msg.get("command")) or "command"
            out.append(Show({"type": "error", "error": f"pi refused {command}: {error}"}))
            if sent == "prompt" and item is None and self.turn_open and not self.running:
                self._stop, self._error = "error", f"pi refused the prompt: {error}"
                self._expect_run = False
        return out + self._maybe_end()

    def _agent_start(self, msg: Any) -> list[Action]:
        self.running, self._expect_run = True, False
        return []

    def _agent_end(self, msg: Any) -> list[Action]:
        self.running = False
        return self._maybe_end()

    def _maybe_end(self) -> list[Action]:
        if not self.turn_open or self.running or self._unanswered or self._expect_run:
            return []
        self.turn_open = False
        out: list[Action] = []
        if self._waiting:
            refs = ", ".join(str(i.ref) for i in self._waiting)
            summary = f"pi did not take in queued message(s) {refs} before its run ended"
            out.append(Show({"type": "info", "summary": summary}))
            self._waiting.clear()
        return [*out, Ended(self._stop, self._usage, self._error)]

    def _queue_update(self, msg: Any) -> list[Action]:
        lists = (msg.get("steering"), msg.get("followUp"))
        self._queue = [t for v in lists if isinstance(v, list) for t in v if isinstance(t, str)]
        return []

    def _message_start(self, msg: Any) -> list[Action]:
        message = mapping(msg.get("message"))
        role = message.get("role")
        if role == "assistant":
            self._model = {
                k: v for k in ("provider", "model") if isinstance(v := message.get(k), str)
            }
            return [Show({"type": "llm-start", **self._model})]
        if role == "user":
            return self._taken_in(_plain_text(message.get("content")))
        return []

    def _taken_in(self, text: str) -> list[Action]:
        for item in self._waiting:
            if item.text == text:
                self._waiting.remove(item)
                return [Show(item.event())]
        return []

    def _message_update(self, msg: Any) -> list[Action]:
        event = mapping(msg.get("assistantMessageEvent"))
        wire = _DELTAS.get(text_of(event.get("type")))
        if wire is None:
            return []
        delta = text_of(event.get("delta"))
        index = event.get("contentIndex")
        out: dict[str, Any] = {"type": wire, "delta": delta}
        if isinstance(index, int) and not isinstance(index, bool):
            out["content-index"] = index
        return [Show(out)] if delta else []

    def _message_end(self, msg: Any) -> list[Action]:
        message = mapping(msg.get("message"))
        if message.get("role") != "assistant":
            return []
        blocks = [mapping(b) for b in message.get("content") or [] if isinstance(b, dict)]
        final = not any(b.get("type") == "toolCall" for b in blocks)
        out: list[Action] = []
        for index, block in enumerate(blocks):
            kind = block.get("type")
            text = text_of(block.get(kind)) if kind in ("text", "thinking") else ""
            if text:
                wire = "assistant-text" if kind == "text" else "assistant-thinking"
                out.append(
                    Show({"type": wire, "final?": final, "content-index": index, "text": text})
                )
        text = "".join(text_of(b.get("text")) for b in blocks if b.get("type") == "text")
        if text:
            self.final_text = text
        usage = _usage(message.get("usage"))
        self._usage += usage
        self._stop = wire_stop(message.get("stopReason"))
        stop_end = {"type": "llm-end", "stop-reason": self._stop, "usage": usage.to_wire()}
        out += [Show({"type": "assistant-stream-end", "final?": final}), Show(stop_end)]
        problem = text_of(message.get("errorMessage"))
        if self._stop == "error":
            self._error = problem or "pi reported an error"
            out.append(Show({"type": "error", "error": self._error, "source": "provider"}))
        return out

    def _tool_start(self, msg: Any) -> list[Action]:
        event: dict[str, Any] = {"type": "tool-call", "name": text_of(msg.get("toolName"))}
        if isinstance(ident := msg.get("toolCallId"), str):
            event["id"] = ident
        if "args" in msg:
            event["arguments"] = msg["args"]
        return [Show(event)]

    def _tool_end(self, msg: Any) -> list[Action]:
        result = mapping(msg.get("result"))
        event: dict[str, Any] = {
            "type": "tool-result",
            "name": text_of(msg.get("toolName")),
            "is-error?": msg.get("isError") is True,
            "result": {"content": _plain_text(result.get("content"))},
        }
        if isinstance(ident := msg.get("toolCallId"), str):
            event["id"] = event["tool-call-id"] = ident
        return [Show(event)]

    def _note(self, msg: Any) -> list[Action]:
        kind = text_of(msg.get("type"))
        detail = text_of(msg.get("errorMessage")) or text_of(msg.get("reason"))
        return [
            Show({"type": "info", "summary": f"pi: {kind}" + (f": {detail}" if detail else "")})
        ]

    def _extension_error(self, msg: Any) -> list[Action]:
        error = text_of(msg.get("error")) or "an extension failed"
        return [Show({"type": "error", "error": f"pi extension: {error}", "source": "agent"})]

    def _ui_request(self, msg: Any) -> list[Action]:
        method = text_of(msg.get("method"))
        ident = msg.get("id")
        if method not in _DIALOGS or not isinstance(ident, str):
            return []
        options = msg.get("options")
        choices = (
            [o for o in options if isinstance(o, str)][:64] if isinstance(options, list) else []
        )
        self._dialogs[ident] = (method, choices)
        title = text_of(msg.get("title")) or text_of(msg.get("message")) or method
        fields = ("title", "message", "options", "placeholder", "prefill")
        arguments = {k: msg[k] for k in fields if k in msg}
        request = Request("pi", "pi", method, arguments, summary=title, choices=tuple(choices))
        return [Ask(request, ident)]

    def answered(self, token: object, verdict: Verdict) -> list[Action]:
        """The ``extension_ui_response`` to dialog ``token``."""
        dialog = self._dialogs.pop(str(token), None)
        if dialog is None:
            return []
        method, options = dialog
        answer: dict[str, Any] = {"type": "extension_ui_response", "id": str(token)}
        if verdict.by == "withdrawn":
            answer["cancelled"] = True
        elif method == "confirm":
            answer["confirmed"] = verdict.approved
        elif method == "select":
            choice = _choose(options, verdict)
            answer.update({"value": choice} if choice is not None else {"cancelled": True})
        elif verdict.approved:
            answer["value"] = verdict.text
        else:
            answer["cancelled"] = True
        return [Send(answer)]


def _choose(options: list[str], verdict: Verdict) -> str | None:
    """The option a verdict picks: the one the person named, else the first that reads as
    yes (approve) or no (deny)."""
    named = verdict.text.strip().lower()
    for option in options:
        if named and option.strip().lower() == named:
            return option
    words = _YES if verdict.approved else _NO
    for option in options:
        first = option.strip().lower().split(" ", 1)[0].strip(",.!:")
        if first in words:
            return option
    return None


def _plain_text(content: object) -> str:
    """A message's text: a string, or the ``text`` of its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(text_of(field(p, "text")) for p in content if field(p, "type") == "text")


def _usage(value: object) -> Usage:
    usage = mapping(value)
    return Usage(
        count(usage.get("input")),
        count(usage.get("output")),
        count(usage.get("cacheRead")),
        count(usage.get("cacheWrite")),
    )


_HANDLERS: Final = {
    "response": PiTranslator._response,
    "agent_start": PiTranslator._agent_start,
    "agent_end": PiTranslator._agent_end,
    "queue_update": PiTranslator._queue_update,
    "message_start": PiTranslator._message_start,
    "message_update": PiTranslator._message_update,
    "message_end": PiTranslator._message_end,
    "tool_execution_start": PiTranslator._tool_start,
    "tool_execution_end": PiTranslator._tool_end,
    "auto_retry_start": PiTranslator._note,
    "compaction_start": PiTranslator._note,
    "extension_error": PiTranslator._extension_error,
    "extension_ui_request": PiTranslator._ui_request,
}


class PiRunner:
    """``--agent pi``: pi's RPC mode through :class:`PiTranslator` (built lazily)."""

    @staticmethod
    def for_agent(options: AdapterOptions, emit: EmitFn) -> TurnRunner:
        from tether.runtime.child.adapters.driver import Traits, TranslatingRunner

        traits = Traits("pi", steer=True, follow_up=True)
        return TranslatingRunner(PiTranslator(), traits, emit, options)
