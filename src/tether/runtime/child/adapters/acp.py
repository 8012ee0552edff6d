"""ACP (Agent Client Protocol) agents: JSON-RPC 2.0 over stdio translated, sans-IO.

For ``gemini --acp``, ``claude-code-acp`` and any other ACP agent (:class:`AcpTranslator`).
The hand-shake is ``initialize {protocolVersion: 1, clientCapabilities}`` (no file system,
no terminal: the agent uses its own tools) and ``session/new {cwd, mcpServers: []}``;
the session id is the CLI's session id. With ``--agent-arg=--session-mode=ID`` the
adapter then sends ``session/set_mode {modeId: ID}`` (e.g. ``bypassPermissions`` for
claude-code-acp); the argument is the adapter's and is not passed to the agent. With a
run's model it then sends ``session/set_model {modelId}`` (unstable in the spec; Gemini
CLI and claude-code-acp have it). A refused setting fails the run's set-up.

A run that resumes a session (``tether child --resume SESSION``) sends ``session/load
{sessionId, cwd, mcpServers: []}`` instead of ``session/new`` when the agent advertises
``loadSession`` (the history the agent replays as ``session/update`` notifications
before it answers is not shown again), and fails ``not resumable`` when it does not;
one that forks it sends ``session/fork`` (unstable in the spec) when the agent
advertises ``sessionCapabilities.fork``, else fails ``not forkable``.

A tether turn is one or more ``session/prompt {sessionId, prompt: [{type: text, text}]}``
requests; the response's ``stopReason`` ends each (``end_turn`` -> ``stop``,
``max_tokens`` -> ``length``, ``cancelled`` -> ``aborted``, others kebab-cased) and its
``usage`` (unstable in the spec, sent by some agents; Gemini CLI puts its counts in
``_meta.quota.token_count``) is the usage.

- steer: ACP cannot add a message to a running prompt; the steer stays queued and opens
  the next prompt, in the same turn, when the current one ends (as a follow-up does);
- follow-up: the driver sends the next ``session/prompt`` when the current one ends;
- interrupt (finalize) and abort: the ``session/cancel`` notification (no permission
  request is ever left pending: each is answered at once). ACP cannot run a prompt
  without tools, so finalize's last prompt only asks for an answer without them.

``session/update`` notifications: ``agent_message_chunk`` / ``agent_thought_chunk`` ->
``assistant-text-delta`` / ``assistant-thinking-delta``; ``tool_call`` -> ``tool-call``
once its input is known (agents announce a call pending and empty first);
``tool_call_update`` with status ``completed`` / ``failed`` -> ``tool-result``;
``plan`` -> ``info``. ACP does not mark model calls, so one is shown from its first
chunk to the next tool call (stop ``tool-use``) or the end of the prompt, with its
whole text and thinking blocks, ``assistant-stream-end`` and ``llm-end``.

``session/request_permission`` goes to the run's approval desk (:mod:`tether.agent.desk`:
rules, else an inbox ``approval_request`` listing the options the agent offered, which
waits for a person) and is answered with the option the verdict picks from those
offered: ``allow_once`` (``allow_always`` when the answer is for the rest of the run),
``reject_once`` (``reject_always``), each falling back to its other kind; ``{"outcome":
"cancelled"}`` when none fits or the turn ended first (ACP asks a client to answer
pending requests so after ``session/cancel``). The call is named by its ACP ``kind``
(``execute``, ``edit``, ``read``, ... from the ``tool_call`` update) and its raw input
(Gemini CLI sends none: an ``execute`` call's command is then its title).
ACP carries no message with the answer: the agent learns only which option was chosen.
Other agent requests (``fs/*``, ``terminal/*``: not offered) get a JSON-RPC "method not
found" error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tether.agent.desk import Request as ToolRequest
from tether.agent.desk import Verdict
from tether.agent.runner import EmitFn, Injection, TurnRunner
from tether.agent.usage import Usage
from tether.runtime.child.adapters.commands import MODE_ARG, Resume, split_mode_arg
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

__all__ = [
    "MODE_ARG",
    "PROTOCOL_VERSION",
    "AcpRunner",
    "AcpTranslator",
    "split_mode_arg",
    "wire_stop",
]

PROTOCOL_VERSION: Final = 1
_STOPS: Final = {"end_turn": "stop", "max_tokens": "length", "cancelled": "aborted"}
_DONE: Final = frozenset({"completed", "failed"})
# The requests that open the run's session, and what each does (for the error message).
_OPENERS: Final = {
    "session/new": "start a session",
    "session/load": "load the session (session/load)",
    "session/fork": "fork the session (session/fork)",
}
# The requests that follow session/new, and what each sets (for the error message).
_SETTINGS: Final = {"session/set_mode": "session mode", "session/set_model": "model"}
_CHUNKS: Final = {
    "agent_message_chunk": ("assistant-text-delta", "assistant-text"),
    "agent_thought_chunk": ("assistant-thinking-delta", "assistant-thinking"),
}


def wire_stop(reason: object) -> str:
    text = text_of(reason)
    return _STOPS.get(text, text.replace("_", "-") or "stop")


class _Call:
    def __init__(self) -> None:
        self.blocks: list[list[str]] = []  # [wire type, text]


class _Tool:
    def __init__(self, name: str, kind: str = "", raw: object = None) -> None:
        self.name = name
        self.kind = kind  # the ACP ToolKind the agent gave it
        self.raw = raw
        self.shown = False


# the option kinds a verdict picks, in order of preference
_PICKS: Final = {
    ("approve", "once"): ("allow_once", "allow_always"),
    ("approve", "always"): ("allow_always", "allow_once"),
    ("deny", "once"): ("reject_once", "reject_always"),
    ("deny", "always"): ("reject_always", "reject_once"),
}


class AcpTranslator:
    """ACP client side <-> wire (see the module docstring)."""

    def __init__(
        self,
        cwd: str,
        *,
        mode: str | None = None,
        model: str | None = None,
        version: str = "0",
        resume: Resume | None = None,
    ) -> None:
        self.cwd = cwd
        self.resume = resume  # the session it loads (session/load) or forks (session/fork)
        self._loading = False  # session/load asked: its replayed history is not shown
        self.mode = mode
        self.model = model
        self._setup: list[tuple[str, dict[str, Any]]] = []  # settings still to send
        self._asked: dict[str, Any] = {}  # method -> the value it asked for
        self.version = version
        self.rpc = Outbox(jsonrpc=True)
        self.session: str | None = None
        self.agent_name = "acp"
        self.turn_open = False
        self.final_text = ""
        self._prompt: int | str | None = None
        self._call: _Call | None = None
        self._tools: dict[str, _Tool] = {}  # open tool calls by id
        self._permissions: dict[int | str, list[Mapping[str, Any]]] = {}  # request id -> options

    # -- commands -----------------------------------------------------------------------

    def handshake(self) -> list[Action]:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "tether", "title": "tether", "version": self.version},
        }
        return [Send(self.rpc.request("initialize", params))]

    def start_turn(self, opening: Injection) -> list[Action]:
        self.turn_open = True
        params = {"sessionId": self.session, "prompt": [{"type": "text", "text": opening.text}]}
        send = Send(self.rpc.request("session/prompt", params))
        self._prompt = send.message["id"]
        return [send]

    def inject(self, item: Injection) -> list[Action]:
        return []  # never called: ACP has no way to add to a running prompt

    def interrupt(self) -> list[Action]:
        if not self.turn_open:
            return []
        return [Send(self.rpc.notify("session/cancel", {"sessionId": self.session}))]

    # -- the agent's output ----------------------------------------------------------------

    def receive(self, message: object) -> list[Action]:
        got = classify(message)
        if isinstance(got, Response):
            return self._response(got, self.rpc.settle(got))
        if isinstance(got, Notification):
            if got.method == "session/update" and not self._loading:
                return self._update(mapping(got.params.get("update")))
            return []
        if isinstance(got, Request):
            return self._request(got)
        return []

    def _response(self, got: Response, method: str | None) -> list[Action]:
        failure = error_message(got.error) if got.error is not None else None
        if method == "initialize":
            if failure is not None:
                return [Broken(f"the ACP agent refused initialize: {failure}")]
            name = text_of(field(got.result, "agentInfo", "name"))
            self.agent_name = name or self.agent_name
            return self._open_session(mapping(field(got.result, "agentCapabilities")))
        if method in _OPENERS:
            return self._session_opened(method, got, failure)
        if method in _SETTINGS:
            if failure is not None:
                what, value = _SETTINGS[method], self._asked.get(method)
                return [Broken(f"the ACP agent refused {what} {value!r} ({method}): {failure}")]
            return self._next_setting()
        if method == "session/prompt" and got.id == self._prompt:
            return self._prompt_done(got, failure)
        if failure is not None and method is not None:
            return [Show({"type": "error", "error": f"the ACP agent refused {method}: {failure}"})]
        return []

    def _open_session(self, capabilities: Mapping[str, Any]) -> list[Action]:
        """``session/new``; to resume ``session/load``, to fork ``session/fork``, when the
        agent advertises them (else the set-up fails, saying which it lacks)."""
        params: dict[str, Any] = {"cwd": self.cwd, "mcpServers": []}
        resume = self.resume
        if resume is None:
            return [Send(self.rpc.request("session/new", params))]
        params = {"sessionId": resume.session, **params}
        if resume.fork:
            if not isinstance(field(capabilities, "sessionCapabilities", "fork"), dict):
                why = "it does not advertise session forking (sessionCapabilities.fork)"
                return [Broken(f"not forkable: the ACP agent {self.agent_name}: {why}")]
            return [Send(self.rpc.request("session/fork", params))]
        if capabilities.get("loadSession") is not True:
            why = "it does not advertise loadSession"
            return [Broken(f"not resumable: the ACP agent {self.agent_name}: {why}")]
        self._loading = True
        return [Send(self.rpc.request("session/load", params))]

    def _session_opened(self, method: str, got: Response, failure: str | None) -> list[Action]:
        self._loading = False
        given = text_of(field(got.result, "sessionId"))
        if method == "session/load" and self.resume is not None:
            given = self.resume.session  # the loaded session keeps its id
        self.session = given or None
        if failure is not None or self.session is None:
            what = _OPENERS[method]
            return [Broken(f"the ACP agent could not {what}: {failure or 'no session id'}")]
        self._setup = self._settings()
        return self._next_setting()

    def _settings(self) -> list[tuple[str, dict[str, Any]]]:
        """What follows session/new: the session mode, then the run's model."""
        steps: list[tuple[str, dict[str, Any]]] = []
        if self.mode is not None:
            steps.append(("session/set_mode", {"sessionId": self.session, "modeId": self.mode}))
        if self.model is not None:
            steps.append(("session/set_model", {"sessionId": self.session, "modelId": self.model}))
        return steps

    def _next_setting(self) -> list[Action]:
        """The next setting's request; once none is left, the session is up."""
        if not self._setup:
            return [Started(self.session)]
        method, params = self._setup.pop(0)
        self._asked[method] = params.get("modeId") or params.get("modelId")
        return [Send(self.rpc.request(method, params))]

    def _prompt_done(self, got: Response, failure: str | None) -> list[Action]:
        self.turn_open, self._prompt = False, None
        if failure is not None:
            out = self._close_call("error", Usage())
            error = f"session/prompt failed: {failure}"
            out.append(Show({"type": "error", "error": error, "source": "agent"}))
            return [*out, Ended("error", Usage(), error)]
        stop = wire_stop(field(got.result, "stopReason"))
        usage = _usage(field(got.result, "usage"))
        if usage == Usage():  # Gemini CLI reports it under _meta.quota.token_count
            usage = _quota_usage(field(got.result, "_meta", "quota", "token_count"))
        return [*self._close_call(stop, usage), Ended(stop, usage)]

    def _request(self, got: Request) -> list[Action]:
        if got.method != "session/request_permission":
            return [
                Send(self.rpc.refuse(got.id, METHOD_NOT_FOUND, f"tether offers no {got.method}"))
            ]
        tool = mapping(got.params.get("toolCall"))
        known = self._tools.get(text_of(tool.get("toolCallId")))
        kind = text_of(tool.get("kind")) or (known.kind if known else "")
        title = text_of(tool.get("title")) or (known.name if known else "")
        title = title or text_of(tool.get("toolCallId")) or "a tool call"
        raw = tool.get("rawInput", known.raw if known else None)
        if not raw and kind == "execute" and title:
            raw = {"command": title}  # Gemini CLI names the command only in the title
        locations = tool.get("locations")
        paths = (
            [text_of(field(where, "path")) for where in locations or []]
            if isinstance(locations, list)
            else []
        )
        offered = got.params.get("options")
        options: list[Mapping[str, Any]] = (
            [o for o in offered if isinstance(o, dict)] if isinstance(offered, list) else []
        )
        self._permissions[got.id] = options
        choices = tuple(
            {k: text_of(o.get(k)) for k in ("optionId", "name", "kind")} for o in options[:16]
        )
        request = ToolRequest(
            self.agent_name,
            "acp",
            kind or title,
            raw,
            summary=title,
            paths=tuple(p for p in paths if p),
            choices=choices,
        )
        # the model's call ended asking for this tool (Gemini CLI asks before its tool_call)
        return [*self._close_call("tool-use", Usage()), Ask(request, got.id)]

    def answered(self, token: Any, verdict: Verdict) -> list[Action]:
        """The answer to permission request ``token``: the option the verdict picks."""
        options = self._permissions.pop(token, None)
        if options is None:
            return []
        picked = None
        if verdict.by != "withdrawn":
            for kind in _PICKS[verdict.decision, verdict.scope]:
                picked = next((o for o in options if o.get("kind") == kind), None)
                if picked is not None:
                    break
        option = text_of(picked.get("optionId")) if picked is not None else ""
        outcome = (
            {"outcome": "selected", "optionId": option} if option else {"outcome": "cancelled"}
        )
        out: list[Action] = [Send(self.rpc.answer(token, {"outcome": outcome}))]
        if verdict.approved and not option:
            note = f"{self.agent_name} offered no option to allow this call: answered cancelled"
            out.append(Show({"type": "info", "summary": note}))
        return out

    # -- session/update -----------------------------------------------------------------

    def _update(self, update: Mapping[str, Any]) -> list[Action]:
        kind = text_of(update.get("sessionUpdate"))
        if kind in _CHUNKS:
            return self._chunk(kind, update)
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        if kind == "plan":
            entries = update.get("entries")
            steps = len(entries) if isinstance(entries, list) else 0
            return [Show({"type": "info", "summary": f"{self.agent_name} plan: {steps} step(s)"})]
        return []

    def _chunk(self, kind: str, update: Mapping[str, Any]) -> list[Action]:
        content = mapping(update.get("content"))
        text = text_of(content.get("text")) if content.get("type") == "text" else ""
        if not text:
            return []
        out = self._open_call()
        assert self._call is not None
        delta, block = _CHUNKS[kind]
        blocks = self._call.blocks
        if blocks and blocks[-1][0] == block:
            blocks[-1][1] += text
        else:
            blocks.append([block, text])
        out.append(Show({"type": delta, "content-index": len(blocks) - 1, "delta": text}))
        return out

    def _open_call(self) -> list[Action]:
        if self._call is not None:
            return []
        self._call = _Call()
        return [Show({"type": "llm-start", "provider": self.agent_name})]

    def _close_call(self, stop: str, usage: Usage) -> list[Action]:
        call, self._call = self._call, None
        if call is None:
            return []
        final = stop != "tool-use"
        out: list[Action] = [
            Show({"type": kind, "final?": final, "content-index": index, "text": text})
            for index, (kind, text) in enumerate(call.blocks)
        ]
        texts = [text for kind, text in call.blocks if kind == "assistant-text"]
        if texts:  # the run's answer is the last assistant text, as for the built-in agent
            self.final_text = "".join(texts)
        out.append(Show({"type": "assistant-stream-end", "final?": final}))
        out.append(Show({"type": "llm-end", "stop-reason": stop, "usage": usage.to_wire()}))
        return out

    def _tool_call(self, update: Mapping[str, Any]) -> list[Action]:
        ident = text_of(update.get("toolCallId"))
        out: list[Action] = []
        if ident not in self._tools:
            out = self._close_call("tool-use", Usage())
            name = text_of(update.get("title")) or text_of(update.get("kind")) or "tool"
            self._tools[ident] = _Tool(name, text_of(update.get("kind")), update.get("rawInput"))
        return out + self._tool_update(update)

    def _tool_update(self, update: Mapping[str, Any]) -> list[Action]:
        """Show the call once its input is known (agents send it pending and empty
        first), and its result when it is done."""
        ident = text_of(update.get("toolCallId"))
        tool = self._tools.get(ident)
        if tool is None:
            return []
        status = text_of(update.get("status"))
        raw = update.get("rawInput")
        if raw is not None:
            tool.raw = raw
        tool.kind = text_of(update.get("kind")) or tool.kind
        out: list[Action] = []
        if not tool.shown and (raw or status not in ("", "pending")):
            tool.shown = True
            event = _call_event(tool.name, ident, raw, update)
            tool.name = event["name"]  # its result goes by the same name
            out.append(Show(event))
        if status not in _DONE:
            return out
        del self._tools[ident]
        result: dict[str, Any] = {"content": _tool_text(update.get("content"))}
        if "rawOutput" in update:
            raw_output = update["rawOutput"]
            if not result["content"] and isinstance(raw_output, str):
                result["content"] = raw_output
            result["details"] = {"raw-output": raw_output}
        done = {
            "type": "tool-result",
            "name": tool.name,
            "id": ident,
            "tool-call-id": ident,
            "is-error?": status == "failed",
            "result": result,
        }
        return [*out, Show(done)]


def _call_event(name: str, ident: str, raw: object, update: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool-call`` event. An agent that sends no input (Gemini CLI names its
    command only in the title) gets it from the title: ``{"command": title}`` for an
    ``execute`` tool, named by its kind, else ``{"title": title}``."""
    event: dict[str, Any] = {"type": "tool-call", "name": name, "id": ident}
    if raw:
        event["arguments"] = raw
        return event
    title = text_of(update.get("title"))
    kind = text_of(update.get("kind"))
    if title and kind == "execute":
        event["name"] = "shell"
        event["arguments"] = {"command": title}
    elif title:
        event["arguments"] = {"title": title} if title != name else {}
    elif raw is not None:
        event["arguments"] = raw
    return event


def _tool_text(content: object) -> str:
    """The text parts of a tool call's content (``{type: content, content: {text}}``)."""
    if not isinstance(content, list):
        return ""
    texts = [text_of(field(item, "content", "text")) for item in content]
    return "\n".join(t for t in texts if t)


def _usage(value: object) -> Usage:
    usage = mapping(value)
    cached = count(usage.get("cachedReadTokens"))
    return Usage(
        count(usage.get("inputTokens")),
        count(usage.get("outputTokens")),
        cached,
        count(usage.get("cachedWriteTokens")),
    )


class AcpRunner:
    """``--agent gemini`` / ``--agent acp``: an ACP agent through :class:`AcpTranslator`."""

    @staticmethod
    def for_agent(options: AdapterOptions, emit: EmitFn) -> TurnRunner:
        from tether.runtime.child.adapters.driver import Traits, TranslatingRunner

        mode, _ = split_mode_arg(options.agent_args)
        traits = Traits(options.agent, steer=False, follow_up=False)
        translator = AcpTranslator(
            options.cwd, mode=mode, model=options.model, resume=options.resume
        )
        return TranslatingRunner(translator, traits, emit, options)


def _quota_usage(value: object) -> Usage:
    usage = mapping(value)
    return Usage(count(usage.get("input_tokens")), count(usage.get("output_tokens")))
