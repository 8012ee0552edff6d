"""The child's wake-up pipe (``TETHER_WAKE_FD``): used alone when valid, fallbacks when not.

A child with a valid wake-up pipe holds no inotify instance and sleeps with no timeout,
so a control reaches it through the pipe or not at all (polling is forced on, so a
fallback would show as a finite timeout). Hostile or stale descriptors are refused and
the child watches its file instead; a writer that goes away leaves the child watching
too, and a new writer takes it over through the run's wake FIFO.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from child_helpers import Child
from tests.support.waits import wait_until
from tests.wake_probe import blocked_without_timer, inotify_instances

from tether.transports.wake import WAKE_ENV, WakePipe, open_wake_fifo

HELLO = [{"text": "hello"}, {"text": "again"}]


def _start_with_pipe(make_child: Callable[..., Child], **env: str) -> tuple[Child, WakePipe]:
    pipe = WakePipe()
    child = make_child(script=HELLO, env={**pipe.child_env(), **env}, pass_fds=pipe.pass_fds())
    child.start()
    pipe.started()
    return child, pipe


def _pid(child: Child) -> int:
    assert child.proc is not None
    return child.proc.pid


def _foreign_close(child: Child) -> int:
    """A control the child rejects without changing state (it names another run)."""
    return child.send("close", run="someone-else")


def test_a_valid_wake_fd_is_the_only_wake_up(make_child: Callable[..., Child]) -> None:
    child, pipe = _start_with_pipe(make_child, TETHER_FORCE_POLLING="1")
    pid = _pid(child)
    try:
        for _ in range(3):
            wait_until(lambda: blocked_without_timer(pid), "idle child asleep with no timeout")
            assert inotify_instances(pid) == 0
            seq = _foreign_close(child)
            pipe.wake()  # nothing else can wake it: no inotify, no timer
            assert child.ack(seq)["status"] == "rejected"
        seq = child.send("prompt", text="hi")
        pipe.wake()
        child.wait_for(lambda e: e["type"] == "turn-complete")
        seq = child.send("close")
        pipe.wake()
        assert child.ack(seq)["status"] == "accepted"
        code, _ = child.finish()
        assert code == 0
    finally:
        pipe.close()


@pytest.fixture
def hostile_fd(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, int | None]]:
    """(TETHER_WAKE_FD's value, the descriptor passed at that number or None)."""
    kind = request.param
    opened: list[int] = []
    if kind == "fifo":
        os.mkfifo(tmp_path / "named", 0o600)
        opened.append(os.open(tmp_path / "named", os.O_RDONLY | os.O_NONBLOCK))
    elif kind == "regular-file":
        (tmp_path / "plain").write_bytes(b"x" * 100)
        opened.append(os.open(tmp_path / "plain", os.O_RDONLY))
    elif kind == "write-end":
        read_fd, write_fd = os.pipe()
        os.close(read_fd)
        opened.append(write_fd)
    values = {"garbage": "3x", "closed": "77", "stdin": "0", "huge": "99999999999"}
    yield (values[kind], None) if kind in values else (str(opened[0]), opened[0])
    for fd in opened:
        os.close(fd)


@pytest.mark.parametrize(
    "hostile_fd",
    ["garbage", "closed", "stdin", "huge", "fifo", "regular-file", "write-end"],
    indirect=True,
)
def test_an_unusable_wake_fd_falls_back_to_watching(
    make_child: Callable[..., Child], hostile_fd: tuple[str, int | None]
) -> None:
    value, fd = hostile_fd
    child = make_child(script=HELLO, env={WAKE_ENV: value}, pass_fds=() if fd is None else (fd,))
    child.start()
    pid = _pid(child)
    wait_until(lambda: inotify_instances(pid) == 1, "the child watches its file instead")
    seq = _foreign_close(child)  # no wake-up byte: the watcher sees the line
    assert child.ack(seq)["status"] == "rejected"
    seq = child.send("close")
    assert child.ack(seq)["status"] == "accepted"
    code, _ = child.finish()
    assert code == 0
    assert "Traceback" not in child.stderr()


def test_a_gone_writer_leaves_the_child_watching_then_a_new_one_takes_over(
    make_child: Callable[..., Child],
) -> None:
    child, pipe = _start_with_pipe(make_child)
    pid = _pid(child)
    seq = _foreign_close(child)
    pipe.wake()
    assert child.ack(seq)["status"] == "rejected"
    pipe.close()  # the writer dies (a daemon SIGKILLed): the child reads EOF
    wait_until(lambda: inotify_instances(pid) == 1, "the child watches once its writer is gone")
    seq = _foreign_close(child)  # appended without a wake-up: the watcher sees it
    assert child.ack(seq)["status"] == "rejected"

    writers: list[WakePipe] = []

    def take_over() -> bool:
        writer = open_wake_fifo(child.root)
        if writer is not None:
            writers.append(writer)
        return writer is not None

    wait_until(take_over, "the child listens on its run's wake FIFO")
    writer = writers[0]
    try:
        seq = _foreign_close(child)
        writer.wake()
        assert child.ack(seq)["status"] == "rejected"
        wait_until(lambda: inotify_instances(pid) == 0, "the child drops its watcher again")
        seq = _foreign_close(child)
        writer.wake()
        assert child.ack(seq)["status"] == "rejected"
    finally:
        writer.close()  # this writer goes too: back to watching
    wait_until(lambda: inotify_instances(pid) == 1, "the child watches after the FIFO's EOF")
    seq = child.send("close")
    assert child.ack(seq)["status"] == "accepted"
    code, _ = child.finish()
    assert code == 0
