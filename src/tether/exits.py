"""The exit statuses of every ``tether`` command: 0, 2, 3, 4 or 5, and nothing else.

::

    0  OK         the run is done, or the action succeeded
    2  USAGE      bad arguments or bad input (no such run or agent, a name already taken,
                  a rejected line), or a set-up that cannot work (an unsafe directory, a
                  full disk, a daemon that runs as another user, a daemon that cannot start)
    3  CANCELLED  the run was cancelled, or the command was stopped (Ctrl-C, SIGTERM,
                  SIGHUP, a reader of the output that went away); for the daemon's
                  commands also: no daemon is running, or it shut down mid-call
    4  FAILED     the run or the action failed (an agent that could not start, a daemon
                  error, an unexpected error inside tether)
    5  TIMED_OUT  the run, or a wait for it, timed out

Never 1 or a shell's 128+N (130 for Ctrl-C, 143 for SIGTERM, 141 for a closed pipe):
:func:`tether.cli.entrypoint` turns an error nobody handled into one line on stderr and
the code :func:`for_exception` gives it, and a signal into :data:`CANCELLED`. An error
class may name its own status in an ``exit_code`` attribute (the daemon client's errors,
``DaemonSetupError``). This module imports nothing, so every layer may use it.
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
USAGE: Final = 2
CANCELLED: Final = 3
FAILED: Final = 4
TIMED_OUT: Final = 5

EARLY_SIGNALS: Final[list[int]] = []
"""The signals ``tether run`` got before its own handling was in place, in order: recorded
by :func:`tether.cli.entrypoint`, acted on by the run once its child has started."""

BY_STATUS: Final = {"done": OK, "cancelled": CANCELLED, "failed": FAILED, "timed-out": TIMED_OUT}
"""A run's final status -> the exit status (an unknown status is a failure)."""


def for_status(status: str) -> int:
    return BY_STATUS.get(status, FAILED)


def recorded_status(status: str, stop_reason: str | None) -> str:
    """The status a run is reported with (its exit status, its row in ``tether runs``):
    a ``done`` run whose last turn ended in an error has no answer, so it is ``failed``.
    (The protocol calls it done: the child answered every control; the parent API's
    result keeps that, with ``stop_reason`` "error".)"""
    return "failed" if status == "done" and stop_reason == "error" else status


def for_exception(exc: BaseException) -> int:
    """The exit status for an error that reached the top of a command."""
    if isinstance(exc, BaseExceptionGroup):
        return for_exception(exc.exceptions[0])
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, and SIGTERM/SIGHUP (see entrypoint)
        return CANCELLED
    code = getattr(exc, "exit_code", None)  # the daemon client's errors carry their own
    if isinstance(code, int) and code in (OK, USAGE, CANCELLED, FAILED, TIMED_OUT):
        return code
    if isinstance(exc, TimeoutError):
        return TIMED_OUT
    if isinstance(exc, OSError) or _is_sqlite_error(exc):
        return USAGE  # the machine cannot do it: a full disk, a permission, a missing file
    return FAILED


def _is_sqlite_error(exc: BaseException) -> bool:
    """``sqlite3.Error`` ("database or disk is full") without importing sqlite3 for it:
    nobody imported it, so ``exc`` cannot be one."""
    import sys

    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(exc, sqlite3.Error)
