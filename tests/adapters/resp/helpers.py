"""Helpers for the RESP adapter tests: a real ``tether child --adapter resp`` over real files.

:class:`AdapterChild` owns a run directory with ``control.jsonl`` and ``events.jsonl``,
starts ``python -m tether child --adapter resp -- CMD...`` in it, appends control lines
with increasing seqs, and reads back event lines, each validated by
:class:`tether.wire.Receiver`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.event_files import Event, read_events, wait_for_event
from tests.support.waits import HANG_S, wait_until

ROOT = Path(__file__).resolve().parents[3]
AGENT = ROOT / "examples" / "bash-agent" / "agent.sh"
LIB = ROOT / "src" / "tether" / "framing" / "tether.sh"


# bash-agent's writer, verbatim from the spec (message-protocol-and-display.md).
SPEC_WRITER = r"""
util_write_msg() {
    local nfields=$# field byte_len _out="" _seg=""
    printf -v _out '*%s\r\n' "$nfields"
    for field in "$@"; do
        byte_len=$(LC_ALL=C printf '%s' "$field" | wc -c)
        byte_len=${byte_len//[[:space:]]/}
        printf -v _seg '$%s\r\n%s\r\n' "$byte_len" "$field"
        _out+="$_seg"
    done
    printf '%s' "$_out"
}
"""


class AdapterChild:
    """One ``tether child --adapter resp`` run in ``root``."""

    def __init__(
        self,
        root: Path,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        run: str = "r",
    ) -> None:
        self.root = root
        self.control = root / "control.jsonl"
        self.events_path = root / "events.jsonl"
        self.stderr_path = root / "child.stderr"
        self.command = list(command)
        self.run = run
        self.seq = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = dict(os.environ)
        self.env.update(
            {
                "FEN_WIRE_CONTROL_PATH": str(self.control),
                "FEN_WIRE_EVENT_PATH": str(self.events_path),
                "FEN_WIRE_RUN_ID": run,
                "PYTHONUNBUFFERED": "1",
            }
        )
        for name in ("TETHER_INBOX_PATH", "RUNEX_INBOX_PATH", "FEN_WIRE_DEADLINE"):
            self.env.pop(name, None)
        self.env.update(env or {})
        fd = os.open(self.control, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)

    def start(self, *flags: str) -> AdapterChild:
        argv = [sys.executable, "-m", "tether", "child", "--cwd", str(self.root), *flags]
        argv += ["--adapter", "resp", "--", *self.command]
        with self.stderr_path.open("ab") as err:
            self.proc = subprocess.Popen(
                argv, env=self.env, cwd=self.root, stdin=subprocess.DEVNULL, stdout=err, stderr=err
            )
        self.wait_for(lambda e: e["type"] == "ready")
        return self

    # -- controls ---------------------------------------------------------------------

    def send(self, kind: str, **fields: Any) -> int:
        self.seq += 1
        obj = {"v": 1, "seq": self.seq, "type": kind, "run": self.run}
        obj.update({k.replace("_", "-"): v for k, v in fields.items()})
        fd = os.open(self.control, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, json.dumps(obj).encode() + b"\n")
        finally:
            os.close(fd)
        return self.seq

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

    def wait_type(self, kind: str, *, count: int = 1) -> Event:
        return self.wait_for(lambda e: e["type"] == kind, count=count)

    def finish(self, timeout: float = HANG_S) -> tuple[int, list[Event]]:
        """Wait for the exit; check that ``exit`` is last and matches the exit code."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"child did not exit\n{self.describe()}")
        events = self.events()
        kinds = [e["type"] for e in events]
        assert kinds.count("exit") == 1, kinds
        assert kinds[-1] == "exit", kinds
        assert (code == 0) == (events[-1]["status"] == "done"), (code, events[-1])
        if events[-1]["status"] == "done":
            assert kinds[-2] == "result", kinds
        return code, events

    def program_pid(self) -> int:
        """The adapter's program: the child's own child (the leader of its group).

        Not the run's reaper (tether.reaper), the child's other child: it outlives the child
        by design, long under load (the group this test then waits for)."""
        assert self.proc is not None
        proc = self.proc

        def program() -> int | None:
            kids = [k for k in children_of(proc.pid) if not _is_reaper(k)]
            return kids[0] if kids else None

        pid: int = wait_until(program, "the program to start", proc=proc, describe=self.describe)
        return pid

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def describe(self) -> str:
        lines = [json.dumps(e)[:300] for e in self.events()]
        return "events:\n" + "\n".join(lines) + "\nstderr:\n" + self.stderr()


def _is_reaper(pid: int) -> bool:
    try:
        return b"tether.reaper" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()
        if len(fields) > 1 and fields[1] == str(pid).encode():
            out.append(int(name))
    return sorted(out)


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["type"] == kind]


def write_program(root: Path, name: str, body: str) -> list[str]:
    """A bash program in ``root`` (tether.sh and the spec's writer loaded); its argv."""
    path = root / name
    path.write_text(f'source "{LIB}"\n{SPEC_WRITER}\n{body}\n')
    return ["bash", str(path)]
