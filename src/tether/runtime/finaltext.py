"""The final answer of a run: the result's text, or the whole text from ``final-text-path``.

A child cuts a final text too long for one line and writes it whole to a private temp file
named by ``final-text-path``. The parent owns that file: it reads it (a regular file owned
by this user, at most :data:`MAX_FINAL_TEXT_BYTES`, never through a symlink) and removes
it. When the file cannot be read, or none was named, the cut text survives with an explicit
note saying so, and the result is marked truncated.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from tether.wire import Result as ResultEvent

MAX_FINAL_TEXT_BYTES: Final = 64 * 1024 * 1024


def full_text(result: ResultEvent) -> tuple[str, bool]:
    """The complete final text of a result, and whether it is still truncated."""
    text = result.final_text if isinstance(result.final_text, str) else ""
    path = result.final_text_path
    if not isinstance(path, str):
        if result.truncated is True:
            return text + truncation_note(len(text.encode()), None, "no file was named"), True
        return text, False
    try:
        return take_final_file(Path(path)), False
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return text + truncation_note(len(text.encode()), path, reason), True


def take_final_file(path: Path) -> str:
    """Read the child's full-text file (ours, regular, bounded) and remove it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(0, "not a regular file owned by this user")
        if st.st_size > MAX_FINAL_TEXT_BYTES:
            raise OSError(0, f"larger than {MAX_FINAL_TEXT_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    os.unlink(path)
    return b"".join(chunks).decode("utf-8", "replace")


def truncation_note(size: int, path: str | None, reason: str) -> str:
    where = f" from {path}" if path else ""
    return (
        f"\n\n[tether: this answer was cut to {size} bytes to fit one wire line; "
        f"the full text could not be read{where}: {reason}]"
    )
