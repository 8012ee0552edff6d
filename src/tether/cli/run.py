"""``tether run``: start a child agent on a task and show it live.

Theory of operation: :func:`tether.runtime.parent.spawn.spawn` starts the child; every update
goes to the display (the only code that writes to the terminal) through
:class:`DisplayFeed`, which ``tether replay`` uses too, so a replay renders exactly what
the live view rendered. Lines typed on stdin become ``steer`` (``+text``: ``follow-up``);
Ctrl-C sends ``finalize``, a second ``cancel``, a third kills the child's process group;
SIGTERM and SIGHUP cancel (a hangup first points the dead terminal's fds at /dev/null).
The final answer always goes to stdout.

Approvals: on a terminal (stdin a TTY, read), an approval the agent asks for is put to
the person in place: the request, then a line ``y`` (yes), ``n`` (no) or ``a`` (yes, and
for this kind of call for the rest of the run), words after it a note for the agent,
with the terminal bell; while one waits, a typed line answers it (it is not a steer).
Anywhere else there is no one to ask: the child denies at once, saying so in the event
log, and a notice on stderr says so too (``--approve RULE`` decides without asking).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from tether import exits
from tether.numbers import SECONDS, SECONDS_OR_ZERO

STDIN_LINE_BYTES: Final = 1024 * 1024
"""A steering line typed or piped on stdin is cut off (skipped) at this size."""

NO_ONE: Final = "not a terminal; pass --approve RULE or run it under the daemon"
"""Why ``tether run`` off a terminal denies what no rule decides."""
_ANSWERS: Final = {
    "y": ("approve", "once"),
    "yes": ("approve", "once"),
    "n": ("deny", "once"),
    "no": ("deny", "once"),
    "a": ("approve", "always"),
    "always": ("approve", "always"),
}

EPILOG: Final = """\
while it runs:
  a line on stdin        is sent as steer (injected at the next turn boundary)
  a line starting with + is sent as follow-up (queued after the current turn)
  Ctrl-C                 finalize (one last tool-free turn, then the answer);
                         again: cancel; a third time: kill the child
  when the agent asks for an approval: y (yes), n (no), a (yes, always for this kind of
  call in this run), then an optional note; with no terminal the request is denied
  (decide ahead with --approve RULE / --deny RULE / --policy FILE)

worktrees and resume:
  --worktree [--base REF] [--branch NAME]   the agent works in a git worktree of its own
                         (branch tether/RUN_ID from HEAD of the repository --cwd is in),
                         outside the repository's tree; see `git worktree list`
  --resume RUN TASK      a new run that continues RUN's conversation (its agent, options,
                         worktree); --fork: a new conversation from it, RUN unchanged
  --base-url URL         point the agent at this model server (`tether model-server`):
                         its CLI's configuration is written into its own private home

exit status:
  0 done, 3 cancelled (also Ctrl-C, SIGTERM, SIGHUP, or a closed output pipe),
  4 failed (including a last turn that ended in an error), 5 timed-out, 2 usage error

The final answer always goes to stdout (`tether run ... > answer.txt` works); when stdout
is not a terminal the live view goes to stderr. Runs are kept: see `tether runs`.
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Start a child agent on TASK and show it live.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("task", nargs="+", help="what the agent should do")
    parser.add_argument(
        "--provider",
        default=os.environ.get("TETHER_PROVIDER"),
        help="model provider (default: $TETHER_PROVIDER, else the child's)",
    )
    parser.add_argument("--model", default=os.environ.get("TETHER_MODEL"), help="model name")
    parser.add_argument("--script", help="replies for the scripted provider (a JSON list)")
    parser.add_argument(
        "--deadline", type=SECONDS, metavar="S", help="the run times out after S seconds"
    )
    parser.add_argument(
        "--finalize-before",
        type=SECONDS_OR_ZERO,
        metavar="S",
        help="send finalize S seconds before the deadline "
        "(default: a fifth of it, at most 10 s, but at least the agent's own stop time "
        "and 2 s for the last turn; 0: never)",
    )
    parser.add_argument("--output", choices=("human", "stream-json", "wire"), default="human")
    parser.add_argument("--cwd", help="working directory of the child")
    parser.add_argument(
        "--child-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for `tether child` (repeatable)",
    )
    parser.add_argument(
        "--no-stdin", action="store_true", help="do not read steering lines from stdin"
    )
    from tether.cli.child import add_agent_flags, add_approval_flags

    add_agent_flags(parser)
    add_workspace_flags(parser)
    add_approval_flags(parser, child=False)
    return parser


def add_workspace_flags(parser: argparse.ArgumentParser, *, resume: bool = True) -> None:
    """``--worktree``, ``--base``, ``--branch``, ``--base-url`` (and ``--resume``,
    ``--fork``: ``tether run``'s)."""
    parser.add_argument(
        "--worktree", action="store_true", help="work in a new git worktree of its own"
    )
    parser.add_argument("--base", metavar="REF", help="with --worktree: start from REF")
    parser.add_argument(
        "--branch", metavar="NAME", help="with --worktree: the new branch (default tether/NAME)"
    )
    parser.add_argument(
        "--base-url", metavar="URL", help="point the agent at this model server (its config)"
    )
    if not resume:
        return
    parser.add_argument(
        "--resume", metavar="RUN", help="continue RUN's conversation (an id, a prefix, latest)"
    )
    parser.add_argument(
        "--fork", action="store_true", help="with --resume: a new conversation from RUN's"
    )


def workspace_problem(args: argparse.Namespace) -> str | None:
    """Workspace flags that go together only with others."""
    if (args.base or args.branch) and not args.worktree:
        return "--base and --branch go with --worktree"
    if getattr(args, "fork", False) and not getattr(args, "resume", None):
        return "--fork goes with --resume RUN"
    return None


def worktree_option(args: argparse.Namespace) -> Any:
    """``SpawnOptions.worktree`` for the flags (None without ``--worktree``)."""
    if not args.worktree:
        return None
    if args.base is None and args.branch is None:
        return True
    from tether.runtime.parent.options import WorktreeOption

    return WorktreeOption(base=args.base, branch=args.branch)


def resolve_run(ref: str) -> str:
    """The id of the one run ``ref`` names (an id, a prefix or suffix, ``latest``);
    ``ValueError`` saying why when it names none or several."""
    from tether.paths import db_path
    from tether.store.index import open_index

    found = open_index().resolve(ref) if db_path().exists() else []
    if not found:
        raise ValueError(f"--resume: no run matches {ref!r} (see `tether runs`)")
    if len(found) > 1:
        some = ", ".join(r.id for r in found[:5])
        raise ValueError(f"--resume: {ref!r} names {len(found)} runs ({some}); give more of it")
    return found[0].id


def main(argv: list[str], prog: str = "tether run") -> int:
    from tether.cli.child import join_agent_args

    parser = build_parser(prog)
    argv, command = _split_command(join_agent_args(argv))
    try:
        args = parser.parse_args(argv)
        args.command = command
        try:
            args.agent = _agent_name(args)
        except ValueError as exc:
            parser.error(str(exc))
        task = " ".join(args.task).strip()
        if not task:
            parser.error("the task is empty")
        problem = _input_problem(args) or workspace_problem(args)
        if problem is not None:
            parser.error(problem)
        if args.resume is not None:
            try:
                args.resume = resolve_run(args.resume)
            except ValueError as exc:
                parser.error(str(exc))
    except SystemExit as exc:
        return exits.OK if exc.code in (0, None) else exits.USAGE
    try:
        return asyncio.run(_main(args, task))
    except KeyboardInterrupt:
        return exits.CANCELLED


def _agent_name(args: argparse.Namespace) -> str | None:
    from tether.cli.child import agent_name

    name = agent_name(args)
    if args.command and name in (None, "builtin"):
        raise ValueError("a program after -- goes with --agent NAME (e.g. --agent resp)")
    if name in ("acp", "resp") and not args.command:
        raise ValueError(f"--agent {name} needs the agent's command after --")
    return name


def _input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the input that spawn's own check does not see: a working
    directory that is none (the options themselves are checked by spawn: BadOptions)."""
    if args.cwd is not None and not os.path.isdir(args.cwd):
        return f"--cwd {args.cwd}: not a directory"
    return None


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``tether run`` arguments from the adapter's program (after the first ``--``)."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


LAST_TURN_S: Final = 2.0  # the default lead leaves the last turn this long, at least


def finalize_after(
    deadline: float | None, before: float | None, agent: str | None = None
) -> float | None:
    """When the parent sends finalize for a run with ``deadline`` seconds: ``before``
    seconds ahead, else a fifth of the deadline (at most 10 s) but never less than the
    agent's own stop time (its adapter's ``stop_s``: bash-agent waits 5 s after its
    SIGINT) plus :data:`LAST_TURN_S` for the last turn."""
    if deadline is None or before == 0:
        return None
    if before is None:
        from tether.runtime.child.adapters.registry import AGENTS, DEFAULT_AGENT

        kind = AGENTS.get(agent or DEFAULT_AGENT, AGENTS[DEFAULT_AGENT])
        before = max(min(10.0, deadline / 5), kind.stop_s + LAST_TURN_S)
    return max(0.0, deadline - before)


async def _main(args: argparse.Namespace, task: str) -> int:
    from tether.errors import BadOptions
    from tether.runtime.parent.spawn import SpawnError, spawn

    if exits.EARLY_SIGNALS:  # stopped before anything started
        return exits.CANCELLED
    asking = _can_ask(args)
    try:
        handle = await spawn(
            task,
            agent=args.agent,
            agent_args=args.agent_arg,
            argv=args.command or None,
            provider=args.provider,
            model=args.model,
            script=None if args.script is None else _absolute(args.script),
            child_args=args.child_arg,
            cwd=args.cwd,
            deadline_s=args.deadline,
            finalize_after_s=finalize_after(args.deadline, args.finalize_before, args.agent),
            worktree=worktree_option(args),
            resume=args.resume,
            fork=args.fork,
            base_url=args.base_url,
            follow_nested=True,
            approval=args.approval,
            approve=args.approve,
            deny=args.deny,
            policy=args.policy,
            approval_timeout_s=args.approval_timeout,
            approval_default=args.approval_default,
            no_one_to_ask=None if asking else NO_ONE,
        )
    except BadOptions as exc:  # bad input: a usage error, nothing was made
        return _refused(args, str(exc), exits.USAGE)
    except SpawnError as exc:
        return _refused(args, str(exc), exits.FAILED)
    except OSError as exc:  # nothing could start: an unsafe directory, a full disk...
        return _refused(args, f"cannot start the run: {_os_error(exc)}", exits.USAGE)
    try:
        # The display (and, for a terminal, rich) is imported once the child is starting:
        # its import overlaps the child's start-up instead of delaying it. The child's
        # first events wait in its file until the display reads them.
        display = _open_display(args)
        presenter = DisplayFeed(display)
        controls = _Controls(handle, display, read_stdin=not args.no_stdin, asking=asking)
    except BaseException:
        handle.kill("the parent could not show the run")  # never leave the child behind
        raise
    controls.install()
    controls.replay(exits.EARLY_SIGNALS)  # what came while the child started, acted on now
    status = asyncio.create_task(_status_loop(handle, display, args.output))
    try:
        async for update in handle.updates():
            presenter.update(update)
            controls.on_update(update)
        result = await handle.wait()
    except BaseException:
        handle.kill("the parent stopped")
        raise
    finally:
        controls.uninstall()
        status.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await status
    presenter.end(
        status=result.status,
        final_text=result.final_text,
        usage=result.usage,
        truncated=result.truncated,
        elapsed_s=result.elapsed_s,
        error=result.error,
        stop_reason=result.stop_reason,
    )
    display.close()
    return exit_code(result.status, result.stop_reason)


def _can_ask(args: argparse.Namespace) -> bool:
    """A person can answer here: stdin is a terminal and is read."""
    return not args.no_stdin and _fd_isatty(0)


def _open_display(args: argparse.Namespace) -> Any:
    from tether.display import open_display

    return open_display(args.output, stdout=sys.stdout, stderr=sys.stderr)


def _refused(args: argparse.Namespace, notice: str, code: int) -> int:
    """The run could not start: say why on the display, return ``code``."""
    display = _open_display(args)
    display.notice(notice, level="error")
    display.close()
    return code


def _os_error(exc: OSError) -> str:
    """One line for an ``OSError``: its own message, else its strerror and file name."""
    if exc.strerror is None:
        return str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror}{where}"


def exit_code(status: str, stop_reason: str | None) -> int:
    """The documented exit status; a run whose last turn ended in an error has failed
    (:func:`tether.exits.recorded_status`: the answer is missing, so a script must not
    mistake it for success)."""
    return exits.for_status(exits.recorded_status(status, stop_reason))


class DisplayFeed:
    """Feeds a run's updates to the display; live and replay call it the same way."""

    def __init__(self, display: Any) -> None:
        self.display = display

    def update(self, update: Any) -> None:
        from tether.runtime.parent.spawn import InboxItem, RunEvent

        if isinstance(update, RunEvent):
            self.display.event(update.event, run=update.run, depth=update.depth, raw=update.raw)
        elif isinstance(update, InboxItem):
            self.display.inbox(update.message, run=update.run, depth=update.depth)
        else:
            level = "error" if update.fatal else "warning"
            self.display.notice(f"run {update.run}: {update.reason}", level=level)

    def end(
        self,
        *,
        status: str,
        final_text: str,
        usage: dict[str, Any] | None,
        truncated: bool,
        elapsed_s: float,
        error: str | None,
        stop_reason: str | None = None,
    ) -> None:
        from tether.display import ended_label

        if status != "done" and error:
            self.display.notice(f"run {status}: {error}", level="error")
        self.display.final(
            status=ended_label(status, stop_reason),
            final_text=final_text,
            usage=usage,
            truncated=truncated,
            elapsed_s=elapsed_s,
        )


async def _status_loop(handle: Any, display: Any, output: str) -> None:
    """The live status line: only on a terminal (a replay could not reproduce its timing)."""
    live = sys.stdout if _isatty(sys.stdout) else sys.stderr
    if output != "human" or not _isatty(live):
        return
    started = time.monotonic()
    while True:
        display.status(state=str(handle.state), elapsed_s=time.monotonic() - started)
        await asyncio.sleep(0.25)


class _Controls:
    """Stdin lines -> steer / follow-up, or the answer to the approval that waits;
    Ctrl-C -> finalize, cancel, kill."""

    def __init__(self, handle: Any, display: Any, *, read_stdin: bool, asking: bool) -> None:
        self.handle = handle
        self.read_stdin = read_stdin
        self.asking = asking
        self.waiting: dict[str, dict[str, Any]] = {}  # approvals put to the person, by key
        self.stdin_fd = 0
        self.display = display
        self.interrupts = 0
        self.loop = asyncio.get_running_loop()
        self.tasks: set[asyncio.Task[None]] = set()
        self._installed: list[int] = []
        self.terminals: list[int] = []

    def _handlers(self) -> dict[int, Callable[[], None]]:
        return {
            signal.SIGINT: self.interrupt,
            signal.SIGTERM: self.terminate,
            signal.SIGHUP: self.hangup,
        }

    def replay(self, signums: list[int]) -> None:
        """Act on signals recorded before :meth:`install`, in the order they came."""
        handlers = self._handlers()
        while signums:
            handlers[signums.pop(0)]()

    def install(self) -> None:
        self.terminals = [fd for fd in (0, 1, 2) if _fd_isatty(fd)]
        for sig, handler in self._handlers().items():
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self.loop.add_signal_handler(sig, handler)
                self._installed.append(sig)
        if not self.read_stdin or not _stdin_readable():
            return
        thread = threading.Thread(target=self._read_stdin, name="tether-stdin", daemon=True)
        thread.start()

    def uninstall(self) -> None:
        for sig in self._installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self.loop.remove_signal_handler(sig)
        # The run is over: a late Ctrl-C, SIGTERM or hangup must not turn its status into
        # 130/143/129 (removing a loop's handler restores the default, which kills).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)

    def _read_stdin(self) -> None:
        """Steering lines from fd 0, read unbuffered.

        ``sys.stdin.buffer.readline()`` would park this daemon thread inside the buffered
        reader's lock, and the interpreter aborts at exit when it finds that lock taken
        ("Fatal Python error: _enter_buffered_busy"): exit 134 whenever stdin is still
        open. ``os.read`` holds no Python-level lock, so exit stays clean.
        """
        from tether.wire.lines import Line, LineSplitter

        splitter = LineSplitter(max_line_bytes=STDIN_LINE_BYTES)
        while True:
            try:
                chunk = os.read(self.stdin_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            splitter.feed(chunk)
            while items := splitter.read():
                for item in items:
                    if isinstance(item, Line):
                        self._typed(item.data)

    def _typed(self, data: bytes) -> None:
        text = data.decode("utf-8", "replace").strip()
        if text:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the run is over
                self.loop.call_soon_threadsafe(self._spawn, self._line(text))

    def _spawn(self, coro: Any) -> None:
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- approvals ----------------------------------------------------------------------

    def on_update(self, update: Any) -> None:
        """Put an approval request to the person; drop one decided otherwise; say when
        no one could be asked."""
        from tether.runtime.parent.spawn import InboxItem

        if not isinstance(update, InboxItem) or update.depth:
            return
        message = update.message
        kind = message.get("type")
        key = message.get("msg_key")
        if kind == "approval_request" and isinstance(key, str) and self.asking:
            self.waiting[key] = message
            if len(self.waiting) == 1:
                self._prompt()
        elif kind == "approval_decision":
            self._decided(message)

    def _prompt(self) -> None:
        key, message = next(iter(self.waiting.items()))
        what = message.get("kind") or message.get("tool") or "this kind of call"
        self.display.notice(
            f"approval {key}: y = yes, n = no, a = yes and always for {what} in this run "
            "(then an optional note), Enter to send",
            level="warning",
        )
        _bell()

    def _decided(self, message: dict[str, Any]) -> None:
        key = message.get("key")
        if isinstance(key, str) and self.waiting.pop(key, None) is not None:
            self.display.notice(f"approval {key} was decided meanwhile ({message.get('by')})")
            if self.waiting:
                self._prompt()
        if message.get("by") == "no-one":
            what = f"{message.get('tool', '?')}: {message.get('summary', '')}"
            self.display.notice(
                f"denied {what}: no one to ask: {message.get('text')}", level="warning"
            )

    async def _answer(self, text: str) -> None:
        from tether.inbox.answers import AnswerRefused
        from tether.runtime.parent.spawn import ParentError

        word, _, note = text.partition(" ")
        chosen = _ANSWERS.get(word.lower())
        if chosen is None:
            self.display.notice("an approval waits: answer y, n or a", level="warning")
            _bell()
            return
        key, message = next(iter(self.waiting.items()))
        del self.waiting[key]
        decision, scope = chosen
        try:
            await self.handle.answer(message, note.strip(), decision=decision, scope=scope)
        except (AnswerRefused, ParentError) as exc:
            self.display.notice(f"approval {key}: {exc}", level="warning")
        if self.waiting:
            self._prompt()

    async def _line(self, text: str) -> None:
        from tether.runtime.parent.spawn import ParentError

        if self.waiting:
            await self._answer(text)
            return
        kind, body = ("follow-up", text[1:].strip()) if text.startswith("+") else ("steer", text)
        if not body:
            return
        try:
            ack = await self.handle.send(kind, text=body)
        except ParentError as exc:
            self.display.notice(f"{kind} not sent: {exc}", level="warning")
            return
        reason = f": {ack.reason}" if isinstance(ack.reason, str) else ""
        self.display.notice(f"{kind} {ack.status}{reason}")

    def interrupt(self) -> None:
        self.interrupts += 1
        if self.interrupts == 1:
            self.display.notice("finalizing: one last turn without tools (Ctrl-C again to cancel)")
            self._spawn(self._send("finalize"))
        elif self.interrupts == 2:
            self.display.notice("cancelling (Ctrl-C again to kill)", level="warning")
            self._spawn(self._send("cancel"))
        else:
            self.display.notice("killing the child", level="warning")
            self.handle.kill()

    def terminate(self) -> None:
        self.interrupts = max(self.interrupts, 1)
        self.interrupt()

    def hangup(self) -> None:
        """The terminal went away: stop writing to it, then cancel the run (exit 3)."""
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in self.terminals:
            os.dup2(devnull, fd)
        os.close(devnull)
        self.terminate()

    async def _send(self, kind: str) -> None:
        from tether.runtime.parent.spawn import ParentError

        with contextlib.suppress(ParentError):
            if kind == "cancel":
                await self.handle.cancel()
            else:
                await self.handle.finalize()


def _bell() -> None:
    """The terminal bell, on the first of stderr and stdout that is a terminal."""
    for fd in (2, 1):
        if _fd_isatty(fd):
            with contextlib.suppress(OSError):
                os.write(fd, b"\a")
            return


def _fd_isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _absolute(path: str) -> str:
    return os.path.abspath(path)


def _stdin_readable() -> bool:
    try:
        os.fstat(0)
    except OSError:
        return False
    return True
