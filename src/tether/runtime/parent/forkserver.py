"""The fork server: built-in-agent children forked from a warm, pre-imported template.

Theory of operation. Exec'ing ``python -m tether child`` costs a whole interpreter start
(tens of ms, ~26 MiB private memory per child). Instead, the first eligible spawn of a
process (the daemon, or a parent starting many runs) starts one *template*
(``python -m tether.cli.forkserver``, see there): it imports everything a built-in child
imports, freezes those objects out of the garbage collector (``gc.freeze``, so the
children's collections do not write to the shared pages), and then forks a child per
request. Children share the template's pages copy-on-write and reach ``ready`` in a few ms.

- The channel is one ``socketpair`` (``SOCK_SEQPACKET``: one message per request or reply,
  descriptors passed with ``SCM_RIGHTS``); nothing is reachable from the file system.
- A :class:`SpawnRequest` carries what exec would: argv, environment, cwd, umask, and the
  descriptors (stdin, stdout, stderr, then the ``pass_fds`` list, each placed at its own
  number in the child, then an optional :class:`~tether.procs.Gate` read end). The child
  starts a new session, takes the template's start-up signal dispositions, an empty signal
  mask, exactly those descriptors, and waits at the gate before it runs anything.
- The template is the children's parent: it reaps them and reports each exit status
  (:class:`Exited`, the ``returncode`` convention of :mod:`subprocess`). One reader thread
  per process hands replies to the waiting spawns and statuses to the :class:`ForkedChild`
  objects, which look like a process to the drivers (``pid``, ``returncode``, ``poll()``,
  ``await wait()``) and to :mod:`tether.procs`.
- A template that dies (SIGKILL) leaves its children running; they are reparented to
  init, so their statuses cannot be known any more: each is then watched through a pidfd
  and ends with ``returncode`` None (as for a re-adopted child: the verdict is the
  child's ``exit`` line). The next spawn starts a new template.
- :meth:`ForkServer.close` ends the template and waits for it (the daemon, before it
  exits and frees its lock, so nothing of it outlives it).
- :meth:`ForkServer.spawn` answers None when no template can serve (it cannot start, it
  died, the request does not fit): the caller execs instead. ``TETHER_FORKSERVER=0``
  turns the fork server off (every child is exec'd); :func:`eligible` says which commands
  may be forked at all (``tether child`` with the built-in agent; external agents exec).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Final

import msgspec

from tether import procs

__all__ = [
    "ENV",
    "Exited",
    "ForkServer",
    "ForkedChild",
    "Refused",
    "SpawnRequest",
    "Spawned",
    "TemplateReady",
    "eligible",
    "enabled",
    "shared_forkserver",
]

ENV: Final = "TETHER_FORKSERVER"
"""``0`` (or ``off``, ``no``, ``false``) starts every child with exec."""
TEMPLATE_MODULE: Final = "tether.cli.forkserver"
MAX_MESSAGE: Final = 1 << 20  # a request bigger than this is exec'd instead
MAX_FDS: Final = 64
TITLE_ROOM: Final = 4096  # bytes of argv room the template keeps for its children's argv
ENV_ROOM: Final = 64 * 1024  # and of environment room (a bigger environment is exec'd)
ROOM_ENV: Final = "TETHER_FORKSERVER_ROOM"
READY_TIMEOUT_S: Final = 20.0  # the template's start (imports) on a loaded machine
REPLY_TIMEOUT_S: Final = 10.0  # one fork; a template that takes longer is killed
CLOSE_TIMEOUT_S: Final = 5.0  # a template asked to exit (ForkServer.close)
WARM_AFTER: Final = 2  # without ``cold``, the spawn that starts the template
RETRY_AFTER_S: Final = 10.0  # after a template that failed to start, exec this long
_OFF: Final = frozenset({"0", "off", "no", "false"})
_STARTUP_PREFIXES: Final = ("PYTHON", "LC_", "LANG")


# -- messages -------------------------------------------------------------------------


class SpawnRequest(msgspec.Struct, frozen=True, kw_only=True, tag="spawn"):
    argv: list[str]
    env: dict[str, str]
    cwd: str
    umask: int
    targets: list[int]  # the numbers of the descriptors after stdin, stdout and stderr
    gated: bool = False  # one more descriptor follows: a procs.Gate read end


class TemplateReady(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    pid: int


class Spawned(msgspec.Struct, frozen=True, kw_only=True, tag="spawned"):
    pid: int


class Refused(msgspec.Struct, frozen=True, kw_only=True, tag="refused"):
    errno: int
    error: str


class Exited(msgspec.Struct, frozen=True, kw_only=True, tag="exited"):
    pid: int
    code: int


Reply = TemplateReady | Spawned | Refused | Exited
REPLY_DECODER: Final = msgspec.json.Decoder(Reply)
REQUEST_DECODER: Final = msgspec.json.Decoder(SpawnRequest)
ENCODER: Final = msgspec.json.Encoder()


# -- which children ---------------------------------------------------------------------


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """False when ``TETHER_FORKSERVER`` turns the fork server off."""
    value = (os.environ if env is None else env).get(ENV, "")
    return value.strip().lower() not in _OFF


def child_prefix() -> list[str]:
    """The argv every built-in child starts with (``command.default_argv``'s)."""
    return [sys.executable, "-m", "tether", "child"]


def eligible(command: Sequence[str]) -> bool:
    """True for ``tether child`` with the built-in agent, or with an external agent whose
    CLI it starts once for the run (``adapters.commands.LAUNCHES``: the forked child starts
    that CLI at once, without an interpreter start before it); other agents keep exec."""
    from tether.runtime.child.adapters.commands import LAUNCHES

    if list(command[:4]) != child_prefix():
        return False
    rest = list(command[4:])
    agent = "builtin"
    for index, arg in enumerate(rest):
        if arg == "--":
            break
        if arg.partition("=")[0] == "--adapter":
            return False
        if arg == "--agent":
            agent = rest[index + 1] if index + 1 < len(rest) else ""
        elif arg.startswith("--agent="):
            agent = arg.partition("=")[2]
    if agent == "builtin":
        return "--" not in rest
    return agent in LAUNCHES


def env_size(env: Mapping[str, str]) -> int:
    """The bytes ``env`` takes in a process's environment area."""
    return sum(len(os.fsencode(f"{k}={v}")) + 1 for k, v in env.items())


def current_umask() -> int:
    """This process's umask, read without changing it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


# -- one child ----------------------------------------------------------------------------


class ForkedChild:
    """A child the template forked, as the drivers see a process.

    ``returncode`` is its status once the template reported it (``-N`` for signal N);
    ``exited`` is True once it is gone, also when the status cannot be known (the
    template died first: ``returncode`` stays None).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_time = procs.proc_start_time(pid)
        self._code: int | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __repr__(self) -> str:
        return f"<ForkedChild pid={self.pid} returncode={self._code}>"

    @property
    def returncode(self) -> int | None:
        return self._code

    @property
    def exited(self) -> bool:
        return self._done.is_set()

    def poll(self) -> int | None:
        return self._code

    def wait_exited(self, timeout: float | None = None) -> bool:
        """Block until the child is gone (or ``timeout``); True when it is."""
        return self._done.wait(timeout)

    async def wait(self) -> int | None:
        """Until the child is gone; its status, None when it cannot be known."""
        if not self._done.is_set():
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            with self._lock:
                waiting = not self._done.is_set()
                if waiting:
                    self._waiters.append((loop, future))
            if waiting:
                await future
        return self._code

    def set_exited(self, code: int | None) -> None:
        """The child is gone (called by the reader thread)."""
        with self._lock:
            if self._done.is_set():
                return
            self._code = code
            self._done.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed
                loop.call_soon_threadsafe(_settle, future)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# -- the template, from its user's side ---------------------------------------------------


class _Template:
    """One running template: its process, its end of the socket, its live children."""

    def __init__(self, popen: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.sock = sock
        self.ready: Future[bool] = Future()
        self.pending: deque[Future[ForkedChild | Refused | None]] = deque()
        self.children: dict[int, ForkedChild] = {}
        self.lost = False
        self.startup_env = _startup_env(os.environ)

    @property
    def failed(self) -> bool:
        """It is gone and never served."""
        return self.lost and self.ready.done() and not self.ready.result()

    @property
    def alive(self) -> bool:
        return not self.lost and self.popen.poll() is None

    def fail_pending(self) -> None:
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_result(None)


class ForkServer:
    """This process's fork server: starts the template on demand; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._template: _Template | None = None
        self._devnull: int | None = None
        self._retry_at = 0.0
        self._asked = 0

    @property
    def template_pid(self) -> int | None:
        """The running template's pid (None before the first spawn, or after it died)."""
        template = self._template
        return template.pid if template is not None and template.alive else None

    def warm(self) -> None:
        """Start the template now (without waiting), so the first spawn is fast."""
        with self._lock:
            self._ensure_template()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        stdout: int,
        stderr: int,
        stdin: int | None = None,
        pass_fds: Sequence[int] = (),
        gate_fd: int | None = None,
        cold: bool = True,
    ) -> ForkedChild | None:
        """Fork ``argv`` as a child; None when no template can serve (exec instead).

        Without a running template, ``cold`` starts one and waits for it; else this one
        answers None at once, and from the second such spawn on a template is started for
        the spawns after it (a process that starts a single child pays nothing).
        ``stdin`` None is ``/dev/null``.
        ``pass_fds`` are placed at the same numbers in the child (as exec's ``pass_fds``).
        With ``gate_fd`` (a :class:`procs.Gate`'s read end) the child waits for the gate
        before it runs anything. Raises ``OSError`` as exec would (``cwd`` is not a
        directory), and when the template goes away with the request sent (it may have
        forked a child, which then ends at its gate or lifeline: the caller must not start
        another on the same ones). Blocking: a few ms, up to the template's start.
        """
        request = SpawnRequest(
            argv=list(argv),
            env=dict(env),
            cwd=os.fspath(cwd),
            umask=current_umask(),
            targets=list(pass_fds),
            gated=gate_fd is not None,
        )
        data = ENCODER.encode(request)
        if len(data) > MAX_MESSAGE or env_size(request.env) > ENV_ROOM:
            return None
        future: Future[ForkedChild | Refused | None] = Future()
        with self._lock:
            running = self._template is not None and self._template.alive
            self._asked += 1
            if not (running or cold or self._asked >= WARM_AFTER):
                return None  # a process that starts one child never pays for a template
            template = self._ensure_template()
            if template is None or not (running or cold) or not _wait_ready(template):
                return None
            if _startup_env(env) != template.startup_env:  # the interpreter would differ
                return None
            fds = [self._null() if stdin is None else stdin, stdout, stderr, *pass_fds]
            if gate_fd is not None:
                fds.append(gate_fd)
            template.pending.append(future)
            try:
                socket.send_fds(template.sock, [data], fds)
            except OSError:  # EMSGSIZE, or the template is gone
                template.pending.remove(future)
                return None
        try:
            reply = future.result(REPLY_TIMEOUT_S)
        except TimeoutError:
            self._kill(template)  # it must not fork this request later
            reply = None
        if reply is None:  # it may have forked a child before it went: no exec of the same
            raise OSError(errno.ECHILD, "the fork server's template went away during the spawn")
        if isinstance(reply, Refused):
            raise OSError(reply.errno, reply.error)
        return reply

    def _null(self) -> int:
        if self._devnull is None:
            self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._devnull

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """Start the template if none runs and wait until it serves; False if it cannot."""
        with self._lock:
            template = self._ensure_template()
        if template is None:
            return False
        try:
            return template.ready.result(timeout)
        except TimeoutError:
            return False

    def _ensure_template(self) -> _Template | None:
        template = self._template
        if template is not None and template.alive:
            return template
        if template is not None and template.failed and time.monotonic() < self._retry_at:
            return None  # it just failed to start: exec for a while
        template = self._template = _start_template()
        self._retry_at = time.monotonic() + RETRY_AFTER_S
        return template

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """End the template and wait for it (SIGKILL after ``timeout``): it exits when its
        socket closes, its children keep running. For a process that exits next (the
        daemon): without it the template would outlive it, reparented, for a moment. A
        later spawn starts a new template."""
        with self._lock:
            template, self._template = self._template, None
        if template is None:
            return
        with contextlib.suppress(OSError):
            template.sock.shutdown(socket.SHUT_RDWR)
        try:
            template.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill(template)
            template.popen.wait()

    def _kill(self, template: _Template) -> None:
        with contextlib.suppress(OSError):
            os.kill(template.pid, 9)


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables an interpreter reads at start-up (a forked child keeps the template's)."""
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES)}


def _wait_ready(template: _Template) -> bool:
    try:
        return template.ready.result(READY_TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(OSError):
            os.kill(template.pid, 9)
        return False


def _start_template() -> _Template | None:
    """Start ``python -m tether.cli.forkserver FD ROOM`` with its end of the socket at FD.

    Popen, not posix_spawn: glibc's posix_spawn leaves its internal signals (32, 33)
    ignored across the exec, and the children would inherit that.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with contextlib.suppress(OSError):
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, MAX_MESSAGE * 2)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE * 2)
    fd = theirs.fileno()
    argv = [sys.executable, "-m", TEMPLATE_MODULE, str(fd), "." * TITLE_ROOM]
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            env={**os.environ, ROOM_ENV: "." * ENV_ROOM},
            start_new_session=True,
        )
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
    template = _Template(popen, ours)
    threading.Thread(
        target=_read_replies, args=(template,), name="tether-forkserver", daemon=True
    ).start()
    return template


def _read_replies(template: _Template) -> None:
    """The reader thread: replies to spawns, exit statuses; then the orphans' watch."""
    try:
        while True:
            try:
                data = template.sock.recv(65536)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            _dispatch(template, data)
    finally:
        template.lost = True
        if not template.ready.done():
            template.ready.set_result(False)
        template.fail_pending()
        with contextlib.suppress(OSError):
            template.sock.close()
        template.popen.wait()
    _watch_orphans(list(template.children.values()))


def _dispatch(template: _Template, data: bytes) -> None:
    try:
        reply = REPLY_DECODER.decode(data)
    except msgspec.DecodeError:
        return  # our own template never writes this; nothing to hand out
    if isinstance(reply, TemplateReady):
        if not template.ready.done():
            template.ready.set_result(True)
    elif isinstance(reply, Exited):
        child = template.children.pop(reply.pid, None)
        if child is not None:
            child.set_exited(reply.code)
    elif template.pending:
        future = template.pending.popleft()
        if isinstance(reply, Spawned):
            child = template.children[reply.pid] = ForkedChild(reply.pid)
            future.set_result(child)
        else:
            future.set_result(reply)


def _watch_orphans(children: list[ForkedChild]) -> None:
    """The template died: watch its children through pidfds until every one is gone."""
    fds: dict[int, ForkedChild] = {}
    poller = select.poll()
    for child in children:
        try:
            fd = os.pidfd_open(child.pid)
        except OSError:
            child.set_exited(None)
            continue
        if not procs.process_matches(child.pid, child.start_time):  # gone, pid reused
            os.close(fd)
            child.set_exited(None)
            continue
        fds[fd] = child
        poller.register(fd, select.POLLIN)
    while fds:
        for fd, _ in poller.poll():
            poller.unregister(fd)
            os.close(fd)
            fds.pop(fd).set_exited(None)


_SHARED: Final = ForkServer()


def shared_forkserver() -> ForkServer:
    """This process's one fork server (its template is started on the first spawn)."""
    return _SHARED
