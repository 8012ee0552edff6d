"""``--agent bash-agent``: lloydzhou/bash-agent, unmodified, one process per input.

Theory of operation
-------------------
bash-agent, run without ``-i``, takes ONE task (from its arguments, or from stdin until
EOF), answers it and exits; ``--session NAME`` keeps the conversation on disk, so the
next process with the same name goes on from it (REFERENCE-FACTS §2). Its
``--output-format stream-json`` output carries everything (its frames stay on an
internal pipe): ``session_start`` first for a new session, then ``user_input``,
``text``, ``thinking``, ``tool_call``, ``tool_result``, ``usage``, ``stop``, ...

So every input of a tether turn is one bash-agent process: the command, then
``--output-format stream-json --session tether-RUN`` and the ``--agent-arg`` values; the
text goes to stdin, which is then closed. Each stdout line is decoded by
:mod:`tether.framing.stream_json` (bash-agent's own lines, quirks included) and turned
into display events by :class:`BashAgentStream` (sans-IO). ``BASH_AGENT_HOME`` defaults
to the run directory, so the session's files stay private to the run.

- **One answer per turn.** The turn's answer is the text of the last model call that had
  any; the turn ends when the process exits, never at a STOP (bash-agent writes
  ``stop end_turn`` twice per answer: the model's, then its own; the second adds
  nothing).
- **Steer and follow-up** cannot reach a running bash-agent (it reads nothing while it
  works): when its process exits, each queued one runs as the next process of the same
  session, in the same tether turn (``steering-injected`` / ``follow-up-injected``).
- **Finalize**: SIGINT to the process group (bash-agent's own Ctrl-C: it stops the model
  call and writes ``stop interrupted``); the turn ends ``aborted`` and the final turn
  runs the note as one more input. Its tools cannot be turned off; the note asks.
- **Cancel, deadline**: the process group is ended (SIGTERM, then SIGKILL).
- A process that exits without an answer and with a non-zero status ends the turn
  ``error`` with an ``error`` event: its stderr tail, without the terminal-title escapes
  bash-agent writes there (e.g. ``ANTHROPIC_API_KEY: unbound variable``: it runs under
  ``set -u``, so the key must be set, even to a dummy, for a local model server). An
  ``error`` line ends the turn ``error`` too (bash-agent itself then exits 0).
- An interrupted bash-agent writes nothing more (its event pipe is closed: no ``stop
  interrupted`` line), so finalize's turn ends ``aborted`` on tether's side.
- The program: the command after ``--``, else ``$TETHER_BASH_AGENT`` (a path to its
  ``agent.sh``), else ``bash-agent`` on PATH.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from tether import procs
from tether.agent.runner import (
    EmitFn,
    Injection,
    TurnControl,
    TurnOutcome,
    TurnRequest,
    TurnRunner,
)
from tether.agent.usage import Usage
from tether.framing import messages as kinds
from tether.framing.resp import FrameRejection
from tether.framing.stream_json import Entry, decode_line, from_stream_json
from tether.runtime.child.adapters.base import CliProcess, wait_exit
from tether.runtime.child.adapters.registry import BASH_AGENT_INTERRUPT_S
from tether.wire.lines import Line, LineSplitter

if TYPE_CHECKING:
    from tether.runtime.child.adapters import AdapterOptions

__all__ = ["BashAgentRunner", "BashAgentStream", "session_name"]

LINE_BYTES: Final = 16 * 1024 * 1024  # a tool result line (bash-agent caps output at 100 kB)
INTERRUPT_WAIT_S: Final = BASH_AGENT_INTERRUPT_S  # after SIGINT (the registry's data)
_TOOL_USE: Final = frozenset({"tool_use", "tool_calls"})
_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def session_name(run_id: str) -> str:
    """bash-agent's ``--session`` name for a tether run."""
    return "tether-" + _NAME_UNSAFE.sub("-", run_id)[:80]


def _wire_stop(reason: str) -> str:
    from tether.agent.loop import wire_stop_reason

    return "aborted" if reason == "interrupted" else wire_stop_reason(reason or "end_turn")


class BashAgentStream:
    """bash-agent's stream-json lines in, wire display events out (sans-IO, total)."""

    def __init__(self) -> None:
        self.final_text = ""
        self.session: str | None = None
        self.usage = Usage()
        self.stop: str | None = None  # the last stop reason of the current process
        self.error: str | None = None
        self._call_text: list[str] = []
        self._pending: Usage | None = None
        self._last: Entry | None = None

    def begin(self) -> None:
        """A new process (one input) starts."""
        self.stop, self.error, self._call_text, self._pending = None, None, [], None

    def receive(self, line: bytes) -> list[dict[str, Any]]:
        obj = decode_line(line)
        entry = obj if isinstance(obj, FrameRejection) else from_stream_json(obj)
        if isinstance(entry, FrameRejection):
            text = line[:80].decode("utf-8", "replace")
            reason = f"bash-agent wrote a line tether cannot read ({entry.reason}): {text}"
            return [{"type": "error", "error": reason, "source": "adapter"}]
        last, self._last = self._last, entry
        if isinstance(entry, kinds.Stop) and last == entry:
            return []  # its own STOP after the model's: one answer
        return self._events(entry)

    def _events(self, entry: Entry) -> list[dict[str, Any]]:
        if isinstance(entry, kinds.Usage):
            self._pending = (self._pending or Usage()) + _usage(entry)
            self.usage = self.usage + _usage(entry)
            return []
        if isinstance(entry, kinds.Stop):
            return self._stopped(entry.reason)
        if isinstance(entry, kinds.Text):
            self._call_text.append(entry.chunk)
        elif isinstance(entry, kinds.Retry):
            self._call_text = []
        elif isinstance(entry, kinds.Error):
            self.error = entry.message
        if isinstance(entry, kinds.UserInputFrame | kinds.UserMessage):
            return []  # the presenter already showed the input
        if not isinstance(entry, kinds.Message):
            return [_record_info(entry, self)]
        return kinds.to_wire_events(entry)

    def _stopped(self, reason: str) -> list[dict[str, Any]]:
        self.stop = reason
        events: list[dict[str, Any]] = []
        text = "".join(self._call_text)
        if text and reason not in _TOOL_USE:
            self.final_text = text
            events.append({"type": "assistant-text", "text": text, "final?": True})
        self._call_text = []
        end: dict[str, Any] = {"type": "llm-end", "stop-reason": _wire_stop(reason)}
        if self._pending is not None:
            end["usage"] = self._pending.to_wire()
            self._pending = None
        return [*events, end]


def _usage(usage: kinds.Usage) -> Usage:
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
    )


def _record_info(entry: Entry, stream: BashAgentStream) -> dict[str, Any]:
    """An ``info`` event for a session record (``session_start``, ``sub_agent_*``, ...)."""
    from tether.framing.stream_json import SessionFork, SessionStart, SubAgentEnd, SubAgentStart

    if isinstance(entry, SessionStart | SessionFork):
        stream.session = entry.session_id
        return {"type": "info", "summary": f"bash-agent session {entry.session_id}"}
    if isinstance(entry, SubAgentStart):
        what = entry.description or entry.prompt.split("\n", 1)[0]
        return {"type": "info", "summary": f"sub-agent {entry.session_id} started: {what}"[:160]}
    if isinstance(entry, SubAgentEnd):
        return {"type": "info", "summary": f"sub-agent {entry.session_id} ended: {entry.status}"}
    return {"type": "info", "summary": "bash-agent record"}


class BashAgentRunner:
    """The turn runner: one bash-agent process per input (see the module docstring)."""

    @staticmethod
    def for_agent(options: AdapterOptions, emit: EmitFn) -> TurnRunner:
        return BashAgentRunner(options, emit)

    def __init__(self, options: AdapterOptions, emit: EmitFn) -> None:
        run_id = options.env.get("FEN_WIRE_RUN_ID") or options.env.get("TETHER_WIRE_RUN_ID")
        self.session = session_name(run_id or f"pid-{os.getpid()}")
        self.argv = [
            *options.argv,
            "--output-format",
            "stream-json",
            "--session",
            self.session,
            *options.agent_args,
        ]
        env = dict(options.env)
        if options.run_dir is not None:
            env.setdefault("BASH_AGENT_HOME", str(options.run_dir))
        self.env = env
        self.cwd = options.cwd
        self.emit = emit
        self.stream = BashAgentStream()
        self.process: CliProcess | None = None

    async def prepare(self) -> None:
        self.emit({"type": "agent-started", "provider": "bash-agent", "model": ""})

    def final_text(self) -> str:
        return self.stream.final_text

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        start = self.stream.usage
        inputs: deque[Injection] = deque([request.opening])
        reason, error = "stop", None
        while inputs:
            item = inputs.popleft()
            if item.kind != "user":
                self.emit(item.event())
            reason, error = await self._one_input(item.text, control)
            if reason in ("aborted", "error"):
                break
            if not inputs:
                inputs.extend(_queued(control))
        usage = _minus(self.stream.usage, start)
        return TurnOutcome(reason, usage.to_wire(), error)

    async def _one_input(self, text: str, control: TurnControl) -> tuple[str, str | None]:
        """Run bash-agent on one input: its stop reason in the wire's words, and an error."""
        splitter = LineSplitter(max_line_bytes=LINE_BYTES, budget_bytes=LINE_BYTES + 1)
        done = asyncio.Event()

        def on_data(data: bytes) -> None:
            splitter.feed(data)
            while batch := splitter.read():
                for item in batch:
                    if isinstance(item, Line) and item.data.strip():
                        for event in self.stream.receive(item.data):
                            self.emit(event)

        self.stream.begin()
        process = CliProcess(
            self.argv, cwd=self.cwd, env=self.env, on_data=on_data, on_eof=done.set
        )
        self.process = process
        await process.start()
        process.write(text.replace("\0", "\ufffd").encode("utf-8", "replace"))
        _close_stdin(process)
        try:
            interrupted = await _wait_or_interrupt(done, control)
            if interrupted:
                await self._interrupt(process)
        except asyncio.CancelledError:
            await process.terminate()
            raise
        finally:
            await process.aclose()
        if interrupted:
            return "aborted", None
        return await self._verdict(process)

    async def _interrupt(self, process: CliProcess) -> None:
        """bash-agent's own Ctrl-C to its group; ended for good if it does not stop."""
        proc = process.proc
        if proc is not None:
            procs.signal_group(proc, signal.SIGINT)
            if not await wait_exit(proc, INTERRUPT_WAIT_S):
                await process.terminate()

    async def _verdict(self, process: CliProcess) -> tuple[str, str | None]:
        stream = self.stream
        if stream.error is not None:
            return "error", f"bash-agent: {stream.error}"  # its error line was shown
        code = process.returncode
        if stream.stop is None or (code not in (0, None) and not stream.final_text):
            # e.g. `ANTHROPIC_API_KEY: unbound variable` (it runs under `set -u`)
            from tether.display.sanitize import sanitize  # its stderr has its title's OSC

            note = sanitize(await process.death_note("before it answered"))
            self.emit({"type": "error", "error": note, "source": "agent"})
            return "error", note
        return _wire_stop(stream.stop), None

    async def aclose(self) -> None:
        if self.process is not None:
            await self.process.aclose()


def _close_stdin(process: CliProcess) -> None:
    stdin = None if process.proc is None else process.proc.stdin
    if stdin is not None:
        stdin.close()


async def _wait_or_interrupt(done: asyncio.Event, control: TurnControl) -> bool:
    """Wait for the process's output to end; True when finalize interrupted it first."""
    if control.interrupted:
        return True
    ended = asyncio.ensure_future(done.wait())
    interrupt = asyncio.ensure_future(control.wait_interrupted())
    try:
        await asyncio.wait({ended, interrupt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()
        interrupt.cancel()
    return not done.is_set() and control.interrupted


def _queued(control: TurnControl) -> list[Injection]:
    """Queued steers and follow-ups, oldest control first: each is one more input."""
    queued = [*control.take_steering(), *control.take_follow_ups()]
    return sorted(queued, key=lambda i: i.ref or 0)


def _minus(total: Usage, start: Usage) -> Usage:
    return Usage(
        total.input - start.input,
        total.output - start.output,
        total.cache_read - start.cache_read,
        total.cache_write - start.cache_write,
    )
