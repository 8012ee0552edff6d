"""The reaper: no process a run started outlives the process that started it.

Theory of operation. Tools run in their own session (``procs.NEW_GROUP``) so a timeout
can end a tool's whole group; but then killing the child's group misses them, and a
child that dies by SIGKILL cannot end them itself. So the first time a process starts
something, :func:`marked_env` starts one small reaper process for it:

- The reaper runs in its own session (a group kill aimed at its owner misses it) and
  reads a pipe whose only write end its owner holds (close-on-exec, so no tool keeps
  it open). The owner writes ``+PGID`` / ``-PGID`` lines as groups start and end.
- Every process started with :func:`marked_env` carries ``TETHER_REAP_TOKEN`` (a random
  token per owner); its descendants inherit it, even those that leave the group.
- When the owner dies, however it dies, the kernel closes the write end; the reaper
  reads EOF and ends every tracked group and every process whose environment carries
  the token: SIGTERM, a short grace, then SIGKILL, repeated until none is left. Then it
  exits. A normal exit of the owner ends the same way, so nothing lingers either.

The reaper's own environment lacks the token, so the reaper of an outer run (a subagent
runs inside a tool) never kills an inner reaper before it has done its work.

Run as ``python -m tether.reaper TOKEN`` with the pipe on stdin; started as a shell
that waits for the pipe's EOF first and only then execs that (:data:`WAIT_SCRIPT`),
so the reaper costs no interpreter start while its owner runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

TYPE_CHECKING = False  # typing's, without importing typing: the reaper starts per run
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Final

__all__ = [
    "REAP_ENV",
    "adopt",
    "marked_env",
    "new_owner_after_fork",
    "reap",
    "reaper_argv",
    "track",
    "untrack",
    "with_token",
]

REAP_ENV: Final = "TETHER_REAP_TOKEN"  # its value: 12 random bytes (os.urandom), in hex
GRACE_S: Final = 1.0
"""How long the marked processes get between SIGTERM and SIGKILL."""
ROUNDS: Final = 20
"""SIGKILL rounds at most (a process forking as fast as it can is still caught)."""
_TICK_S: Final = 0.02
SHELL: Final = "/bin/sh"
WAIT_SCRIPT: Final = """trap '' INT HUP
cd / || exit 0
nl='
'
groups=''
while IFS= read -r line; do
  case $line in
  -*)
    entry="+${line#-}$nl"
    case $groups in
    *"$entry"*) groups="${groups%%"$entry"*}${groups#*"$entry"}" ;;
    esac ;;
  +*) groups="$groups$line$nl" ;;
  esac
done
exec "$0" -m tether.reaper "$1" <<END
$groups
END
"""
"""The reaper while its owner lives: a shell (~1 ms of CPU and ~1 MiB, not a Python
interpreter's 20-40 ms and ~10 MiB per owner) that keeps the owner's tracked groups
(a ``+PGID`` line adds one, ``-PGID`` removes it: what it holds is bounded by the groups
alive, not by how many the owner ever started) until EOF and only then execs
``python -m tether.reaper TOKEN`` with them on its stdin. ``$0`` is the interpreter,
``$1`` the token; like the Python reaper it runs in ``/``, ignores a terminal's SIGINT
and SIGHUP and lacks the token."""


class _Owner:
    """This process's side: the token, and the pipe to its reaper (None until started)."""

    def __init__(self) -> None:
        self.token = os.urandom(12).hex()
        self.fd: int | None = None

    def ensure_started(self) -> bool:
        """Start the reaper unless one is listening; False when none can be started."""
        if self.fd is not None:
            return True
        read_end, write_end = os.pipe()  # both close-on-exec: no tool inherits them
        env = {k: v for k, v in os.environ.items() if k != REAP_ENV}
        argv = reaper_argv(self.token)
        actions = [
            (os.POSIX_SPAWN_DUP2, read_end, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ]
        try:
            # posix_spawn, not Popen: no object that warns when collected while running.
            os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
        except OSError:
            os.close(write_end)
            return False
        finally:
            os.close(read_end)
        self.fd = write_end
        return True

    def send(self, line: str) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, line.encode() + b"\n")
        except OSError:  # the reaper died: the next marked_env starts another
            os.close(self.fd)
            self.fd = None


_owner = _Owner()


def reaper_argv(token: str) -> list[str]:
    """The reaper's command for ``token`` (its owner's pipe goes on its stdin): the
    waiting shell (:data:`WAIT_SCRIPT`), else ``python -m tether.reaper TOKEN``."""
    if os.access(SHELL, os.X_OK):
        return [SHELL, "-c", WAIT_SCRIPT, sys.executable, token]
    return [sys.executable, "-m", "tether.reaper", token]


def adopt(token: str, fd: int) -> None:
    """Take over a reaper started for this process before it ran (``tether child``'s
    CLI, started by the pre-exec stage: ``runtime.adapters.prestart_stage``): its token,
    and ``fd``, the write end of its pipe (made close-on-exec here)."""
    os.set_inheritable(fd, False)
    if _owner.fd is not None and _owner.fd != fd:
        with contextlib.suppress(OSError):
            os.close(_owner.fd)
    _owner.token = token
    _owner.fd = fd


def new_owner_after_fork() -> None:
    """A forked process (a fork server's child) is a new owner: its own token, and not
    the write end of its parent's reaper pipe (which would keep that reaper waiting)."""
    if _owner.fd is not None:
        with contextlib.suppress(OSError):
            os.close(_owner.fd)
    _owner.token = os.urandom(12).hex()
    _owner.fd = None


os.register_at_fork(after_in_child=new_owner_after_fork)


def marked_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with its reap token, the reaper started first.

    Call it for every process that must not outlive this one, then :func:`track` its
    group. Without a reaper (none could be started) ``env`` comes back unmarked.
    """
    base = dict(os.environ if env is None else env)
    if _owner.ensure_started():
        return with_token(base, _owner.token)
    return base


def with_token(env: Mapping[str, str], token: str) -> dict[str, str]:
    """``env`` marked with ``token`` (what :func:`marked_env` gives, for a known token)."""
    base = dict(env)
    base[REAP_ENV] = token
    return base


def track(pgid: int) -> None:
    """A process group this process started (with :func:`marked_env`) is now running."""
    if pgid > 1:
        _owner.send(f"+{pgid}")


def untrack(pgid: int) -> None:
    """A tracked group has been ended by its starter: the reaper forgets it."""
    if pgid > 1:
        _owner.send(f"-{pgid}")


# -- the reaper process ----------------------------------------------------------------


def _read_groups(fd: int) -> set[int]:
    """The groups still tracked when the pipe reaches EOF."""
    groups: set[int] = set()
    pending = b""
    while chunk := os.read(fd, 65536):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _apply(groups, line)
    return groups


def _apply(groups: set[int], line: bytes) -> None:
    try:
        pgid = int(line[1:])
    except ValueError:
        return
    if line[:1] == b"+":
        groups.add(pgid)
    elif line[:1] == b"-":
        groups.discard(pgid)


def marked_pids(token: str) -> Iterator[int]:
    """Live processes whose environment carries ``REAP_ENV=token`` (this one excluded)."""
    needle = f"{REAP_ENV}={token}".encode()
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if needle in environ.split(b"\0") and not _zombie(name):
            yield int(name)


def _zombie(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[:1] == [b"Z"]
    except OSError:
        return True


def _signal_all(groups: set[int], pids: list[int], sig: int) -> None:
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _group_alive(pgid: int) -> bool:
    from tether.procs import group_has_live_members

    return group_has_live_members(pgid)


def reap(token: str, groups: set[int]) -> None:
    """End the tracked groups and every marked process: SIGTERM, grace, then SIGKILL."""
    pids = list(marked_pids(token))
    if not pids and not any(_group_alive(g) for g in groups):
        return
    _signal_all(groups, pids, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if not list(marked_pids(token)) and not any(_group_alive(g) for g in groups):
            return
        time.sleep(_TICK_S)
    for _ in range(ROUNDS):
        pids = list(marked_pids(token))
        live = {g for g in groups if _group_alive(g)}
        if not pids and not live:
            return
        _signal_all(live, pids, signal.SIGKILL)
        time.sleep(_TICK_S)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m tether.reaper TOKEN  (the owner's pipe on stdin)", file=sys.stderr)
        return 2
    os.chdir("/")  # keep no directory of the run busy
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a terminal's signals are not for the reaper
    try:
        groups = _read_groups(0)
    except OSError:
        groups = set()
    reap(argv[0], groups)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
