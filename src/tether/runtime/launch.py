"""Starting a child: its command, its wire environment, its process group and files."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

from tether import procs
from tether.errors import SpawnError
from tether.runtime.rundir import RunDir, append_line
from tether.runtime.sidecars import InboxTail


def default_argv(provider: str | None, model: str | None) -> list[str]:
    """``tether child`` with the provider and model flags."""
    argv = [sys.executable, "-m", "tether", "child"]
    if provider:
        argv += ["--provider", provider]
    if model:
        argv += ["--model", model]
    return argv


def wire_env(run: RunDir, deadline: float | None) -> dict[str, str]:
    """The environment that points a child at its run (FEN_* and TETHER_* names)."""
    env: dict[str, str] = {}
    values = {
        "CONTROL_PATH": str(run.control),
        "EVENT_PATH": str(run.events),
        "RUN_ID": run.run_id,
    }
    if deadline is not None:
        values["DEADLINE"] = str(int(deadline))
    for prefix in ("FEN_WIRE_", "TETHER_WIRE_"):
        env.update({prefix + k: v for k, v in values.items()})
    env["TETHER_RUN_DIR"] = str(run.path)
    env["TETHER_INBOX_PATH"] = env["RUNEX_INBOX_PATH"] = str(run.inbox)
    return env


def absolute_cwd(cwd: str | os.PathLike[str] | None) -> str:
    return os.path.abspath(cwd if cwd is not None else os.getcwd())


def make_inbox(run: RunDir, db: Path | None) -> InboxTail | None:
    try:
        from tether.inbox import create_inbox
    except ImportError:
        return None
    create_inbox(run.inbox)
    return InboxTail(run.inbox, run.run_id, db)


LIFELINE_ENV = "TETHER_LIFELINE_FD"


async def start_child(
    command: list[str], run: RunDir, cwd: str | os.PathLike[str] | None, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, int]:
    """Start the child in its own process group; returns it and the lifeline's write end.

    The lifeline is a pipe whose read end the child holds (``TETHER_LIFELINE_FD``): the
    parent keeps the write end open for the run's life, so if the parent process dies the
    kernel closes it, the child reads EOF and ends its run instead of waiting forever.
    (The daemon starts its children without one: they must outlive it.)
    """
    fd = os.open(run.stderr, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    lifeline_read, lifeline_write = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            cwd=cwd,
            env={**env, LIFELINE_ENV: str(lifeline_read)},
            pass_fds=(lifeline_read,),
            **procs.NEW_GROUP,
        )
    except OSError as exc:
        os.close(lifeline_write)
        append_line(run.stderr, f"tether: cannot start {shlex.join(command)}: {exc}".encode())
        raise SpawnError(f"cannot start the child ({shlex.join(command)}): {exc}") from exc
    finally:
        os.close(fd)
        os.close(lifeline_read)
    return proc, lifeline_write
