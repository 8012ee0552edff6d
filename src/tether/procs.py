"""Process groups: start a child in its own group, end the whole group.

Theory of operation: anything tether starts that may itself start processes (a
``bash -c`` tool, a child agent, a RESP program) runs in a new session
(``start_new_session=True``, see :data:`NEW_GROUP`), so its process group id equals
its pid and every descendant that does not leave the group can be signalled at once.
Ending a group is two steps: SIGTERM to the group, a short grace for it to go, then
SIGKILL to whatever is left (and a brief wait until it is gone, so a caller can rely on
the group being dead when the call returns). A leader that exits early does not end the wait: the
group is watched until it is empty (or the grace runs out), so a grandchild that
ignores SIGTERM is still killed.

``target`` is a pid/pgid (``int``), a :class:`subprocess.Popen`, an
:class:`asyncio.subprocess.Process`, or a child of the fork server
(``runtime.forkserver.ForkedChild``: ``exited`` also when its status is unknown). For the
process objects the leader is reaped (Popen) or its return code read (asyncio, forked), so
no zombie is left behind.

Errors: signalling a group that is already gone is not an error (``False``);
PermissionError is treated the same (the pid was reused by someone else's process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from typing import Any, Final, Protocol

__all__ = [
    "GRACE_S",
    "NEW_GROUP",
    "Gate",
    "find_program",
    "group_alive",
    "group_has_live_members",
    "group_id",
    "kill_group",
    "nul_problem",
    "proc_start_time",
    "process_matches",
    "signal_group",
    "terminate_group",
    "terminate_group_sync",
]

# Pass as keyword arguments to subprocess.Popen / asyncio.create_subprocess_exec.
NEW_GROUP: Final[dict[str, Any]] = {"start_new_session": True}

# Default time between SIGTERM and SIGKILL.
GRACE_S: Final = 2.0
# After SIGKILL, how long to wait for the group's processes to be gone.
KILL_WAIT_S: Final = 0.5

_TICK_S: Final = 0.01


class _HasPid(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...


Target = int | _HasPid


def group_id(target: Target) -> int:
    """The process group of ``target``: its pid, for processes started with NEW_GROUP."""
    return target if isinstance(target, int) else target.pid


def signal_group(target: Target, sig: int) -> bool:
    """Send ``sig`` to the whole group; False when the group is gone."""
    pgid = group_id(target)
    if pgid <= 1:
        raise ValueError(f"refusing to signal process group {pgid}")
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(target: Target) -> bool:
    """True while any process (zombies included) is in the group."""
    return signal_group(target, 0)


def kill_group(target: Target) -> bool:
    """SIGKILL the whole group at once; False when it was already gone."""
    return signal_group(target, signal.SIGKILL)


def _leader_done(target: Target) -> bool:
    """Reap the leader if we own it; True when it has exited (or is not ours)."""
    if isinstance(target, int):
        return True
    if isinstance(target, subprocess.Popen):
        return target.poll() is not None
    exited = getattr(target, "exited", None)  # a forked child whose status may be unknown
    return exited if isinstance(exited, bool) else target.returncode is not None


def _gone(target: Target) -> bool:
    return _leader_done(target) and not group_has_live_members(target)


def group_has_live_members(target: Target) -> bool:
    """True while a process of the group is running (zombies do not count).

    Orphaned members that die become zombies of init, which may take a while to reap
    them; ``killpg(pgid, 0)`` still finds those, so where it does, ``/proc`` decides.
    """
    if not group_alive(target):
        return False
    pgid = group_id(target)
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    return any(name.isdigit() and _live_in_group(name, pgid) for name in names)


def _live_in_group(pid: str, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    fields = data.rpartition(b")")[2].split()  # state, ppid, pgrp, ...
    return len(fields) > 2 and fields[0] != b"Z" and fields[2] == str(pgid).encode()


async def terminate_group(target: Target, grace_s: float = GRACE_S) -> int | None:
    """SIGTERM the group, wait up to ``grace_s`` for it to empty, then SIGKILL the rest.

    Returns the leader's return code when ``target`` is a process object that has
    exited, else None. Never raises for a group that is already gone.
    """
    if signal_group(target, signal.SIGTERM) and not await _wait_gone(target, grace_s):
        kill_group(target)
        await _wait_gone(target, KILL_WAIT_S)
    return await _reap(target)


async def _wait_gone(target: Target, seconds: float) -> bool:
    deadline = time.monotonic() + max(0.0, seconds)
    while not _gone(target):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_TICK_S)
    return True


def _wait_gone_sync(target: Target, seconds: float) -> bool:
    deadline = time.monotonic() + max(0.0, seconds)
    while not _gone(target):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_TICK_S)
    return True


async def _reap(target: Target) -> int | None:
    if isinstance(target, int):
        return None
    if isinstance(target, subprocess.Popen):
        return _reap_popen(target)
    wait = getattr(target, "wait", None)
    if wait is not None:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            code: int | None = await asyncio.wait_for(wait(), timeout=max(GRACE_S, 1.0))
            return code
    return target.returncode


def terminate_group_sync(target: Target, grace_s: float = GRACE_S) -> int | None:
    """The blocking variant of :func:`terminate_group` (for signal handlers and atexit)."""
    if signal_group(target, signal.SIGTERM) and not _wait_gone_sync(target, grace_s):
        kill_group(target)
        _wait_gone_sync(target, KILL_WAIT_S)
    if isinstance(target, subprocess.Popen):
        return _reap_popen(target)
    return None if isinstance(target, int) else target.returncode


def _reap_popen(proc: subprocess.Popen[Any]) -> int | None:
    try:
        return proc.wait(timeout=max(GRACE_S, 1.0))
    except subprocess.TimeoutExpired:
        return None


# -- process identity: a pid is the same process only while its start time matches ---------


def proc_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time, clock ticks since boot), or ``None``
    when the process does not exist. The comm field may hold spaces and parentheses, so
    fields are counted after the last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data.rpartition(b")")[2].split()
    # After the comm, fields start at number 3 (state); field 22 is index 22 - 3.
    try:
        return int(fields[22 - 3])
    except (IndexError, ValueError):
        return None


def process_matches(pid: int | None, start_time: int | None) -> bool:
    """True when ``pid`` is alive, not a zombie, and started at ``start_time``."""
    if pid is None or pid <= 0 or start_time is None:
        return False
    if proc_start_time(pid) != start_time:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state != [b"Z"]


# -- what exec cannot carry ---------------------------------------------------------------


def nul_problem(name: str, value: object) -> str | None:
    """Where ``value`` (a str, or lists/dicts of them) holds a NUL byte, said plainly.

    A process's arguments, environment and working directory are C strings: a NUL byte
    cannot be passed (``execve`` would cut the string, Python refuses with ValueError).
    """
    if isinstance(value, str):
        return f"{name} contains a NUL byte, which {_NUL_WHY}" if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{name}[{key!r}]"
            if isinstance(key, str) and "\0" in key:
                return f"{name} has a key with a NUL byte ({key!r}), which {_NUL_WHY}"
            problem = nul_problem(where, item)
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = nul_problem(f"{name}[{index}]", item)
            if problem is not None:
                return problem
    return None


_NUL_WHY: Final = "a process's arguments and environment cannot carry; remove it"


# -- a gate: a child that may run only once its starter says so ----------------------------

GATE_EXIT: Final = 125
"""The exit status of a gated child whose starter died before opening the gate."""
_GATE_SCRIPT: Final = 'read -r go && [ "$go" = go ] || exit 125; exec "$@" </dev/null'


class Gate:
    """A pipe a gated child waits on before it execs its real command.

    The starter records the child's pid (say, in the same row that reserves its name),
    then calls :meth:`open`. If the starter dies first, the kernel closes the write end,
    the child reads EOF and exits with :data:`GATE_EXIT` having run nothing: no child
    ever runs that its starter did not record. Pass :meth:`argv` as the command and
    :attr:`read_fd` as its stdin; the real command gets /dev/null on stdin.
    """

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()

    @staticmethod
    def argv(command: list[str]) -> list[str]:
        return ["/bin/sh", "-c", _GATE_SCRIPT, "tether-gate", *command]

    def started(self) -> None:
        """The child holds its end now: close ours (call right after the fork).

        Each end is closed once: a second ``close`` of the same number would close
        whatever another thread opened there meanwhile (a concurrent spawn's pipe)."""
        fd, self.read_fd = self.read_fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def open(self) -> None:
        """Let the child run its command."""
        try:
            os.write(self.write_fd, b"go\n")
        except OSError:
            pass  # the child is gone already
        finally:
            self.close()

    def close(self) -> None:
        """Shut the gate for good (the child, if any, exits without running)."""
        self.started()
        fd, self.write_fd = self.write_fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def find_program(argv0: str, cwd: str, env: dict[str, str]) -> str | None:
    """Where ``argv0`` would be executed from (a path with ``/`` is taken from ``cwd``)."""
    import shutil

    if "/" in argv0:
        path = os.path.join(cwd, argv0)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(argv0, path=env.get("PATH", os.defpath))
