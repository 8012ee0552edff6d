"""Waiting in tests: on the event that changes the answer, never on a fixed sleep.

Theory of operation: a test waits only for a state that follows something it did (a
control it sent, a signal, a file it wrote). :func:`wait_until` checks that state, then
blocks until one of the events that can change the answer happens, and checks again:

- ``files``: a file changes (or appears, or goes): inotify on its directory, through
  tether's own :class:`~tether.transports.watch.FileWatcher`;
- ``pids``: a process exits: its pidfd turns readable;
- ``proc``: the process the state comes from exits: one last check, then the test fails
  at once (a child that died never writes the line the test waits for).

A state that only ``/proc``, a socket or a database shows is checked again every
:data:`POLL_S`: the one poll of the suite, written here once. A file event counts only
for a state read from that file: a database's commit is not seen by its reader when its
WAL file changes (the commit is published in the shared-memory index after), and a
socket file appears before it listens; those are polled (``polled=True`` keeps the
poll when events are named too).

:data:`HANG_S` bounds every wait. It is a hang detector, not a speed check: a niced suite
beside other work on 2 cores was measured starved for 100 s of wall clock with 3 s of CPU
used, so the bound leaves a minute; a lost wake-up or a state never reached still fails.
No test decides by how long something took: timing belongs in ``bench/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tether import procs
from tether.transports.watch import FileWatcher

T = TypeVar("T")

HANG_S = 60.0
POLL_S = 0.01  # only where no event is named: a state that only /proc or a socket shows

Pid = int | subprocess.Popen[Any] | subprocess.Popen[bytes] | subprocess.Popen[str]


class _Sources:
    """The descriptors that end a wait: the watcher's (file changes) and pidfds (exits)."""

    def __init__(
        self,
        files: Iterable[str | os.PathLike[str]],
        pids: Iterable[Pid],
        proc: subprocess.Popen[Any] | None = None,
        polled: bool = False,
    ) -> None:
        self.polled = polled
        self.watcher: FileWatcher | None = None
        paths = [Path(f) for f in files]
        if paths:
            self.watcher = FileWatcher(poll_interval=0.03)
            for path in paths:
                self.watcher.watch(path)
        self.pidfds: list[int] = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # gone already: nothing to wait on
                self.pidfds.append(os.pidfd_open(pid if isinstance(pid, int) else pid.pid))
        self.exit_fd: int | None = None  # wakes the wait to fail it, changes no answer
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.exit_fd = os.pidfd_open(proc.pid)

    @property
    def named(self) -> bool:
        """Whether an event is named for every change of the answer (else: poll)."""
        return not self.polled and (self.watcher is not None or bool(self.pidfds))

    def fds(self) -> list[int]:
        watched = list(self.watcher.readable_fds()) if self.watcher is not None else []
        exit_fd = [] if self.exit_fd is None else [self.exit_fd]
        return watched + self.pidfds + exit_fd

    def next_check_in(self, remaining: float) -> float:
        """How long to block: the deadline, a polled directory's turn, or the poll."""
        limits = [remaining]
        if not self.named:
            limits.append(POLL_S)
        due = self.watcher.poll_due_in() if self.watcher is not None else None
        if due is not None:
            limits.append(due)
        return max(0.0, min(limits))

    def woke(self, ready: Iterable[int]) -> None:
        """Consume what woke the wait: watcher events; an exited pid's fd is dropped (it
        stays readable for good)."""
        ready = set(ready)
        if self.watcher is not None:
            self.watcher.collect()
        for fd in [fd for fd in self.pidfds if fd in ready]:
            self.pidfds.remove(fd)
            os.close(fd)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
        for fd in [*self.pidfds, *([] if self.exit_fd is None else [self.exit_fd])]:
            os.close(fd)
        self.pidfds, self.exit_fd = [], None


@contextlib.contextmanager
def _sources(
    files: Iterable[str | os.PathLike[str]],
    pids: Iterable[Pid],
    proc: subprocess.Popen[Any] | None = None,
    polled: bool = False,
) -> Iterator[_Sources]:
    sources = _Sources(files, pids, proc, polled)
    try:
        yield sources
    finally:
        sources.close()


def wait_until(
    check: Callable[[], T],
    what: str,
    *,
    files: Iterable[str | os.PathLike[str]] = (),
    pids: Iterable[Pid] = (),
    proc: subprocess.Popen[Any] | None = None,
    polled: bool = False,
    describe: Callable[[], str] = str,
    timeout: float = HANG_S,
) -> T:
    """The first truthy value of ``check()``, re-checked when a named event happens (see
    the module docstring); fails the test after ``timeout`` or once ``proc`` has exited."""
    deadline = time.monotonic() + timeout
    with _sources(files, pids, proc, polled) as sources:
        while True:
            if value := check():
                return value
            if proc is not None and proc.poll() is not None:
                if value := check():  # what it wrote before it exited
                    return value
                pytest.fail(f"{what}: the process exited ({proc.returncode}) first\n{describe()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"{what}: not within {timeout} s (a hang)\n{describe()}")
            poller = select.poll()
            for fd in sources.fds():
                poller.register(fd, select.POLLIN)
            wait_ms = int(sources.next_check_in(remaining) * 1000) + 1
            sources.woke(fd for fd, _ in poller.poll(wait_ms))


async def wait_until_async(
    check: Callable[[], T],
    what: str,
    *,
    files: Iterable[str | os.PathLike[str]] = (),
    pids: Iterable[Pid] = (),
) -> T:
    """:func:`wait_until` inside an event loop: the loop runs on while this waits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    with _sources(files, pids) as sources:
        while True:
            if value := check():
                return value
            remaining = deadline - loop.time()
            if remaining <= 0:
                pytest.fail(f"{what}: not within {HANG_S} s (a hang)")
            woken: asyncio.Future[int] = loop.create_future()
            fds = sources.fds()
            for fd in fds:
                loop.add_reader(fd, _settle, woken, fd)
            try:
                await asyncio.wait({woken}, timeout=sources.next_check_in(remaining))
            finally:
                for fd in fds:
                    loop.remove_reader(fd)
            sources.woke([woken.result()] if woken.done() else [])


def _settle(future: asyncio.Future[int], fd: int) -> None:
    if not future.done():
        future.set_result(fd)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0] not in (b"Z", b"X")


def group_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` now (zombies included)."""
    out = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()
        except (OSError, ValueError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid).encode():
            out.append(int(name))
    return out


def wait_gone(pids: Iterable[int], what: str, *, timeout: float = HANG_S) -> None:
    """Until every one of ``pids`` has exited (zombies count as gone): their pidfds."""
    pids = list(pids)
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), what, pids=pids, timeout=timeout)


def wait_group_gone(pgid: int, what: str = "", *, timeout: float = HANG_S) -> None:
    """Until no live process is left in group ``pgid`` (SIGKILLed members still need the
    CPU to exit): woken by each member's exit."""
    wait_until(
        lambda: not procs.group_has_live_members(pgid),
        what or f"process group {pgid} to end",
        pids=group_members(pgid),
        timeout=timeout,
    )


async def settle(awaitable: Awaitable[T], what: str) -> T:
    """``awaitable``'s result, or a test failure after the hang detector's bound."""
    try:
        async with asyncio.timeout(HANG_S):
            return await awaitable
    except TimeoutError:
        pytest.fail(f"{what}: not within {HANG_S} s (a hang)")


def wait_pid_file(path: Path, *, proc: subprocess.Popen[Any] | None = None, what: str = "") -> int:
    """The pid a test double's shell wrote to ``path`` (``echo $! > path``), once its
    whole line is there."""

    def written() -> int | None:
        with contextlib.suppress(FileNotFoundError):
            text = path.read_text()
            if text.endswith("\n"):
                return int(text)
        return None

    pid: int = wait_until(written, what or f"a pid in {path}", files=[path], proc=proc)
    return pid


async def loop_pass() -> None:
    """Return once every callback the running loop had scheduled has run (they run in the
    order they were scheduled): the end of the loop's current pass, decided by the loop's
    own order, not by time."""
    loop = asyncio.get_running_loop()
    passed: asyncio.Future[None] = loop.create_future()
    loop.call_soon(passed.set_result, None)
    await passed


def wait_text(path: Path, text: str, *, proc: subprocess.Popen[Any] | None = None) -> None:
    """Until ``text`` is in the file at ``path`` (re-read as it changes: inotify)."""
    wait_until(
        lambda: path.exists() and text in path.read_text(errors="replace"),
        f"{text!r} in {path}",
        files=[path],
        proc=proc,
    )


def wait_glob(root: Path, pattern: str, *, proc: subprocess.Popen[Any] | None = None) -> Path:
    """The first path under ``root`` matching ``pattern``: a name the test cannot know
    beforehand (a run's directory), so polled."""
    found: Path = wait_until(
        lambda: next(iter(sorted(root.glob(pattern))), None), f"{pattern} in {root}", proc=proc
    )
    return found


def spin_until(
    check: Callable[[], T], what: str, *, proc: subprocess.Popen[Any] | None = None
) -> T:
    """:func:`wait_until` with no pause between checks, for a state that lasts only a few
    milliseconds (a race the test must land in); bounded by :data:`HANG_S` too."""
    deadline = time.monotonic() + HANG_S
    while not (value := check()):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the process exited ({proc.returncode}) first")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {HANG_S} s (a hang)")
    return value


async def retry_async(
    attempt: Callable[[], Awaitable[T]], retry_on: type[BaseException], what: str
) -> T:
    """``attempt()``'s result, tried again while it raises ``retry_on``: for a state the
    test cannot watch, only try (a NATS cluster electing its leader). Tried every
    :data:`POLL_S`: the one poll of the async tests; after :data:`HANG_S` the error
    propagates."""
    deadline = time.monotonic() + HANG_S
    while True:
        try:
            return await attempt()
        except retry_on:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(POLL_S)  # no event to wait on: the one timed pause
