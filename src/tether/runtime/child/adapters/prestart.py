"""Starting an exec'd adapter child with its CLI already running (the parent's side).

A ``tether child --agent NAME`` that is exec'd (a process's first run, or with the fork
server off) used to start its agent CLI only after its own interpreter and its first
imports (~90 ms on a quiet machine, several times that under load), and a Python reaper
process beside it. For the agents whose CLI runs once for the run
(:data:`~tether.runtime.child.adapters.commands.LAUNCHES`), the parent now computes the CLI's
launch itself, exactly as ``tether child`` would (:func:`~.commands.cli_launch` on the
child's environment without the child's own variables, :data:`CHILD_ONLY_ENV`; its
working directory resolved the same way), and execs the pre-exec stage
(:mod:`~tether.runtime.child.adapters.prestart_stage`) instead of the child: a bare interpreter
that starts the reaper and the CLI and then execs the child's own command in the same
process, which adopts both (:func:`tether.runtime.child.adapters.early.adopt`).

:func:`plan` says how: the stage's command and the descriptor of its spec (a memfd
the stage reads), or None for anything else (an agent not in ``LAUNCHES``, extra
``tether child`` arguments, a missing CLI, a bad flag, another source tree in the
child's ``PYTHONPATH``, ``TETHER_PRESTART=0``): the child is exec'd as before and deals
with it (and reports a missing CLI or a bad flag) the usual way.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

from tether import reaper
from tether.runtime.child.adapters import START_TIMEOUT_ENV
from tether.runtime.child.adapters.commands import Resume, cli_launch
from tether.runtime.child.adapters.registry import find_command, get_agent

__all__ = ["CHILD_ONLY_ENV", "ENV", "CliRequest", "Prestart", "enabled", "plan"]

ENV: Final = "TETHER_PRESTART"
"""``0`` (or ``off``, ``no``, ``false``): exec ``tether child``, which starts its CLI."""
CHILD_ONLY_ENV: Final = ("TETHER_LIFELINE_FD", "TETHER_WAKE_FD", START_TIMEOUT_ENV)
"""What ``tether child`` removes from its environment before it starts the CLI."""
_OFF: Final = frozenset({"0", "off", "no", "false"})
_STAGE: Final = os.path.join(os.path.dirname(__file__), "prestart_stage.py")


class CliRequest(NamedTuple):
    """The agent of a ``tether child`` command, as ``tether.spawn`` built it."""

    agent: str
    command: list[str]  # the agent's own command ([]: its CLI on PATH)
    agent_args: list[str]
    model: str | None
    resume: Resume | None = None  # the session it continues (``tether child --resume``)


class Prestart(NamedTuple):
    argv: list[str]  # the stage, then the child's command
    spec_fd: int  # pass it to the stage (at its number); close it once it has started


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(ENV, "").strip().lower() not in _OFF


def plan(
    request: CliRequest, command: Sequence[str], cwd: str, env: Mapping[str, str]
) -> Prestart | None:
    """How to exec ``command`` (a ``tether child`` for ``request``) with its CLI started
    first, in ``cwd`` (absolute) with ``env``; None: exec ``command`` itself."""
    if not (enabled(os.environ) and enabled(env) and os.path.isfile(_STAGE)):
        return None
    if env.get("PYTHONPATH") != os.environ.get("PYTHONPATH"):
        return None  # a child from another source tree may not know ADOPT_ENV
    base = {k: v for k, v in env.items() if k not in CHILD_ONLY_ENV}
    try:
        agent, args, model = request.agent, request.agent_args, request.model
        argv = find_command(get_agent(agent), request.command, base)
        resume = request.resume
        launch = None if argv is None else cli_launch(agent, argv, args, base, model, resume=resume)
    except ValueError:
        return None  # the child reports it
    if launch is None or os.sep not in launch.argv[0]:
        return None
    token = os.urandom(12).hex()
    reaper_env = {k: v for k, v in base.items() if k != reaper.REAP_ENV}
    spec = (
        launch.argv,
        reaper.with_token(launch.env, token),
        os.path.realpath(cwd),
        token,
        reaper.reaper_argv(token),
        reaper_env,
    )
    fd = os.memfd_create("tether-prestart", os.MFD_CLOEXEC)
    try:
        data = marshal.dumps(spec)
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        os.close(fd)
        return None
    return Prestart([sys.executable, "-I", "-S", _STAGE, str(fd), *command], fd)
