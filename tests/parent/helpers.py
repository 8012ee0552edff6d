"""Shared helpers for the parent tests: the test-double child and an update collector."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.waits import HANG_S
from tether.runtime.parent.spawn import RunEvent, RunHandle, Timeouts, Update

DOUBLE = Path(__file__).parent / "doubles" / "wire_child.py"
FAST = Timeouts(start_s=5, ack_s=5, cancel_grace_s=0.5, kill_grace_s=0.5, exit_grace_s=0.5)


ENDLESS = -1  # turn_ms of a turn that only a control ends (cancel, finalize, a deadline)


def double(mode: str = "normal", turn_ms: int = 150, gate: Gate | None = None) -> list[str]:
    """argv of the TEST DOUBLE child in ``mode``; with a gate, its turns end when the test
    opens the gate, not after ``turn_ms``."""
    argv = [sys.executable, str(DOUBLE), "--mode", mode, "--turn-ms", str(turn_ms)]
    return argv if gate is None else [*argv, "--gate", str(gate.path)]


class Gate:
    """What ends a gated double's turns: each :meth:`open` ends one turn (or follow-up)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> None:
        with self.path.open("ab") as file:
            file.write(b"open\n")


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

    async def until(self, predicate: Callable[[Update], bool], wait_s: float = HANG_S) -> Update:
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

    async def until_type(self, tag: str, wait_s: float = HANG_S) -> RunEvent:
        item = await self.until(lambda u: isinstance(u, RunEvent) and _tag(u) == tag, wait_s)
        assert isinstance(item, RunEvent)
        return item

    def events(self) -> list[RunEvent]:
        return [i for i in self.items if isinstance(i, RunEvent)]

    def types(self) -> list[str]:
        return [_tag(i) for i in self.events()]

    async def done(self) -> None:
        await asyncio.wait_for(self.task, HANG_S)


def _tag(item: RunEvent) -> str:
    tag = type(item.event).__struct_config__.tag
    return str(tag)


def child_state(item: RunEvent) -> str | None:
    """The double's own state, carried in its extra ``child-state`` member."""
    value = json.loads(item.raw).get("child-state")
    return None if value is None else str(value)
