"""Where tether keeps its files.

State (run directories, the SQLite index, inbox rows) lives in the state
directory: ``$TETHER_HOME`` if set, else ``$XDG_STATE_HOME/tether``, else
``~/.local/state/tether``. The daemon's socket lives in the runtime directory:
``$XDG_RUNTIME_DIR/tether`` (falling back to the state directory), overridable
with ``TETHER_SOCKET`` for the socket itself. Every directory tether creates is
0700 and every file 0600: agents' transcripts are private.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) as 0700 and tighten it if it already exists."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def create_private_file(path: Path, *, exclusive: bool = True) -> None:
    """Create an empty 0600 file; with ``exclusive`` fail if it already exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, FILE_MODE)
    os.close(fd)
