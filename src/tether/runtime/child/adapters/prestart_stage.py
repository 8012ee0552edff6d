"""The pre-exec stage: an agent CLI started before ``tether child``'s interpreter.

Run as ``python -I -S prestart_stage.py SPEC_FD COMMAND...`` by the parent
(:mod:`tether.runtime.child.adapters.prestart`) in place of the exec'd ``tether child``
COMMAND, in the child's own session, with the child's environment and descriptors. A
bare interpreter (no ``site``, no ``tether``: about 10 ms) that:

1. reads the spec (a :mod:`marshal` tuple) from SPEC_FD: the CLI's command, environment
   and working directory (``commands.cli_launch``'s, exactly what ``tether child`` would
   start), the reaper's token, command and environment;
2. starts the reaper (:mod:`tether.reaper`, as :func:`tether.reaper.marked_env` would:
   ``posix_spawn``, its own session, the pipe's read end on its stdin) and keeps the
   pipe's write end;
3. starts the CLI: ``fork`` (this process has one thread), then in the new process its
   own session, SIGPIPE and SIGXFSZ back to their defaults (what ``subprocess`` does;
   not ``posix_spawn``, which leaves glibc's signals 32 and 33 ignored), its three pipes
   as stdin, stdout and stderr and nothing else, its working directory, ``execve`` with
   the reaper's mark in its environment; an exec failure comes back through a
   close-on-exec pipe (as in ``subprocess``); then ``+PGID`` to the reaper;
4. execs COMMAND in this same process, with :data:`ADOPT_ENV` naming the CLI's pid, this
   side's ends of its pipes, the reaper pipe's write end and the token: ``tether child``
   adopts them (:func:`tether.runtime.child.adapters.early.adopt`), so the CLI is its child
   (``waitpid``, a pidfd) and the reaper its own.

Killed at any moment, nothing survives: before the reaper starts there is no CLI; after,
the reaper reads EOF only once every copy of the write end is closed, and the CLI's
process holds a (close-on-exec) copy from its fork until its ``execve``, which gives it
the token the reaper looks for; after that the CLI is found by its token or its group.
Anything that goes wrong before the CLI runs (no reaper, a failed exec) is undone and
COMMAND runs without :data:`ADOPT_ENV`: ``tether child`` then starts the CLI itself and
reports a failure the usual way. Exit status 4 (FAILED) only when COMMAND cannot be
exec'd at all, with one line on stderr.

Imports only what a bare interpreter has loaded or built in (``os``, ``sys``,
``marshal``, ``_signal``): nothing of ``tether``, so no ``site`` is needed.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal without enum (~4 ms)
import marshal
import os
import sys

ADOPT_ENV = "TETHER_ADOPT"
"""``PID,STDIN,STDOUT,STDERR,REAPER_FD,TOKEN``: the CLI started before ``tether child``."""
FAILED = 4  # tether.exits.FAILED (this stage imports nothing of tether)
_EXEC_FAILED = 127


def main(argv: list[str]) -> int:
    spec_fd, command = int(argv[0]), argv[1:]
    adopt = None
    try:
        adopt = _start(_read_spec(spec_fd))
    except Exception as exc:  # noqa: BLE001 - COMMAND still runs and starts the CLI itself
        print(f"tether child: the CLI is started late ({exc})", file=sys.stderr)
    if adopt is not None:
        os.environ[ADOPT_ENV] = adopt
    try:
        os.execv(command[0], command)  # noqa: S606 - the child's own command
    except OSError as exc:
        print(f"tether child: cannot exec {command[0]}: {exc.strerror}", file=sys.stderr)
    return FAILED


def _read_spec(fd: int) -> tuple[list[str], dict[str, str], str, str, list[str], dict[str, str]]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    spec = marshal.loads(b"".join(chunks))  # noqa: S302 - written by our parent
    cli_argv, cli_env, cli_cwd, token, reaper_argv, reaper_env = spec
    return cli_argv, cli_env, cli_cwd, token, reaper_argv, reaper_env


def _start(
    spec: tuple[list[str], dict[str, str], str, str, list[str], dict[str, str]],
) -> str | None:
    """Start the reaper and the CLI; the value of :data:`ADOPT_ENV`, None when not."""
    cli_argv, cli_env, cli_cwd, token, reaper_argv, reaper_env = spec
    inherited = _inherited_fds()
    for fd in inherited:  # COMMAND's descriptors (lifeline, wake-up pipe): not the CLI's
        os.set_inheritable(fd, False)
    try:
        reap_fd = _start_reaper(reaper_argv, reaper_env)
        if reap_fd is None:
            return None
        try:
            started = _start_cli(cli_argv, cli_env, cli_cwd)
        except BaseException:
            os.close(reap_fd)
            raise
        if started is None:
            os.close(reap_fd)
            return None
        pid, ours = started
        os.write(reap_fd, b"+%d\n" % pid)  # its group (its own session: pgid = pid)
    finally:
        for fd in inherited:
            os.set_inheritable(fd, True)
    fds = (*ours, reap_fd)
    for fd in fds:
        os.set_inheritable(fd, True)
    return ",".join([str(pid), *map(str, fds), token])


def _inherited_fds() -> list[int]:
    """This process's descriptors above 2 that an exec would pass on."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                found.append(fd)
        except OSError:  # listdir's own descriptor, closed by now
            continue
    return found


def _start_reaper(argv: list[str], env: dict[str, str]) -> int | None:
    """The reaper's pipe's write end (close-on-exec), or None when it cannot start.

    The same start as ``tether.reaper._Owner.ensure_started``, written out again on
    purpose: this stage imports nothing of tether (``tether.reaper`` and the package
    cost 10-15 ms here, taken from the CLI's head start)."""
    read_end, write_end = os.pipe()
    actions = [
        (os.POSIX_SPAWN_DUP2, read_end, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    try:
        os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return write_end


def _start_cli(
    argv: list[str], env: dict[str, str], cwd: str
) -> tuple[int, tuple[int, int, int]] | None:
    """The CLI's pid and this side's ends of its stdin, stdout and stderr; None when it
    could not be exec'd (the reason is left for ``tether child`` to find again)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    error_r, error_w = os.pipe()
    theirs = (stdin_r, stdout_w, stderr_w)
    ours = (stdin_w, stdout_r, stderr_r)
    try:
        pid = os.fork()
        if pid == 0:  # the CLI's process: from here on it only becomes the CLI
            _exec_cli(argv, env, cwd, theirs, error_w)
        os.close(error_w)
        error_w = -1
        failed = os.read(error_r, 16)  # EOF: the exec closed it
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in (*theirs, error_r, error_w):
            if fd >= 0:
                os.close(fd)
    if failed:
        os.waitpid(pid, 0)
        for fd in ours:
            os.close(fd)
        return None
    return pid, ours


def _exec_cli(
    argv: list[str], env: dict[str, str], cwd: str, fds: tuple[int, int, int], error_w: int
) -> None:
    """In the forked process: become the CLI, or report why not and exit."""
    try:
        os.setsid()
        for sig in (_signal.SIGPIPE, _signal.SIGXFSZ):
            _signal.signal(sig, _signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # dup2 clears close-on-exec on the target
        os.chdir(cwd)
        os.execve(argv[0], argv, env)  # noqa: S606 - the CLI's launch
    except BaseException as exc:  # noqa: BLE001 - this process must never return
        code = getattr(exc, "errno", None) or 0
        try:
            os.write(error_w, b"%d" % (code or 1))
        finally:
            os._exit(_EXEC_FAILED)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
