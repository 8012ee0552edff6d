"""The fork server's template process: ``python -m tether.cli.forkserver FD ROOM``.

Theory of operation (the user's side is :mod:`tether.runtime.parent.forkserver`). The template
gets its socket on descriptor FD. It records the signal dispositions it started with,
imports what a built-in ``tether child`` imports, collects and freezes the heap
(``gc.freeze``), says :class:`TemplateReady`, and then serves: each
:class:`SpawnRequest` is one ``fork``; the parent side answers :class:`Spawned` with the
pid, and reaps its children on SIGCHLD, reporting :class:`Exited`. It exits when its
user's end of the socket closes (its children keep running).

In the forked child, before anything of the run happens (:func:`_enter`): a new session,
the start-up signal dispositions and an empty signal mask, no wake-up fd; the passed
descriptors moved to their numbers and every other descriptor closed; the gate waited
for (exit 125 without a ``go``, as :class:`tether.procs.Gate`); cwd, umask, environment;
``sys.argv``, ``/proc/self/cmdline`` and ``/proc/self/environ`` the command's (the
template starts with room for them: a long dummy argument, a long variable). Then the
child runs :func:`tether.cli.entrypoint` exactly as ``python -m tether child`` does, and
exits through the interpreter's normal shutdown. The hash seed is the template's: it
cannot change after start-up.

The fork itself is libc's ``fork()`` without CPython's after-fork work when the template
has one thread (:func:`_fork`; else ``os.fork()``). That work re-creates locks and thread
state that only another thread could hold or change, and runs every module's
``os.register_at_fork`` hook (threading, logging, concurrent.futures, random, the
reaper): Python code that writes to the template's shared objects, ~0.45 MiB copied into
every child right after the fork (0.1-0.15 MiB of an idle child's private memory in the
end: it writes many of those pages later anyway). Of those hooks a one-thread child needs
only two, which it runs (:data:`AFTER_FORK`): a new ``random`` seed and the reaper's new
token.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, Final

from tether.runtime.parent.forkserver import (
    ENCODER,
    MAX_FDS,
    MAX_MESSAGE,
    REQUEST_DECODER,
    ROOM_ENV,
    Exited,
    Refused,
    Spawned,
    SpawnRequest,
    TemplateReady,
    env_size,
)

GATE_EXIT: Final = 125  # procs.GATE_EXIT
CHILD_CRASH: Final = 127  # the forked child could not even begin (said on its stderr)

Signals = dict[int, Any]

# The modules whose ``os.register_at_fork(after_in_child=...)`` hooks the template has
# imported, and what a child forked without them (:func:`_fork`) still runs of each, by
# name (module, function). The others only re-create locks and thread records, which
# nothing else holds or changes in a process of one thread.
# tests/parent/test_forkserver.py checks that the template registers no other hook.
AFTER_FORK: Final[dict[str, tuple[str, str] | None]] = {
    "threading": None,
    "logging": None,
    "concurrent.futures.thread": None,
    "random": ("random", "seed"),
    "tether.reaper": ("tether.reaper", "new_owner_after_fork"),
}


def _preload() -> None:
    """What a built-in child imports, before and after ``ready``."""
    import asyncio.subprocess  # noqa: F401
    import concurrent.futures.thread  # noqa: F401
    import importlib.util  # noqa: F401
    import json  # noqa: F401
    import random  # noqa: F401
    import shlex  # noqa: F401
    import shutil  # noqa: F401

    import tether.agent.loop
    import tether.agent.providers.command
    import tether.agent.registry
    import tether.agent.scripted
    import tether.agent.tools
    import tether.agent.toolset
    import tether.cli.child
    import tether.reaper
    import tether.runtime.child.adapters.registry
    import tether.runtime.child.files
    import tether.runtime.child.presenter
    import tether.transports.watch
    import tether.wire  # noqa: F401
    from tether.runtime.child.adapters.preload import preload
    from tether.wire.codec import prime

    preload()  # the adapters of the agents forked like built-in children
    prime()  # every message type's decoder: a child's first line of a type builds none


_REHEARSALS = 8
"""How many times the template rehearses: 3.11 quickens a function's bytecode at its
eighth call, so after eight runs even the functions a run calls once are quickened and
specialized here; a child calling them then writes no warm-up counter into their code
objects (measured: 4,160 -> 3,970 KiB private per idle child; 12 or 16 runs were no
better, ~7-20 ms each at the template's start)."""


def _rehearse(start: Signals) -> bool:
    """One short scripted run in this process before any fork, then every trace of it
    undone (signals, environment, files; its threads are joined by ``asyncio.run``).

    Python 3.11 specializes bytecode in place the first times a function runs; done in
    each child, that writes to (and so copies) the pages of every code object the child
    uses. Run here (:data:`_REHEARSALS` times), the children inherit code that is already
    specialized. False when the run failed (another would fail too).
    """
    import shutil
    import tempfile
    from pathlib import Path

    from tether.cli import child
    from tether.runtime.parent.command import ChildCommand, default_argv
    from tether.runtime.parent.launch import prepare_run
    from tether.runtime.parent.options import SpawnOptions

    saved = dict(os.environ)
    root = tempfile.mkdtemp(prefix="tether-template-")
    try:
        script = Path(root) / "script.json"
        script.write_text('[{"text": "rehearsal"}]')
        command = ChildCommand(default_argv(None, None), "builtin")
        prepared = prepare_run(
            "rehearsal", SpawnOptions(deadline_s=30), command, runs_root=Path(root)
        )
        closed = prepared.mirror.control("close")
        if isinstance(closed, tuple):
            prepared.control.append(closed[1])
        prepared.control.close()
        os.environ.update(prepared.env)
        child.main([*default_argv("scripted", None)[4:], "--script", str(script)], "tether child")
    except Exception as exc:  # noqa: BLE001 (a rehearsal that fails only costs memory later)
        print(f"tether.cli.forkserver: rehearsal failed: {exc!r}", file=sys.stderr)
        return False
    finally:
        os.environ.clear()
        os.environ.update(saved)
        signal.set_wakeup_fd(-1)
        for sig, handler in start.items():
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, handler)
        shutil.rmtree(root, ignore_errors=True)
    return True


_FILLER: list[object] = []
"""What :func:`_fill_pools` allocated: kept for the template's life, never touched."""


def _fill_pools() -> None:
    """Take every free block of pymalloc's partly used pools, in the template, for good.

    The template's start-up and rehearsals free objects all over its pools; a child's
    own small allocations would first fill those holes, one or two on each page, and
    so copy a page for every few objects. With the holes taken here (by bytes and
    floats that nothing touches again), a child's allocations go to fresh pools, packed
    (measured: 3,995 -> 3,825 KiB private per idle child). Nothing is done when the
    allocator's statistics do not read as pymalloc's (``PYTHONMALLOC=malloc``).
    """
    import tempfile

    try:
        with tempfile.TemporaryFile() as out:  # 0600, unlinked at once
            saved = os.dup(2)
            os.dup2(out.fileno(), 2)
            try:
                sys._debugmallocstats()  # CPython's only view of its pools
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            out.seek(0)
            text = out.read().decode(errors="replace")
    except OSError:  # no temp dir (full, missing): the children just copy a little more
        return
    for line in text.splitlines():
        parts = line.split()  # class, size, pools, blocks in use, blocks free
        if len(parts) != 5 or not all(part.isdigit() for part in parts):
            continue
        size, free = int(parts[1]), int(parts[4])
        if size == 32:  # a float is 24 bytes
            _FILLER.extend(float(n) + 0.5 for n in range(free))
        elif size >= 48:  # a bytes object is 33 bytes and its length
            _FILLER.extend(bytes(size - 33) for _ in range(free))


def _start_signals() -> Signals:
    """Every signal's disposition now, at the interpreter's start (what a child gets)."""
    found: Signals = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            handler = signal.getsignal(sig)
            if handler is not None:
                found[sig] = handler
    return found


def main(argv: list[str]) -> int:
    start = _start_signals()
    gc.disable()  # nothing collected (and written) until the children's own collections
    os.environ.pop(ROOM_ENV, None)
    areas = _Areas()
    areas.set_argv(["python", "-m", "tether.cli.forkserver"])
    areas.set_env(dict(os.environ))
    try:
        sock = socket.socket(fileno=int(argv[0]))
    except (OSError, ValueError, IndexError):
        print("tether.cli.forkserver: run by tether's fork server only", file=sys.stderr)
        return 2
    _preload()
    for _ in range(_REHEARSALS):
        if not _rehearse(start):
            break
    _raw_fork()  # ctypes imported and the function looked up before the heap is frozen
    gc.collect()
    _fill_pools()
    gc.freeze()
    plan = _serve(sock, start, areas)
    if plan is None:
        return 0
    _enter(plan)
    from tether.cli import entrypoint

    entrypoint()  # raises SystemExit, like `python -m tether child`
    return 0


# -- serving ----------------------------------------------------------------------------


class _Plan:
    """What a forked child still has to do to become the requested process."""

    def __init__(
        self,
        request: SpawnRequest,
        fds: list[int],
        start: Signals,
        sock: socket.socket,
        areas: _Areas,
    ) -> None:
        self.request = request
        self.fds = fds
        self.start = start
        self.sock = sock
        self.areas = areas


def _serve(sock: socket.socket, start: Signals, areas: _Areas) -> _Plan | None:
    """Fork per request until the user goes; in a forked child, return its plan."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _noop)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    if not _send(sock, TemplateReady(pid=os.getpid())):
        return None
    while True:
        for fd, _ in poller.poll():
            if fd == wake_r:
                _drain(wake_r)
                if not _reap(sock):
                    return None
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
            except InterruptedError:
                continue
            except OSError:
                return None
            if not data:
                return None
            plan = _handle(sock, data, fds, start, areas)
            if plan is not None:
                os.close(wake_r)
                os.close(wake_w)
                return plan


def _noop(_signum: int, _frame: object) -> None:
    pass


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _reap(sock: socket.socket) -> bool:
    """Report every child that has exited; False when the user is gone."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        if not _send(sock, Exited(pid=pid, code=os.waitstatus_to_exitcode(status))):
            return False


def _send(sock: socket.socket, message: TemplateReady | Spawned | Refused | Exited) -> bool:
    try:
        sock.send(ENCODER.encode(message))
    except OSError:
        return False
    return True


def _handle(
    sock: socket.socket, data: bytes, fds: list[int], start: Signals, areas: _Areas
) -> _Plan | None:
    problem = None
    try:
        request = REQUEST_DECODER.decode(data)
    except Exception as exc:  # noqa: BLE001 (msgspec's decode and validation errors)
        request, problem = None, Refused(errno=22, error=f"bad spawn request: {exc}")
    if request is not None:
        problem = _check(request, fds, areas)
    if request is None or problem is not None:
        _close(fds)
        _send(sock, problem or Refused(errno=22, error="bad spawn request"))
        return None
    _parse_flags(request.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = _fork()
    except OSError as exc:
        _close(fds)
        _send(sock, Refused(errno=exc.errno or 11, error=f"fork: {exc.strerror}"))
        return None
    if pid == 0:
        return _Plan(request, fds, start, sock, areas)
    _close(fds)
    _send(sock, Spawned(pid=pid))
    return None


def _parse_flags(argv: list[str]) -> None:
    """A built-in child's flags parsed here, before the fork, into ``tether.cli.child``'s
    cache: the children of one command share the result (see ``parse_flags``). Bad flags
    are left for the child to report (argparse says why on its stderr and exits)."""
    if argv[1:4] != ["-m", "tether", "child"]:
        return
    from tether.cli.child import parse_flags

    with contextlib.suppress(SystemExit, Exception):
        parse_flags(argv[4:], "tether child")


def _fork() -> int:
    """``fork()``, as ``os.fork()`` but without CPython's after-fork work while this
    process has one thread (see the module docstring); ``os.fork()`` otherwise."""
    raw = _raw_fork()
    if raw is None or not _one_thread():
        return os.fork()
    pid: int = raw()
    if pid < 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    if pid == 0:
        _after_raw_fork()
    return pid


@functools.cache
def _raw_fork() -> Callable[[], int] | None:
    """libc's ``fork``, called with the GIL held (``ctypes.PyDLL``); None without ctypes."""
    try:
        import ctypes

        fork = ctypes.PyDLL(None, use_errno=True).fork
    except (ImportError, OSError, AttributeError):
        return None
    fork.restype = ctypes.c_int
    fork.argtypes = []
    return fork


def _one_thread() -> bool:
    """True when this process has exactly one thread (the kernel's count: C threads too)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _after_raw_fork() -> None:
    """The after-fork hooks a one-thread child needs (:data:`AFTER_FORK`)."""
    for needed in AFTER_FORK.values():
        if needed is not None and needed[0] in sys.modules:
            getattr(sys.modules[needed[0]], needed[1])()


def _check(request: SpawnRequest, fds: list[int], areas: _Areas) -> Refused | None:
    if len(fds) != 3 + len(request.targets) + int(request.gated):
        return Refused(errno=22, error="the descriptors do not match the request")
    if any(fd < 0 for fd in request.targets) or not request.argv:
        return Refused(errno=22, error="bad descriptor numbers or an empty argv")
    if env_size(request.env) > areas.env_room:
        return Refused(errno=7, error="the environment does not fit the template's room")
    if not os.path.isdir(request.cwd):
        return Refused(errno=2, error=f"No such directory: {request.cwd!r}")
    return None


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# -- becoming the child -----------------------------------------------------------------


def _enter(plan: _Plan) -> None:
    """Turn this freshly forked process into the requested child (see the docstring)."""
    request = plan.request
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig, handler in plan.start.items():
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        plan.sock.detach()  # its number is closed below; no object may close it later
        gate = _place(plan.fds, request)
        os.chdir(request.cwd)
        env = _gate_pwd(request.env) if gate is not None else request.env
        plan.areas.set_argv(request.argv)  # what `ps` shows, also while at the gate
        plan.areas.set_env(env)
        if gate is not None:
            _wait_gate(gate)
        os.umask(request.umask)
        _set_environ(env)
        _forget_tempdir()
        sys.argv = [_main_path(), *request.argv[3:]]
        sys.orig_argv = list(request.argv)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"tether: cannot start the forked child: {exc}\n".encode())
        os._exit(CHILD_CRASH)
    gc.enable()


def _forget_tempdir() -> None:
    """``tempfile`` chose its directory in the template (``TMPDIR`` then); the child's is
    its own (a run's private ``tmp/``), so ``tempfile`` looks again at its first use."""
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        setattr(tempfile, "tempdir", None)  # noqa: B010 (a module only maybe imported)


def _set_environ(env: dict[str, str]) -> None:
    """``os.environ`` (and the C environment) becomes ``env``, in ``env``'s order.

    Only what differs is written when the template's order allows it: rewriting every
    variable frees the template's objects and encodes new ones, which copies template
    pages into each child for an environment that is mostly the template's (measured:
    30-60 KiB less private memory per idle child).
    """
    environ = os.environ
    kept = [key for key in environ if key in env]
    if kept + [key for key in env if key not in environ] != list(env):
        environ.clear()  # another order: rebuilt, as exec would have it
        environ.update(env)
        return
    for key in [key for key in environ if key not in env]:
        del environ[key]
    for key, value in env.items():
        if environ.get(key) != value:
            environ[key] = value


def _place(fds: list[int], request: SpawnRequest) -> int | None:
    """Move the descriptors to 0, 1, 2 and the targets; close every other one."""
    import fcntl

    targets = [0, 1, 2, *request.targets]
    top = max([*fds, *targets]) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in fds]
    keep = set(targets)
    for source, target in zip(high, targets, strict=False):
        os.dup2(source, target, inheritable=True)
    gate = high[-1] if request.gated else None
    if gate is not None:
        keep.add(gate)
    _close_all_but(keep)
    return gate


def _close_all_but(keep: set[int]) -> None:
    low = 0
    for fd in [*sorted(keep), max(os.sysconf("SC_OPEN_MAX"), max(keep) + 1)]:
        if low < fd:  # never an empty range: closerange(0, 0) closes everything
            os.closerange(low, fd)
        low = fd + 1


def _gate_pwd(env: dict[str, str]) -> dict[str, str]:
    """``PWD`` as the exec'd gate's ``/bin/sh`` leaves it: kept when it names the current
    directory, else the physical path."""
    pwd = env.get("PWD")
    try:
        if pwd is not None and os.path.samefile(pwd, "."):
            return env
    except OSError:
        pass
    return {**env, "PWD": os.getcwd()}


def _wait_gate(fd: int) -> None:
    """Wait for the starter's ``go`` (it has recorded our pid); exit 125 without it."""
    data = b""
    while b"\n" not in data and len(data) < 64:
        try:
            chunk = os.read(fd, 64)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    os.close(fd)
    if data.split(b"\n", 1)[0] != b"go":
        os._exit(GATE_EXIT)


def _main_path() -> str:
    import tether

    return os.path.join(os.path.dirname(os.path.abspath(tether.__file__)), "__main__.py")


# -- what /proc/PID/cmdline and /proc/PID/environ show --------------------------------


def _areas() -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Where the kernel reads ``/proc/self/cmdline`` and ``/proc/self/environ`` from
    (``arg_start``/``arg_end``, ``env_start``/``env_end``: fields 48-51 of ``stat``)."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        start, end, env_start, env_end = (int(fields[n - 3]) for n in (48, 49, 50, 51))
    except (OSError, ValueError, IndexError):
        return None
    return (start, end), (env_start, env_end)


class _Areas:
    """The argv and environment areas of this process's memory, rewritten in place.

    The template is started with room in both (a long dummy argument, a long
    ``TETHER_FORKSERVER_ROOM`` variable), so a child's argv and environment fit; only
    the bytes that change are written (a child dirties a page or two, not the room).
    """

    def __init__(self) -> None:
        found = _areas()
        self.args, self.env = found if found is not None else ((0, 0), (0, 0))
        self.used = {self.args: self.args[1] - self.args[0], self.env: self.env[1] - self.env[0]}

    @property
    def env_room(self) -> int:
        return self.env[1] - self.env[0]

    def set_argv(self, argv: list[str]) -> None:
        self._write(self.args, [os.fsencode(arg) for arg in argv])

    def set_env(self, env: dict[str, str]) -> None:
        self._write(self.env, [os.fsencode(f"{k}={v}") for k, v in env.items()])

    def _write(self, area: tuple[int, int], items: list[bytes]) -> None:
        room = area[1] - area[0]
        data = b""
        for item in items:  # whole items only: the rest does not fit
            if len(data) + len(item) + 1 > room:
                break
            data += item + b"\0"
        size = max(len(data), self.used[area])
        self.used[area] = len(data)
        if room <= 0:
            return
        with contextlib.suppress(OSError):
            fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
            try:
                os.pwrite(fd, data.ljust(size, b"\0"), area[0])
            finally:
                os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
