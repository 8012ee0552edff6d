"""Where tether keeps its files.

State (run directories, the SQLite index, inbox rows) lives in the state
directory: ``$TETHER_HOME`` if set, else ``$XDG_STATE_HOME/tether``, else
``~/.local/state/tether``. The daemon's socket lives in the runtime directory:
``$XDG_RUNTIME_DIR/tether`` (falling back to the state directory), overridable
with ``TETHER_SOCKET`` for the socket itself. Every directory tether creates is
0700 and every file 0600: agents' transcripts are private.

Trusting a directory (:func:`ensure_private_dir`, used for every directory tether keeps
files in: the state directory, ``runs/``, the runtime and socket directories). Another
local user must be unable to read what tether writes there or to replace what it reads:

- symlinks are resolved (a symlinked ``TETHER_HOME`` is allowed) and BOTH the path as
  given and the resolved path are checked, component by component from ``/``: every
  component must be owned by you or root, and a directory writable by group or others
  is accepted only when it is sticky (``/tmp``), where others cannot rename your entries;
- the directory itself must be yours and not writable by group or others; a directory
  tether creates now is made 0700 (every missing component), and one of yours that is
  merely readable by others is tightened to 0700;
- anything else (her directory, a 0777 one, a symlink she owns) is refused with
  :class:`UnsafeDirectory`, which says what to do; nothing is chmodded or written first.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tether.errors import TetherError

DIR_MODE = 0o700
FILE_MODE = 0o600


def state_dir(env: dict[str, str] | None = None) -> Path:
    """The state directory (not created)."""
    env = dict(os.environ) if env is None else env
    if env.get("TETHER_HOME"):
        return Path(env["TETHER_HOME"])
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tether"


def db_path(env: dict[str, str] | None = None) -> Path:
    """The SQLite database (WAL) that indexes runs, inbox rows and the daemon registry."""
    return state_dir(env) / "tether.db"


def runs_dir(env: dict[str, str] | None = None) -> Path:
    """The parent directory of every run directory."""
    return state_dir(env) / "runs"


def worktrees_dir(env: dict[str, str] | None = None) -> Path:
    """Where the agents' git worktrees live (see :mod:`tether.workspace`)."""
    return state_dir(env) / "worktrees"


def homes_dir(env: dict[str, str] | None = None) -> Path:
    """Where the agents' private homes live (their CLIs' configuration and sessions)."""
    return state_dir(env) / "homes"


def runtime_dir(env: dict[str, str] | None = None) -> Path:
    """The directory that holds the daemon socket and its lock file."""
    env = dict(os.environ) if env is None else env
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "tether"
    return state_dir(env) / "run"


def socket_path(env: dict[str, str] | None = None) -> Path:
    """The daemon socket: ``$TETHER_SOCKET`` or ``<runtime dir>/daemon.sock``."""
    env = dict(os.environ) if env is None else env
    if env.get("TETHER_SOCKET"):
        return Path(env["TETHER_SOCKET"])
    return runtime_dir(env) / "daemon.sock"


class UnsafeDirectory(TetherError, PermissionError):
    """A directory tether would keep files in could be read or replaced by another user."""


def ensure_private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create ``path`` (0700) or check it; return it resolved (see the module docstring).

    ``tighten=False`` leaves an existing directory's mode alone (the caller checks it).
    """
    given = Path(os.path.abspath(path))
    _check_chain(given, create=False)
    resolved = Path(os.path.realpath(given))
    _check_chain(resolved, create=True, tighten=tighten)
    return resolved


def _check_chain(path: Path, *, create: bool, tighten: bool = False) -> None:
    me = os.geteuid()
    current = Path(path.anchor)
    _check_component(current, os.lstat(current), leaf=False, me=me)
    for part in path.parts[1:]:
        current = current / part
        leaf = current == path
        if create and not os.path.lexists(current):
            try:
                os.mkdir(current, DIR_MODE)
            except FileExistsError:
                pass
            else:
                os.chmod(current, DIR_MODE)  # mkdir's mode went through the umask
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if create:
                raise
            return  # the rest does not exist yet: the resolved walk creates it
        _check_component(current, info, leaf=leaf, me=me)
    if tighten and stat.S_IMODE(os.lstat(path).st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)


def _check_component(where: Path, info: os.stat_result, *, leaf: bool, me: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        if info.st_uid not in (me, 0):
            raise _unsafe(where, f"is a symlink owned by uid {info.st_uid}")
        return
    if not stat.S_ISDIR(info.st_mode):
        raise _unsafe(where, "is not a directory")
    if info.st_uid not in ((me,) if leaf else (me, 0)):
        raise _unsafe(where, f"is owned by uid {info.st_uid}, not by you (uid {me})")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022 and (leaf or not mode & stat.S_ISVTX):
        raise _unsafe(where, f"is writable by other users (mode {mode:04o})")


def _unsafe(where: Path, why: str) -> UnsafeDirectory:
    return UnsafeDirectory(
        f"refusing to use {where}: it {why}, so another user could read or replace "
        "tether's files there; use a directory only you can write (chmod go-w, or set "
        "TETHER_HOME / XDG_RUNTIME_DIR to one of yours)"
    )


def create_private_file(path: Path, *, exclusive: bool = True) -> None:
    """Create an empty 0600 file; with ``exclusive`` fail if it already exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, FILE_MODE)
    os.close(fd)
