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
  its uncut final text with ``mkstemp``, as the wire spec's own child does, puts it here.

The child may touch every one of these files: the parent and the daemon open them only
through :mod:`tether.fsafe` (no symlink followed, no FIFO blocked on, regular files with one
link owned by this user).

Run ids sort by creation time and are unique: ``20261130T061500-ab12cd`` (UTC second,
then random hex); the directory is created exclusively, so two parents never share one.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether import fsafe
from tether.fsafe import append_line  # the one safe O_APPEND writer, used by every run file
from tether.paths import create_private_file, ensure_private_dir, runs_dir

CONTROL_FILE: Final = "control.jsonl"
EVENTS_FILE: Final = "events.jsonl"
INBOX_FILE: Final = "inbox.jsonl"
STDERR_FILE: Final = "stderr.log"
FINAL_FILE: Final = "final.txt"
SPILL_PREFIX: Final = "final-text-"  # a child's uncut final text: final-text-XXXX.txt
TMP_DIR: Final = "tmp"  # the child's TMPDIR

_ID_ATTEMPTS: Final = 16

__all__ = [
    "CONTROL_FILE",
    "EVENTS_FILE",
    "FINAL_FILE",
    "INBOX_FILE",
    "SPILL_PREFIX",
    "STDERR_FILE",
    "TMP_DIR",
    "RunDir",
    "append_line",
    "create_run_dir",
    "is_run_id",
    "new_run_id",
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
