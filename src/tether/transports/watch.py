"""One file watcher for every file a process tails.

Theory of operation: tether tails append-only files (the child's control file,
the parent's event file, every run's inbox) by byte offset. The watcher only
says *which* files may have changed; readers then ``pread`` from their offset.

With inotify (Linux), a :class:`FileWatcher` owns one inotify instance and adds
one watch per *directory* (``IN_MODIFY | IN_CREATE | IN_MOVED_TO |
IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE`` and friends), shared by every watched
file in that directory; events are filtered by file name. The kernel allows
only 128 inotify instances per user, so a process should create ONE watcher
and share it (a drain loop that serves all inboxes, say), never one per file.
``wait()`` hands each change to one caller: two loops that both call ``wait()``
on the same watcher steal each other's wake-ups, so let one loop wait and
dispatch.

A directory that cannot be watched (missing yet, out of inotify watches,
permission) is polled instead, and its watch is retried on every poll. When
inotify is unavailable or fails, or with ``force_polling`` / the environment
variable ``TETHER_FORCE_POLLING=1``, every file is polled: each poll interval
the watcher stats the files and reports those whose (inode, device, size,
mtime, ctime) changed. Callers switch the interval between 0.03 s (busy) and
0.3 s (idle) with :meth:`FileWatcher.set_poll_interval`.

``IN_Q_OVERFLOW`` (the kernel dropped events) reports every watched file as
changed. Returned paths are "maybe changed": a reader must cope with finding
nothing new. They are the ``Path`` objects built from what was passed to
:meth:`FileWatcher.watch`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

__all__ = ["FileWatcher", "polling_forced"]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

DIR_MASK = (
    IN_MODIFY
    | IN_CREATE
    | IN_MOVED_TO
    | IN_CLOSE_WRITE
    | IN_ATTRIB
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
)
_EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024

Signature = tuple[int, int, int, int, int] | None


def polling_forced(env: dict[str, str] | None = None) -> bool:
    """True when ``TETHER_FORCE_POLLING`` asks for polling instead of inotify."""
    value = (os.environ if env is None else env).get("TETHER_FORCE_POLLING", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


class _Libc:
    """The three inotify calls, loaded with ctypes (None where unavailable)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.init1: Any = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch: Any = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int
        self.rm_watch: Any = libc.inotify_rm_watch
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        self.rm_watch.restype = ctypes.c_int


_libc_cache: list[_Libc | None] = []


def _libc() -> _Libc | None:
    if not _libc_cache:
        try:
            _libc_cache.append(_Libc())
        except (OSError, AttributeError):
            _libc_cache.append(None)
    return _libc_cache[0]


def _signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class _Dir:
    """One watched directory: its inotify watch (None while polled) and files."""

    path: bytes
    wd: int | None = None
    names: dict[bytes, Path] = field(default_factory=dict)


class FileWatcher:
    """Wake-ups for a set of files: inotify on their directories, else polling.

    Not thread-safe except :meth:`wake`; use it from one thread or one event
    loop. Usable as a (sync) context manager.
    """

    def __init__(self, *, poll_interval: float = 0.3, force_polling: bool = False) -> None:
        self._poll_interval = _check_interval(poll_interval)
        self._paths: dict[Path, Path] = {}  # absolute path -> path as given
        self._dirs: dict[bytes, _Dir] = {}
        self._polled: set[bytes] = set()  # the keys of the dirs without a watch (polled)
        self._wds: dict[int, list[_Dir]] = {}
        self._signatures: dict[Path, Signature] = {}
        self._pending: set[Path] = set()
        self._interrupted = False
        self._lock = threading.Lock()
        self._next_poll = time.monotonic() + self._poll_interval
        self._closed = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._fd: int | None = None
        self._libc: _Libc | None = None
        if not (force_polling or polling_forced()):
            self._open_inotify()

    # -- set-up -------------------------------------------------------------

    def _open_inotify(self) -> None:
        libc = _libc()
        if libc is None:
            return
        fd = libc.init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return
        self._fd, self._libc = fd, libc

    @property
    def using_inotify(self) -> bool:
        """False when inotify is unavailable or failed, or polling was forced."""
        return self._fd is not None

    @property
    def poll_interval(self) -> float:
        return self._poll_interval

    def set_poll_interval(self, seconds: float) -> None:
        """Change how often polled files are checked (0.03 busy, 0.3 idle)."""
        self._poll_interval = _check_interval(seconds)
        self._next_poll = min(self._next_poll, time.monotonic() + self._poll_interval)

    def watched(self) -> set[Path]:
        """The watched files, as given to :meth:`watch`."""
        return set(self._paths.values())

    def watch(self, path: str | os.PathLike[str]) -> None:
        """Watch ``path`` (which may not exist yet). Watching twice is harmless."""
        self._check_open()
        given = Path(path)
        absolute = Path(os.path.abspath(given))
        if absolute in self._paths:
            return
        dir_key = os.fsencode(absolute.parent)
        directory = self._dirs.get(dir_key)
        if directory is None:
            directory = self._dirs[dir_key] = _Dir(dir_key)
            if not self._add_dir_watch(directory):
                self._polled.add(dir_key)
        self._paths[absolute] = given
        directory.names[os.fsencode(absolute.name)] = absolute
        self._signatures[absolute] = _signature(absolute)

    def unwatch(self, path: str | os.PathLike[str]) -> None:
        """Stop watching ``path``; its directory's watch goes with its last file."""
        absolute = Path(os.path.abspath(Path(path)))
        if self._paths.pop(absolute, None) is None:
            return
        self._signatures.pop(absolute, None)
        with self._lock:
            self._pending.discard(absolute)
        dir_key = os.fsencode(absolute.parent)
        directory = self._dirs[dir_key]
        directory.names.pop(os.fsencode(absolute.name), None)
        if not directory.names:
            del self._dirs[dir_key]
            self._drop_dir_watch(directory)
            self._polled.discard(dir_key)

    def _add_dir_watch(self, directory: _Dir) -> bool:
        if self._fd is None or self._libc is None:
            return False
        wd = int(self._libc.add_watch(self._fd, directory.path, DIR_MASK))
        if wd < 0:
            return False  # missing, no permission, out of watches: polled instead
        directory.wd = wd
        self._polled.discard(directory.path)
        sharing = self._wds.setdefault(wd, [])
        if directory not in sharing:
            sharing.append(directory)
        return True

    def _drop_dir_watch(self, directory: _Dir) -> None:
        wd, directory.wd = directory.wd, None
        if self._dirs.get(directory.path) is directory:
            self._polled.add(directory.path)
        if wd is None:
            return
        sharing = self._wds.get(wd, [])
        if directory in sharing:
            sharing.remove(directory)
        if not sharing:
            self._wds.pop(wd, None)
            if self._fd is not None and self._libc is not None:
                self._libc.rm_watch(self._fd, wd)

    # -- inotify events -----------------------------------------------------

    def _read_events(self) -> None:
        while self._fd is not None:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                self._fall_back_to_polling()
                return
            if not data:
                return
            self._parse_events(data)

    def _parse_events(self, data: bytes) -> None:
        offset, size = 0, len(data)
        while offset + _EVENT_HEADER.size <= size:
            wd, mask, _cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            start = offset + _EVENT_HEADER.size
            end = start + length
            if end > size:
                return  # a torn record: the kernel never sends one; stop safely
            name = data[start:end].split(b"\0", 1)[0]
            offset = end
            self._dispatch(wd, mask, name)

    def _dispatch(self, wd: int, mask: int, name: bytes) -> None:
        if mask & IN_Q_OVERFLOW:
            self._pending.update(self._paths)
            return
        sharing = self._wds.get(wd)
        if not sharing:
            return
        lost = mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)
        for directory in list(sharing):
            if lost or not name:
                self._pending.update(directory.names.values())
            else:
                path = directory.names.get(name)
                if path is not None:
                    self._pending.add(path)
            if lost:
                self._lose_dir_watch(directory, removed_by_kernel=bool(mask & IN_IGNORED))

    def _lose_dir_watch(self, directory: _Dir, *, removed_by_kernel: bool) -> None:
        """The directory went away or moved: poll its files until it is back."""
        if removed_by_kernel and directory.wd is not None:
            self._wds.pop(directory.wd, None)
            directory.wd = None
            self._polled.add(directory.path)
        else:
            self._drop_dir_watch(directory)
        for absolute in directory.names.values():
            self._signatures[absolute] = None

    def _fall_back_to_polling(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wds.clear()
        for directory in self._dirs.values():
            directory.wd = None
        self._polled.update(self._dirs)
        self._pending.update(self._paths)

    # -- polling ------------------------------------------------------------

    def _polled_dirs(self) -> list[_Dir]:
        """The directories without a watch (kept as a set: a wait costs nothing per
        watched directory, however many there are)."""
        return [self._dirs[key] for key in self._polled]

    def _poll(self) -> None:
        self._next_poll = time.monotonic() + self._poll_interval
        for directory in self._polled_dirs():
            if self._add_dir_watch(directory):
                self._pending.update(directory.names.values())
                continue
            for absolute in directory.names.values():
                signature = _signature(absolute)
                if signature != self._signatures.get(absolute):
                    self._signatures[absolute] = signature
                    self._pending.add(absolute)

    # -- waiting ------------------------------------------------------------

    def wake(self, paths: list[Path] | None = None) -> None:
        """Report ``paths`` as changed (or, with none, end the current wait early).

        Safe to call from another thread or a signal handler's thread.
        """
        with self._lock:
            if paths:
                self._pending.update(Path(os.path.abspath(p)) for p in paths)
            else:
                self._interrupted = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _collect(self) -> tuple[set[Path], bool]:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass
        self._read_events()
        if self._polled and time.monotonic() >= self._next_poll:
            self._poll()
        with self._lock:
            pending, self._pending = self._pending, set()
            interrupted, self._interrupted = self._interrupted, False
        return {self._paths[p] for p in pending if p in self._paths}, interrupted

    def _sleep_for(self, deadline: float | None) -> float | None:
        """How long to block before the next check, or None for no limit."""
        now = time.monotonic()
        limits = [] if deadline is None else [deadline - now]
        if self._polled:
            limits.append(self._next_poll - now)
        return max(0.0, min(limits)) if limits else None

    def _fds(self) -> list[int]:
        return [self._wake_r] if self._fd is None else [self._wake_r, self._fd]

    def readable_fds(self) -> tuple[int, ...]:
        """The descriptors that become readable when a wait would end (the wake pipe and,
        with inotify, its instance): for a caller that keeps them registered with its own
        event loop and calls :meth:`collect` when one is readable, instead of
        :meth:`wait` (which registers and unregisters them on every call)."""
        return tuple(self._fds())

    def collect(self) -> set[Path]:
        """What may have changed since the last collect, without blocking (the polled
        directories are checked when their poll is due)."""
        self._check_open()
        return self._collect()[0]

    def poll_due_in(self) -> float | None:
        """Seconds until a polled directory is due for its next check; None when none is
        polled (then only :meth:`readable_fds` need watching)."""
        return self._sleep_for(None)

    def wait_sync(self, timeout: float | None = None) -> set[Path]:
        """Block until some watched files may have changed; empty set on timeout."""
        self._check_open()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            changed, interrupted = self._collect()
            if changed or interrupted:
                return changed
            if deadline is not None and time.monotonic() >= deadline:
                return set()
            poller = select.poll()
            for fd in self._fds():
                poller.register(fd, select.POLLIN)
            sleep_for = self._sleep_for(deadline)
            poller.poll(None if sleep_for is None else max(1, int(sleep_for * 1000 + 0.999)))

    async def wait(self, timeout: float | None = None) -> set[Path]:  # noqa: ASYNC109
        """Wait (asyncio) until some watched files may have changed; empty set on timeout."""
        import asyncio  # not at module level: a child imports this before it writes `ready`

        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            changed, interrupted = self._collect()
            if changed or interrupted:
                return changed
            if deadline is not None and time.monotonic() >= deadline:
                return set()
            await self._readable(loop, self._sleep_for(deadline))

    async def _readable(self, loop: asyncio.AbstractEventLoop, sleep_for: float | None) -> None:
        ready: asyncio.Future[None] = loop.create_future()

        def wake_up() -> None:
            if not ready.done():
                ready.set_result(None)

        fds = self._fds()
        for fd in fds:
            loop.add_reader(fd, wake_up)
        timer = None if sleep_for is None else loop.call_later(sleep_for, wake_up)
        try:
            await ready
        finally:
            if timer is not None:
                timer.cancel()
            for fd in fds:
                loop.remove_reader(fd)

    # -- closing ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("FileWatcher is closed")

    def close(self) -> None:
        """Release the inotify instance and the wake-up pipe. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for fd in (self._fd, self._wake_r, self._wake_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = None
        self._paths.clear()
        self._dirs.clear()
        self._polled.clear()
        self._wds.clear()

    def __enter__(self) -> FileWatcher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _check_interval(seconds: float) -> float:
    if not seconds > 0:
        raise ValueError(f"poll interval must be positive, got {seconds!r}")
    return float(seconds)
