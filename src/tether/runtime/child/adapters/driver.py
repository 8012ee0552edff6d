"""The driver of a sans-IO translator: one CLI process, turns, controls, the ending.

Theory of operation: :class:`TranslatingRunner` is the turn runner
(:class:`tether.agent.runner.TurnRunner`) of the Codex, pi and ACP adapters. It owns a
:class:`~tether.runtime.child.adapters.base.CliProcess` whose stdout lines go to the
translator's ``receive``; every method of the translator returns actions
(:mod:`tether.runtime.child.adapters.translate`) that the driver performs in order: write a
message to the CLI, emit a display event, take a permission request to the run's
approval desk (:mod:`tether.agent.desk`: rules, then a person, for as long as it takes;
the verdict goes back through the translator's ``answered``, in the CLI's protocol),
note the end of the CLI's turn, or fail the set-up. Requests still waiting when the turn
is interrupted or aborted, or the CLI dies, are withdrawn (answered deny / cancelled).

- :meth:`prepare` starts the CLI (stdin stays open for the whole run: pi exits on EOF)
  and runs the hand-shake (minus its opening when ``tether child`` wrote that as the CLI
  started: ``AdapterOptions.sent``, checked against the translator's); the CLI's session
  id is shown in an ``info`` event and, with a run directory, kept in its
  ``agent-session`` file (0600) for resume.
- :meth:`run_turn` opens a turn with the opening message, then until the CLI's turn
  ends: steers (and, where the CLI takes them natively, follow-ups) go to the
  translator's ``inject`` as the presenter queues them; finalize's interrupt goes to
  ``interrupt`` once. When the CLI's turn ends, queued follow-ups (and the steers of a
  CLI that takes none mid-turn: ACP) open the next CLI turn of the same tether turn
  (unless the turn was interrupted); usage is summed across them.
- finalize's last turn: with ``Traits.final_command`` the CLI is closed and started
  again with that command (Claude Code: ``--resume SESSION --tools ""``, the same
  conversation with no tools), hand-shake included; without, it runs in the same CLI.
- Abort (cancel, the deadline, a fatal error: the turn task is cancelled): the CLI's own
  interrupt is written, then the CLI's process group and every process it started in
  another group (Codex runs tools in their own sessions) are ended, SIGTERM then SIGKILL
  after :data:`~tether.runtime.child.adapters.base.TERM_GRACE_S`.
- The CLI closing its stdout (killed, crashed) ends the turn ``error`` with its exit
  status and stderr tail, and then the run (:meth:`gone` returns: the presenter ends it
  ``failed``, so the daemon shows the agent ended and a follow-up resumes its session in
  a new run); a CLI that dies between turns ends the run at once. A model call left open
  (the CLI died, or was ended, mid-stream) is closed with ``llm-end`` ``error`` /
  ``aborted``.
- :meth:`aclose` closes stdin, gives the CLI a moment, then ends whatever is left
  (claude-code-acp never exits on EOF).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

from tether.agent.desk import Verdict
from tether.agent.runner import (
    EmitFn,
    Injection,
    RunnerSetupError,
    TurnControl,
    TurnOutcome,
    TurnRequest,
)
from tether.agent.usage import Usage
from tether.runtime.child.adapters.base import BadLine, CliProcess
from tether.runtime.child.adapters.translate import (
    Action,
    Ask,
    Broken,
    Ended,
    Send,
    Show,
    Started,
    Withdraw,
)
from tether.wire.limits import POLL_BUSY_S

if TYPE_CHECKING:
    from tether.agent.desk import Request
    from tether.runtime.child.adapters import AdapterOptions

__all__ = ["SESSION_FILE", "Traits", "TranslatingRunner", "Translator", "descendants"]

SESSION_FILE: Final = "agent-session"
# The hand-shake's bound when the run sets no start timeout (TETHER_START_TIMEOUT_S):
# Gemini CLI alone takes 11-20 s to answer `initialize` on a loaded 2-core machine, more
# than the parent's default start_s (20 s) leaves; a run that sets one is held to it.
START_S: Final = 60.0


class Translator(Protocol):
    final_text: str

    def handshake(self) -> list[Action]: ...

    def start_turn(self, opening: Injection) -> list[Action]: ...

    def inject(self, item: Injection) -> list[Action]: ...

    def interrupt(self) -> list[Action]: ...

    def receive(self, message: object) -> list[Action]: ...

    def answered(self, token: Any, verdict: Verdict) -> list[Action]: ...


class Traits(NamedTuple):
    """Which queued controls the translator takes in during a turn."""

    name: str  # the agent's name, for messages and agent-started
    steer: bool  # steers go to inject() (else they wait for the next turn)
    follow_up: bool  # follow-ups go to inject() (else they open the next CLI turn)
    # When set, finalize's last turn runs in a new CLI with this command (given the CLI's
    # command and the session id), e.g. Claude Code's with `--resume ID --tools ""`.
    final_command: Callable[[Sequence[str], str | None], list[str]] | None = None


class _Turn:
    """What one tether turn collects while its CLI turns run."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()
        self.outcome: Ended | None = None
        self.usage = Usage()
        self.interrupted = False


class TranslatingRunner:
    """See the module docstring."""

    def __init__(
        self, translator: Translator, traits: Traits, emit: EmitFn, options: AdapterOptions
    ) -> None:
        self.translator = translator
        self.traits = traits
        self._emit = emit
        self._call_open = False  # an llm-start not yet closed by its llm-end
        self.run_dir = options.run_dir
        env = options.env
        self.desk = options.desk
        self.cwd = options.cwd
        self._asks: dict[Any, asyncio.Task[None]] = {}  # token -> its wait at the desk
        self._command = (list(options.argv), options.cwd, env)
        self._start_s = START_S if options.start_s is None else options.start_s
        started_at = time.monotonic() if options.started_at is None else options.started_at
        self._handshake_by = started_at + self._start_s
        self.process = self._new_process(options.argv, options.process)
        self._sent = list(options.sent)  # the hand-shake's opening, written early
        self.session: str | None = None
        self._started = asyncio.Event()
        self._problem: str | None = None
        self._prepared = asyncio.Event()
        self._setup_error: str | None = None
        self._turn: _Turn | None = None
        self._dead: str | None = None
        self._ending = False  # the runner ends the CLI itself (no death to report)
        self._death: str | None = None  # how the CLI died on its own
        self._lost = asyncio.Event()  # set once that death is to end the run

    # -- set-up -------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Start (or adopt) the CLI and run the hand-shake, bounded by the run's start
        timeout counted from the child's start (from the restart for finalize's CLI)."""
        try:
            await self.process.start()
            self._perform(self._unsent(self.translator.handshake()))
            remaining = max(0.0, self._handshake_by - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._started.wait(), remaining)
            if self._problem is not None or not self._started.is_set():
                why = self._problem or (
                    f"no answer to the hand-shake within {self._start_s:g} s "
                    "(the run's start timeout)"
                )
                raise RunnerSetupError(await self._note(why))
        except BaseException as exc:
            self._setup_error = str(exc) or repr(exc)
            raise
        finally:
            self._prepared.set()

    def _unsent(self, actions: list[Action]) -> list[Action]:
        """The hand-shake's actions without the messages written early (the same ones)."""
        sent, self._sent = self._sent, []
        if not sent:
            return actions
        early = [a.message for a in actions[: len(sent)] if isinstance(a, Send)]
        if early != sent:
            raise RunnerSetupError(
                f"{self.traits.name}: the hand-shake written as the CLI started differs "
                "from the adapter's (a bug in tether)"
            )
        return actions[len(sent) :]

    def _new_process(
        self, argv: Sequence[str], started: subprocess.Popen[bytes] | None = None
    ) -> CliProcess:
        """A CLI process whose end is mourned only while it is the current one."""

        def on_eof() -> None:
            if process is self.process:
                self._on_eof()

        _, cwd, env = self._command
        process = CliProcess(
            argv, cwd=cwd, env=env, on_message=self._on_message, on_eof=on_eof, started=started
        )
        return process

    async def _restart(self, argv: Sequence[str]) -> None:
        """Finalize's last turn: the CLI again, with ``argv`` (Traits.final_command)."""
        await self.aclose()
        self.process = self._new_process(argv)
        self._ending = False
        self._dead = self._problem = self._setup_error = None
        self._started.clear()
        self._prepared.clear()
        self._handshake_by = time.monotonic() + self._start_s
        await self.prepare()

    async def _note(self, why: str) -> str:
        if self.process.eof or self.process.returncode is not None:
            return await self.process.death_note("during the hand-shake")
        return f"{self.traits.name}: {why}"

    async def _wait_prepared(self) -> None:
        await self._prepared.wait()
        if self._setup_error is not None:
            raise RunnerSetupError(self._setup_error)

    # -- turns --------------------------------------------------------------------------

    async def run_turn(self, request: TurnRequest, control: TurnControl) -> TurnOutcome:
        await self._wait_prepared()
        if request.final and self.traits.final_command is not None:
            await self._restart(self.traits.final_command(self._command[0], self.session))
        self.emit({"type": "agent-started", "provider": self.traits.name})
        turn = self._turn = _Turn()
        try:
            outcome = await self._run(turn, request.opening, control)
        except asyncio.CancelledError:
            self._abort()
            self._turn = None  # ended by us: the CLI's exit that follows is no error
            await self.terminate()
            self._close_call("aborted")
            raise
        finally:
            self._turn = None
            if self._death is not None:
                self._lost.set()  # after the turn the death ended
        status = {"aborted": "aborted", "error": "error"}.get(outcome.stop_reason, "done")
        complete: dict[str, Any] = {"type": "agent-turn-complete", "status": status}
        if outcome.error:
            complete["error"] = outcome.error
        self.emit(complete)
        return outcome

    async def _run(self, turn: _Turn, opening: Injection, control: TurnControl) -> TurnOutcome:
        self.emit(opening.event())
        if self._dead is not None:
            return TurnOutcome("error", {}, self._dead)
        self._perform(self.translator.start_turn(opening))
        follow_ups: list[Injection] = []
        while True:
            await self._until_ended(turn, control)
            ended = turn.outcome
            if ended is None:  # the CLI went away
                error = self._dead or f"{self.traits.name} went away"
                return TurnOutcome("error", turn.usage.to_wire(), error)
            if not turn.interrupted and ended.stop_reason not in ("aborted", "error"):
                follow_ups += self._queued(control)
            if not follow_ups or turn.interrupted:
                return TurnOutcome(ended.stop_reason, turn.usage.to_wire(), ended.error)
            item = follow_ups.pop(0)
            self.emit(item.event())
            turn.ended.clear()
            turn.outcome = None
            self._perform(self.translator.start_turn(item))

    async def _until_ended(self, turn: _Turn, control: TurnControl) -> None:
        while not turn.ended.is_set():
            if control.interrupted and not turn.interrupted:
                turn.interrupted = True
                self._withdraw_all()
                self._perform(self.translator.interrupt())
            if not turn.interrupted:
                self._take(control)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(turn.ended.wait(), POLL_BUSY_S)

    def _queued(self, control: TurnControl) -> list[Injection]:
        """What opens the next CLI turn when one ends: the follow-ups, and the steers of
        a CLI that cannot take them during its turn (ACP), in the order they came.

        They stay in the same tether turn: ending it with a steer still queued would show
        the parent an idle child (whose automatic ``close`` then refuses what follows).
        """
        items = [] if self.traits.steer else control.take_steering()
        return sorted([*items, *control.take_follow_ups()], key=lambda i: i.ref or 0)

    def _take(self, control: TurnControl) -> None:
        items: list[Injection] = []
        if self.traits.steer:
            items += control.take_steering()
        if self.traits.follow_up:
            items += control.take_follow_ups()
        for item in sorted(items, key=lambda i: i.ref or 0):
            self._perform(self.translator.inject(item))

    def _abort(self) -> None:
        self._withdraw_all()
        with contextlib.suppress(Exception):
            self._perform(self.translator.interrupt())

    def final_text(self) -> str:
        return self.translator.final_text

    async def gone(self) -> str:
        """Once the CLI died on its own (see the module docstring): how."""
        await self._lost.wait()
        return self._death or f"{self.traits.name} went away"

    # -- the CLI's output ---------------------------------------------------------------

    def _on_message(self, message: dict[str, Any] | BadLine) -> None:
        if isinstance(message, BadLine):
            error = f"{self.traits.name} wrote a bad line: {message.reason}"
            self.emit({"type": "error", "error": error, "source": "adapter"})
            return
        self._perform(self.translator.receive(message))

    def _on_eof(self) -> None:
        self._dead = f"{self.traits.name} closed its stdout"
        asyncio.get_running_loop().create_task(self._mourn())

    async def _mourn(self) -> None:
        """The CLI's output ended: say why (exit status, stderr tail) and end the turn."""
        process = self.process
        note = await process.death_note("mid-run")
        if process is not self.process:
            return  # replaced meanwhile (finalize's restart)
        _kill_groups(_strays(process))  # its tools have no one to answer to now
        self._withdraw_all()
        self._dead = note
        if not self._ending:
            self._death = note
            if self._turn is None:
                self._lost.set()
        if not self._started.is_set():
            self._problem = self._problem or note
            self._started.set()
        turn = self._turn
        if turn is not None and not turn.ended.is_set():
            self._close_call("error")
            self.emit({"type": "error", "error": note, "source": "adapter"})
            turn.ended.set()

    # -- display ------------------------------------------------------------------------

    def emit(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind in ("llm-start", "llm-end"):
            self._call_open = kind == "llm-start"
        self._emit(event)

    def _close_call(self, stop: str) -> None:
        """A model call the CLI never closed (it died or was ended mid-stream) is closed
        as the built-in agent closes one: ``assistant-stream-end``, ``llm-end`` with
        ``stop`` (its text already went out as deltas)."""
        if self._call_open:
            self.emit({"type": "assistant-stream-end", "final?": False})
            self.emit({"type": "llm-end", "stop-reason": stop})

    # -- actions ------------------------------------------------------------------------

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.process.write_json(action.message)
            elif isinstance(action, Show):
                self.emit(action.event)
            elif isinstance(action, Ended):
                self._ended(action)
            elif isinstance(action, Started):
                self._session(action.session)
            elif isinstance(action, Ask):
                self._ask(action)
            elif isinstance(action, Withdraw):
                self._withdraw(action.token)
            elif isinstance(action, Broken):
                self._problem = self._problem or action.reason  # the first says why
                self._started.set()

    def _ended(self, action: Ended) -> None:
        turn = self._turn
        if turn is None:
            return
        turn.usage += action.usage
        turn.outcome = action
        turn.ended.set()

    def _session(self, session: str | None) -> None:
        self.session = session
        self._started.set()
        if not session:
            return
        self.emit({"type": "info", "summary": f"{self.traits.name} session {session}"})
        if self.run_dir is not None:
            with contextlib.suppress(OSError):
                _write_private(self.run_dir / SESSION_FILE, session + "\n")

    # -- approvals ----------------------------------------------------------------------

    def _ask(self, action: Ask) -> None:
        """Take the CLI's request to the desk; its verdict is answered when it comes."""
        request = action.request
        if request.cwd is None:
            request = request._replace(cwd=self.cwd)
        old = self._asks.pop(action.token, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(self._decide(action.token, request))
        self._asks[action.token] = task

    async def _decide(self, token: Any, request: Request) -> None:
        try:
            if self.desk is None:
                why = "this child has no approval desk"
                verdict = Verdict("deny", "no-one", text=why)
            else:
                verdict = await self.desk.request(request)
        except asyncio.CancelledError:
            self._answer(token, Verdict("deny", "withdrawn", text="the turn ended"))
            raise
        finally:
            if self._asks.get(token) is asyncio.current_task():
                del self._asks[token]
        self._answer(token, verdict)

    def _answer(self, token: Any, verdict: Verdict) -> None:
        with contextlib.suppress(Exception):  # a CLI gone meanwhile: nothing to answer
            self._perform(self.translator.answered(token, verdict))

    def _withdraw(self, token: Any) -> None:
        task = self._asks.pop(token, None)
        if task is not None:
            task.cancel()

    def _withdraw_all(self) -> None:
        for token in list(self._asks):
            self._withdraw(token)

    # -- ending -------------------------------------------------------------------------

    async def terminate(self) -> None:
        """End the CLI's group and every process it started elsewhere (see the docstring)."""
        self._ending = True
        strays = _strays(self.process)
        await self.process.terminate()
        _kill_groups(strays)

    async def aclose(self) -> None:
        self._ending = True
        self._withdraw_all()
        strays = _strays(self.process)
        try:
            await self.process.aclose()
        finally:
            _kill_groups(strays + _strays(self.process))


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc; [] where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _strays(process: CliProcess) -> list[int]:
    """The process groups of the CLI's descendants that left its group.

    Searched below this process, not below the CLI: the adapter is the subreaper of what
    it starts (:func:`~tether.runtime.child.adapters.base.adopt_orphans`), so a tool whose CLI
    died first (Claude Code runs Bash in its own session) is still found here.
    """
    proc = process.proc
    own = os.getpgrp()
    groups = []
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group not in (own, proc.pid if proc else None) and group not in groups:
                groups.append(group)
    return groups


def _kill_groups(groups: list[int]) -> None:
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
