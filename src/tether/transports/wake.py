"""Waking a child when a control line is appended, without a kernel instance per child.

Theory of operation: whoever appends to a child's ``control.jsonl`` (the parent API, the
daemon) also holds the write end of a pipe whose read end the child inherits, named by
``TETHER_WAKE_FD``. After each appended line the writer puts one byte into the pipe
(:meth:`WakePipe.wake`, non-blocking: a full pipe already holds a wake-up). The child
waits on that descriptor alone (:class:`ControlWaiter`): no inotify instance, no timer.
A pipe costs two descriptors and no per-user instance (the kernel allows 128 inotify
instances per user, so a fleet watching with inotify falls back to polling).

The descriptor is checked before it is trusted (:func:`inherited_wake_fd`): it must be
an anonymous pipe's read end or a socket (never a named FIFO, a regular file, a
terminal or fd 0-2), and it is made non-blocking and not inheritable, so a hostile or
stale number cannot hang the child or leak into its tools. Anything else is ignored.

Fallbacks, for parents that pass no descriptor (foreign ones) and for a writer that went
away (EOF: a killed daemon; the child outlives it): the control file is watched with a
:class:`~tether.transports.watch.FileWatcher`, inotify first, then the spec's polling
cadence. A child that lost its writer also opens a FIFO named ``wake`` in its run
directory (:class:`WakeFifo`); a writer that takes the run over (a restarted daemon)
opens it with :func:`open_wake_fifo` and wakes through it, and the child then drops its
watcher again. Every path re-reads the file after it is armed, so no line is missed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tether import fsafe

if TYPE_CHECKING:
    import asyncio

    from tether.transports.watch import FileWatcher

__all__ = [
    "WAKE_ENV",
    "WAKE_FIFO",
    "ControlWaiter",
    "ControlWriter",
    "WakeFifo",
    "WakePipe",
    "inherited_wake_fd",
    "open_wake_fifo",
]

WAKE_ENV: Final = "TETHER_WAKE_FD"
WAKE_FIFO: Final = "wake"  # in the run directory, next to control.jsonl
_DRAIN_BYTES: Final = 4096
_DRAIN_READS: Final = 4  # at most 16 KiB per wake-up: a flooding writer cannot starve a turn
_MAX_FD: Final = 1 << 20
_ANONYMOUS: Final = ("pipe:", "socket:")


# -- the writer's side -------------------------------------------------------------------


class WakePipe:
    """The writer's end of a child's wake-up pipe; the child inherits :attr:`read_fd`.

    Pass :meth:`child_env` in the child's environment and :meth:`pass_fds` to the spawn
    (the child must get the descriptor at the same number: ``pass_fds`` keeps it; a
    fork server must ``dup2`` it there). Call :meth:`started` once the child holds it.
    """

    def __init__(self, write_fd: int | None = None) -> None:
        """A new pipe; or, given ``write_fd`` (a FIFO opened by :func:`open_wake_fifo`),
        a waker that writes there and hands nothing to a child."""
        read_fd: int | None = None
        if write_fd is None:
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(write_fd, False)
        self._write_fd = write_fd
        self.read_fd = read_fd

    def child_env(self) -> dict[str, str]:
        return {} if self.read_fd is None else {WAKE_ENV: str(self.read_fd)}

    def pass_fds(self) -> tuple[int, ...]:
        return () if self.read_fd is None else (self.read_fd,)

    def started(self) -> None:
        """The child has its copy: close ours (else the child never sees EOF)."""
        fd, self.read_fd = self.read_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def wake(self) -> None:
        """One byte for the child; never blocks, never raises (a gone child is no error)."""
        if self._write_fd < 0:
            return
        with contextlib.suppress(OSError):  # EAGAIN: a wake-up is pending; EPIPE: gone
            os.write(self._write_fd, b"\1")

    def close(self) -> None:
        self.started()
        fd, self._write_fd = self._write_fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


class ControlWriter:
    """A child's control file as its writer holds it: append a line, then wake the child.

    ``file`` is the control file opened once (:class:`tether.fsafe.AppendFile`); ``wake``
    the child's pipe (None for a child started without one, e.g. adopted after a daemon
    restart: :meth:`take_over` then looks for the run's wake FIFO on each append until a
    child listens there).
    """

    def __init__(
        self, file: fsafe.AppendFile, wake: WakePipe | None = None, *, fifo_dir: Path | None = None
    ) -> None:
        self.file = file
        self.wake = wake
        self._fifo_dir = fifo_dir

    def append(self, line: bytes) -> None:
        """Append ``line`` and a newline (``OSError`` as the file's), then wake the child."""
        self.file.append(line)
        if self.wake is None and self._fifo_dir is not None:
            self.wake = open_wake_fifo(self._fifo_dir)
        if self.wake is not None:
            self.wake.wake()

    def child_env(self) -> dict[str, str]:
        return {} if self.wake is None else self.wake.child_env()

    def pass_fds(self) -> tuple[int, ...]:
        return () if self.wake is None else self.wake.pass_fds()

    def started(self) -> None:
        if self.wake is not None:
            self.wake.started()

    def close(self) -> None:
        self.file.close()
        if self.wake is not None:
            self.wake.close()


def open_wake_fifo(run_dir: str | os.PathLike[str]) -> WakePipe | None:
    """The write end of a run's wake FIFO (a child whose writer went away listens on it).

    Opened through :func:`tether.fsafe.open_fifo` (no link followed, never blocking,
    ``ENXIO`` when no child listens: None); anything but our FIFO in its place is
    refused. The result's :meth:`WakePipe.wake` works like a pipe's.
    """
    try:
        fd = fsafe.open_fifo(os.path.join(os.fspath(run_dir), WAKE_FIFO), os.O_WRONLY)
    except OSError:
        return None
    return WakePipe(fd)


# -- the child's side --------------------------------------------------------------------


def inherited_wake_fd(raw: str | None) -> int | None:
    """The descriptor ``TETHER_WAKE_FD`` names, if it is a usable wake-up source.

    Usable: a number >= 3 naming an open, readable anonymous pipe or socket. It is made
    non-blocking and not inheritable. Anything else (garbage, closed, a regular file, a
    named FIFO, a terminal, a pipe's write end) is None: the caller falls back.
    """
    if raw is None or not raw.isdigit() or len(raw) > 8:
        return None
    fd = int(raw)
    if not 3 <= fd < _MAX_FD:
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return None
        if not _anonymous(fd):
            return None
        import fcntl  # not at module level: the child imports this before `ready`

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
            return None
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


def _anonymous(fd: int) -> bool:
    """True for a pipe or socket with no name (a named FIFO anyone may open is refused)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True  # no /proc: a non-blocking FIFO still cannot hang us
    return target.startswith(_ANONYMOUS)


def drain(fd: int) -> bool:
    """Read what is pending on ``fd``; False at EOF or on an error (the writer is gone)."""
    for _ in range(_DRAIN_READS):
        try:
            data = os.read(fd, _DRAIN_BYTES)
        except BlockingIOError:
            return True
        except InterruptedError:
            continue
        except OSError:
            return False
        if not data:
            return False
        if len(data) < _DRAIN_BYTES:
            return True
    return True


class WakeFifo:
    """The FIFO ``wake`` in a run directory, read by a child whose writer went away.

    Created 0600 by the child (never followed if something else is there); opened
    read-only and non-blocking, so it shows EOF when its last writer closes, and is then
    reopened for the next one.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / WAKE_FIFO
        self.fd: int | None = None

    def open(self) -> int | None:
        with contextlib.suppress(OSError):  # an existing name is kept: checked below
            os.mkfifo(self.path, 0o600)
        try:
            self.fd = fsafe.open_fifo(self.path, os.O_RDONLY)
        except OSError:
            return None
        return self.fd

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class ControlWaiter:
    """What a child waits on for new control lines; see the module docstring.

    ``mode`` is ``wake-fd`` (the inherited pipe, or a taken-over FIFO), ``inotify`` or
    ``polling``. Use from one asyncio loop: :meth:`start`, then :meth:`wait` between
    reads (it returns when the file may have grown; the caller reads, then waits again).
    ``on_wake`` is called at once from the descriptor's reader, so the caller can read
    the new lines without a hop through a task; it returns True when it read everything
    (then :meth:`wait` goes on waiting), False to have :meth:`wait` return.
    """

    def __init__(
        self,
        control_path: Path,
        wake_fd: int | None,
        *,
        poll_interval: float,
        force_polling: bool = False,
        fifo_dir: Path | None = None,
        on_wake: Callable[[], bool] | None = None,
    ) -> None:
        self._path = control_path
        self._on_wake_call = on_wake
        self._fd = wake_fd
        self._poll_interval = poll_interval
        self._force_polling = force_polling
        self._fifo = None if fifo_dir is None else WakeFifo(fifo_dir)
        self._fifo_live = False  # a writer woke us through the FIFO: the watcher can go
        self._watcher: FileWatcher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._woken: asyncio.Event | None = None

    @property
    def mode(self) -> str:
        if self._watcher is None:
            return "wake-fd"
        return "inotify" if self._watcher.using_inotify else "polling"

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio

        self._loop, self._woken = loop, asyncio.Event()
        if self._fd is not None:
            try:
                loop.add_reader(self._fd, self._on_wake)
                return
            except (OSError, ValueError):  # not pollable after all
                self._fd = None
        self._open_watcher()

    def set_poll_interval(self, seconds: float) -> None:
        self._poll_interval = seconds
        if self._watcher is not None:
            self._watcher.set_poll_interval(seconds)

    async def wait(self) -> None:
        """Until the control file may have grown (the caller then reads it)."""
        if self._fifo_live and self._watcher is not None:
            self._close_watcher()  # a writer that wakes is back: no instance needed
        if self._watcher is None:
            woken = self._woken
            assert woken is not None
            await woken.wait()
            woken.clear()
        else:
            await self._watcher.wait()

    def _on_wake(self) -> None:
        fd = self._fd
        if fd is None or self._woken is None:
            return
        if drain(fd):
            if self._watcher is not None:  # the FIFO while a watcher runs: a writer is back
                self._fifo_live = True
                self._watcher.wake()
            elif self._on_wake_call is not None and self._on_wake_call():
                return  # all read already: the waiter sleeps on
            self._woken.set()
            return
        self._writer_gone()

    def _writer_gone(self) -> None:
        """EOF: nobody holds the write end. Watch the file, and listen on the FIFO."""
        self._forget_fd()
        self._fifo_live = False
        if self._watcher is None:
            self._open_watcher()
        if self._fifo is not None and self._loop is not None:
            fd = self._fifo.open()
            if fd is not None:
                self._fd = fd
                self._loop.add_reader(fd, self._on_wake)
        assert self._woken is not None
        self._woken.set()  # read once more: a line may have come with the last byte
        if self._watcher is not None:
            self._watcher.wake([self._path])

    def _forget_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
        if self._fifo is not None and self._fifo.fd == fd:
            self._fifo.close()
        else:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _open_watcher(self) -> None:
        from tether.transports.watch import FileWatcher

        watcher = FileWatcher(poll_interval=self._poll_interval, force_polling=self._force_polling)
        watcher.watch(self._path)
        self._watcher = watcher

    def _close_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()

    def close(self) -> None:
        self._forget_fd()
        self._close_watcher()
        if self._fifo is not None:
            self._fifo.close()
