"""The agent CLI started first thing, before ``tether child`` imports what it runs on.

An agent CLI takes one to several seconds to start; ``tether child`` takes 0.1-0.8 s
(more under load) to import asyncio, the wire, the presenter and the adapter. Started
in that order the two costs add up. :func:`start_early` starts the CLI as soon as the
flags are parsed, so they overlap: the CLI boots while ``tether child`` writes ``ready``
and builds its adapter, which then adopts the running process
(:class:`~tether.runtime.adapters.base.CliProcess` given ``started=``). For an agent
in :data:`~.commands.HANDSHAKES` the opening of its hand-shake is written to the CLI's
stdin right after it starts (:attr:`Early.sent`): the CLI reads it as soon as it is up,
and the adapter does not send it again.

:func:`spawn_cli` is the one way an adapter starts a CLI process (early or not): pipes
for stdin, stdout and stderr, its own session (``procs.NEW_GROUP``: one group to end),
the reaper's mark in its environment and its group tracked, so it never outlives this
process however this process ends.

Nothing is started for an agent outside :data:`~.commands.LAUNCHES` or when anything
is wrong (a missing CLI, a bad flag): the adapter then starts it, or reports the error,
the usual way. Imports nothing heavy (``subprocess``, the registry, the reaper).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from tether import reaper
from tether.runtime.adapters.commands import HANDSHAKES, CliLaunch, cli_launch
from tether.runtime.adapters.registry import find_command, get_agent

__all__ = ["Early", "spawn_cli", "start_early", "stop_early"]


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


def start_early(
    agent: str,
    *,
    command: Sequence[str],
    agent_args: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    model: str | None,
) -> Early | None:
    """``agent``'s CLI, started now; None when it is not started early (see above)."""
    try:
        argv = find_command(get_agent(agent), command, env)
        launch = None if argv is None else cli_launch(agent, argv, agent_args, env, model)
        if launch is None:
            return None
        popen = spawn_cli(launch.argv, cwd, launch.env)
    except (OSError, ValueError):
        return None
    opening = HANDSHAKES.get(agent)
    sent = () if opening is None else tuple(opening(cwd, model))
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
    if early is None:
        return
    import os
    import signal

    with contextlib.suppress(OSError):
        os.killpg(early.popen.pid, signal.SIGKILL)
    early.popen.wait()
    reaper.untrack(early.popen.pid)
