"""What a live process waits on, read from ``/proc`` (for the wake-up tests).

- :func:`inotify_instances`: how many inotify instances the process holds (descriptors
  whose link reads ``anon_inode:inotify``);
- :func:`blocked_without_timer`: its main thread sleeps in ``epoll_wait`` with no
  timeout, so nothing but a descriptor can wake it (no polling, no timer);
- :func:`parent_pid` and :func:`kill_and_wait`: who forked a process, and a SIGKILL that
  returns once the process is dead (its pidfd turns readable).
"""

from __future__ import annotations

import os
from pathlib import Path

# x86_64: epoll_wait, epoll_pwait, epoll_pwait2; aarch64 has only epoll_pwait (22)
_EPOLL_WAITS = {"x86_64": {232, 281, 441}, "aarch64": {22, 441}}
_NO_TIMEOUT = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)  # -1 as the kernel shows the int argument


def fd_links(pid: int) -> list[str]:
    out = []
    base = Path(f"/proc/{pid}/fd")
    for name in os.listdir(base):
        try:
            out.append(os.readlink(base / name))
        except OSError:
            continue
    return out


def inotify_instances(pid: int) -> int:
    return sum(link == "anon_inode:inotify" for link in fd_links(pid))


def blocked_without_timer(pid: int) -> bool:
    """The main thread is in epoll_wait(..., timeout=-1) (epoll_pwait2: no timespec)."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    if len(fields) < 5 or not fields[0].isdigit():
        return False  # running, or not in a syscall
    number = int(fields[0])
    waits = _EPOLL_WAITS.get(os.uname().machine, set())
    if number not in waits:
        return False
    if number == 441:  # epoll_pwait2(epfd, events, maxevents, timeout *)
        return int(fields[4], 16) == 0
    return int(fields[4], 16) in _NO_TIMEOUT


def parent_pid(pid: int) -> int:
    """The parent pid of ``pid``, from ``/proc/PID/stat`` (the name may hold spaces)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rpartition(")")[2].split()[1])


def kill_and_wait(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is dead (its pidfd turns readable)."""
    import select
    import signal

    fd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        select.select([fd], [], [])
    finally:
        os.close(fd)
