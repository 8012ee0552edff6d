"""The final answer of a run: the result's text, or the whole text from ``final-text-path``.

A child cuts a final text too long for one line and writes it whole to a private temp file
named by ``final-text-path``. The parent owns that file, but trusts nothing the child names:
it reads only a file *directly inside* one of two directories, opened relative to a
descriptor of it (see :mod:`tether.fsafe`): a ``final-text-*`` file of the run directory
(tether's own child), or any file of the child's private temp directory ``tmp/`` (its
``TMPDIR``, where ``mkstemp`` puts it, as the wire spec's own child does), that directory
opened through the run directory's descriptor, never through a symlink. The file must be
regular, have one link, be owned by this user, and hold at most
:data:`MAX_FINAL_TEXT_BYTES`; no symlink is followed, no FIFO blocked on; and only that very
file is removed. When the file cannot be read, or none was named, the cut text survives with
an explicit note saying so, and the result is marked truncated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from tether import fsafe
from tether.runtime.parent.rundir import SPILL_PREFIX, TMP_DIR
from tether.wire import Result as ResultEvent

MAX_FINAL_TEXT_BYTES: Final = 64 * 1024 * 1024


def full_text(result: ResultEvent, run_dir: Path) -> tuple[str, bool]:
    """The complete final text of a result, and whether it is still truncated.

    ``run_dir`` is the run's directory: the only place a final-text file may be.
    """
    text = result.final_text if isinstance(result.final_text, str) else ""
    path = result.final_text_path
    if not isinstance(path, str):
        if result.truncated is True:
            return text + truncation_note(len(text.encode()), None, "no file was named"), True
        return text, False
    try:
        return take_final_file(path, run_dir), False
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return text + truncation_note(len(text.encode()), path, reason), True


def take_final_file(path: str, run_dir: Path) -> str:
    """Read the child's full-text file (see the module docstring) and remove it."""
    tmp = run_dir / TMP_DIR
    if os.path.dirname(os.path.abspath(path)) == os.path.normpath(os.path.abspath(tmp)):
        name = fsafe.name_inside(tmp, path)
        with fsafe.opened_dir(run_dir) as run_fd, fsafe.opened_subdir(run_fd, TMP_DIR) as dir_fd:
            return _take(dir_fd, name)
    name = fsafe.name_inside(run_dir, path)
    if not name.startswith(SPILL_PREFIX):
        raise fsafe.UnsafeFileError(
            path, f"not a {SPILL_PREFIX}* file of the run nor a file of its {TMP_DIR}/"
        )
    with fsafe.opened_dir(run_dir) as dir_fd:
        return _take(dir_fd, name)


def _take(dir_fd: int, name: str) -> str:
    """The text of file ``name`` of ``dir_fd`` (a safe open), removed once read."""
    fd = fsafe.open_in(dir_fd, name, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        data = fsafe.read_all(fd, MAX_FINAL_TEXT_BYTES)
    finally:
        os.close(fd)
    fsafe.unlink_in(dir_fd, name, st)
    return data.decode("utf-8", "replace")


def truncation_note(size: int, path: str | None, reason: str) -> str:
    where = f" from {path}" if path else ""
    return (
        f"\n\n[tether: this answer was cut to {size} bytes to fit one wire line; "
        f"the full text could not be read{where}: {reason}]"
    )
