"""The Claude Code adapter: ``claude -p`` in stream-json both ways, as a sans-IO translator.

Theory of operation
-------------------
The driver (:mod:`tether.runtime.child.adapters.driver`) starts Claude Code once (the
``initialize`` control request is the hand-shake: its answer says the CLI is up) as::

    claude -p --input-format stream-json --output-format stream-json --verbose
           --include-partial-messages --replay-user-messages
           [--permission-prompt-tool stdio] AGENT_ARGS...

and keeps its stdin open; :class:`ClaudeTranslator` turns tether's turns into its
messages and its lines into actions. Every user message written
(``{"type": "user", "message": ...}``) is echoed back by Claude Code
(``--replay-user-messages``, ``isReplay: true``) at the moment it takes it in, and every
batch of taken-in messages ends with one ``result`` line. So:

- a turn writes its opening and ends at the first ``result`` after which every message
  written has been echoed (:class:`~tether.runtime.child.adapters.translate.Ended` with that
  ``result``'s stop reason, usage summed over the turn's results);
- a steer is written as soon as the presenter queues it. Claude Code takes a message
  written mid-turn in before its next model call ("The user sent a new message while
  you were working"), or, when it was already giving its last answer, right after it,
  as one more pass of the same tether turn. ``steering-injected`` is shown when the echo
  arrives, that is when Claude Code really took it in;
- follow-ups wait for the turn's ``result`` and open the next pass (the driver);
- interrupt (finalize, cancel, the deadline) is Claude Code's ``interrupt`` control
  request; its ``result`` (``error_during_execution``) ends the turn ``aborted``;
- finalize's last turn runs in a new Claude Code resumed from the session with
  ``--tools ""``: no tools at all (:func:`final_command`, used by the driver);
- permission prompts (``can_use_tool`` control requests, asked because the adapter
  passes ``--permission-prompt-tool stdio`` unless the user chose their own prompt tool
  or ``--dangerously-skip-permissions``) go to the run's approval desk
  (:mod:`tether.agent.desk`: rules, else an inbox ``approval_request`` that waits for a
  person); the verdict is the ``control_response``: ``{"behavior": "allow",
  "updatedInput": INPUT}`` runs the tool as asked, ``{"behavior": "deny", "message":
  WHY}`` tells the model why it did not run. A ``control_cancel_request`` (Claude Code
  aborted the call) withdraws the request. Claude Code's own settings still decide what
  it asks about (``--agent-arg=--permission-mode=MODE``, ``--allowedTools=TOOLS``).

Stream events map as the built-in agent's do (:mod:`.claude_stream`). The session id
from ``system/init`` is recorded (``claude --resume ID`` continues it): a later run
resumes it with ``--resume`` (``tether child --resume ID``), or forks it with
``--fork-session`` too; both are on its command line (:mod:`.commands`).

Unless already set, the CLI's environment gets ``DISABLE_NON_ESSENTIAL_MODEL_CALLS=1``
and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no title-generation model call, no
telemetry or update checks): a supervised run makes only the calls its turns need.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from tether.agent.desk import Request, Verdict
from tether.agent.runner import Injection
from tether.agent.usage import Usage
from tether.runtime.child.adapters.claude_stream import ModelCall, tool_results, usage_of
from tether.runtime.child.adapters.commands import CLAUDE_ARGS as BASE_ARGS
from tether.runtime.child.adapters.commands import QUIET_ENV
from tether.runtime.child.adapters.commands import claude_command as command
from tether.runtime.child.adapters.translate import (
    Action,
    Ask,
    Broken,
    Ended,
    Send,
    Show,
    Started,
    Withdraw,
    mapping,
    text_of,
)

if TYPE_CHECKING:
    from tether.agent.runner import EmitFn, TurnRunner
    from tether.runtime.child.adapters import AdapterOptions

__all__ = [
    "BASE_ARGS",
    "QUIET_ENV",
    "ClaudeRunner",
    "ClaudeTranslator",
    "command",
    "final_args",
    "final_command",
]

INIT_ID: Final = "tether-initialize"
_USAGE_FIELDS: Final = {
    "input": "input",
    "output": "output",
    "cache-read": "cache_read",
    "cache-write": "cache_write",
}


def final_args(session: str | None) -> list[str]:
    """What the final turn's Claude Code adds: the session resumed, no tools."""
    resume = ["--resume", session] if session else []
    return [*resume, "--tools", ""]


# The flags that choose the session Claude Code starts from (with their value, if any).
_SESSION_FLAGS: Final = {"--resume": True, "-r": True, "--session-id": True}
_SESSION_SWITCHES: Final = frozenset({"--fork-session", "--continue", "-c"})


def final_command(argv: Sequence[str], session: str | None) -> list[str]:
    """The final turn's Claude Code: ``argv`` without the flags that chose its session
    (the run may have resumed or forked one), then :func:`final_args`: the run's own
    session resumed, no tools."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _SESSION_FLAGS:
            skip = True
        elif arg not in _SESSION_SWITCHES and arg.split("=", 1)[0] not in _SESSION_FLAGS:
            out.append(arg)
    return [*out, *final_args(session)]


def _user_line(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def _usage(raw: object) -> Usage:
    counts = usage_of(raw)
    return Usage(**{_USAGE_FIELDS[k]: v for k, v in counts.items()})


class ClaudeTranslator:
    """Claude Code's stream-json <-> wire (see the module docstring)."""

    def __init__(self) -> None:
        self.final_text = ""
        self.session: str | None = None
        self.model = "claude"
        self._pending: deque[Injection] = deque()  # written, not yet taken in
        self._open = False  # a tether turn waits for its `result`
        self._interrupted = False
        self._usage = Usage()
        self._call: ModelCall | None = None
        self._tool_names: dict[str, str] = {}
        self._requests = 0
        self._asked: dict[str, tuple[object, str]] = {}  # request_id -> (input, tool_use_id)

    # -- tether -> Claude Code ----------------------------------------------------------

    def handshake(self) -> list[Action]:
        """The ``initialize`` control request: its answer says Claude Code is up (the
        session id follows with the first ``system/init``). A restarted one starts afresh."""
        self._pending.clear()
        self._asked.clear()
        self._open = self._interrupted = False
        self._call = None
        request = {"subtype": "initialize", "hooks": None}
        return [Send({"type": "control_request", "request_id": INIT_ID, "request": request})]

    def start_turn(self, opening: Injection) -> list[Action]:
        """A turn (or a follow-up's pass of it): the driver has announced the opening."""
        self._open, self._interrupted = True, False
        self._usage = Usage()
        return self._write(opening._replace(kind="user", ref=None))

    def inject(self, item: Injection) -> list[Action]:
        return self._write(item)

    def interrupt(self) -> list[Action]:
        if not self._open or self._interrupted:
            return []
        self._interrupted = True
        self._pending.clear()  # what was not taken in yet never will be
        self._requests += 1
        request = {"type": "control_request", "request_id": f"tether-{self._requests}"}
        return [Send(request | {"request": {"subtype": "interrupt"}})]

    def _write(self, item: Injection) -> list[Action]:
        self._pending.append(item)
        return [Send(_user_line(item.text))]

    # -- Claude Code -> tether ----------------------------------------------------------

    def receive(self, message: object) -> list[Action]:
        line = mapping(message)
        kind = text_of(line.get("type"))
        if kind == "stream_event":
            return self._stream(mapping(line.get("event")))
        if kind == "user":
            return self._user(line)
        if kind == "result":
            return self._result(line)
        if kind == "system" and line.get("subtype") == "init":
            return self._init(line)
        if kind == "control_request":
            return self._control_request(line)
        if kind == "control_response":
            return self._control_response(mapping(line.get("response")))
        if kind == "control_cancel_request":
            request_id = text_of(line.get("request_id"))
            return [Withdraw(request_id)] if self._asked.pop(request_id, None) else []
        # `assistant` lines repeat what the stream events said; system/status and
        # other kinds carry nothing for the wire.
        return []

    def _init(self, line: Mapping[str, Any]) -> list[Action]:
        model = text_of(line.get("model"))
        if model:
            self.model = model[:160]
        session = text_of(line.get("session_id"))
        if not session or session == self.session:
            return []
        self.session = session
        return [Started(session)]

    def _stream(self, event: Mapping[str, Any]) -> list[Action]:
        if event.get("type") == "message_start":
            self._call = ModelCall.start(event)
            return [Show({"type": "llm-start", "provider": "claude", "model": self.model})]
        call = self._call
        if call is None:
            return []
        out: list[Action] = [Show(e) for e in call.feed(event)]
        if call.done:
            self._call = None
            if call.text:
                self.final_text = call.text
            self._tool_names.update(call.tool_names)
        return out

    def _user(self, line: Mapping[str, Any]) -> list[Action]:
        if line.get("isReplay") is True:
            return self._taken_in()
        return [Show(e) for e in tool_results(line, self._tool_names)]

    def _taken_in(self) -> list[Action]:
        """The echo of a message we wrote: it is in Claude Code's conversation now."""
        if not self._pending:
            return []
        item = self._pending.popleft()
        return [] if item.kind == "user" or item.ref is None else [Show(item.event())]

    def _result(self, line: Mapping[str, Any]) -> list[Action]:
        self._usage += _usage(line.get("usage"))
        if not self._open or (self._pending and not self._interrupted):
            return []  # Claude Code goes on with what it has not taken in yet
        self._open = False
        out: list[Action] = []
        if self._call is not None:  # a model call cut short by the interrupt
            out += [Show(e) for e in self._call.salvage()]
            self._call = None
        if self._interrupted:
            return [*out, Ended("aborted", self._usage)]
        stop, error = _stop_of(line)
        if not self.final_text and not error:
            self.final_text = text_of(line.get("result"))
        return [*out, Ended(stop, self._usage, error)]

    def _control_response(self, response: Mapping[str, Any]) -> list[Action]:
        if response.get("request_id") != INIT_ID:
            return []  # an interrupt's answer: its `result` is what counts
        if response.get("subtype") == "success":
            return [Started(None)]
        error = text_of(response.get("error")) or "no reason given"
        return [Broken(f"Claude Code refused to initialize: {error}")]

    def _control_request(self, line: Mapping[str, Any]) -> list[Action]:
        request = mapping(line.get("request"))
        request_id = text_of(line.get("request_id"))
        if not request_id:
            error = "Claude Code sent a control request without a request_id"
            return [Show({"type": "error", "error": error, "source": "adapter"})]
        if request.get("subtype") != "can_use_tool":
            error = f"tether does not answer {text_of(request.get('subtype'))!r} requests"
            refused = {"subtype": "error", "request_id": request_id, "error": error}
            return [Send({"type": "control_response", "response": refused})]
        tool = text_of(request.get("tool_name")) or "tool"
        raw = request.get("input")
        self._asked[request_id] = (raw, text_of(request.get("tool_use_id")))
        ask = Request("claude", "claude", tool, raw, choices=("allow", "deny"))
        return [Ask(ask, request_id)]

    def answered(self, token: object, verdict: Verdict) -> list[Action]:
        """The ``control_response`` for the permission prompt ``token`` (its request_id)."""
        asked = self._asked.pop(str(token), None)
        if asked is None:
            return []  # withdrawn by Claude Code meanwhile
        raw, tool_use = asked
        answer: dict[str, Any]
        if verdict.approved:
            answer = {"behavior": "allow", "updatedInput": raw if isinstance(raw, dict) else {}}
        else:
            answer = {"behavior": "deny", "message": verdict.note()}
        if tool_use:
            answer["toolUseID"] = tool_use
        response = {"subtype": "success", "request_id": str(token), "response": answer}
        return [Send({"type": "control_response", "response": response})]


class ClaudeRunner:
    """``--agent claude``: the translator on the shared driver."""

    @staticmethod
    def for_agent(options: AdapterOptions, emit: EmitFn) -> TurnRunner:
        from tether.runtime.child.adapters.driver import Traits, TranslatingRunner

        traits = Traits("claude", steer=True, follow_up=False, final_command=final_command)
        return TranslatingRunner(ClaudeTranslator(), traits, emit, options)


def _stop_of(result: Mapping[str, Any]) -> tuple[str, str | None]:
    """A ``result`` line's stop reason in the wire's words, and its error if it failed."""
    from tether.agent.loop import wire_stop_reason

    subtype = text_of(result.get("subtype"))
    if result.get("is_error") is True or subtype != "success":
        errors = result.get("errors")
        text = text_of(result.get("result")) or subtype or "an error"
        if isinstance(errors, list) and errors:
            text = "; ".join(str(e) for e in errors[:5])
        return "error", f"Claude Code: {text[:400]}"
    return wire_stop_reason(text_of(result.get("stop_reason")) or "end_turn"), None
