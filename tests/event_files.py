"""Reading a child's event file in tests: every complete line validated, in seq order."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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
    events: Callable[[], list[Event]],
    predicate: Callable[[Event], bool],
    *,
    proc: subprocess.Popen[bytes] | None,
    describe: Callable[[], str],
    count: int = 1,
    timeout: float,
) -> Event:
    """The ``count``-th matching event; fails once the deadline passes or the child exits."""
    deadline = time.monotonic() + timeout
    while True:
        matches = [e for e in events() if predicate(e)]
        if len(matches) >= count:
            return matches[count - 1]
        exited = proc is not None and proc.poll() is not None
        if exited or time.monotonic() > deadline:
            matches = [e for e in events() if predicate(e)]  # one last look
            if len(matches) >= count:
                return matches[count - 1]
            why = "the child exited before the event" if exited else f"none within {timeout}s"
            pytest.fail(f"no matching event: {why}\n{describe()}")
        time.sleep(0.01)
