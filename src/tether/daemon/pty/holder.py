"""The holder of one PTY agent's pseudo-terminal (``python -m tether.daemon.pty.holder``).

Theory of operation: the daemon starts one holder per PTY agent in a session of its own,
so the holder (and the program under it) outlive a killed daemon. The holder

1. binds the private socket ``pty.sock`` (0600) in the agent's run directory (0700; it
   binds by the short relative name, so a long directory path still fits ``sun_path``);
2. forks the program on a new pseudo-terminal (``forkpty``: the program leads its own
   session with the PTY as its controlling terminal, at the size asked for, in its cwd);
3. prints one JSON line to stdout, ``{"pid": N}`` (or ``{"error": ...}`` when the program
   cannot be found), then points stdout at ``/dev/null``;
4. loops on one selector: PTY output goes to the output ring and to the connected daemon
   (one at a time: a new connection from the same user replaces the old one, whose
   daemon is gone); frames from the daemon are keystrokes, resizes and stop requests
   (:mod:`tether.daemon.pty.frames`);
5. when the program ends: reads what is left on the PTY, writes ``pty-exit.json``
   ({code, signal}, 0600), tells the daemon, hangs up what is left of the program's
   process group and exits.

Killing the holder closes the PTY master, so the kernel hangs up the terminal and the
program gets SIGHUP. A daemon that stops reading for ``SEND_TIMEOUT_S`` is dropped (it
reconnects later and gets the ring); the program is never blocked by a dead daemon.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import pty
import selectors
import shutil
import signal
import socket
import struct
import sys
import termios
import time
from pathlib import Path
from typing import Final, NoReturn

import msgspec

from tether.daemon.pty.frames import (
    CHUNK_BYTES,
    EXIT_NAME,
    MAX_HOLDER_FRAME,
    MAX_SIZE,
    MIN_SIZE,
    SOCKET_NAME,
    ExitInfo,
    Hello,
    HolderFrame,
    HolderRejection,
    Kind,
    OutputRing,
    Resize,
    Stop,
    decode_holder_frame,
    decode_json,
    encode,
)
from tether.daemon.rpc.protocol import FrameDecoder
from tether.numbers import count
from tether.wire.needdata import NEED_DATA

SEND_TIMEOUT_S: Final = 10.0
MAX_PENDING_INPUT: Final = 1_048_576
_UCRED: Final = struct.Struct("3i")
_SO_PEERCRED: Final = getattr(socket, "SO_PEERCRED", 17)


def set_winsize(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _bind(name: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(name)
    finally:
        os.umask(old)
    os.chmod(name, 0o600)
    sock.listen(4)
    return sock


def _find_program(program: str, cwd: str) -> str | None:
    if "/" in program:
        path = os.path.join(cwd, program)
        return path if os.access(path, os.X_OK) and not os.path.isdir(path) else None
    return shutil.which(program)


def _exec_child(argv: list[str], cwd: str, cols: int, rows: int) -> NoReturn:
    """In the forked child: on the PTY, as the new session's leader. Never returns."""
    try:
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores some; the program must not
        set_winsize(0, cols, rows)
        os.chdir(cwd)
        os.execvp(argv[0], argv)  # noqa: S606
    except BaseException as exc:  # noqa: BLE001 (report anything, then leave the fork)
        with contextlib.suppress(Exception):
            os.write(2, f"tether pty: cannot start {argv[0]}: {exc}\r\n".encode())
    os._exit(127)


class Holder:
    """The selector loop; see the module docstring."""

    def __init__(self, listener: socket.socket, master: int, pid: int, size: Resize) -> None:
        self.listener = listener
        self.master = master
        self.pid = pid
        self.size = size
        self.ring = OutputRing()
        self.sel = selectors.DefaultSelector()
        self.client: socket.socket | None = None
        self.decoder = FrameDecoder(MAX_HOLDER_FRAME)
        self.pending = bytearray()
        self.pidfd = os.pidfd_open(pid)
        self.kill_at: float | None = None
        self.exit: ExitInfo | None = None
        os.set_blocking(master, False)
        self.sel.register(listener, selectors.EVENT_READ, self._accept)
        self.sel.register(master, selectors.EVENT_READ, self._on_master)
        self.sel.register(self.pidfd, selectors.EVENT_READ, self._on_exit)

    def run(self) -> ExitInfo:
        while self.exit is None:
            timeout = None if self.kill_at is None else max(0.0, self.kill_at - time.monotonic())
            for key, mask in self.sel.select(timeout):
                key.data(mask)
                if self.exit is not None:
                    break
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.kill_at = None
                self._signal_group(signal.SIGKILL)
        return self.exit

    # -- the PTY --------------------------------------------------------------------

    def _on_master(self, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush_input()
        if mask & selectors.EVENT_READ:
            self._read_master()

    def _read_master(self) -> bool:
        try:
            data = os.read(self.master, CHUNK_BYTES)
        except BlockingIOError:
            return False
        except OSError as exc:  # EIO: every slave end closed
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.master)
            return False
        self.ring.append(data)
        self._send(encode(Kind.OUTPUT, data))
        return True

    def _flush_input(self) -> None:
        try:
            written = os.write(self.master, self.pending)
        except BlockingIOError:
            written = 0
        except OSError:
            self.pending.clear()
            written = 0
        del self.pending[:written]
        self._watch_master()

    def _watch_master(self) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.pending else 0)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.modify(self.master, events, self._on_master)

    def _on_exit(self, mask: int) -> None:
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            info = ExitInfo(signal=os.WTERMSIG(status))
        else:
            info = ExitInfo(code=os.waitstatus_to_exitcode(status))
        while self._read_master():  # what the program wrote last
            pass
        self.exit = info

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    # -- the daemon -----------------------------------------------------------------

    def _accept(self, mask: int) -> None:
        conn, _ = self.listener.accept()
        uid = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, _SO_PEERCRED, _UCRED.size))[1]
        if uid != os.geteuid():
            conn.close()
            return
        self._drop_client()
        conn.settimeout(SEND_TIMEOUT_S)
        self.client = conn
        self.decoder = FrameDecoder(MAX_HOLDER_FRAME)
        self.sel.register(conn, selectors.EVENT_READ, self._on_client)
        hello = Hello(pid=self.pid, cols=self.size.cols, rows=self.size.rows)
        self._send(encode(Kind.HELLO, hello) + encode(Kind.RING, self.ring.content()))

    def _drop_client(self) -> None:
        if self.client is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.client)
            self.client.close()
            self.client = None

    def _send(self, data: bytes) -> None:
        if self.client is None:
            return
        try:
            self.client.sendall(data)
        except OSError:  # gone or stalled: it gets the ring when it reconnects
            self._drop_client()

    def _on_client(self, mask: int) -> None:
        assert self.client is not None
        try:
            data = self.client.recv(CHUNK_BYTES)
        except OSError:
            data = b""
        if not data:
            self._drop_client()
            return
        self.decoder.feed(data)
        while (body := self.decoder.next_frame()) is not NEED_DATA:
            if not isinstance(body, bytes):  # a broken peer: drop it
                self._drop_client()
                return
            frame = decode_holder_frame(body)
            if isinstance(frame, HolderRejection):
                self._drop_client()
                return
            self._on_frame(frame)

    def _on_frame(self, frame: HolderFrame) -> None:
        if frame.kind is Kind.INPUT:
            room = MAX_PENDING_INPUT - len(self.pending)
            self.pending += frame.payload[: max(0, room)]
            self._flush_input()
            return
        value = decode_json(frame)
        if isinstance(value, Resize):
            self.size = value
            with contextlib.suppress(OSError):
                set_winsize(self.master, value.cols, value.rows)
        elif isinstance(value, Stop):
            self._signal_group(signal.SIGHUP)
            self._signal_group(signal.SIGCONT)
            self.kill_at = time.monotonic() + value.grace_s

    def finish(self, info: ExitInfo) -> None:
        write_exit_file(Path(EXIT_NAME), info)
        self._send(encode(Kind.EXIT, info))
        self._drop_client()
        os.close(self.master)  # hangs up whatever is left on the terminal
        self._signal_group(signal.SIGHUP)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME)


def write_exit_file(path: Path, info: ExitInfo) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, msgspec.json.encode(info))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_exit_file(path: Path) -> ExitInfo | None:
    """The program's exit as the holder recorded it, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    value = decode_json(HolderFrame(Kind.EXIT, data))
    return value if isinstance(value, ExitInfo) else None


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tether.daemon.pty.holder")
    parser.add_argument("--dir", required=True, help="the agent's run directory (0700)")
    parser.add_argument("--cols", type=count(MIN_SIZE, MAX_SIZE), default=80)
    parser.add_argument("--rows", type=count(MIN_SIZE, MAX_SIZE), default=24)
    parser.add_argument("--cwd", default=None)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        parser.error("a program to run is required")
    return args


def _report(data: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    cwd = args.cwd or os.getcwd()
    program = _find_program(args.program[0], cwd)
    if program is None:
        _report({"error": f"program not found: {args.program[0]!r} (PATH and cwd {cwd})"})
        return 2
    os.chdir(args.dir)
    listener = _bind(SOCKET_NAME)
    size = Resize(cols=args.cols, rows=args.rows)
    pid, master = pty.fork()
    if pid == 0:
        _exec_child(args.program, cwd, size.cols, size.rows)
    for signum in (signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    set_winsize(master, size.cols, size.rows)
    holder = Holder(listener, master, pid, size)
    _report({"pid": pid})
    holder.finish(holder.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
