"""Reading a child's event file in tests: every complete line validated, in seq order."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.waits import HANG_S, wait_until
from tether.wire import Receiver, Rejection

Event = dict[str, Any]


def read_events(path: Path) -> list[Event]:
    """The complete event lines so far, each validated (type, envelope, seq order)."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]  # a partial last line is not an event yet
    receiver = Receiver("event")
    out = []
    for line in lines:
        result = receiver.receive(line)
        assert not isinstance(result, Rejection), f"bad event line {line!r}: {result}"
        out.append(json.loads(line))
    return out


def wait_for_event(
    path: Path,
    predicate: Callable[[Event], bool],
    *,
    proc: subprocess.Popen[bytes] | None,
    describe: Callable[[], str],
    count: int = 1,
    timeout: float = HANG_S,
) -> Event:
    """The ``count``-th matching event of the file at ``path``, re-read as it grows; fails
    once the child has exited without it (or at the hang detector's bound)."""

    def found() -> Event | None:
        matches = [e for e in read_events(path) if predicate(e)]
        return matches[count - 1] if len(matches) >= count else None

    event: Event = wait_until(
        found, "no matching event", files=[path], proc=proc, describe=describe, timeout=timeout
    )
    return event
