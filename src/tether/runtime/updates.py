"""What a parent hands out while a run goes: validated events, inbox messages, channel errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.runtime.mirror import ChannelError
from tether.wire import AnyEvent
from tether.wire.session import State


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One validated wire event of run ``run``, its raw line, and the mirrored state after it."""

    run: str
    event: AnyEvent
    raw: bytes
    state: State
    depth: int = 0


@dataclass(frozen=True, slots=True)
class InboxItem:
    """One message an agent appended to the run's inbox (``{"type": ..., ...}``)."""

    run: str
    message: dict[str, Any]
    depth: int = 0


Update = RunEvent | InboxItem | ChannelError
