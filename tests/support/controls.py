"""Sample fields for every control kind (the extensions need a key or a ref)."""

from __future__ import annotations

from typing import Any

from tether.wire.session import ControlKind

TEXT = {ControlKind.PROMPT, ControlKind.STEER, ControlKind.FOLLOW_UP}


def control_fields(kind: ControlKind, text: str = "more") -> dict[str, Any]:
    """Fields that make a valid control of ``kind`` (an answer to a key nothing waits on,
    an unqueue of a seq never queued: both rejected by a tether child, by the table's
    rule for checked effects)."""
    if kind in TEXT:
        return {"text": text}
    if kind is ControlKind.ANSWER:
        return {"key": "nothing:0", "decision": "approve"}
    if kind is ControlKind.UNQUEUE:
        return {"ref": 999_999}
    return {}
