"""How the daemon's server is sized and timed (:class:`ServerConfig`): one value the
composition root builds from ``tether daemon``'s flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tether.daemon.rpc.protocol import MAX_FRAME_BYTES

__all__ = ["ServerConfig"]


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    socket_path: Path
    max_connections: int = 512
    max_in_flight_per_connection: int = 256
    max_in_flight: int = 4096
    frame_timeout_s: float = 30.0
    deliver_timeout_s: float = 10.0
    max_channels: int = 4096
    shutdown_grace_s: float = 5.0
    max_frame_bytes: int = MAX_FRAME_BYTES
    # Pending connections the kernel queues for us (a burst of clients); asyncio's own
    # default (100) is too few: an AF_UNIX connect then fails with EAGAIN.
    listen_backlog: int = 1024
