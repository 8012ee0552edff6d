"""Shared helpers for the parent tests: the test-double child and an update collector."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tether.runtime.parent.spawn import RunEvent, RunHandle, Timeouts, Update

DOUBLE = Path(__file__).parent / "doubles" / "wire_child.py"
FAST = Timeouts(start_s=5, ack_s=5, cancel_grace_s=0.5, kill_grace_s=0.5, exit_grace_s=0.5)


def double(mode: str = "normal", turn_ms: int = 150) -> list[str]:
    """argv of the TEST DOUBLE child in ``mode``."""
    return [sys.executable, str(DOUBLE), "--mode", mode, "--turn-ms", str(turn_ms)]


class Collector:
    """Reads a handle's updates in the background; lets a test wait for one."""

    def __init__(self, handle: RunHandle) -> None:
        self.handle = handle
        self.items: list[Update] = []
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for item in self.handle.updates():
            self.items.append(item)
            self._changed.set()
        self._changed.set()

    async def until(self, predicate: Callable[[Update], bool], wait_s: float = 10.0) -> Update:
        async def scan() -> Update:
            seen = 0
            while True:
                for item in self.items[seen:]:
                    if predicate(item):
                        return item
                seen = len(self.items)
                if self.task.done():
                    raise AssertionError(f"run ended without the update; got {self.types()}")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(scan(), wait_s)

    async def until_type(self, tag: str, wait_s: float = 10.0) -> RunEvent:
        item = await self.until(lambda u: isinstance(u, RunEvent) and _tag(u) == tag, wait_s)
        assert isinstance(item, RunEvent)
        return item

    def events(self) -> list[RunEvent]:
        return [i for i in self.items if isinstance(i, RunEvent)]

    def types(self) -> list[str]:
        return [_tag(i) for i in self.events()]

    async def done(self) -> None:
        await asyncio.wait_for(self.task, 30)


def _tag(item: RunEvent) -> str:
    tag = type(item.event).__struct_config__.tag
    return str(tag)


def child_state(item: RunEvent) -> str | None:
    """The double's own state, carried in its extra ``child-state`` member."""
    value = json.loads(item.raw).get("child-state")
    return None if value is None else str(value)
