"""The daemon's place on disk: its private socket directory, lock file and socket.

Theory of operation: :func:`tether.daemon.app.run_daemon` (a) makes sure the socket's
directory is a 0700 directory owned by us (:func:`ensure_socket_dir`, checked with
``fstat`` on an ``O_NOFOLLOW`` descriptor), (b) takes an exclusive ``flock`` on
``<socket>.lock`` (:class:`DaemonLock`; a second daemon fails here with
:class:`AlreadyRunning`) and writes its pid there, (c) removes a stale socket file and
binds a new one at 0600 (:func:`bind_socket`), then (d) serves until SIGTERM or SIGINT.
The lock is never released while the socket exists, so whoever holds it owns the socket
path.

``start_detached`` / ``stop_daemon`` / ``daemon_status`` drive it from the CLI without any
daemon-side method: the pid comes from the lock file, liveness from a connect probe.

Errors, as a tree::

    DaemonSetupError        the daemon cannot start (message says what to do)
    +-- UnsafeSocketDir     wrong owner, mode or type for the socket directory
    +-- AlreadyRunning      another daemon holds the lock
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tether import exits, jsondepth, paths
from tether.errors import DaemonError

log = logging.getLogger("tether.daemon")

MAX_SOCKET_PATH_BYTES = 107  # sun_path is 108 bytes including the terminating NUL


class DaemonSetupError(DaemonError):
    """The daemon cannot start; the message says why and what to do."""

    exit_code = exits.USAGE  # a set-up that cannot work


class UnsafeSocketDir(DaemonSetupError):
    pass


class AlreadyRunning(DaemonSetupError):
    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def lock_path_for(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".lock")


def log_path() -> Path:
    return paths.state_dir() / "daemon.log"


def ensure_socket_dir(directory: Path) -> None:
    """Create ``directory`` 0700 if missing, then verify it with fstat; refuse it when it
    is not a real directory (no symlink) owned by this user with mode 0700, or when any
    directory above it could be replaced by another user (:func:`paths.ensure_private_dir`).
    """
    try:
        paths.ensure_private_dir(directory, tighten=False)
    except paths.UnsafeDirectory as exc:
        raise UnsafeSocketDir(f"socket directory: {exc}") from None
    except OSError as exc:
        raise _unusable(directory, exc) from None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _unusable(directory, exc) from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    mode = stat.S_IMODE(info.st_mode)
    if mode != paths.DIR_MODE:
        raise UnsafeSocketDir(
            f"socket directory {directory} has mode {mode:04o}; it must be 0700 "
            f"(run: chmod 700 {directory})"
        )


def _unusable(directory: Path, exc: OSError) -> UnsafeSocketDir:
    return UnsafeSocketDir(
        f"socket directory {directory} is not a usable directory ({exc.strerror}); "
        "point TETHER_SOCKET or XDG_RUNTIME_DIR at a private directory"
    )


@dataclass
class DaemonLock:
    """An exclusive flock on the lock file, held for the daemon's life."""

    path: Path
    handle: IO[str]

    @classmethod
    def acquire(cls, path: Path) -> DaemonLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, paths.FILE_MODE)
        handle = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            pid = read_lock_pid(path)
            where = f" (pid {pid})" if pid else ""
            raise AlreadyRunning(
                f"another tether daemon is already running{where} for {path.with_suffix('')}; "
                "use 'tether daemon status' or 'tether daemon stop'",
                pid,
            ) from None
        return cls(path, handle)

    def write_info(self, socket_path: Path) -> None:
        info = {"pid": os.getpid(), "socket": str(socket_path), "started_at": time.time()}
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(json.dumps(info) + "\n")
        self.handle.flush()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.seek(0)
            self.handle.truncate()
        self.handle.close()


def read_lock_pid(lock_path: Path) -> int | None:
    try:
        info = jsondepth.loads(lock_path.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid") if isinstance(info, dict) else None
    return pid if isinstance(pid, int) and pid > 0 else None


def raise_open_files_limit() -> int:
    """Raise this process's descriptor limit (``RLIMIT_NOFILE``) to its hard limit and
    return the soft limit now in force. Each agent holds several descriptors (its control
    file, wake-up pipe, event file, pidfd; one inbox database serves all), so 1,000 agents
    need far more than the usual soft limit of 1,024; the hard limit is as far as an
    unprivileged process may go (an unlimited one is capped at the kernel's ``nr_open``)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft == resource.RLIM_INFINITY or soft >= target:
        return int(soft)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, exc)
        return int(soft)
    return int(target)


def _nr_open() -> int:
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20


def descriptors_free() -> tuple[int, int]:
    """(how many descriptors this process may still open, its soft limit).

    Counted in ``/proc/self/fd``. Without it, a probe: the kernel hands out the lowest
    free number, so a probe's number is at most the count open and the estimate errs
    towards "more left" when earlier ones were closed (a real ``EMFILE`` is still
    answered where it happens)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = _nr_open()
    try:
        used = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own descriptor
    except OSError:
        try:
            used = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return 0, int(soft)
        os.close(used)
    return int(soft) - used, int(soft)


def bind_socket(path: Path, *, backlog: int) -> socket.socket:
    """Bind a Unix socket at ``path`` with mode 0600, listening with ``backlog`` pending
    connections (call with the lock held)."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise DaemonSetupError(
            f"socket path {path} is {size} bytes; Unix sockets allow at most "
            f"{MAX_SOCKET_PATH_BYTES}: set TETHER_SOCKET to a shorter path"
        )
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise DaemonSetupError(f"cannot bind the socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old_umask)
    os.chmod(path, paths.FILE_MODE)
    info = os.lstat(path)
    if not stat.S_ISSOCK(info.st_mode) or stat.S_IMODE(info.st_mode) != paths.FILE_MODE:
        sock.close()
        raise DaemonSetupError(f"socket {path} could not be made private (0600)")
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


# -- control from the CLI ----------------------------------------------------------------------


@dataclass(frozen=True)
class DaemonState:
    running: bool
    answering: bool
    pid: int | None
    socket: Path

    def as_dict(self) -> dict[str, object]:
        return {
            "running": self.running,
            "answering": self.answering,
            "pid": self.pid,
            "socket": str(self.socket),
        }


def probe(socket_path: Path, timeout: float = 1.0) -> bool:
    """True when something accepts connections and answers a request on ``socket_path``.

    Raises :class:`~tether.daemon.rpc.client.UntrustedDaemon` when what answers runs as
    another user (nothing is sent to it, and no daemon of ours may be started there).
    """
    from tether.daemon.rpc.client import (
        DaemonCallError,
        DaemonClient,
        DaemonClientError,
        UntrustedDaemon,
    )

    try:
        with DaemonClient.connect(socket_path, timeout=timeout) as client:
            client.call("daemon.status")
    except DaemonCallError:
        return True  # it answered, even if with an error
    except UntrustedDaemon:
        raise
    except (DaemonClientError, OSError):
        return False
    return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def daemon_status(socket_path: Path) -> DaemonState:
    pid = read_lock_pid(lock_path_for(socket_path))
    answering = probe(socket_path)
    alive = pid is not None and pid_alive(pid)
    return DaemonState(answering or alive, answering, pid if alive else None, socket_path)


def start_detached(
    socket_path: Path, *, timeout: float = 10.0, extra: list[str] | None = None
) -> int:
    """Start ``tether daemon --foreground`` in its own session and wait until it answers.

    Returns the daemon's pid. Raises :class:`DaemonSetupError` with the log's tail when it
    exits or stays silent.
    """
    paths.ensure_private_dir(paths.state_dir())
    log_file = log_path()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, paths.FILE_MODE)
    env = dict(os.environ, TETHER_SOCKET=str(socket_path))
    argv = [sys.executable, "-m", "tether", "daemon", "--foreground", *(extra or [])]
    with os.fdopen(fd, "ab") as log_handle:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_handle,
            stderr=log_handle,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe(socket_path, timeout=0.5):
            return child.pid
        status = child.poll()
        if status is not None:
            raise DaemonSetupError(
                f"the daemon exited with status {status}:\n{_tail(log_file)}"
                f"\n(full log: {log_file})"
            )
        time.sleep(0.05)
    raise DaemonSetupError(f"the daemon did not answer within {timeout:g}s (log: {log_file})")


def stop_daemon(socket_path: Path, *, timeout: float = 10.0, force: bool = False) -> int | None:
    """SIGTERM the daemon (SIGKILL after ``timeout`` with ``force``); returns its pid or
    ``None`` when none was running. Raises ``TimeoutError`` if it does not exit."""
    pid = read_lock_pid(lock_path_for(socket_path))
    if pid is None or not pid_alive(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout):
        return pid
    if force:
        os.kill(pid, signal.SIGKILL)
        if _wait_gone(pid, 2.0):
            return pid
    raise TimeoutError(f"the daemon (pid {pid}) did not exit within {timeout:g}s")


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _is_zombie(pid):
            return True
        time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rpartition(")")[2].split()[:1] == ["Z"]


def _tail(path: Path, lines: int = 10) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def ensure_running(socket_path: Path | None = None, *, timeout: float = 10.0) -> bool:
    """Start a detached daemon unless one answers; True when this call started it.

    For commands that should start the daemon on demand (``tether agent spawn``).
    Raises :class:`DaemonSetupError` when it cannot be started.
    """
    socket_path = paths.socket_path() if socket_path is None else socket_path
    if probe(socket_path):
        return False
    try:
        start_detached(socket_path, timeout=timeout)
    except DaemonSetupError:
        if probe(socket_path):  # lost a race with another starter: fine
            return False
        raise
    return True
