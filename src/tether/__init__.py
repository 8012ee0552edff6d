"""tether: supervise live AI agents over a strict line protocol.

The protocol core lives in :mod:`tether.wire`; the parent API (``spawn``, ``run``)
in :mod:`tether.runtime.parent`. Heavy parts load lazily so that a child starts fast.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
