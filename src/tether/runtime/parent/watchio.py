"""The I/O both supervision drivers share: event slices into a :class:`RunWatch`, ending a
process group, the stderr tail.

The parent API (:mod:`tether.runtime.parent.spawn`) and the daemon
(:mod:`tether.daemon.fleet.wire_agent`) differ in how they wait (an asyncio child watcher, a
pidfd) and in what they do with each event (updates for a caller, followers and a
registry row); reading and ending are the same and live here once.

Reading is bounded: :func:`read_slice` makes at most :data:`READS_PER_SLICE` reads of one
budget each (64 KiB, 64 lines) and says whether more is waiting, so a driver runs the
watch's timers and yields to its loop between slices whatever the child writes (a
flood, or a line of gigabytes, which is skipped a budget at a time without buffering).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Final

from tether import procs
from tether.runtime.parent.mirror import ChannelError
from tether.runtime.parent.rundir import RunDir, read_tail
from tether.runtime.parent.supervise import STDERR_TAIL_BYTES, RunWatch
from tether.transports.tail import FileTail, TailStatus
from tether.wire import AnyEvent, TooLarge

__all__ = ["READS_PER_SLICE", "drain", "end_group", "read_slice", "stderr_tail"]

READS_PER_SLICE: Final = 32  # bounded reads (<= 64 KiB, <= 64 lines each) between yields

OnEvent = Callable[[AnyEvent, bytes], None]
OnError = Callable[[ChannelError], None]


def read_slice(
    tail: FileTail,
    watch: RunWatch,
    on_event: OnEvent,
    on_error: OnError,
    reads: int = READS_PER_SLICE,
) -> bool:
    """Feed up to ``reads`` bounded reads of the event file to ``watch``; True if more waits."""
    for _ in range(reads):
        read = tail.read()
        if read.status in (TailStatus.TRUNCATED, TailStatus.MISSING):
            what = "truncated" if read.status is TailStatus.TRUNCATED else "gone"
            error = ChannelError(f"event file {what}", True, watch.mirror.run)
            watch.channel_error(error)
            on_error(error)
            return False
        for item in read.items:
            if isinstance(item, TooLarge):
                on_error(watch.too_large(item.offset))
                continue
            event, problem = watch.receive(item.data)
            if event is not None:
                on_event(event, item.data)
            if problem is not None:
                on_error(problem)
        if not read.more:
            return False
    return True


async def drain(
    tail: FileTail, watch: RunWatch, on_event: OnEvent, on_error: OnError, limit: int | None
) -> None:
    """Read the rest of the event file (at most about ``limit`` bytes), yielding between slices."""
    start = tail.offset
    while read_slice(tail, watch, on_event, on_error):
        if limit is not None and tail.offset - start >= limit:
            break
        await asyncio.sleep(0)
    watch.drained()


async def end_group(target: procs.Target, grace_s: float) -> int | None:
    """End what is left of the child's process group (nothing when it is empty)."""
    if procs.group_alive(target):
        return await procs.terminate_group(target, grace_s)
    return None if isinstance(target, int) else target.returncode


def stderr_tail(run: RunDir) -> str:
    """The last bytes of the child's stderr, as a failure quotes them (or a full disk)."""
    tail = read_tail(run.stderr, STDERR_TAIL_BYTES)
    if not tail and _disk_full(run):
        return f"[tether: the disk holding {run.path} is full: the child could write nothing]"
    return tail


def _disk_full(run: RunDir) -> bool:
    try:
        return os.statvfs(run.path).f_bavail == 0
    except OSError:
        return False
