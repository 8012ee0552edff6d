"""``tether agent attach`` under a real pseudo-terminal (``pty.fork``): raw mode, typing,
SIGWINCH resizes, the detach key, and the terminal restored on every way out; and the
wire-agent view with typed lines sent as steer / follow-up."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
from typing import Any

from tests.support.agentd import AgentDaemon, agentd
from tests.support.pty import BASH, spawn_pty

__all__ = ["agentd"]


class Terminal:
    """The attach CLI running on a pty we hold the master of."""

    def __init__(self, agentd: AgentDaemon, name: str, cols: int = 100, rows: int = 30) -> None:
        pid, master = pty.fork()
        if pid == 0:  # the child: a terminal of the given size, then the CLI
            try:
                fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                argv = [sys.executable, "-m", "tether", "agent", "attach", name]
                os.execve(sys.executable, argv, agentd.env)
            finally:
                os._exit(127)
        self.pid, self.master = pid, master
        self.seen = b""

    def read_until(self, needle: bytes) -> bytes:
        while needle not in self.seen:
            try:
                chunk = os.read(self.master, 65536)
            except OSError as exc:  # EIO: the CLI is gone
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            assert chunk, f"the CLI ended before {needle!r}: {self.seen[-2000:]!r}"
            self.seen += chunk
        return self.seen

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def lflag(self) -> int:
        return int(termios.tcgetattr(self.master)[3])

    def wait(self) -> int:
        with contextlib.suppress(OSError):
            while os.read(self.master, 65536):  # drain until the CLI closes its side
                pass
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.master)


def test_attach_types_resizes_and_detaches_restoring_the_terminal(agentd: AgentDaemon) -> None:
    status = spawn_pty(agentd, "tty", BASH)
    term = Terminal(agentd, "tty", cols=100, rows=30)
    try:
        assert term.lflag() & termios.ICANON  # a fresh pty is cooked
        term.read_until(b"detach with Ctrl-]")
        assert agentd.wait_for("tty", lambda s: s["pty"]["cols"] == 100)["attached"] is True
        assert not term.lflag() & termios.ICANON  # raw while attached
        term.type(b"echo at-$((3*3))\r")
        term.read_until(b"at-9")

        term.resize(120, 40)  # the kernel sends the CLI SIGWINCH
        agentd.wait_for("tty", lambda s: (s["pty"]["cols"], s["pty"]["rows"]) == (120, 40))
        term.type(b"stty size\r")
        term.read_until(b"40 120")

        term.type(b"\x1d")  # Ctrl-]
        term.read_until(b"detached")
        assert term.wait() == 0
        assert term.lflag() & termios.ICANON  # restored
    finally:
        term.close()
    after = agentd.status("tty")
    assert after["state"] == "running"  # the agent keeps running
    assert os.path.exists(f"/proc/{status['pid']}")


def test_sigterm_and_program_exit_restore_the_terminal(agentd: AgentDaemon) -> None:
    spawn_pty(agentd, "t2", BASH)
    term = Terminal(agentd, "t2")
    try:
        term.read_until(b"detach with Ctrl-]")
        assert not term.lflag() & termios.ICANON
        os.kill(term.pid, signal.SIGTERM)
        term.read_until(b"SIGTERM")
        assert term.wait() == 0
        assert term.lflag() & termios.ICANON
    finally:
        term.close()

    term = Terminal(agentd, "t2")
    try:
        term.read_until(b"detach with Ctrl-]")
        term.type(b"exit 3\r")
        term.read_until(b"the program ended: failed (exit 3)")
        assert term.wait() == 0
        assert term.lflag() & termios.ICANON
    finally:
        term.close()


def test_attach_to_a_wire_agent_shows_it_and_steers(agentd: AgentDaemon) -> None:
    replies: list[dict[str, Any]] = [{"text": "first answer"}, {"text": "second answer"}]
    agentd.spawn("wired", replies, task="go")
    agentd.wait_for("wired", lambda s: s["state"] == "ready" and s["turn"] >= 1)
    cli = subprocess.Popen(
        [sys.executable, "-m", "tether", "agent", "attach", "wired"],
        env={**agentd.env, "NO_COLOR": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert cli.stdin is not None
        assert cli.stdout is not None
        seen = b""
        while b"first answer" not in seen:  # the recorded log through the display
            seen += cli.stdout.read1(65536)
        cli.stdin.write(b"+and now the second\n")
        cli.stdin.flush()
        while b"second answer" not in seen or b"follow_up accepted" not in seen:
            chunk = cli.stdout.read1(65536)  # the follow-up's turn, live, and its ack
            assert chunk, seen
            seen += chunk
        cli.stdin.close()  # end of input detaches
        assert cli.wait(30) == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        for stream in (cli.stdin, cli.stdout):
            if stream is not None:
                stream.close()
    assert agentd.status("wired")["state"] == "ready"


def test_cli_spawns_a_pty_agent(agentd: AgentDaemon) -> None:
    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tether", "agent", *args]
        return subprocess.run(
            command, env=agentd.env, capture_output=True, text=True, timeout=60, check=False
        )

    spawned = tether("spawn", "clip", "--pty", "--cols", "90", "--rows", "20", "--", "cat")
    assert spawned.returncode == 0, spawned.stderr
    assert "tether agent attach clip" in spawned.stdout
    status = agentd.status("clip")
    assert (status["kind"], status["pty"]["cols"], status["pty"]["rows"]) == ("pty", 90, 20)
    assert tether("spawn", "nocmd", "--pty").returncode == 2
    listed = tether("list")
    assert "clip" in listed.stdout
    assert tether("rm", "clip", "--force").returncode == 0
