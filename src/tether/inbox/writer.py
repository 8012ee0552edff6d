"""Write to an inbox: create it privately, append one line atomically.

An inbox is a per-run JSONL file, created 0600 (exclusively) in the run's
private directory, whose path reaches the child in ``TETHER_INBOX_PATH`` (and
``RUNEX_INBOX_PATH``, the spec's name). Anything that can append a line can
write to it, ``echo '{"type":"progress","text":"step 3"}' >> "$TETHER_INBOX_PATH"``
included. :func:`append_inbox` is the Python way (the built-in agent's
``report`` tool uses it): one ``O_APPEND`` write per line, so concurrent
writers interleave only at line boundaries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from tether.inbox.messages import MAX_MESSAGE_BYTES
from tether.paths import FILE_MODE

__all__ = [
    "ENV_NAMES",
    "INBOX_FILENAME",
    "append_inbox",
    "create_inbox",
    "inbox_env",
    "inbox_path_from_env",
    "run_id_for_inbox",
]

INBOX_FILENAME: Final = "inbox.jsonl"
"""The inbox's name inside a run directory."""

ENV_NAMES: Final = ("TETHER_INBOX_PATH", "RUNEX_INBOX_PATH")
"""Environment variables that carry the inbox path to a child (tether's, the spec's)."""

_encoder: Final = msgspec.json.Encoder()


def create_inbox(path: str | os.PathLike[str]) -> Path:
    """Create an empty inbox file, 0600, failing if it already exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    os.close(fd)
    return Path(path)


def inbox_env(path: str | os.PathLike[str]) -> dict[str, str]:
    """The environment entries that point a child at its inbox."""
    value = os.fspath(path)
    return dict.fromkeys(ENV_NAMES, value)


def inbox_path_from_env(env: Mapping[str, str] | None = None) -> Path | None:
    """The inbox path a child was given, if any."""
    env = os.environ if env is None else env
    for name in ENV_NAMES:
        if env.get(name):
            return Path(env[name])
    return None


def run_id_for_inbox(path: str | os.PathLike[str]) -> str:
    """The run a file belongs to: ``<run>/inbox.jsonl`` or ``<run>.jsonl``."""
    p = Path(os.path.abspath(path))
    if p.name == INBOX_FILENAME and p.parent.name:
        return p.parent.name
    return p.name.removesuffix(".jsonl") or p.name


def encode_line(obj: Any) -> bytes:
    """One inbox line for ``obj`` (a mapping or a Struct): JSON object + newline."""
    try:
        data = _encoder.encode(obj)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValueError(f"inbox message is not JSON-encodable: {exc}") from exc
    if not data.startswith(b"{"):
        raise ValueError("an inbox message must be a JSON object")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"inbox message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    return data + b"\n"


def append_inbox(path: str | os.PathLike[str], obj: Any) -> int:
    """Append ``obj`` as one line with a single ``O_APPEND`` write; return its offset.

    The offset (with the run id) is the message's ``msg_key`` once drained.
    The file is created 0600 if it does not exist.
    """
    line = encode_line(obj)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        written = os.write(fd, line)
        while written < len(line):  # only on a full disk or a signal: finish the line
            written += os.write(fd, line[written:])
        return os.lseek(fd, 0, os.SEEK_CUR) - len(line)
    finally:
        os.close(fd)
