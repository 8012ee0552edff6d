"""The one "need more data" sentinel of tether's incremental readers.

The RESP frame reader (:mod:`tether.framing.resp`) and the daemon's frame decoder
(:mod:`tether.daemon.rpc.protocol`) hand out a value, a rejection, or :data:`NEED_DATA`.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["NEED_DATA", "NeedData"]


class NeedData(enum.Enum):
    """The type of :data:`NEED_DATA`."""

    NEED_DATA = "need-data"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned when no whole value (or rejection) is available yet: feed more bytes."""
