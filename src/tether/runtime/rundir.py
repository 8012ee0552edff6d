"""Run directories: where one run's files live.

Every run gets a private directory ``<runs dir>/<run id>/`` (0700) holding

- ``control.jsonl``: the parent's controls (0600, created exclusively before the child starts),
- ``events.jsonl``: the child's events, also the run's permanent log (0600),
- ``inbox.jsonl``: the reverse channel any agent can append to (0600),
- ``stderr.log``: the child's stderr and stdout (0600),
- ``final.txt``: the run's complete final answer, once it has one (0600).

Run ids sort by creation time and are unique: ``20261130T061500-ab12cd`` (UTC second,
then random hex); the directory is created exclusively, so two parents never share one.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether.paths import FILE_MODE, create_private_file, ensure_private_dir, runs_dir

CONTROL_FILE: Final = "control.jsonl"
EVENTS_FILE: Final = "events.jsonl"
INBOX_FILE: Final = "inbox.jsonl"
STDERR_FILE: Final = "stderr.log"
FINAL_FILE: Final = "final.txt"

_ID_ATTEMPTS: Final = 16


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


def run_dir_for(run_id: str, root: Path | None = None) -> RunDir:
    """The directory of an existing run (not checked)."""
    return RunDir(run_id, (runs_dir() if root is None else root) / run_id)


def create_run_dir(root: Path | None = None, *, now: float | None = None) -> RunDir:
    """Make a new private run directory with its control, event and stderr files."""
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
        return run
    raise FileExistsError(f"could not make a unique run directory under {base}")


def append_line(path: Path, line: bytes) -> None:
    """Append one line (a newline is added) with a single ``O_APPEND`` write."""
    data = line + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    try:
        written = os.write(fd, data)
        while written < len(data):  # a full disk or a signal: finish the line
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600), replacing it atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        data = text.encode("utf-8", "replace")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_tail(path: Path, limit: int = 2000) -> str:
    """The last ``limit`` bytes of a file as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - limit))
            data = handle.read(limit)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if size > limit:
        text = text.split("\n", 1)[-1] if "\n" in text else text
        text = "…" + text
    return text.strip()
