"""A latency hint for processes that mostly wait: ask the kernel for a short time slice.

Theory of operation: since Linux 6.12 the fair scheduler (EEVDF) lets an ordinary task
ask for its own slice with ``sched_setattr(2)`` (``SCHED_OTHER``/``SCHED_BATCH`` with
``sched_runtime`` set; no privilege needed). A task that wakes with a shorter slice than
the one running gets an earlier virtual deadline and preempts it sooner, instead of
waiting out a default slice (0.7 ms x (1 + log2 CPUs): 1.4 ms on 2 CPUs) behind every
runnable task. It changes how soon a task runs, not how much CPU it gets (its weight,
i.e. its nice value, stays as it was).

The daemon asks for it once, on its main thread before any other thread or process
exists: threads, the fork server and the agents it forks inherit it (an agent's tools
too: a short slice costs a busy task only more frequent switches when it competes, never
CPU share). Measured on the 2-core machine under load (``bench/fleet.py``): each hop of
control-to-ack (daemon -> child -> daemon) waited for a CPU ~2.5 ms p50 with the default
slice, ~0.3-0.5 ms with a short one. An older kernel ignores ``sched_runtime`` for these
policies or refuses the call; either way nothing changes, and no error is raised.

``TETHER_SCHED_SLICE_US`` sets the slice (default :data:`DEFAULT_SLICE_US`); 0 asks for
nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from typing import Final

__all__ = ["DEFAULT_SLICE_US", "SLICE_ENV", "current_slice_ns", "request_short_slice"]

SLICE_ENV: Final = "TETHER_SCHED_SLICE_US"
DEFAULT_SLICE_US: Final = 300
_MIN_US: Final = 100  # the kernel clamps a custom slice to 0.1-100 ms
_MAX_US: Final = 100_000
_FAIR_POLICIES: Final = frozenset({0, 3})  # SCHED_OTHER, SCHED_BATCH
# struct sched_attr (SCHED_ATTR_SIZE_VER1): size, policy, flags, nice, priority,
# runtime, deadline, period, util_min, util_max
_ATTR: Final = struct.Struct("IIQiIQQQII")
_SYSCALLS: Final = {"x86_64": (314, 315), "aarch64": (274, 275)}  # setattr, getattr


def request_short_slice(env: dict[str, str] | None = None) -> int | None:
    """Ask for a short slice for the calling thread (and what it starts from now on); the
    slice granted in nanoseconds, or None when nothing changed (not asked for, not a fair
    policy, no such call on this kernel or machine)."""
    slice_us = _slice_us(os.environ if env is None else env)
    if slice_us is None:
        return None
    current = _get()
    if current is None or current[1] not in _FAIR_POLICIES:
        return None
    wanted = slice_us * 1000
    values = list(current)
    values[2] = 0  # no flags: set policy, nice and runtime as given (nice unchanged)
    values[5] = wanted
    if not _set(values):
        return None
    granted = current_slice_ns()
    return granted if granted == wanted else None


def current_slice_ns() -> int | None:
    """The calling thread's slice as ``sched_getattr`` reports it (None: no such call)."""
    current = _get()
    return None if current is None else current[5]


def _slice_us(env: dict[str, str] | os._Environ[str]) -> int | None:
    raw = env.get(SLICE_ENV, "").strip()
    try:
        value = int(raw) if raw else DEFAULT_SLICE_US
    except ValueError:
        return None
    if value <= 0:
        return None
    return min(max(value, _MIN_US), _MAX_US)


def _syscall(index: int, *args: object) -> int | None:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None or not hasattr(ctypes, "CDLL"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    result: int = libc.syscall(numbers[index], *args)
    return result


def _get() -> tuple[int, ...] | None:
    buffer = ctypes.create_string_buffer(_ATTR.size)
    if _syscall(1, 0, buffer, ctypes.c_uint(_ATTR.size), ctypes.c_uint(0)) != 0:
        return None
    return _ATTR.unpack(buffer.raw)


def _set(values: list[int]) -> bool:
    values[0] = _ATTR.size
    buffer = ctypes.create_string_buffer(_ATTR.pack(*values), _ATTR.size)
    return _syscall(0, 0, buffer, ctypes.c_uint(0)) == 0
