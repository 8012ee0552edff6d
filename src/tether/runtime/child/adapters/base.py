"""The adapter base: one agent CLI process, owned for the whole run.

Theory of operation: :class:`CliProcess` starts the CLI once (``start``), in its own
process group, with stdin, stdout and stderr as pipes; stdin stays open for the run (pi
exits on EOF). Its environment is the child's, so ``TETHER_INBOX_PATH`` /
``RUNEX_INBOX_PATH`` reach the CLI and its tools can ``echo >>`` the inbox. Three pump
tasks run until the end:

- stdout: every chunk goes to ``on_data`` (a RESP reader) or, for JSON-lines protocols,
  through :class:`JsonLines` (a bounded line splitter plus a JSON object decoder) to
  ``on_message`` as a dict or a :class:`BadLine`; ``on_eof`` runs once when stdout ends
  (or when the process has exited and a leftover of its group keeps stdout open);
- stderr: copied to the child's stderr (the run's stderr file), its first line and the
  last :data:`STDERR_TAIL_BYTES` kept for :meth:`CliProcess.death_note` (a CLI that
  refuses its arguments says why first and then prints its whole usage: Gemini CLI);
- the exit watch.

Ending: :meth:`CliProcess.terminate` (SIGTERM to the group, SIGKILL after the grace) for
cancel and the deadline; :meth:`CliProcess.aclose` closes stdin, lets the CLI leave for
a moment, then ends whatever is left of the group, so the CLI never outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from tether import jsondepth, procs, reaper
from tether.agent.runner import RunnerSetupError
from tether.runtime.child.adapters.early import spawn_cli
from tether.wire.limits import SUMMARY_BYTES
from tether.wire.lines import Line, LineSplitter
from tether.wire.text import cut_text

__all__ = [
    "CLI_LINE_BYTES",
    "STDERR_TAIL_BYTES",
    "TERM_GRACE_S",
    "BadLine",
    "CliChild",
    "CliProcess",
    "JsonLines",
    "wait_exit",
    "with_stderr",
]

# Between SIGTERM and SIGKILL for the CLI's group. The presenter allows an aborted turn
# and `aclose` about a second each, so this stays well below that.
TERM_GRACE_S: Final = 0.3
# At the end of the run: how long the CLI may take to leave after stdin's EOF.
EXIT_WAIT_S: Final = 0.2
# How long to wait for the exit status and stderr after EOF on stdout.
DEATH_WAIT_S: Final = 0.5
STDERR_TAIL_BYTES: Final = 2048
STDERR_HEAD_BYTES: Final = 512
READ_CHUNK: Final = 64 * 1024
EXIT_POLL_S: Final = 0.02
# The longest stdout line a JSON-lines CLI may write (tool results can be large).
CLI_LINE_BYTES: Final = 16 * 1024 * 1024
# The most arrays and objects such a line may hold: each decoded one costs ~250 bytes, so
# a 16 MiB line of them would be ~500 MB; real events hold hundreds.
CLI_LINE_CONTAINERS: Final = 65536
# A dead CLI's note (one line): well within an exit line's error (child_io), longer than
# a summary, so the stderr lines that say why fit.
ERROR_LINE_BYTES: Final = 4 * SUMMARY_BYTES
STDERR_LABEL: Final = "; stderr: "


class BadLine(NamedTuple):
    """A stdout line that is not a JSON object (or is too long); ``reason`` says which."""

    offset: int
    reason: str


class JsonLines:
    """Bytes in, JSON objects (dicts) or :class:`BadLine` out; bounded and total."""

    def __init__(self, max_line_bytes: int = CLI_LINE_BYTES) -> None:
        self._splitter = LineSplitter(
            max_line_bytes=max_line_bytes, budget_bytes=max_line_bytes + 1, budget_lines=1024
        )

    def feed(self, data: bytes) -> list[dict[str, Any] | BadLine]:
        self._splitter.feed(data)
        out: list[dict[str, Any] | BadLine] = []
        while batch := self._splitter.read():
            out.extend(self._decode(item) for item in batch)
        return out

    def _decode(self, item: object) -> dict[str, Any] | BadLine:
        if not isinstance(item, Line):
            offset = getattr(item, "offset", 0)
            return BadLine(offset, f"a line of more than {CLI_LINE_BYTES} bytes was skipped")
        data = item.data.strip()
        if not data:
            return BadLine(item.offset, "an empty line")
        try:
            value = jsondepth.decode_any(data, max_containers=CLI_LINE_CONTAINERS)
        except msgspec.DecodeError as exc:
            return BadLine(item.offset, f"not JSON ({exc}): {_preview(data)}")
        if not isinstance(value, dict):
            return BadLine(item.offset, f"not a JSON object: {_preview(data)}")
        return value


def _preview(data: bytes) -> str:
    return data[:80].decode("utf-8", "replace")


class CliChild:
    """A started CLI process on the event loop: stdin a write transport, stdout and
    stderr stream readers, its exit seen through a pidfd (polled where there is none).

    :meth:`adopt` takes a :class:`subprocess.Popen` with three pipes, however it was
    started (:func:`~tether.runtime.child.adapters.early.spawn_cli`, early or not), so a
    CLI started before the event loop existed is driven like any other.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        stdin: asyncio.WriteTransport,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._popen = popen
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._transports = transports
        self._exited = asyncio.Event()
        self._pidfd: int | None = None
        self._poller: asyncio.TimerHandle | None = None

    @classmethod
    async def adopt(cls, popen: subprocess.Popen[bytes]) -> CliChild:
        loop = asyncio.get_running_loop()
        assert popen.stdin is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        readers: list[asyncio.StreamReader] = []
        transports: list[asyncio.BaseTransport] = [stdin]
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(limit=READ_CHUNK)
            transport, _ = await loop.connect_read_pipe(_protocol_of(reader), pipe)
            readers.append(reader)
            transports.append(transport)
        child = cls(popen, stdin, readers[0], readers[1], transports)
        child._watch(loop)
        return child

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            self._poll()  # no pidfd (an old kernel): poll at EXIT_POLL_S
            return
        loop.add_reader(self._pidfd, self._check)

    def _check(self) -> None:
        """Reap the process if it has exited (waitpid for its pid only)."""
        if self._popen.poll() is None:
            return
        self._exited.set()
        self._unwatch()

    def _poll(self) -> None:
        self._check()
        if not self._exited.is_set():
            self._poller = asyncio.get_running_loop().call_later(EXIT_POLL_S, self._poll)

    def _unwatch(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def wait(self) -> int:
        await self._exited.wait()
        code = self._popen.returncode
        assert code is not None
        return code

    def close(self) -> None:
        """Close the pipes and stop watching (the process is not signalled)."""
        for transport in self._transports:
            transport.close()
        self._unwatch()


def _protocol_of(reader: asyncio.StreamReader) -> Callable[[], asyncio.StreamReaderProtocol]:
    return lambda: asyncio.StreamReaderProtocol(reader)


class CliProcess:
    """One CLI process and its pumps; see the module docstring."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        on_data: Callable[[bytes], None] | None = None,
        on_message: Callable[[dict[str, Any] | BadLine], None] | None = None,
        on_eof: Callable[[], None] | None = None,
        started: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.argv = list(argv)
        self._early = started  # started by `tether child` already: adopted by start()
        self.cwd = cwd
        self.env = dict(env)
        self._on_data = on_data
        self._on_message = on_message
        self._on_eof = on_eof
        self._lines = JsonLines() if on_message is not None else None
        self.proc: CliChild | None = None
        self.started_at: float | None = None
        self.eof = False
        self.stderr_tail = b""
        self.stderr_head = b""  # the first STDERR_HEAD_BYTES
        self._stderr_bytes = 0
        self._stderr_done = asyncio.Event()
        self._pumps: list[asyncio.Task[None]] = []

    @property
    def name(self) -> str:
        return Path(self.argv[0]).name if self.argv else "?"

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def start(self) -> None:
        """Start the CLI (or adopt the one started early, ``started=``); a failure is a
        :class:`RunnerSetupError` naming the command."""
        adopt_orphans()
        popen, self._early = self._early, None
        if popen is None:
            try:
                popen = spawn_cli(self.argv, self.cwd, self.env)
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise RunnerSetupError(f"cannot start {shlex.join(self.argv)}: {reason}") from exc
        proc = self.proc = await CliChild.adopt(popen)
        self.started_at = time.monotonic()
        self._pumps = [
            asyncio.create_task(self._pump_stdout(proc.stdout)),
            asyncio.create_task(self._pump_stderr(proc.stderr)),
            asyncio.create_task(self._watch_exit(proc)),
        ]

    def write(self, data: bytes) -> bool:
        """Write to the CLI's stdin; False when it is gone."""
        stdin = None if self.proc is None else self.proc.stdin
        if stdin is None or stdin.is_closing():
            return False
        try:
            stdin.write(data)
        except (OSError, RuntimeError, ValueError):
            return False
        return True

    def write_json(self, obj: Any) -> bool:
        """One JSON line on the CLI's stdin."""
        return self.write(msgspec.json.encode(obj) + b"\n")

    async def terminate(self, grace_s: float = TERM_GRACE_S) -> None:
        """SIGTERM the CLI's group, SIGKILL what is left after ``grace_s``."""
        if self.proc is None:
            await self._drop_early()
            return
        try:
            await procs.terminate_group(self.proc, grace_s)
        except BaseException:
            procs.kill_group(self.proc)
            raise

    async def aclose(self, exit_wait_s: float = EXIT_WAIT_S) -> None:
        """Close stdin, give the CLI ``exit_wait_s`` to leave, then end its whole group."""
        proc = self.proc
        if proc is None:
            await self._drop_early()
            return
        try:
            proc.stdin.close()
            await wait_exit(proc, exit_wait_s)
            await procs.terminate_group(proc, TERM_GRACE_S)
        except BaseException:
            procs.kill_group(proc)
            raise
        finally:
            reaper.untrack(proc.pid)
            for task in self._pumps:
                task.cancel()
            if self._pumps:
                await asyncio.wait(self._pumps, timeout=DEATH_WAIT_S)
            proc.close()

    async def _drop_early(self) -> None:
        """A CLI started early and never adopted (the run ended first): end its group."""
        popen, self._early = self._early, None
        if popen is not None:
            try:
                await procs.terminate_group(popen, TERM_GRACE_S)
            finally:
                reaper.untrack(popen.pid)

    async def death_note(self, when: str) -> str:
        """What happened to the CLI, with its exit status and the tail of its stderr."""
        proc = self.proc
        if proc is None:
            return f"{self.name} is not running"
        await wait_exit(proc, DEATH_WAIT_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stderr_done.wait(), DEATH_WAIT_S)
        code = proc.returncode
        if code is None:
            note = f"{self.name} closed its stdout {when} (it is still running)"
        elif code < 0:
            note = f"{self.name} was killed by signal {-code} {when}"
        else:
            note = f"{self.name} exited with status {code} {when}"
        return with_stderr(note, self.stderr_text())

    def stderr_text(self) -> str:
        """What the CLI wrote to stderr: all of it when the tail holds it, else its first
        line, ``...`` and the whole lines of the tail."""
        tail = self.stderr_tail
        if self._stderr_bytes > len(tail):
            first = self.stderr_head.split(b"\n", 1)[0]
            tail = first + b"\n...\n" + tail.split(b"\n", 1)[-1]
        return tail.decode("utf-8", "replace")

    def _keep_stderr(self, data: bytes) -> None:
        if self._stderr_bytes < STDERR_HEAD_BYTES:
            self.stderr_head += data[: STDERR_HEAD_BYTES - self._stderr_bytes]
        self._stderr_bytes += len(data)
        self.stderr_tail = (self.stderr_tail + data)[-STDERR_TAIL_BYTES:]

    # -- pumps -----------------------------------------------------------------------

    async def _pump_stdout(self, stream: asyncio.StreamReader) -> None:
        try:
            while data := await stream.read(READ_CHUNK):
                if self._on_data is not None:
                    self._on_data(data)
                if self._lines is not None and self._on_message is not None:
                    for item in self._lines.feed(data):
                        self._on_message(item)
        except (OSError, ValueError) as exc:
            if self._on_message is not None:
                self._on_message(BadLine(-1, f"reading stdout failed: {exc}"))
        finally:
            self._ended()

    def _ended(self) -> None:
        if self.eof:
            return
        self.eof = True
        if self._on_eof is not None:
            self._on_eof()

    async def _pump_stderr(self, stream: asyncio.StreamReader) -> None:
        try:
            while data := await stream.read(READ_CHUNK):
                self._keep_stderr(data)
                with contextlib.suppress(OSError):
                    os.write(2, data)
        except (OSError, ValueError):
            pass
        finally:
            self._stderr_done.set()

    async def _watch_exit(self, proc: CliChild) -> None:
        """The CLI exited: when its stdout stays open (a leftover process of its group
        holds it), its output counts as ended anyway after a short wait."""
        await wait_exit(proc, None)
        await asyncio.sleep(DEATH_WAIT_S)
        self._ended()


_PR_SET_CHILD_SUBREAPER: Final = 36
_adopted: list[bool] = []


def adopt_orphans() -> bool:
    """Make this process the subreaper of everything it starts (Linux; once).

    A CLI's tool that outlives the CLI (Claude Code runs Bash in its own session; a CLI
    killed mid-turn leaves its tools behind) is then reparented to this process, not to
    init, so the adapter still finds it among its descendants and ends it. False where
    the kernel does not offer it.
    """
    if not _adopted:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _adopted.append(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            _adopted.append(False)
    return _adopted[0]


async def wait_exit(proc: CliChild, seconds: float | None) -> bool:
    """Wait until the process itself has exited (at most ``seconds``); True when it has.

    Woken by the exit (:class:`CliChild` watches a pidfd), never polled: an idle adapter
    child has no timer of its own (it woke 50 times a second while its CLI ran). Not
    asyncio's ``Process.wait()``: on Python 3.11 that also waits for the pipes to close,
    which a leftover process of its group can hold open.
    """
    if proc.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), seconds)
    return proc.returncode is not None


def with_stderr(note: str, stderr: str) -> str:
    """``note``, the first line of stderr and as many of its last lines as fit, on ONE
    line (error events keep one line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return f"{note}; its stderr is empty"
    first = cut_text(lines.pop(0), ERROR_LINE_BYTES // 2)[0]
    room = ERROR_LINE_BYTES - len(f"{note}{STDERR_LABEL}{first}".encode())
    kept: list[str] = []
    while lines and len(" | ".join(["", lines[-1], *kept]).encode()) <= room:
        kept.insert(0, lines.pop())
    return f"{note}{STDERR_LABEL}{' | '.join([first, *kept])}"
