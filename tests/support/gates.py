"""A tool that works until the test says so: a gate its shell command waits on.

Theory of operation: a :class:`ToolGate` is a FIFO that the test holds open for reading
and writing. The tool's command (:attr:`ToolGate.command`) reads one line from it: its
open never blocks (a writer exists), its ``read`` sleeps in the kernel until the test
calls :meth:`ToolGate.open`, which writes the line. A line written before the tool reads
waits in the pipe. So a test that acts inside a tool (a steer, a follow-up, a withdrawal)
decides when the tool ends by its own events, however slow the machine, and nothing
polls. The ``tool_gate`` fixture makes gates and closes them at teardown.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class ToolGate:
    """A FIFO at ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path, 0o600)
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    @property
    def command(self) -> str:
        """A shell command that returns once the gate opens (``sh`` or ``bash``)."""
        return f"read gate < {shlex.quote(str(self.path))}"

    def open(self) -> None:
        """Let one waiting (or the next) tool through."""
        assert self._fd is not None, "the gate is closed"
        os.write(self._fd, b"go\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@pytest.fixture
def tool_gate() -> Iterator[Callable[[Path], ToolGate]]:
    """Make a :class:`ToolGate` at a path; every one made is closed at teardown."""
    made: list[ToolGate] = []

    def make(path: Path) -> ToolGate:
        made.append(ToolGate(path))
        return made[-1]

    yield make
    for gate in made:
        gate.close()
