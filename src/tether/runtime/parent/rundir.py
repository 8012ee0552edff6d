"""Run directories: where one run's files live.

Every run gets a private directory ``<runs dir>/<run id>/`` (0700) holding

- ``control.jsonl``: the parent's controls (0600, created exclusively before the child starts),
- ``events.jsonl``: the child's events, also the run's permanent log (0600),
- ``inbox.jsonl``: the reverse channel any agent can append to (0600),
- ``stderr.log``: the child's stderr and stdout (0600),
- ``final.txt``: the run's complete final answer, once it has one (0600),
- ``final-text-*.txt``: a child's uncut final text (``final-text-path``), until the parent
  has read and removed it,
- ``tmp/``: the child's private temp directory (0700, its ``TMPDIR``): a child that writes
  its uncut final text with ``mkstemp``, as the wire spec's own child does, puts it here,
- ``.row-pending``: a mark (a symlink naming its owner, never followed) the recording
  parent makes and removes once the run's row in the index is final
  (:func:`mark_pending_row`); a mark whose owner is gone is a run whose row is missing or
  unfinished, which the readers of the index recover from the directory
  (:mod:`tether.runtime.parent.recovery`).

The child may touch every one of these files: the parent and the daemon open them only
through :mod:`tether.fsafe` (no symlink followed, no FIFO blocked on, regular files with one
link owned by this user).

Run ids sort by creation time and are unique: ``20261130T061500-ab12cd`` (UTC second,
then random hex); the directory is created exclusively, so two parents never share one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether import fsafe
from tether.fsafe import append_line  # the one safe O_APPEND writer, used by every run file
from tether.paths import create_private_file, ensure_private_dir, runs_dir
from tether.procs import proc_start_time

CONTROL_FILE: Final = "control.jsonl"
EVENTS_FILE: Final = "events.jsonl"
INBOX_FILE: Final = "inbox.jsonl"
STDERR_FILE: Final = "stderr.log"
FINAL_FILE: Final = "final.txt"
SPILL_PREFIX: Final = "final-text-"  # a child's uncut final text: final-text-XXXX.txt
TMP_DIR: Final = "tmp"  # the child's TMPDIR
PENDING_ROW_FILE: Final = ".row-pending"  # the run's index row is not known to be final

_ID_ATTEMPTS: Final = 16

__all__ = [
    "CONTROL_FILE",
    "EVENTS_FILE",
    "FINAL_FILE",
    "INBOX_FILE",
    "PENDING_ROW_FILE",
    "SPILL_PREFIX",
    "STDERR_FILE",
    "TMP_DIR",
    "RunDir",
    "append_line",
    "clear_pending_row",
    "create_run_dir",
    "is_run_id",
    "mark_pending_row",
    "new_run_id",
    "pending_row_owner",
    "read_tail",
    "run_dir_for",
    "write_private_text",
]


def new_run_id(now: float | None = None) -> str:
    """A fresh sortable run id: UTC time to the second, a dash, six hex digits."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3)}"


def is_run_id(text: str) -> bool:
    """True for strings shaped like :func:`new_run_id` output (safe as a directory name)."""
    stamp, _, suffix = text.partition("-")
    return (
        len(stamp) == 15
        and stamp[8] == "T"
        and (stamp[:8] + stamp[9:]).isdigit()
        and len(suffix) == 6
        and all(c in "0123456789abcdef" for c in suffix)
    )


@dataclass(frozen=True, slots=True)
class RunDir:
    """The paths of one run's files."""

    run_id: str
    path: Path

    @property
    def control(self) -> Path:
        return self.path / CONTROL_FILE

    @property
    def events(self) -> Path:
        return self.path / EVENTS_FILE

    @property
    def inbox(self) -> Path:
        return self.path / INBOX_FILE

    @property
    def stderr(self) -> Path:
        return self.path / STDERR_FILE

    @property
    def final(self) -> Path:
        return self.path / FINAL_FILE

    @property
    def tmp(self) -> Path:
        return self.path / TMP_DIR


def run_dir_for(run_id: str, root: Path | None = None) -> RunDir:
    """The directory of an existing run (not checked)."""
    return RunDir(run_id, (runs_dir() if root is None else root) / run_id)


def create_run_dir(root: Path | None = None, *, now: float | None = None) -> RunDir:
    """Make a new private run directory with its control, event and stderr files and
    the child's temp directory."""
    base = ensure_private_dir(runs_dir() if root is None else root)
    for _ in range(_ID_ATTEMPTS):
        run_id = new_run_id(now)
        path = base / run_id
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        path.chmod(0o700)  # mkdir's mode is filtered by the umask
        run = RunDir(run_id, path)
        for name in (run.control, run.events, run.stderr):
            create_private_file(name, exclusive=True)
        run.tmp.mkdir(mode=0o700)
        run.tmp.chmod(0o700)
        return run
    raise FileExistsError(f"could not make a unique run directory under {base}")


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600), atomically (see :func:`tether.fsafe.replace_file`)."""
    fsafe.replace_file(path, text.encode("utf-8", "replace"))


def read_tail(path: Path, limit: int = 2000) -> str:
    """The last ``limit`` bytes of a file as text ("" when it cannot be read)."""
    try:
        data = fsafe.read_tail(path, limit + 1)  # a FIFO or symlink in its place reads as ""
    except OSError:
        return ""
    cut = len(data) > limit
    text = data[-limit:].decode("utf-8", "replace")
    if cut:
        text = text.split("\n", 1)[-1] if "\n" in text else text
        text = "…" + text
    return text.strip()


def mark_pending_row(run_dir: Path) -> bool:
    """Mark ``run_dir`` as a run whose index row is not yet final, owned by this process.

    The mark is a symlink whose target names its owner (``owner:PID:START``), never
    followed: no descriptor stays open, and a disk too full for the row has room for it (a
    short target lives in the inode). False when it cannot be made (the run is then not
    recoverable from its directory, as before)."""
    try:
        os.symlink(_owner_text(), run_dir / PENDING_ROW_FILE)
    except OSError:
        return False
    return True


def pending_row_owner(run_dir: Path) -> tuple[int, int | None] | None:
    """The pid and start time the run's mark names; None when there is no (valid) mark."""
    try:
        text = os.readlink(run_dir / PENDING_ROW_FILE)
    except OSError:
        return None
    kind, _, rest = text.partition(":")
    pid, _, start = rest.partition(":")
    if kind != "owner" or not pid.isdigit():
        return None
    return int(pid), int(start) if start.isdigit() else None


def clear_pending_row(run_dir: Path, owner: tuple[int, int | None] | None = None) -> None:
    """Remove the run's mark when it names ``owner`` (default: this process)."""
    mine = (os.getpid(), proc_start_time(os.getpid()))
    if pending_row_owner(run_dir) == (owner or mine):
        with contextlib.suppress(OSError):
            os.unlink(run_dir / PENDING_ROW_FILE)


def _owner_text() -> str:
    return f"owner:{os.getpid()}:{proc_start_time(os.getpid()) or ''}"
