"""Follow the runs a run starts (its subagents, and theirs), so a display can nest them.

A subagent run is an ordinary run started by a tool inside the child; its events go to
its own ``events.jsonl``, and the run index records its parent run. The follower asks the
index, at most every :data:`SCAN_S`, for new children of the runs it follows, tails each
child's log through its own :class:`~tether.runtime.parent.mirror.RunMirror` (the same
validation as the top-level run) and hands out their updates with ``depth`` = nesting
level. Nothing here can fail a run: an unreadable index or log is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tether.runtime.parent.hub import WatchHub
from tether.runtime.parent.mirror import ChannelError, RunMirror, too_large
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.outcome import RunResult
from tether.runtime.parent.rundir import RunDir
from tether.runtime.parent.updates import RunEvent, Update
from tether.store.index import RunIndex
from tether.transports.tail import FileTail, TailStatus
from tether.wire import TooLarge

SCAN_S: Final = 0.5
MAX_FOLLOWED: Final = 64


@dataclass
class _Followed:
    run: RunDir
    depth: int
    mirror: RunMirror
    tail: FileTail
    token: int
    done: bool = False


@dataclass
class NestedFollower:
    """Tails the logs of a run's descendants; see the module docstring."""

    root: str
    index: RunIndex
    hub: WatchHub
    wake: asyncio.Event
    max_depth: int = 8
    _runs: dict[str, _Followed] = field(default_factory=dict)
    _next_scan: float = 0.0

    async def poll(self) -> list[Update]:
        """New updates from descendants (``depth`` >= 1), each run's in log order."""
        now = time.monotonic()
        if now >= self._next_scan:
            self._next_scan = now + SCAN_S
            await self._scan()
        out: list[Update] = []
        for followed in self._runs.values():
            if not followed.done:
                out.extend(self._read(followed))
        return out

    async def _scan(self) -> None:
        parents = [(self.root, 0)] + [(r, f.depth) for r, f in self._runs.items()]
        for parent, depth in parents:
            if depth >= self.max_depth or len(self._runs) >= MAX_FOLLOWED:
                continue
            try:
                children = await asyncio.to_thread(self.index.children, parent)
            except (sqlite3.Error, OSError):
                return
            for child in children:
                if child.id not in self._runs and len(self._runs) < MAX_FOLLOWED:
                    self._follow(RunDir(child.id, Path(child.run_dir)), depth + 1)

    def _follow(self, run: RunDir, depth: int) -> None:
        token = self.hub.subscribe_event(run.events, self.wake)
        self._runs[run.run_id] = _Followed(
            run, depth, RunMirror(run.run_id), FileTail(run.events), token
        )

    def _read(self, followed: _Followed) -> list[Update]:
        out: list[Update] = []
        run_id = followed.run.run_id
        while True:
            read = followed.tail.read()
            if read.status is not TailStatus.OK or not read.items:
                if read.status is TailStatus.TRUNCATED:
                    out.append(ChannelError("event file truncated", True, run_id))
                    self._stop(followed)
                return out
            for item in read.items:
                if isinstance(item, TooLarge):
                    out.append(too_large(run_id, item.offset))
                    continue
                event, problem = followed.mirror.receive(item.data)
                if event is not None:
                    state = followed.mirror.state
                    out.append(RunEvent(run_id, event, item.data, state, followed.depth))
                if problem is not None:
                    out.append(problem)
            if followed.mirror.finished:
                self._stop(followed)
                return out

    def _stop(self, followed: _Followed) -> None:
        followed.done = True
        followed.tail.close()
        self.hub.unsubscribe(followed.run.events, followed.token)

    def close(self) -> None:
        for followed in self._runs.values():
            if not followed.done:
                with contextlib.suppress(Exception):
                    self._stop(followed)


class NestedUpdates(Observer):
    """The run's descendants' updates handed to ``put`` as they come (its own task: the
    index is asked every :data:`SCAN_S`, the logs are read when they change), and what is
    left once the run has ended."""

    def __init__(
        self, root: str, index: RunIndex, hub: WatchHub, put: Callable[[Update], None]
    ) -> None:
        self._wake = asyncio.Event()
        self._follower = NestedFollower(root, index, hub, self._wake)
        self._put = put
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"nested-{root}")

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._hand_out(await self._follower.poll())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), SCAN_S)

    def _hand_out(self, updates: list[Update]) -> None:
        for update in updates:
            self._put(update)

    async def on_end(self, result: RunResult) -> str | None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(Exception):
            self._hand_out(await self._follower.poll())
        self._follower.close()
        return None
