"""TEST DOUBLE: a ``command`` provider that reports on the child that ran it.

The built-in child starts this program for each model call; its parent process is the
child itself. It prints, as its reply (one JSON object), what the child looks like from
``/proc``: session and process group, signal mask and dispositions, descriptors, cwd,
environment, argv, umask. Descriptor targets that name a run's files are given relative
to the run directory, pipes and sockets by kind only (their inode numbers differ).
"""

from __future__ import annotations

import json
import os
import sys


def _status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _fd_kind(target: str, run_dir: str) -> str:
    if target.startswith(("pipe:", "socket:")):
        return target.split(":", maxsplit=1)[0]
    if run_dir and target.startswith(run_dir):
        return "RUN" + target[len(run_dir) :]
    return target


def main() -> None:
    sys.stdin.read()
    pid = os.getppid()
    stat = _read(f"/proc/{pid}/stat").decode().rpartition(")")[2].split()
    status = _status(pid)
    environ = _read(f"/proc/{pid}/environ").decode().split("\0")
    env = dict(item.partition("=")[::2] for item in environ if item)
    run_dir = env.get("TETHER_RUN_DIR", "")
    fds = {}
    for name in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        try:
            fds[name] = _fd_kind(os.readlink(f"/proc/{pid}/fd/{name}"), run_dir)
        except OSError:
            continue
    cmdline = _read(f"/proc/{pid}/cmdline").decode().split("\0")
    report = {
        "pid": pid,
        "ppid": int(stat[1]),
        "pgrp": int(stat[2]),
        "session": int(stat[3]),
        "tty": int(stat[4]),
        "sig_blocked": status["SigBlk"],
        "sig_ignored": status["SigIgn"],
        "sig_caught": status["SigCgt"],
        "umask": status.get("Umask"),
        "fds": fds,
        "cwd": os.readlink(f"/proc/{pid}/cwd"),
        "env": env,
        "cmdline": [arg for arg in cmdline if arg],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
