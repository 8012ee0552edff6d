"""bash-agent's RESP-like internal frames and the message kinds they carry (sans-IO).

- :mod:`tether.framing.resp`: the incremental frame reader (pure Python, or hiredis-backed)
  and the writer.
- :mod:`tether.framing.messages`: TEXT, THINKING, TOOL_CALL, ... as typed values, and their
  conversions to and from frames, stream-json objects and wire display events.
- ``tether.sh`` (next to this file; ``tether shell-lib`` prints its path): the bash writer.
"""

from __future__ import annotations

from pathlib import Path

from tether.framing.resp import (
    Frame,
    FrameCode,
    FrameReader,
    FrameRejection,
    PureReader,
    ReaderStatistics,
    ReadResult,
    encode_frame,
)
from tether.framing.resp_hiredis import HiredisReader, hiredis_available, open_reader

__all__ = [
    "SHELL_LIBRARY",
    "Frame",
    "FrameCode",
    "FrameReader",
    "FrameRejection",
    "HiredisReader",
    "PureReader",
    "ReadResult",
    "ReaderStatistics",
    "encode_frame",
    "hiredis_available",
    "open_reader",
]

SHELL_LIBRARY: Path = Path(__file__).resolve().parent / "tether.sh"
"""The bash helper library (``tether shell-lib`` prints it; the RESP runner passes it on)."""
