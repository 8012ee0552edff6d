"""``tether agent attach NAME``: the terminal client for a daemon agent.

Theory of operation. A PTY agent is driven over ``agent.drive``
(:class:`~tether.daemon.pty.drive_client.DriveConnection`): the terminal goes to raw mode, the
agent's screen (its output ring) is drawn, keystrokes go to the program as they are typed,
and a SIGWINCH sends the new size. ``Ctrl-]`` (printed on attach) detaches; the agent
keeps running. The terminal's settings are restored on every way out: detach, the
program's end, the daemon going away, SIGTERM/SIGHUP, an error.

A wire agent has no terminal: attach shows its live view through the display (the whole
event log, then live events, as ``tether run`` draws them) and sends each typed line as
``steer`` (``+line``: ``follow-up``), printing the ack. Ctrl-C or end of input detaches.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from tether import jsondepth

if TYPE_CHECKING:
    from tether.daemon.pty.drive_client import DriveConnection
    from tether.display import Display

DETACH_KEY: Final = b"\x1d"
DETACH_NAME: Final = "Ctrl-]"
READ_BYTES: Final = 4096


def attach(socket_path: Path | None, name: str) -> int:
    """Attach this terminal to agent ``name``; returns the exit status."""
    from tether.daemon.rpc.client import DaemonClient

    with DaemonClient.connect(socket_path) as client:
        status = client.call("agent.status", {"name": name})
    if status.get("kind") == "pty":
        return attach_pty(socket_path, name)
    return attach_wire(socket_path, name)


# -- PTY agents ---------------------------------------------------------------------------------


def attach_pty(socket_path: Path | None, name: str, stdin_fd: int = 0, stdout_fd: int = 1) -> int:
    from tether.daemon.pty.drive_client import DriveConnection

    conn = DriveConnection.open(name, socket_path)
    conn.sock.settimeout(None)
    try:
        size = _terminal_size(stdout_fd)
        if size is not None:
            conn.send_control(type="resize", cols=size[0], rows=size[1])
        # Signals are caught before the banner says we are attached: a SIGTERM that
        # follows the banner must find the handler that restores the terminal.
        with _wakeups() as wake, _raw_terminal(stdin_fd):
            _say(f"attached to {name}; detach with {DETACH_NAME}")
            outcome = _pump(conn, wake, stdin_fd, stdout_fd)
    finally:
        conn.close()
    _say(outcome)
    return 0


class _Wake:
    """Signals arrive as bytes on a pipe (``set_wakeup_fd``) so ``select`` sees them."""

    def __init__(self, read_fd: int) -> None:
        self.fd = read_fd
        self.resized = False
        self.ended: str | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGWINCH:
            self.resized = True
        else:
            self.ended = f"detached: {signal.Signals(signum).name}"

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 512)


@contextlib.contextmanager
def _wakeups() -> Iterator[_Wake]:
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    wake = _Wake(read_fd)
    signums = (signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, wake.handler) for signum in signums}
    old_fd = signal.set_wakeup_fd(write_fd)
    try:
        yield wake
    finally:
        signal.set_wakeup_fd(old_fd)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(read_fd)
        os.close(write_fd)


@contextlib.contextmanager
def _raw_terminal(fd: int) -> Iterator[None]:
    """Raw mode while inside; the saved settings come back however the block ends."""
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # not a terminal (piped input): nothing to change
        yield
        return
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def _pump(conn: DriveConnection, wake: _Wake, stdin_fd: int, stdout_fd: int) -> str:
    """Copy bytes both ways until detach or the end; returns what to tell the user."""
    reading = True
    while True:
        if wake.ended is not None:
            return wake.ended + "; the agent keeps running"
        if wake.resized:
            wake.resized = False
            _send_size(conn, stdout_fd)
        fds = [conn.fileno(), wake.fd] + ([stdin_fd] if reading else [])
        try:
            ready, _, _ = select.select(fds, [], [])
        except InterruptedError:
            continue
        if wake.fd in ready:
            wake.drain()
        if stdin_fd in ready:
            reading = _keys(conn, os.read(stdin_fd, READ_BYTES))
        if conn.fileno() in ready:
            ended = _screen(conn, stdout_fd)
            if ended is not None:
                return ended


def _send_size(conn: DriveConnection, fd: int) -> None:
    size = _terminal_size(fd)
    if size is not None:
        conn.send_control(type="resize", cols=size[0], rows=size[1])


def _keys(conn: DriveConnection, data: bytes) -> bool:
    """Typed bytes to the program; False once the detach key (or end of input) came."""
    keys, detach, _ = data.partition(DETACH_KEY)
    if keys:
        conn.send_input(keys)
    if detach or not data:
        conn.send_control(type="detach")
        return False
    return True


def _screen(conn: DriveConnection, stdout_fd: int) -> str | None:
    """Draw what the daemon sent; the closing words once the connection ended."""
    from tether.daemon.rpc.client import DaemonConnectionLost
    from tether.transports.ws import WsBinary, WsClosed, WsText

    try:
        events = conn.receive()
    except (DaemonConnectionLost, OSError):
        return "the daemon closed the connection; the agent keeps running"
    for event in events:
        if isinstance(event, WsBinary):
            _write_all(stdout_fd, event.data)
        elif isinstance(event, WsText):
            conn.last_words = _control_text(event.text) or conn.last_words
        elif isinstance(event, WsClosed):
            return conn.last_words
    return None


def _control_text(text: str) -> str | None:
    try:
        message = jsondepth.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    if message.get("type") == "exit":
        return f"the program ended: {message.get('state')} (exit {message.get('exit_code')})"
    if message.get("type") == "detached":
        return f"detached: {message.get('reason')}"
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _terminal_size(fd: int) -> tuple[int, int] | None:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    if not (0 < size.columns <= 1000 and 0 < size.lines <= 1000):
        return None
    return size.columns, size.lines


def _say(text: str) -> None:
    os.write(2, f"\r\n[tether] {text}\r\n".encode())


# -- wire agents --------------------------------------------------------------------------------


def attach_wire(socket_path: Path | None, name: str) -> int:
    from tether.daemon.rpc.client import DaemonClient
    from tether.display import open_display

    lock = threading.Lock()
    display = open_display("human", stdout=sys.stdout, stderr=sys.stderr)
    # Ctrl-C detaches, and so does the end of stdin (the steering thread signals SIGINT):
    # also when started with SIGINT ignored (a background job of a script inherits SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _say(f"watching {name}: a line steers it, +line is a follow-up; Ctrl-C or Ctrl-D detaches")
    typing = threading.Thread(
        target=_steer_lines, args=(socket_path, name, display, lock), daemon=True
    )
    client = DaemonClient.connect(socket_path)
    client.settimeout(None)
    client.on_request = lambda request: _on_events(request, display, lock)
    try:
        typing.start()
        result = client.call("agent.events", {"name": name, "after_seq": 0, "follow": True})
        with lock:
            display.notice(f"{name} {result['state']} (last seq {result['last_seq']})")
    except KeyboardInterrupt:
        with lock:
            display.notice(f"detached from {name}; it keeps running")
    finally:
        client.close()
        with lock:
            display.close()
    return 0


def _on_events(request: Any, display: Display, lock: threading.Lock) -> dict[str, Any]:
    import msgspec

    from tether.daemon.rpc.client import DaemonCallError
    from tether.daemon.rpc.protocol import ErrorCode
    from tether.wire import Rejection, decode_event

    if request.method != "agent.event" or not isinstance(request.params, dict):
        raise DaemonCallError(ErrorCode.UNKNOWN_METHOD, f"no {request.method} here")
    for raw in request.params.get("events", []):
        line = msgspec.json.encode(raw)
        event = decode_event(line)
        if not isinstance(event, Rejection):
            with lock:
                display.event(event, run=event.run, raw=line)
    return {}


def _steer_lines(
    socket_path: Path | None, name: str, display: Display, lock: threading.Lock
) -> None:
    from tether.daemon.rpc.client import DaemonClient, DaemonClientError

    for line in sys.stdin:
        text = line.rstrip("\n")
        if not text.strip():
            continue
        method, body = (
            ("agent.follow_up", text[1:].strip())
            if text.startswith("+")
            else (
                "agent.steer",
                text,
            )
        )
        try:
            with DaemonClient.connect(socket_path) as client:
                result = client.call(method, {"name": name, "text": body})
            note = f"{method.removeprefix('agent.')} {result['ack']} (seq {result['seq']})"
        except DaemonClientError as exc:
            note = f"not sent: {exc}"
        with lock:
            display.notice(note)
    os.kill(os.getpid(), signal.SIGINT)  # end of input: detach


__all__ = ["DETACH_KEY", "attach", "attach_pty", "attach_wire"]
