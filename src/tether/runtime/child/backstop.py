"""The child's backstop: it ends once its parent is gone or it is told to stop, even when
its event loop is stuck.

Theory of operation. The graceful ways out (the lifeline pipe's EOF read by the event
loop, a signal handled by the loop) need the loop to run. A blocking call on it (a provider
reading a script that was a FIFO) once kept a child alive for ever after ``tether run`` was
SIGKILLed: parent 1, its own session, SIGTERM recorded and never acted on. So:

- the lifeline's read end is put in ``O_ASYNC`` mode, owned by this process: when the
  parent dies the kernel closes the write end and sends SIGIO;
- SIGIO (once the pipe is at EOF), SIGTERM, SIGHUP and SIGINT get a Python handler that
  starts a one-shot real-time timer, :data:`BACKSTOP_S` out, whose SIGALRM nobody handles
  (its default action ends the process). CPython runs a Python handler even while the
  main thread is blocked in a system call: the call is interrupted, the handler runs, the
  call is retried (PEP 475);
- the loop's own handling still runs (asyncio's wake-up descriptor is written by the C
  handler whatever Python handler is installed), so a child whose loop is alive writes
  its ``exit`` event and leaves long before the timer fires.

A child that ends by the timer writes no ``exit`` event: its parent is gone, or asked it
to stop and ends its group anyway. The tools it started are ended by its reaper
(:mod:`tether.reaper`), which sees it die.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
from collections.abc import Callable
from types import FrameType
from typing import Final

__all__ = ["BACKSTOP_S", "arm", "handle_stop_signals", "watch_lifeline"]

BACKSTOP_S: Final = 15.0
"""How long a child may take to leave once told to (a graceful exit takes a few seconds:
the turn interrupted, an agent CLI given its own stop grace)."""

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def arm(grace_s: float = BACKSTOP_S) -> None:
    """Start the timer; once started, a later call does not push it back."""
    if signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # even if it came in ignored
        signal.setitimer(signal.ITIMER_REAL, grace_s)


def handle_stop_signals(
    record: Callable[[int], object] | None = None, *, grace_s: float = BACKSTOP_S
) -> None:
    """SIGTERM, SIGHUP and SIGINT arm the timer, then go to ``record`` (if any). Call it
    again after ``loop.add_signal_handler``: the loop's handling keeps working."""

    def stopped(signum: int, _frame: FrameType | None) -> None:
        arm(grace_s)
        if record is not None:
            record(signum)

    for sig in STOP_SIGNALS:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, stopped)


def watch_lifeline(fd: int, *, grace_s: float = BACKSTOP_S) -> bool:
    """Have the kernel signal this process when ``fd`` (the lifeline's read end) reaches
    EOF, and arm the timer then. False when ``fd`` is not usable (no backstop)."""

    def parent_gone(_signum: int, _frame: FrameType | None) -> None:
        if _at_eof(fd):
            arm(grace_s)

    try:
        os.set_blocking(fd, False)
        signal.signal(signal.SIGIO, parent_gone)
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except (OSError, ValueError):
        return False
    if _at_eof(fd):  # gone before we asked to be told
        arm(grace_s)
    return True


def _at_eof(fd: int) -> bool:
    """True when ``fd``'s write end is closed (poll says hang-up), without reading it."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(mask & (select.POLLHUP | select.POLLERR) for _, mask in events)
