"""The RESP adapter: a program that speaks bash-agent frames on stdio, run as turns.

Theory of operation
-------------------
:class:`RespRunner` is a :class:`tether.agent.runner.TurnRunner` for any program that
reads ``USER_INPUT`` frames on stdin and writes message frames (TEXT, THINKING,
TOOL_CALL, TOOL_RESULT, USAGE, STOP, ...; see :mod:`tether.framing.messages`) on stdout.

The program is started ONCE, in :meth:`RespRunner.prepare` (right after ``ready``, so its
start-up overlaps the parent's first prompt), in its own process group, and lives for
the whole run: a long-lived agent that loops reading inputs. Its working directory is
the child's ``--cwd``; its environment is the child's plus ``TETHER_SHELL_LIB`` (the
path of ``tether.sh``). Its stderr passes through to the child's stderr (the run's
stderr file under ``tether run``); the last :data:`STDERR_TAIL_BYTES` are kept for error
messages.

One pump task reads stdout all the time. While a turn runs or an answer is owed, each
frame becomes display events at once (:func:`tether.framing.messages.to_wire_events`),
except that a model call's USAGE frames are summed and shown with its STOP in ONE
``llm-end`` (stop reason in the wire's words), after the call's whole ``assistant-text``
/ ``assistant-thinking`` blocks and ``assistant-stream-end``, as the built-in agent does.
USAGE counts (and SUB_AGENT_RESULT's) go to the usage of the turn that next ends.
Frames that arrive while nothing is owed and no turn runs are held for the next turn
(up to :data:`MAX_HELD_FRAMES`), so a program may write its answer before it reads its
input, or without reading it at all.

The contract, counted per input
-------------------------------
Every ``USER_INPUT`` tether writes (``*3``: ``USER_INPUT``, ``0``, the text) is one input,
and the program owes each input, in order, one answer that ends with a STOP whose
reason is not ``tool_use`` (a STOP ``tool_use`` marks a model call that asked for tools:
the answer goes on, as in bash-agent). A turn:

1. writes its opening text (prompt, or the steer/follow-up that starts a turn);
2. while answers are owed, writes queued steer texts as further inputs as soon as it
   sees them (it checks on every frame and every 30 ms), each with
   ``steering-injected {text, ref}``. A program that only reads between answers sees a
   steer after its current answer, which is bash-agent's own loop;
3. when every input is answered, writes queued follow-ups (``follow-up-injected``) and
   goes on, else ends with the last answer's STOP reason in the wire's words
   (``end_turn`` -> ``stop``, ``max_tokens`` -> ``length``, ...).

The turn's final text is the text of the last answer (or model call) that had any; it is
sent as ``assistant-text`` with ``final? true`` when its STOP arrives, so the run's
``result`` carries it.

Finalize, cancel, failures
--------------------------
- finalize while a turn runs: the turn ends at once (``aborted``) on tether's side; the
  program is not signalled and finishes what it is doing. The final turn writes the note
  as one more input and ends when every input, the note's included, is answered. Tools
  cannot be disabled for an external program: the program decides how to answer the
  note (the default note asks for an answer without tools).
- cancel, the deadline, a fatal error (asyncio cancellation of the turn): the program's
  process group gets SIGTERM, then SIGKILL after :data:`TERM_GRACE_S`.
- the end of the run: stdin is closed (EOF), the program gets a moment to
  leave, then whatever is left of its group is ended the same way.
- a bad frame: an ``error`` event (source ``adapter``); the reader resyncs at the next
  line that starts with ``*``. It does not end the turn. A well-formed frame of an
  unknown kind is skipped with an ``info`` event.
- EOF on stdout with an answer still owed (the program exited, or closed stdout): the
  turn ends ``error`` with the exit status and the tail of stderr, and the run follows
  the state table. Every later turn ends ``error`` the same way at once. Only a program
  that cannot be started at all ends the run ``failed``
  (:class:`~tether.agent.runner.RunnerSetupError` from :meth:`RespRunner.prepare`).

NUL characters cannot travel in bash strings, so they are written as U+FFFD.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from tether.agent.runner import (
    EmitFn,
    Injection,
    TurnControl,
    TurnOutcome,
    TurnRequest,
)
from tether.framing import SHELL_LIBRARY
from tether.framing.messages import (
    UNKNOWN_TYPE,
    AgentResult,
    Error,
    Message,
    Retry,
    Stop,
    SubAgentResult,
    Text,
    Thinking,
    Usage,
    UserInputFrame,
    from_fields,
    to_frame,
    to_wire_events,
)
from tether.framing.resp import Frame, FrameRejection
from tether.framing.resp_hiredis import open_reader
from tether.runtime.child.adapters.base import STDERR_TAIL_BYTES, TERM_GRACE_S, CliProcess
from tether.wire.limits import POLL_BUSY_S

if TYPE_CHECKING:
    from tether.runtime.child.adapters import AdapterOptions

__all__ = [
    "STDERR_TAIL_BYTES",
    "TERM_GRACE_S",
    "RespRunner",
    "user_input_frame",
]

# Frames held for the next turn at most; past this they are shown at once instead.
MAX_HELD_FRAMES: Final = 1024

# STOP reasons that end a model call but not the answer (tools run next).
_TOOL_USE: Final = frozenset({"tool_use", "tool-use", "tool_calls", "toolUse"})
_MODEL_CUT: Final = 160


def user_input_frame(text: str) -> bytes:
    """The frame that hands ``text`` to the program: ``USER_INPUT``, ``0``, the text."""
    return to_frame(UserInputFrame(text=text.replace("\0", "\ufffd")))


class RespRunner:
    """Runs turns on a RESP-speaking program; see the module docstring."""

    def __init__(
        self,
        argv: Sequence[str],
        emit: EmitFn,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not argv:
            raise ValueError("the RESP adapter needs a program: --adapter resp -- CMD ARGS...")
        self.argv = list(argv)
        self.emit = emit
        self.cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("TETHER_SHELL_LIB", str(SHELL_LIBRARY))
        self._cli = CliProcess(
            self.argv, cwd=self.cwd, env=self.env, on_data=self._on_data, on_eof=self._on_eof
        )
        self._reader = open_reader()
        self._start: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._eof = False
        self._pending: deque[Frame | FrameRejection] = deque()  # read, not yet handled
        self._active = False  # a turn is running
        self._owed = 0  # inputs written and not yet answered by a final STOP
        self._usage: dict[str, int] = {}  # counted for the turn that ends next
        self._call_usage: dict[str, int] = {}  # of the model call, shown at its STOP
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._final_text = ""
        self._last_stop = "end_turn"
        self._last_error: str | None = None

    @classmethod
    def for_agent(cls, options: AdapterOptions, emit: EmitFn) -> RespRunner:
        """``--agent resp -- CMD ARGS...``: the command, then any ``--agent-arg`` values."""
        return cls([*options.argv, *options.agent_args], emit, cwd=options.cwd, env=options.env)

    # -- the runner interface --------------------------------------------------------

    async def prepare(self) -> None:
        """Start the program (once); a start failure is a :class:`RunnerSetupError`."""
        if self._start is None:
            self._start = asyncio.ensure_future(self._cli.start())
        await asyncio.shield(self._start)

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        await self.prepare()
        started = {"type": "agent-started", "provider": "resp", "model": self._model()}
        self.emit(started | {"cwd": self.cwd})
        self._last_stop, self._last_error = "end_turn", None
        self._active = True
        waiter = asyncio.ensure_future(control.wait_interrupted())
        waiter.add_done_callback(lambda _: self._wake.set())
        try:
            self._inject(request.opening)
            outcome = await self._until_answered(control)
        except asyncio.CancelledError:
            await self._terminate()
            self._complete("aborted", "the run was aborted")
            raise
        finally:
            self._active = False
            waiter.cancel()
        status = {"aborted": "aborted", "error": "error"}.get(outcome.stop_reason, "done")
        self._complete(status, outcome.error)
        return outcome

    def final_text(self) -> str:
        return self._final_text

    async def aclose(self) -> None:
        """Close stdin, give the program a moment to leave, then end its whole group."""
        if self._cli.proc is None:
            if self._start is not None and not self._start.done():
                self._start.cancel()
            return
        await self._cli.aclose()

    # -- the program -----------------------------------------------------------------

    async def _terminate(self) -> None:
        await self._cli.terminate(TERM_GRACE_S)

    def _model(self) -> str:
        return shlex.join(self.argv)[:_MODEL_CUT]

    def _write(self, text: str) -> bool:
        """Write one input; False when the program's stdin is gone."""
        return self._cli.write(user_input_frame(text))

    def _on_data(self, data: bytes) -> None:
        try:
            self._reader.feed(data)
            self._pending.extend(self._reader)
        except Exception as exc:  # noqa: BLE001 - a bug here must end the turn, not hang it
            error = f"internal error in the RESP adapter: {type(exc).__name__}: {exc}"
            self._pending.append(FrameRejection("internal", error))
        self._handle_pending()

    def _on_eof(self) -> None:
        if self._eof:
            return
        cut = self._reader.eof()
        if cut is not None:
            self._pending.append(cut)
        self._eof = True
        self._handle_pending()

    def _handle_pending(self) -> None:
        """Handle the frames read so far, unless they wait for the next turn."""
        try:
            if self._active or self._owed or len(self._pending) > MAX_HELD_FRAMES:
                while self._pending:
                    self._on_frame(self._pending.popleft())
        finally:
            self._wake.set()

    # -- frames -> display events ----------------------------------------------------

    def _on_frame(self, item: Frame | FrameRejection) -> None:
        if isinstance(item, FrameRejection):
            where = f" at byte {item.offset}" if item.offset is not None else ""
            self._adapter_error(f"bad frame from the program{where} ({item.code}): {item.reason}")
            return
        message = from_fields(item)
        if isinstance(message, FrameRejection) and message.code == UNKNOWN_TYPE:
            # A kind this side does not know (a newer writer's) is skipped, as
            # bash-agent's display does.
            self.emit({"type": "info", "summary": f"skipped a frame: {message.reason}"})
        elif isinstance(message, FrameRejection):
            self._adapter_error(f"bad message from the program ({message.code}): {message.reason}")
        else:
            self._on_message(message)

    def _on_message(self, message: Message) -> None:
        if isinstance(message, Stop):
            self._on_stop(message.reason)
            return
        if isinstance(message, Text):
            self._text.append(message.chunk)
        elif isinstance(message, Thinking):
            self._thinking.append(message.chunk)
        elif isinstance(message, Retry):
            self._text.clear()
            self._thinking.clear()
        elif isinstance(message, Usage):
            counts = {
                "input": message.input_tokens,
                "output": message.output_tokens,
                "cache-read": message.cache_read_input_tokens,
                "cache-write": message.cache_creation_input_tokens,
            }
            _add(self._usage, counts)
            _add(self._call_usage, counts)
            return  # shown with the model call's STOP, in one llm-end
        elif isinstance(message, SubAgentResult | AgentResult):
            _add(self._usage, {"input": message.input_tokens, "output": message.output_tokens})
        elif isinstance(message, Error):
            self._last_error = message.message
        for event in to_wire_events(message):
            self.emit(event)

    def _on_stop(self, reason: str) -> None:
        """A model call ended; a final STOP also answers the oldest owed input."""
        final = reason not in _TOOL_USE
        thinking, text = "".join(self._thinking), "".join(self._text)
        self._thinking.clear()
        self._text.clear()
        if thinking:
            self.emit({"type": "assistant-thinking", "final?": final, "text": thinking})
        if text:
            self.emit({"type": "assistant-text", "final?": final, "text": text})
            self._final_text = text
        self.emit({"type": "assistant-stream-end", "final?": final})
        self._llm_end(reason)
        if final:
            self._last_stop = reason
            self._owed = max(0, self._owed - 1)
            self._wake.set()

    def _llm_end(self, reason: str | None) -> None:
        """One ``llm-end`` per model call: its STOP reason (wire words) and USAGE counts."""
        event: dict[str, Any] = {"type": "llm-end"}
        if reason is not None:
            event["stop-reason"] = _wire_stop_reason(reason)
        if self._call_usage:
            event["usage"] = {"input": 0, "output": 0} | self._call_usage
            self._call_usage = {}
        if len(event) > 1:
            self.emit(event)

    def _adapter_error(self, error: str) -> None:
        self.emit({"type": "error", "error": error, "source": "adapter"})

    # -- turns -----------------------------------------------------------------------

    def _inject(self, item: Injection) -> None:
        """Write one input; it is owed an answer even when the write fails (a dead
        program's answer may already be read; if not, EOF ends the turn)."""
        self.emit(item.event())
        self._write(item.text)
        self._owed += 1

    async def _until_answered(self, control: TurnControl) -> TurnOutcome:
        while True:
            self._handle_pending()
            if control.interrupted:
                return self._outcome("aborted")
            if not self._eof:
                for item in control.take_steering():
                    self._inject(item)
            if self._owed == 0:
                more = [] if self._eof else control.take_follow_ups()
                if not more:
                    return self._outcome(_wire_stop_reason(self._last_stop), self._last_error)
                for item in more:
                    self._inject(item)
                continue
            if self._eof:
                return await self._died()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_BUSY_S)

    def _outcome(self, stop_reason: str, error: str | None = None) -> TurnOutcome:
        self._llm_end(None)  # USAGE without a STOP after it is still shown
        usage, self._usage = self._usage, {}
        if stop_reason != "error":
            error = None
        return TurnOutcome(stop_reason, usage, error)

    async def _died(self) -> TurnOutcome:
        """EOF on stdout mid-turn: salvage the partial answer and end the turn ``error``."""
        text = "".join(self._text)
        self._text.clear()
        self._thinking.clear()
        if text:
            self.emit({"type": "assistant-text", "final?": False, "text": text})
            self._final_text = text
        error = await self._cli.death_note("in the middle of a turn")
        self._adapter_error(error)
        return self._outcome("error", error)

    def _complete(self, status: str, error: str | None) -> None:
        event: dict[str, Any] = {"type": "agent-turn-complete", "status": status}
        if error:
            event["error"] = error
        else:
            event["result"] = self._final_text
        self.emit(event)


def _add(total: dict[str, int], counts: Mapping[str, int]) -> None:
    for key, value in counts.items():
        if value:
            total[key] = total.get(key, 0) + value


def _wire_stop_reason(reason: str) -> str:
    from tether.agent.loop import wire_stop_reason

    return wire_stop_reason(reason)
