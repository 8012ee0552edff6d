"""Who is at the other end of a Unix socket: the kernel's ``SO_PEERCRED`` (Linux).

The daemon refuses a client of another uid, and every client refuses a "daemon" of
another uid before it sends a single byte (a request may carry ``env`` secrets). This
module imports nothing from tether: every layer may use it.
"""

from __future__ import annotations

import socket
import struct
from typing import Final, NamedTuple

_SO_PEERCRED: Final = getattr(socket, "SO_PEERCRED", 17)
_UCRED: Final = struct.Struct("3i")


class PeerCred(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_cred(sock: socket.socket) -> PeerCred:
    """The peer's pid, uid and gid (``OSError`` when the kernel cannot say)."""
    return PeerCred(*_UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, _UCRED.size)))
