"""Starting a daemon agent's child: in its own session, waiting at a gate until the
registry holds its pid, with the descriptors the daemon has left checked first.
"""

from __future__ import annotations

import errno
import os
import shlex
import subprocess
from typing import Final

from tether.daemon.rpc.lifecycle import descriptors_free
from tether.daemon.rpc.methods import RpcFailure
from tether.daemon.rpc.protocol import ErrorCode
from tether.procs import Gate, find_program
from tether.runtime.parent.forkserver import ForkedChild
from tether.runtime.parent.launch import fork_child
from tether.runtime.parent.rundir import RunDir, append_line
from tether.transports.wake import ControlWriter

__all__ = ["DESCRIPTORS_PER_AGENT", "DESCRIPTORS_RESERVED", "check_descriptors", "launch"]

# An agent holds about this many descriptors here: control file, wake-up pipe, event file,
# pidfd, its inbox's database (file, WAL, shared memory), and one in flight while spawning.
DESCRIPTORS_PER_AGENT: Final = 8
DESCRIPTORS_RESERVED: Final = 64  # kept for clients' connections and the daemon's own files


def check_descriptors() -> None:
    """Refuse a spawn that would leave the daemon too few descriptors to serve its clients
    (it would otherwise fail halfway, or stop accepting connections: ``EMFILE``)."""
    free, limit = descriptors_free()
    if free < DESCRIPTORS_PER_AGENT + DESCRIPTORS_RESERVED:
        raise RpcFailure(
            ErrorCode.SPAWN_FAILED,
            f"the daemon is near its descriptor limit ({limit}; about {free} left, and each "
            f"agent needs about {DESCRIPTORS_PER_AGENT} while {DESCRIPTORS_RESERVED} are kept "
            "for connections): stop or remove agents, or start the daemon with a higher "
            "limit (ulimit -n; it raises its soft limit to the hard one itself)",
        )


def launch(
    command: list[str], run: RunDir, cwd: str, env: dict[str, str], control: ControlWriter
) -> tuple[subprocess.Popen[bytes] | ForkedChild, Gate]:
    """Start the child in its own session, waiting at a :class:`~tether.procs.Gate`.

    stdin /dev/null, stdout+stderr to ``stderr.log``. The caller opens the gate once the
    pid is recorded: a daemon killed in between leaves no child running unrecorded. A
    built-in child is forked from the fork server (:func:`~tether.runtime.parent.launch.fork_child`,
    which waits at the same gate), others are exec'd.
    (Not :func:`tether.runtime.parent.launch.start_child`: the daemon watches every child with a
    pidfd, including those a previous daemon started, so it owns no asyncio child watcher.)
    The child inherits ``control``'s wake-up pipe (``TETHER_WAKE_FD``).
    """
    fd = os.open(run.stderr, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    gate = Gate()
    env = {**env, **control.child_env()}
    child: subprocess.Popen[bytes] | ForkedChild | None
    try:
        child = fork_child(
            command,
            cwd=cwd,
            env=env,
            output=fd,
            pass_fds=control.pass_fds(),
            gate_fd=gate.read_fd,
        )
        child = child or _exec(command, cwd, env, output=fd, gate=gate, pass_fds=control.pass_fds())
    except OSError as exc:
        gate.close()
        append_line(run.stderr, f"tether: cannot start {shlex.join(command)}: {exc}".encode())
        raise
    finally:
        os.close(fd)
        control.started()
    gate.started()
    return child, gate


def _exec(
    command: list[str],
    cwd: str,
    env: dict[str, str],
    *,
    output: int,
    gate: Gate,
    pass_fds: tuple[int, ...],
) -> subprocess.Popen[bytes]:
    if find_program(command[0], cwd, env) is None:  # the gate's sh would say it less clearly
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
    return subprocess.Popen(
        Gate.argv(command),
        stdin=gate.read_fd,
        stdout=output,
        stderr=output,
        cwd=cwd,
        env=env,
        close_fds=True,
        pass_fds=pass_fds,
        start_new_session=True,
    )
