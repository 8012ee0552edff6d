"""Helpers for the child tests: a real ``python -m tether child`` over real files.

:class:`Child` owns a run directory with ``control.jsonl`` and ``events.jsonl``; it
appends control lines (stamping increasing seqs), starts the child, waits on event
lines, and checks every event line with :class:`tether.wire.Receiver` plus the
protocol's ordering invariants (:func:`check_invariants`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from tests.event_files import Event, read_events, wait_for_event
from tests.support.gates import ToolGate
from tests.support.waits import HANG_S, pid_alive

__all__ = ["Child", "check_invariants", "index_of", "pid_alive", "types"]

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class Child:
    """One child run in ``root`` (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        script: str | list[Any] | None = None,
        args: Iterable[str] = (),
        run: str = "r",
        env: dict[str, str] | None = None,
        create_control: bool = True,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.root = root
        self.control = root / "control.jsonl"
        self.events_path = root / "events.jsonl"
        self.stderr_path = root / "child.stderr"
        self.run = run
        self.seq = 0
        self.sent = 0  # control lines appended
        self.proc: subprocess.Popen[bytes] | None = None
        self.args = list(args)
        self.pass_fds = pass_fds  # inherited at the same numbers (a wake-up pipe, say)
        self._gate: ToolGate | None = None
        if script is not None:
            self.args += ["--script", str(self._script_path(script))]
        self.env = dict(os.environ)
        self.env.update(
            {
                "FEN_WIRE_CONTROL_PATH": str(self.control),
                "FEN_WIRE_EVENT_PATH": str(self.events_path),
                "FEN_WIRE_RUN_ID": run,
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.pop("TETHER_FORCE_POLLING", None)
        self.env.update(env or {})
        if create_control:
            fd = os.open(self.control, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)

    def _script_path(self, script: str | list[Any]) -> Path:
        if isinstance(script, str):
            return SCRIPTS / script
        path = self.root / "script.json"
        path.write_text(json.dumps(script))
        return path

    # -- the process ------------------------------------------------------------------

    def start(self, *, wait_ready: bool = True) -> Child:
        argv = [sys.executable, "-m", "tether", "child", "--cwd", str(self.root), *self.args]
        with self.stderr_path.open("ab") as err:
            self.proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                pass_fds=self.pass_fds,
            )
        if wait_ready:
            self.wait_for(lambda e: e["type"] == "ready")
        return self

    def wait_exit(self, timeout: float = HANG_S) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"child did not exit within {timeout}s\n{self.describe()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self._gate is not None:
            self._gate.close()

    def gate(self) -> ToolGate:
        """The gate ``ROOT/go`` (make it before the tool runs) that scripts/gated_tool.json's
        tool waits on until :meth:`ToolGate.open` (see tests/support/gates.py)."""
        if self._gate is None:
            self._gate = ToolGate(self.root / "go")
        return self._gate

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    # -- controls ---------------------------------------------------------------------

    def send(
        self, kind: str, *, seq: int | None = None, run: str | None = None, **fields: Any
    ) -> int:
        """Append one control line; returns its seq."""
        self.seq = self.seq + 1 if seq is None else seq
        obj = {"v": 1, "seq": self.seq, "type": kind, "run": self.run if run is None else run}
        obj.update({k.replace("_", "-"): v for k, v in fields.items()})
        self.send_raw(json.dumps(obj).encode() + b"\n")
        return self.seq

    def send_raw(self, data: bytes) -> None:
        """Append bytes with one write (count the lines as control lines)."""
        self.sent += data.count(b"\n")
        fd = os.open(self.control, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    # -- events -----------------------------------------------------------------------

    def events(self) -> list[Event]:
        """The complete event lines so far, each validated (type, envelope, seq order)."""
        return read_events(self.events_path)

    def wait_for(
        self, predicate: Callable[[Event], bool], *, count: int = 1, timeout: float = HANG_S
    ) -> Event:
        """Wait for the ``count``-th event that matches; returns it."""
        return wait_for_event(
            self.events_path,
            predicate,
            proc=self.proc,
            describe=self.describe,
            count=count,
            timeout=timeout,
        )

    def ack(self, ref: int) -> Event:
        return self.wait_for(lambda e: e["type"] == "control-ack" and e.get("ref") == ref)

    def describe(self) -> str:
        lines = [json.dumps(e)[:300] for e in self.events()]
        return "events:\n" + "\n".join(lines) + "\nstderr:\n" + self.stderr()

    def finish(self, timeout: float = HANG_S) -> tuple[int, list[Event]]:
        """Wait for the exit; check the invariants; return (exit code, events)."""
        code = self.wait_exit(timeout)
        events = self.events()
        check_invariants(events, code, controls=self.sent)
        return code, events


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def index_of(events: list[Event], predicate: Callable[[Event], bool]) -> int:
    for i, event in enumerate(events):
        if predicate(event):
            return i
    raise AssertionError("no such event")


def check_invariants(events: list[Event], code: int, *, controls: int | None = None) -> None:
    """The ordering rules every finished run obeys."""
    kinds = types(events)
    assert kinds.count("exit") == 1, kinds
    assert kinds[-1] == "exit", kinds
    exit_event = events[-1]
    assert (code == 0) == (exit_event["status"] == "done"), (code, exit_event)
    assert kinds.count("result") <= 1
    if exit_event["status"] == "done":
        assert kinds[-2] == "result", kinds[-3:]
    else:
        assert "result" not in kinds
    acks = [e for e in events if e["type"] == "control-ack"]
    refs = [a["ref"] for a in acks if "ref" in a]
    assert len(refs) == len(set(refs)), f"a control was acked twice: {refs}"
    if controls is not None:
        assert len(acks) == controls, f"{len(acks)} acks for {controls} control lines"
    ack_at = {
        e["ref"]: i for i, e in enumerate(events) if e["type"] == "control-ack" and "ref" in e
    }
    for i, event in enumerate(events):
        for ref in _refs(event):
            assert ack_at.get(ref, i) < i, f"{event['type']} for {ref} before its ack"
    turns = [e["turn"] for e in events if e["type"] == "turn-started"]
    assert turns == list(range(1, len(turns) + 1)), turns
    done = [e["turn"] for e in events if e["type"] == "turn-complete"]
    assert done == turns[: len(done)], (turns, done)


def _refs(event: Event) -> list[int]:
    if event["type"] in ("steering-injected", "follow-up-injected") and "ref" in event:
        return [event["ref"]]
    if event["type"] == "info":
        return list(event.get("refs", []))
    return []
