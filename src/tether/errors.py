"""Every exception tether raises on purpose, as one tree rooted at :class:`TetherError`.

Decoders never raise: bad input comes back as a value (``wire.Rejection``,
``framing.resp.Rejection``, ``inbox.messages.InboxRejection``, ``daemon.protocol.ProtocolError``).
Exceptions are for caller bugs and for what goes wrong around a run::

    TetherError
    └── ParentError
        ├── SpawnError       the child could not be started
        ├── RunEnded         the run ended before a control was acknowledged
        └── ControlRefused   a control could not be encoded (too large, bad field)

This module imports nothing from tether, so every layer may raise from it.
"""

from __future__ import annotations

__all__ = [
    "ControlRefused",
    "ParentError",
    "RunEnded",
    "SpawnError",
    "TetherError",
]


class TetherError(Exception):
    """Base of every error tether raises on purpose."""


class ParentError(TetherError):
    """A problem talking to a child run."""


class SpawnError(ParentError):
    """The child could not be started (bad argv, missing executable, no permission)."""


class RunEnded(ParentError):
    """The run ended before the control was acknowledged (its result says how)."""


class ControlRefused(ParentError, ValueError):
    """The control could not be sent: it does not encode as a valid wire line."""
