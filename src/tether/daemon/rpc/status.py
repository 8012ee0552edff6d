"""What ``daemon.status`` answers about the server itself (a msgspec Struct, as every
verb's reply is); the fleet's ``agent.status {}`` carries it inside its own reply."""

from __future__ import annotations

import msgspec

__all__ = ["ServerStatus"]


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The server's statistics: who it is, how long it has run, what it serves now."""

    pid: int
    socket: str
    started_at: float
    uptime_s: float
    connections: int  # open client connections
    in_flight: int  # calls being answered
    channels: int = 0  # channels registered (the channel hub's count; 0 without one)
    methods: list[str] = []
