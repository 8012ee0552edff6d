"""An event loop on a virtual clock, for the timers of asyncio parts (trio's ``MockClock``
with ``autojump_threshold=0``).

Theory of operation: :class:`MockClockLoop` reports :meth:`time` from a counter that
starts at 0. When the loop is about to block with nothing ready, no descriptor event
pending (its selector answers a zero-timeout poll with nothing), the counter jumps by the
block's timeout, the time to the next timer: the timer fires at once and a test of a
five-minute timeout takes no time. What happens between timers is decided by the loop's
order alone, so a test can say "the answer came 10 s before the timeout" and mean it.

Only for code whose waits are the loop's timers and futures: work done in threads or
other processes takes real time the virtual clock does not wait for.

Run a coroutine on it with :func:`run`.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that, instead of blocking, moves its loop's clock to the next timer."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: MockClockLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0 or self.loop is None:
            return ready
        if timeout is None:  # no timer at all: only a descriptor can wake the loop
            return super().select(None)
        self.loop.now += timeout
        return []


class MockClockLoop(asyncio.SelectorEventLoop):
    """See the module docstring."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0

    def time(self) -> float:
        return self.now


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`MockClockLoop`."""
    with asyncio.Runner(loop_factory=MockClockLoop) as runner:
        return runner.run(main)
