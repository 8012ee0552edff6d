"""The wake-up pipe's two ends, in one process (the child side runs for real elsewhere)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tether.transports.wake import (
    WAKE_ENV,
    WakePipe,
    drain,
    inherited_wake_fd,
    open_wake_fifo,
)


def test_a_pipe_read_end_and_a_socket_are_accepted_non_blocking() -> None:
    pipe = WakePipe()
    left, right = socket.socketpair()
    try:
        assert pipe.read_fd is not None
        assert pipe.child_env() == {WAKE_ENV: str(pipe.read_fd)}
        for fd in (pipe.read_fd, left.fileno()):
            assert inherited_wake_fd(str(fd)) == fd
            assert not os.get_blocking(fd)
            assert not os.get_inheritable(fd)
        assert drain(pipe.read_fd)  # nothing pending: still alive
    finally:
        pipe.close()
        left.close()
        right.close()


def test_refused_descriptors(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    plain = os.open(tmp_path / "f", os.O_RDONLY)
    fifo = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        for raw in (None, "", "x", "-1", "1", "2", "3.0", "99999999", str(write_fd)):
            assert inherited_wake_fd(raw) is None, raw
        assert inherited_wake_fd(str(plain)) is None
        assert inherited_wake_fd(str(fifo)) is None  # named: anyone may open it
        os.close(read_fd)
        assert inherited_wake_fd(str(read_fd)) is None  # closed
    finally:
        for fd in (write_fd, plain, fifo):
            os.close(fd)


def test_wake_never_blocks_and_eof_shows_the_writer_gone() -> None:
    pipe = WakePipe()
    assert pipe.read_fd is not None
    read_fd = os.dup(pipe.read_fd)
    os.set_blocking(read_fd, False)
    pipe.started()
    try:
        for _ in range(70_000):  # more than a pipe holds: the extra wake-ups are dropped
            pipe.wake()
        assert drain(read_fd)
        pipe.close()
        pipe.wake()  # closed: a no-op
        while drain(read_fd):
            pass  # the rest of the bytes, then EOF
    finally:
        os.close(read_fd)


def test_the_fifo_is_opened_only_when_a_child_listens(tmp_path: Path) -> None:
    assert open_wake_fifo(tmp_path) is None  # nothing there
    (tmp_path / "wake").write_text("")
    assert open_wake_fifo(tmp_path) is None  # a regular file is refused
    (tmp_path / "wake").unlink()
    os.symlink(tmp_path / "elsewhere", tmp_path / "wake")
    assert open_wake_fifo(tmp_path) is None  # never followed
    (tmp_path / "wake").unlink()
    os.mkfifo(tmp_path / "wake", 0o600)
    assert open_wake_fifo(tmp_path) is None  # no reader: ENXIO, never blocks
    reader = os.open(tmp_path / "wake", os.O_RDONLY | os.O_NONBLOCK)
    try:
        writer = open_wake_fifo(tmp_path)
        assert writer is not None
        writer.wake()
        assert os.read(reader, 10) == b"\1"
        writer.close()
        assert os.read(reader, 10) == b""  # EOF: the writer is gone
    finally:
        os.close(reader)
