"""The agent CLI started first thing, before ``tether child`` imports what it runs on.

An agent CLI takes one to several seconds to start; ``tether child`` takes 0.1-0.8 s
(more under load) to import asyncio, the wire, the presenter and the adapter. Started
in that order the two costs add up. :func:`start_early` starts the CLI as soon as the
flags are parsed, so they overlap: the CLI boots while ``tether child`` writes ``ready``
and builds its adapter, which then adopts the running process
(:class:`~tether.runtime.child.adapters.base.CliProcess` given ``started=``). For an agent
in :data:`~.commands.HANDSHAKES` the opening of its hand-shake is written to the CLI's
stdin right after it starts (:attr:`Early.sent`): the CLI reads it as soon as it is up,
and the adapter does not send it again.

:func:`spawn_cli` is the one way an adapter starts a CLI process (early or not): pipes
for stdin, stdout and stderr, its own session (``procs.NEW_GROUP``: one group to end),
the reaper's mark in its environment and its group tracked, so it never outlives this
process however this process ends.

An exec'd child may find its CLI started before its interpreter by the pre-exec stage
(:mod:`~tether.runtime.child.adapters.prestart_stage`, named in ``TETHER_ADOPT``): :func:`adopt`
takes over that process (an :class:`Adopted` ``Popen``: it is this process's child) and
its reaper, and :func:`start_early` uses it when it is what it would start itself (the
same command line), else ends it and starts its own.

Nothing is started for an agent outside :data:`~.commands.LAUNCHES` or when anything
is wrong (a missing CLI, a bad flag): the adapter then starts it, or reports the error,
the usual way. Imports nothing heavy (``subprocess``, the registry, the reaper).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tether import reaper
from tether.runtime.child.adapters.commands import HANDSHAKES, CliLaunch, Resume, cli_launch
from tether.runtime.child.adapters.prestart_stage import ADOPT_ENV
from tether.runtime.child.adapters.registry import find_command, get_agent

__all__ = [
    "ADOPT_ENV",
    "Adopted",
    "Early",
    "adopt",
    "discard",
    "spawn_cli",
    "start_early",
    "stop_early",
]


class Early(NamedTuple):
    """A CLI started early: the launch it was started with, its process, and the
    messages already written to its stdin (the opening of its hand-shake)."""

    agent: str
    launch: CliLaunch
    popen: subprocess.Popen[bytes]
    sent: Sequence[dict[str, Any]] = ()


def spawn_cli(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a CLI (see the module docstring); raises OSError when it cannot start."""
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
        cwd=cwd,
        env=reaper.marked_env(env),  # ended by the reaper if this process dies
        start_new_session=True,  # procs.NEW_GROUP (procs imports asyncio)
    )
    reaper.track(popen.pid)
    return popen


class Adopted(subprocess.Popen[bytes]):
    """A CLI started before this interpreter by the pre-exec stage, as a ``Popen``.

    It is this process's child (the stage forked it, then exec'd this program), so
    ``poll``, ``wait`` and the signals work as for any ``Popen``; only the start is not
    ``Popen``'s (``__init__`` fills in what its methods read, as of Python 3.11-3.13)."""

    def __init__(self, pid: int, args: list[str], stdin: int, stdout: int, stderr: int) -> None:
        # no super().__init__(): it would start a process
        self.args = args
        self.pid = pid
        self.returncode = None
        self.stdin = open(stdin, "wb", buffering=0)  # noqa: SIM115 - the CLI's pipes
        self.stdout = open(stdout, "rb", buffering=0)  # noqa: SIM115
        self.stderr = open(stderr, "rb", buffering=0)  # noqa: SIM115
        self.encoding = None
        self.errors = None
        self.text_mode = False
        self.pipesize = -1
        self._waitpid_lock = threading.Lock()
        self._input = None
        self._communication_started = False
        self._sigint_wait_secs = 0.25
        self._closed_child_pipe_fds = True
        self._child_created = True


def adopt(raw: str | None) -> Adopted | None:
    """The CLI named by ``TETHER_ADOPT`` (``raw``), its reaper taken over; None without one.

    Call it first thing: the reaper's pipe is then this process's before anything else
    is started (:func:`tether.reaper.adopt`)."""
    parts = (raw or "").split(",")
    if len(parts) != 6 or not all(part.isdigit() for part in parts[:5]) or not parts[5]:
        return None
    pid, stdin, stdout, stderr, reap_fd = map(int, parts[:5])
    reaper.adopt(parts[5], reap_fd)
    for fd in (stdin, stdout, stderr):
        os.set_inheritable(fd, False)
    return Adopted(pid, _command_line(pid), stdin, stdout, stderr)


def _command_line(pid: int) -> list[str]:
    """The process's command line ([] when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [os.fsdecode(arg) for arg in raw.split(b"\0")[:-1]]


def start_early(
    agent: str,
    *,
    command: Sequence[str],
    agent_args: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    model: str | None,
    adopted: Adopted | None = None,
    resume: Resume | None = None,
) -> Early | None:
    """``agent``'s CLI, started now (or ``adopted``, when it is that command); None when
    it is not started early (see above). ``adopted`` is ended when it is not used."""
    try:
        argv = find_command(get_agent(agent), command, env)
        launch = (
            None if argv is None else cli_launch(agent, argv, agent_args, env, model, resume=resume)
        )
    except ValueError:
        launch = None
    if adopted is not None and (launch is None or adopted.args not in ([], launch.argv)):
        discard(adopted)  # not what this child would run (a bug in tether): run its own
        adopted = None
    if launch is None:
        return None
    try:
        popen = adopted or spawn_cli(launch.argv, cwd, launch.env)
    except OSError:
        return None
    opening = HANDSHAKES.get(agent)
    sent = () if opening is None else tuple(opening(cwd, model, resume))
    if sent:
        _write_lines(popen, sent)
    return Early(agent, launch, popen, sent)


def _write_lines(popen: subprocess.Popen[bytes], messages: Sequence[dict[str, Any]]) -> None:
    """The messages as JSON lines on the CLI's stdin (an empty pipe: one short write).

    A CLI that is already gone is left for the adapter to find (its stdout's end)."""
    import json

    assert popen.stdin is not None
    data = b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in messages)
    with contextlib.suppress(OSError):
        popen.stdin.write(data)


def stop_early(early: Early | None) -> None:
    """End a CLI started early that will not be adopted (the child failed first)."""
    if early is not None:
        discard(early.popen)


def discard(popen: subprocess.Popen[bytes]) -> None:
    """End a CLI process and its group, reap it, close its pipes."""
    import signal

    with contextlib.suppress(OSError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()
    reaper.untrack(popen.pid)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
