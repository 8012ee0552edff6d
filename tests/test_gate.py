"""The spawn gate (:class:`tether.procs.Gate`): a child runs only once its starter says so,
and the gate closes each of its descriptors once (a number closed twice may by then be
another thread's new descriptor: parallel ``agent.spawn`` calls lost children that way)."""

from __future__ import annotations

import os
import subprocess
import sys

from tether.procs import GATE_EXIT, Gate


def gated(gate: Gate, code: str) -> subprocess.Popen[bytes]:
    command = Gate.argv([sys.executable, "-c", code])
    popen = subprocess.Popen(command, stdin=gate.read_fd, close_fds=True)
    gate.started()
    return popen


def test_an_opened_gate_runs_the_command() -> None:
    gate = Gate()
    popen = gated(gate, "raise SystemExit(7)")
    gate.open()
    assert popen.wait(30) == 7


def test_a_closed_gate_runs_nothing() -> None:
    gate = Gate()
    popen = gated(gate, "raise SystemExit(7)")
    gate.close()
    assert popen.wait(30) == GATE_EXIT


def test_closing_again_leaves_a_reused_descriptor_alone() -> None:
    gate = Gate()
    numbers = {gate.read_fd, gate.write_fd}
    gate.started()
    gate.close()
    others = [os.pipe() for _ in range(4)]  # the lowest free numbers: the gate's old ones
    try:
        reused = {fd for pair in others for fd in pair} & numbers
        assert reused, "the test needs the gate's numbers to be reused"
        gate.started()
        gate.close()
        gate.open()
        for fd in reused:
            os.fstat(fd)  # still open
    finally:
        for read, write in others:
            os.close(read)
            os.close(write)
