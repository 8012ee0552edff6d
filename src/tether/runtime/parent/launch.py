"""Starting a child: its run directory, command, wire environment, process group and files.

:func:`prepare_run` is the one preparation every spawn shares (the parent API and the
daemon): a private run directory with the task already written as the first ``prompt``,
the command, the environment and the deadline.
"""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tether import fsafe, procs
from tether.errors import ControlRefused, SpawnError
from tether.numbers import seconds_problem
from tether.runtime.child.adapters.prestart import CliRequest
from tether.runtime.parent import forkserver
from tether.runtime.parent.command import ChildCommand
from tether.runtime.parent.forkserver import ForkedChild
from tether.runtime.parent.mirror import RunMirror
from tether.runtime.parent.options import SpawnOptions
from tether.runtime.parent.rundir import RunDir, append_line, create_run_dir
from tether.runtime.parent.sidecars import InboxTail
from tether.transports.wake import ControlWriter, WakePipe
from tether.wire import Rejection
from tether.wire.env import wire_env, without_wire_env


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """A run ready to start (see :func:`prepare_run`)."""

    run: RunDir
    mirror: RunMirror  # it stamped the first prompt
    first_seq: int | None  # the task's seq (None without a task)
    command: list[str]
    env: dict[str, str]
    created_at: float  # Unix time
    deadline: int | None  # Unix seconds, exactly as FEN_WIRE_DEADLINE carries it
    # Opened before the child exists; close it when the run ends. It also holds the
    # child's wake-up pipe: spawn with ``control.child_env()`` in the environment and
    # ``control.pass_fds()`` inherited at the same numbers, then call ``control.started()``.
    control: ControlWriter


def prepare_run(
    task: str | None,
    options: SpawnOptions,
    command: ChildCommand,
    *,
    runs_root: Path | None = None,
    fixed_env: Mapping[str, str] | None = None,
) -> PreparedRun:
    """Make the run directory, write ``task`` as the first prompt, and build the spawn of
    ``command`` (:func:`~tether.runtime.parent.command.child_command`'s, for ``options``).

    The environment is this process's (without its own wire settings), then
    ``TETHER_PROVIDER``/``TETHER_MODEL``, the run's ``env`` (as the command gives it), the
    wire variables, the command's own and ``fixed_env``. The deadline is ``ceil(now +
    deadline_s)``: a whole second on the wire that never comes before the time asked for.
    Raises :class:`ControlRefused` when the task cannot be sent as a prompt, ``ValueError``
    when ``deadline_s`` is not a positive number of seconds
    (:func:`tether.numbers.seconds_problem`). Blocking (files): call it from a thread.
    """
    deadline_s, provider, model = options.deadline_s, options.provider, options.model
    problem = None if deadline_s is None else seconds_problem(deadline_s)
    if problem is not None:
        raise ValueError(f"deadline_s: {problem}")
    run = create_run_dir(runs_root)
    mirror = RunMirror(run.run_id)
    first_seq = None
    # A path the child swaps later changes nothing; every append also wakes the child.
    control = ControlWriter(fsafe.AppendFile(run.control), WakePipe())
    if task is not None:
        stamped = mirror.control("prompt", text=task)
        if isinstance(stamped, Rejection):
            control.close()
            raise ControlRefused(f"cannot send the task as a prompt: {stamped.reason}")
        first_seq = stamped[0]
        control.append(stamped[1])
    created_at = time.time()
    deadline = None if deadline_s is None else math.ceil(created_at + deadline_s)
    inherited = without_wire_env(os.environ)
    passed = {k: v for k, v in (("TETHER_PROVIDER", provider), ("TETHER_MODEL", model)) if v}
    wire = run_env(run, deadline)
    own = {**command.env, **(fixed_env or {})}
    child_env = {**inherited, **passed, **(command.child_env(options.env) or {}), **wire, **own}
    argv = list(command.argv)
    return PreparedRun(run, mirror, first_seq, argv, child_env, created_at, deadline, control)


def monotonic_at(unix_time: float) -> float:
    """The monotonic clock's reading at ``unix_time`` (for timers set in wall time)."""
    return time.monotonic() + (unix_time - time.time())


def run_env(run: RunDir, deadline: int | None) -> dict[str, str]:
    """The environment that points a child at its run: the wire variables
    (:func:`tether.wire.env.wire_env`), its run directory, its inbox and its private temp
    directory (``TMPDIR``: where a final-text file made with ``mkstemp`` is read from)."""
    env = wire_env(
        control_path=str(run.control),
        event_path=str(run.events),
        run_id=run.run_id,
        deadline=deadline,
    )
    env["TETHER_RUN_DIR"] = str(run.path)
    env["TMPDIR"] = str(run.tmp)
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


def fork_child(
    command: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    output: int,
    pass_fds: Sequence[int] = (),
    gate_fd: int | None = None,
    cold: bool = True,
) -> ForkedChild | None:
    """``command`` forked from this process's fork server when it may be (a built-in
    ``tether child``, the fork server not turned off here or in ``env``); None: exec it.

    The child gets what exec would give it: stdin ``/dev/null``, stdout and stderr on
    ``output``, ``pass_fds`` at their numbers, a new session, ``env`` and ``cwd``; see
    :mod:`tether.runtime.parent.forkserver` for ``gate_fd`` and ``cold``. Blocking.
    """
    if not (forkserver.enabled() and forkserver.enabled(env) and forkserver.eligible(command)):
        return None
    return forkserver.shared_forkserver().spawn(
        command,
        env=env,
        cwd=cwd,
        stdout=output,
        stderr=output,
        pass_fds=pass_fds,
        gate_fd=gate_fd,
        cold=cold,
    )


async def _exec_child(
    command: list[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: dict[str, str],
    output: int,
    pass_fds: tuple[int, ...],
    cli: CliRequest | None,
) -> asyncio.subprocess.Process:
    """``command`` exec'd in its own session; through the pre-exec stage for ``cli``."""
    stage = None
    if cli is not None:
        from tether.runtime.child.adapters.prestart import plan

        stage = plan(cli, command, absolute_cwd(cwd), env)
    try:
        return await asyncio.create_subprocess_exec(
            *(command if stage is None else stage.argv),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds if stage is None else (*pass_fds, stage.spec_fd),
            **procs.NEW_GROUP,
        )
    finally:
        if stage is not None:
            os.close(stage.spec_fd)


async def start_child(
    command: list[str],
    run: RunDir,
    cwd: str | os.PathLike[str] | None,
    env: dict[str, str],
    control: ControlWriter | None = None,
    *,
    cli: CliRequest | None = None,
) -> tuple[asyncio.subprocess.Process | ForkedChild, int]:
    """Start the child in its own process group; returns it and the lifeline's write end.

    The lifeline is a pipe whose read end the child holds (``TETHER_LIFELINE_FD``): the
    parent keeps the write end open for the run's life, so if the parent process dies the
    kernel closes it, the child reads EOF and ends its run instead of waiting forever.
    (The daemon starts its children without one: they must outlive it.) The child also
    inherits ``control``'s wake-up pipe (``TETHER_WAKE_FD``). A built-in child is forked
    from the fork server once its template runs (:func:`fork_child`; the second spawn of
    a process starts the template for those after it), else exec'd: for ``cli`` (an
    adapter child, see :mod:`tether.runtime.child.adapters.prestart`) with its agent's CLI
    started before the child's interpreter.
    """
    fd = os.open(run.stderr, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    lifeline_read, lifeline_write = os.pipe()
    wake_env = {} if control is None else control.child_env()
    wake_fds = () if control is None else control.pass_fds()
    child_env = {**env, LIFELINE_ENV: str(lifeline_read), **wake_env}
    pass_fds = (lifeline_read, *wake_fds)
    proc: asyncio.subprocess.Process | ForkedChild | None
    try:
        proc = await asyncio.to_thread(
            fork_child,
            command,
            cwd=absolute_cwd(cwd),
            env=child_env,
            output=fd,
            pass_fds=pass_fds,
            cold=False,
        )
        if proc is None:
            proc = await _exec_child(
                command, cwd=cwd, env=child_env, output=fd, pass_fds=pass_fds, cli=cli
            )
    except OSError as exc:
        os.close(lifeline_write)
        append_line(run.stderr, f"tether: cannot start {shlex.join(command)}: {exc}".encode())
        raise SpawnError(f"cannot start the child ({shlex.join(command)}): {exc}") from exc
    finally:
        os.close(fd)
        os.close(lifeline_read)
        if control is not None:
            control.started()
    return proc, lifeline_write
