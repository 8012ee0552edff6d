"""The Claude Code adapter: ``claude -p`` in stream-json both ways, run as turns.

Theory of operation
-------------------
:class:`ClaudeRunner` starts Claude Code once, in :meth:`prepare`, as::

    claude -p --input-format stream-json --output-format stream-json --verbose
           --include-partial-messages --replay-user-messages
           [--permission-prompt-tool stdio] AGENT_ARGS...

and keeps its stdin open for the run (:class:`~tether.runtime.adapters.base.CliProcess`).
Every user message tether writes (``{"type": "user", "message": ...}``) is echoed back
by Claude Code (``--replay-user-messages``, ``isReplay: true``) at the moment it takes it
in, and every batch of taken-in messages ends with one ``result`` line. So a turn:

1. writes its opening (``user`` event);
2. writes each steer as soon as the presenter queues it; Claude Code takes a message
   written mid-turn in before its next model call ("The user sent a new message while
   you were working"), or, when it was already giving its last answer, right after
   that answer. ``steering-injected`` is emitted when the echo arrives, that is when
   Claude Code really took it in;
3. ends at a ``result`` once every message written is echoed; queued follow-ups are
   written then (``follow-up-injected`` on their echo) and the turn goes on.

Stream events map to the wire as the built-in agent does: ``message_start`` ->
``llm-start``; text / thinking deltas -> ``assistant-*-delta``; at ``message_stop`` the
whole blocks (``final?`` unless the call asked for tools), ``assistant-stream-end`` and
``llm-end`` (stop reason, usage); then one ``tool-call`` per ``tool_use`` block. A
``user`` line's ``tool_result`` blocks become ``tool-result`` events. The turn's usage
is the sum of its ``result`` lines' usage; its stop reason that of the last ``result``
(``aborted`` after an interrupt, ``error`` when Claude Code reports an error). The
session id from ``system/init`` is reported once in an ``info`` event (``claude
--resume ID`` continues it).

Controls
--------
- finalize: the ``interrupt`` control request, wait for its ``result``; then the final
  turn runs in a new Claude Code resumed from the session with ``--tools ""`` (no tools
  at all), the note as its one message.
- cancel, the deadline (asyncio cancellation): the ``interrupt`` control request, a
  short wait for its ``result``, then the process group is ended with a grace.
- close: after the turn, stdin is closed; Claude Code exits on EOF (else it is ended).
- permission prompts (``can_use_tool`` control requests, asked because the adapter
  passes ``--permission-prompt-tool stdio`` unless the user chose their own prompt tool
  or ``--dangerously-skip-permissions``): each becomes an inbox ``approval_request`` and
  is denied with a reason, as there is no answer path yet. Choose a permission mode
  with ``--agent-arg=--permission-mode=MODE`` or ``--agent-arg=--allowedTools=TOOLS``.

Unless already set, the CLI's environment gets ``DISABLE_NON_ESSENTIAL_MODEL_CALLS=1``
and ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no title-generation model call, no
telemetry or update checks): a supervised run makes only the calls its turns need.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Mapping
from typing import Any, Final

from tether.agent.runner import EmitFn, Injection, TurnControl, TurnOutcome, TurnRequest
from tether.runtime.adapters import AdapterOptions
from tether.runtime.adapters.base import TERM_GRACE_S, BadLine, CliProcess
from tether.runtime.adapters.claude_stream import ModelCall, tool_results, usage_of
from tether.wire.limits import POLL_BUSY_S

__all__ = ["BASE_ARGS", "ClaudeRunner"]

BASE_ARGS: Final = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--replay-user-messages",
)
QUIET_ENV: Final = {
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
# After an interrupt: how long to wait for Claude Code's `result` (finalize; a cancel
# waits less, the presenter's unwind grace is a second in all).
INTERRUPT_WAIT_S: Final = 3.0
CANCEL_WAIT_S: Final = 0.3
NO_ANSWER_PATH: Final = (
    "tether: this permission prompt was sent to the run's inbox as an approval_request, "
    "but there is no answer path yet, so it is denied. Start the run with "
    "--agent-arg=--permission-mode=acceptEdits (or bypassPermissions) or "
    "--agent-arg=--allowedTools=TOOL to allow it."
)
_OWN_PROMPT_FLAGS: Final = ("--permission-prompt-tool", "--dangerously-skip-permissions")


def _user_line(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


class ClaudeRunner:
    """Runs turns on Claude Code; see the module docstring."""

    @classmethod
    def for_agent(cls, options: AdapterOptions, emit: EmitFn) -> ClaudeRunner:
        return cls(options, emit)

    def __init__(self, options: AdapterOptions, emit: EmitFn) -> None:
        self.options = options
        self.emit = emit
        self.env = {**QUIET_ENV, **options.env}
        self.session_id: str | None = None
        self.model = "claude"
        self._cli: CliProcess | None = None
        self._start: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._pending: deque[Injection] = deque()  # written, not yet taken in
        self._results: list[dict[str, Any]] = []  # of the running turn
        self._answered = False  # a `result` came after everything written was taken in
        self._call: ModelCall | None = None
        self._tool_names: dict[str, str] = {}
        self._final_text = ""
        self._requests = 0

    # -- the runner interface --------------------------------------------------------

    def argv(self, *, final: bool = False) -> list[str]:
        """The CLI's command: the base flags, the prompt tool, the user's arguments; the
        final turn resumes the session with no tools."""
        args = [*self.options.argv, *BASE_ARGS]
        user = self.options.agent_args
        if not any(a.split("=", 1)[0] in _OWN_PROMPT_FLAGS for a in user):
            args += ["--permission-prompt-tool", "stdio"]
        args += user
        if final:
            if self.session_id is not None:
                args += ["--resume", self.session_id]
            args += ["--tools", ""]
        return args

    async def prepare(self) -> None:
        if self._start is None:
            self._start = asyncio.ensure_future(self._launch(final=False))
        await asyncio.shield(self._start)

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        await self.prepare()
        if request.final:
            await self._restart_without_tools()
        started = {"type": "agent-started", "provider": "claude", "model": self.model}
        self.emit(started | {"cwd": self.options.cwd})
        self._results.clear()
        waiter = asyncio.ensure_future(control.wait_interrupted())
        waiter.add_done_callback(lambda _: self._wake.set())
        try:
            self._write(request.opening)
            return await self._until_answered(control)
        except asyncio.CancelledError:
            await self._interrupt(CANCEL_WAIT_S)
            await self._terminate()
            self._complete("aborted", "the run was aborted")
            raise
        finally:
            waiter.cancel()

    def final_text(self) -> str:
        return self._final_text

    async def aclose(self) -> None:
        if self._cli is None or self._cli.proc is None:
            if self._start is not None and not self._start.done():
                self._start.cancel()
            return
        await self._cli.aclose()

    # -- the CLI ---------------------------------------------------------------------

    async def _launch(self, *, final: bool) -> None:
        self._cli = CliProcess(
            self.argv(final=final),
            cwd=self.options.cwd,
            env=self.env,
            on_message=self._on_message,
            on_eof=self._wake.set,
        )
        await self._cli.start()

    async def _restart_without_tools(self) -> None:
        """The final turn's Claude Code: the session resumed, ``--tools ''``."""
        if self._cli is not None:
            await self._cli.aclose()
        self._pending.clear()
        self._call = None
        await self._launch(final=True)

    async def _terminate(self) -> None:
        if self._cli is not None:
            await self._cli.terminate(TERM_GRACE_S)

    def _write(self, item: Injection) -> None:
        """Write one user message; its echo marks when Claude Code takes it in."""
        if item.kind == "user":
            self.emit(item.event())
        self._pending.append(item)
        self._answered = False
        if self._cli is not None:
            self._cli.write_json(_user_line(item.text))

    async def _interrupt(self, wait_s: float) -> bool:
        """Claude Code's ``interrupt`` control request; True when its ``result`` came."""
        cli = self._cli
        if cli is None or cli.eof:
            return False
        self._requests += 1
        seen = len(self._results)
        request = {"subtype": "interrupt"}
        line = {"type": "control_request", "request_id": f"tether-{self._requests}"}
        if not cli.write_json(line | {"request": request}):
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while len(self._results) == seen and not cli.eof:
            left = deadline - loop.time()
            if left <= 0:
                return False
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(left, POLL_BUSY_S))
        return len(self._results) > seen

    # -- turns -----------------------------------------------------------------------

    async def _until_answered(self, control: TurnControl) -> TurnOutcome:
        while True:
            cli = self._cli
            assert cli is not None
            if control.interrupted:
                if not await self._interrupt(INTERRUPT_WAIT_S):
                    await self._terminate()  # the final turn starts a new one anyway
                return self._outcome("aborted")
            if not cli.eof:
                for item in control.take_steering():
                    self._write(item)
            if self._answered:
                more = [] if cli.eof else control.take_follow_ups()
                if not more:
                    return self._outcome(*self._last_stop())
                for item in more:
                    self._write(item)
                continue
            if cli.eof:
                return await self._died(cli)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_BUSY_S)

    def _last_stop(self) -> tuple[str, str | None]:
        from tether.agent.loop import wire_stop_reason

        result = self._results[-1]
        subtype = result.get("subtype")
        if result.get("is_error") or subtype != "success":
            text = result.get("result") or result.get("error") or subtype or "an error"
            errors = result.get("errors")
            if isinstance(errors, list) and errors:
                text = "; ".join(str(e) for e in errors)
            return "error", f"Claude Code: {str(text)[:400]}"
        reason = result.get("stop_reason")
        return wire_stop_reason(reason if isinstance(reason, str) else "end_turn"), None

    def _outcome(self, stop_reason: str, error: str | None = None) -> TurnOutcome:
        if self._call is not None:  # a model call cut short (interrupt, a dead CLI)
            for event in self._call.salvage():
                self.emit(event)
            self._call = None
        usage: dict[str, int] = {}
        for result in self._results:
            for key, count in usage_of(result.get("usage")).items():
                usage[key] = usage.get(key, 0) + count
        self._results.clear()
        status = {"aborted": "aborted", "error": "error"}.get(stop_reason, "done")
        self._complete(status, error)
        return TurnOutcome(stop_reason, usage, error)

    async def _died(self, cli: CliProcess) -> TurnOutcome:
        error = await cli.death_note("in the middle of a turn")
        self.emit({"type": "error", "error": error, "source": "adapter"})
        self._pending.clear()
        return self._outcome("error", error)

    def _complete(self, status: str, error: str | None) -> None:
        event: dict[str, Any] = {"type": "agent-turn-complete", "status": status}
        if error:
            event["error"] = error
        else:
            event["result"] = self._final_text
        self.emit(event)

    # -- Claude Code's lines -> display events ---------------------------------------

    def _on_message(self, item: dict[str, Any] | BadLine) -> None:
        try:
            if isinstance(item, BadLine):
                self._adapter_error(
                    f"bad line from Claude Code at byte {item.offset}: {item.reason}"
                )
            else:
                self._on_line(item)
        finally:
            self._wake.set()

    def _on_line(self, line: dict[str, Any]) -> None:
        kind = line.get("type")
        if kind == "stream_event":
            self._on_stream(line.get("event"))
        elif kind == "user":
            self._on_user(line)
        elif kind == "result":
            self._results.append(line)
            self._answered = not self._pending
        elif kind == "system" and line.get("subtype") == "init":
            self._on_init(line)
        elif kind == "control_request":
            self._on_control_request(line)
        # `assistant` lines repeat what the stream events said; control_response,
        # system/status and other kinds carry nothing for the wire.

    def _on_init(self, line: Mapping[str, Any]) -> None:
        model = line.get("model")
        if isinstance(model, str) and model:
            self.model = model[:160]
        session = line.get("session_id")
        if isinstance(session, str) and session and session != self.session_id:
            self.session_id = session
            summary = f"Claude Code session {session} (claude --resume {session})"
            self.emit({"type": "info", "summary": summary[:160]})

    def _on_stream(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start":
            self._call = ModelCall.start(event)
            self.emit({"type": "llm-start", "provider": "claude", "model": self.model})
            return
        call = self._call
        if call is None:
            return
        for out in call.feed(event):
            self.emit(out)
        if call.done:
            self._call = None
            if call.text:
                self._final_text = call.text
            self._tool_names.update(call.tool_names)

    def _on_user(self, line: Mapping[str, Any]) -> None:
        if line.get("isReplay"):
            self._taken_in(line)
            return
        for event in tool_results(line, self._tool_names):
            self.emit(event)

    def _taken_in(self, line: Mapping[str, Any]) -> None:
        """The echo of a message we wrote: it is in Claude Code's conversation now."""
        if not self._pending:
            return
        item = self._pending.popleft()
        if item.kind != "user":
            self.emit(item.event())

    def _on_control_request(self, line: Mapping[str, Any]) -> None:
        request = line.get("request")
        request_id = line.get("request_id")
        if not isinstance(request, dict) or not isinstance(request_id, str):
            self._adapter_error("a control request from Claude Code without an id or request")
            return
        if request.get("subtype") == "can_use_tool":
            self._ask_approval(request)
            answer: dict[str, Any] = {"behavior": "deny", "message": NO_ANSWER_PATH}
            response = {"subtype": "success", "request_id": request_id, "response": answer}
        else:
            error = f"tether does not answer {request.get('subtype')!r} requests"
            response = {"subtype": "error", "request_id": request_id, "error": error}
        if self._cli is not None:
            self._cli.write_json({"type": "control_response", "response": response})

    def _ask_approval(self, request: Mapping[str, Any]) -> None:
        """A permission prompt: an inbox ``approval_request``, and an ``info`` saying so."""
        tool = str(request.get("tool_name") or "a tool")
        what = request.get("description") or json.dumps(request.get("input"))[:200]
        reason = f"Claude Code asks to use {tool}: {what}"
        from tether.inbox.writer import append_inbox, inbox_path_from_env

        path = inbox_path_from_env(self.options.env)
        if path is not None:
            message = {"type": "approval_request", "reason": reason, "agent": "claude"}
            with contextlib.suppress(OSError, ValueError):
                append_inbox(path, message | {"tool": tool, "input": request.get("input")})
        summary = f"permission prompt denied (no answer path yet): {reason}"
        self.emit({"type": "info", "summary": summary[:160]})

    def _adapter_error(self, error: str) -> None:
        self.emit({"type": "error", "error": error, "source": "adapter"})
