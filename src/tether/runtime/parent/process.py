"""A run's child process as its driver watches it, however it was started.

Theory of operation. A child is one of: an asyncio subprocess (``tether.spawn`` exec'd it),
a :class:`~tether.runtime.parent.forkserver.ForkedChild` (the fork server forked it; its
status comes from the template), a ``subprocess.Popen`` (the daemon exec'd it behind a
gate), or a bare pid (a child another process started: a daemon re-adopting its agents
after a restart). :class:`ChildProcess` gives the driver one face over all four: the pid,
``wait()`` for its exit (with its status when it can be known) and the target whose group
is ended.

A Popen or a bare pid is watched with a pidfd (``pidfd_open``): no SIGCHLD handler, no
thread per child, and it works the same for a child this process did not start. Without
pidfds (an old kernel) the pid is looked at every :data:`PID_CHECK_S` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
from typing import Final

from tether import procs
from tether.runtime.parent.forkserver import ForkedChild

__all__ = ["PID_CHECK_S", "ChildProcess", "Started"]

log = logging.getLogger("tether.runtime.parent.process")

# Without a pidfd the pid is looked at this often.
PID_CHECK_S: Final = 5.0

Started = asyncio.subprocess.Process | ForkedChild | subprocess.Popen[bytes] | int


class ChildProcess:
    """One child, however started (see the module docstring).

    ``owns_group``: its process group is ours to end (a child seen alive); a child found
    gone at re-adoption is never signalled (its pid may be another process's by now).
    """

    def __init__(self, started: Started, *, owns_group: bool = True) -> None:
        self.started = started
        self.owns_group = owns_group
        self.pid = started if isinstance(started, int) else started.pid

    @property
    def target(self) -> procs.Target:
        """What :func:`tether.procs.terminate_group` ends."""
        return self.started

    @property
    def returncode(self) -> int | None:
        started = self.started
        if isinstance(started, int):
            return None
        if isinstance(started, subprocess.Popen):
            return started.poll()
        return started.returncode

    async def wait(self) -> int | None:
        """Until the process is gone; its status when it can be known."""
        started = self.started
        if isinstance(started, asyncio.subprocess.Process | ForkedChild):
            return await started.wait()
        await _wait_pid(self)
        return self.returncode


async def _wait_pid(child: ChildProcess) -> None:
    try:
        fd = os.pidfd_open(child.pid)
    except ProcessLookupError:
        return
    except OSError as exc:
        log.warning(
            "cannot watch pid %d with a pidfd (%s): looking every %g s", child.pid, exc, PID_CHECK_S
        )
        await _poll_pid(child)
        return
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await gone
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(fd)
        os.close(fd)


async def _poll_pid(child: ChildProcess) -> None:
    started = child.started
    while True:
        if isinstance(started, subprocess.Popen):
            if started.poll() is not None:
                return
        elif not procs.group_has_live_members(child.pid):
            return
        await asyncio.sleep(PID_CHECK_S)
