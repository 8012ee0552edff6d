"""TEST DOUBLE: one hostile wire child program, many modes (not the real ``tether child``).

It reads the wire environment like a real child (``FEN_WIRE_*`` / ``TETHER_WIRE_*``,
``TETHER_RUN_DIR``, ``TETHER_INBOX_PATH``), follows the protocol with the simulated agent
of ``tests/parent/doubles/wire_child.py`` (it subclasses that double), and misbehaves at
one moment chosen by its mode. It keeps its OWN channel working (it holds its control
and event files open from the start), so a parent that is not fooled by the trap still
sees a normal run end.

    python hostile_child.py MODE [--arg TEXT] [--size N] [--count N] [--turn-ms MS]
    python hostile_child.py --list        # every mode with its help line

Adding a mode: write a function taking the :class:`Hostile` child and decorate it with
``@mode("name", WHEN, "help")``; WHEN is ``START`` (before ``ready``), ``READY`` (right
after ``ready``, before the first prompt is answered) or ``FINISH`` (instead of the normal
``result`` + ``exit done``). ``child.arg``/``size``/``count`` carry the options; the
helpers ``plant_symlink``, ``plant_fifo``, ``emit_line`` and ``result_naming`` do the
common work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parent" / "doubles"))

from wire_child import Child

from tether.wire import messages as m
from tether.wire.session import Internal, advance

START, READY, FINISH = "start", "ready", "finish"


@dataclass(frozen=True)
class Mode:
    name: str
    when: str
    help: str
    act: Callable[[Hostile], None]


MODES: dict[str, Mode] = {}


def mode(name: str, when: str, help: str) -> Callable[[Callable[[Hostile], None]], Mode]:
    def register(act: Callable[[Hostile], None]) -> Mode:
        MODES[name] = spec = Mode(name, when, help, act)
        return spec

    return register


class Hostile(Child):
    def __init__(self, spec: Mode, *, arg: str, size: int, count: int, turn_ms: int) -> None:
        super().__init__("normal", turn_ms)
        self.spec = spec
        self.arg = arg
        self.size = size
        self.count = count
        self.run_dir = Path(os.environ.get("TETHER_RUN_DIR") or os.path.dirname(self.event_path))
        self.inbox_path = Path(os.environ.get("TETHER_INBOX_PATH") or self.run_dir / "inbox.jsonl")
        # Our own channel survives whatever we do to the paths later.
        self.control_fd = os.open(self.control_path, os.O_RDONLY)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self.event_fd = os.open(self.event_path, flags, 0o600)

    # -- the channel through the fds held from the start ------------------------------

    def emit_line(self, line: bytes) -> None:
        data = memoryview(line + b"\n")
        while data:
            data = data[os.write(self.event_fd, data) :]

    def read_controls(self) -> list[bytes]:
        data = os.pread(self.control_fd, 1 << 20, self.offset)
        self.offset += len(data)
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return lines

    # -- the run with the mode's moment -------------------------------------------------

    def main(self) -> None:
        self.fire(START)
        self.state = advance(self.state, Internal.STARTED).next_state
        self.emit(m.Ready)
        self.fire(READY)
        self.serve()

    def finish(self) -> None:
        if self.spec.when == FINISH:
            self.spec.act(self)
            return
        super().finish()

    def fire(self, when: str) -> None:
        if self.spec.when == when:
            self.spec.act(self)

    # -- helpers for modes ----------------------------------------------------------------

    def next_info(self) -> bytes:
        """A valid ``info`` line, cheap enough to flood with."""
        self.sender.seq += 1
        obj = {"v": 1, "seq": self.sender.seq, "type": "info", "run": self.run, "summary": "x"}
        return json.dumps(obj, separators=(",", ":")).encode()

    def plant_symlink(self, name: str, target: str) -> Path:
        """Replace ``<run dir>/name`` with a symlink to ``target`` (atomically)."""
        path = self.run_dir / name
        tmp = self.run_dir / f".{name}.hostile"
        os.symlink(target, tmp)
        os.replace(tmp, path)
        return path

    def plant_fifo(self, name: str) -> Path:
        """Replace ``<run dir>/name`` with a FIFO nobody writes to (atomically)."""
        path = self.run_dir / name
        tmp = self.run_dir / f".{name}.hostile"
        os.mkfifo(tmp, 0o600)
        os.replace(tmp, path)
        return path

    def result_naming(self, path: str | os.PathLike[str]) -> None:
        """A truncated result whose ``final-text-path`` is ``path``, then ``exit done``."""
        self.emit(
            m.Result,
            stop_reason="end_turn",
            final_text="cut",
            truncated=True,
            final_text_path=str(path),
            usage=self.usage,
        )
        self.exit("done")


# -- final-text-path lies (items 1-2) ----------------------------------------------------


@mode("final-path-victim", FINISH, "final-text-path names --arg (any file of the user)")
def _final_victim(child: Hostile) -> None:
    child.result_naming(child.arg)


@mode("final-path-symlink", FINISH, "final-text-path names a symlink in the run dir to --arg")
def _final_symlink(child: Hostile) -> None:
    child.result_naming(child.plant_symlink("final-text-evil.txt", child.arg))


@mode("final-path-hardlink", FINISH, "final-text-path names a hard link in the run dir to --arg")
def _final_hardlink(child: Hostile) -> None:
    path = child.run_dir / "final-text-evil.txt"
    os.link(child.arg, path)
    child.result_naming(path)


@mode("final-path-fifo", FINISH, "final-text-path names a FIFO in the run dir")
def _final_fifo(child: Hostile) -> None:
    child.result_naming(child.plant_fifo("final-text-fifo.txt"))


@mode("final-path-events", FINISH, "final-text-path names the run's own events.jsonl")
def _final_events(child: Hostile) -> None:
    child.result_naming(child.event_path)


@mode("final-path-dotdot", FINISH, "final-text-path climbs out of the run dir to --arg via ..")
def _final_dotdot(child: Hostile) -> None:
    up = os.path.relpath(child.arg, child.run_dir)
    child.result_naming(f"{child.run_dir}/{up}")


# -- final-text-path in the child's TMPDIR (the run's tmp/) ------------------------------

FULL_TEXT = "the whole answer, " * 8000  # longer than one wire line


@mode("final-path-mkstemp", FINISH, "as the wire spec's child: the whole text in a mkstemp file")
def _final_mkstemp(child: Hostile) -> None:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="answer-")  # in $TMPDIR, 0600
    with os.fdopen(fd, "w") as out:
        out.write(FULL_TEXT)
    child.result_naming(path)


def _in_tmp(name: str) -> Path:
    return Path(os.environ["TMPDIR"]) / name


@mode("final-path-tmp-symlink", FINISH, "final-text-path names a symlink in TMPDIR to --arg")
def _final_tmp_symlink(child: Hostile) -> None:
    os.symlink(child.arg, _in_tmp("evil"))
    child.result_naming(_in_tmp("evil"))


@mode("final-path-tmp-hardlink", FINISH, "final-text-path names a hard link in TMPDIR to --arg")
def _final_tmp_hardlink(child: Hostile) -> None:
    os.link(child.arg, _in_tmp("evil"))
    child.result_naming(_in_tmp("evil"))


@mode("final-path-tmp-fifo", FINISH, "final-text-path names a FIFO in TMPDIR")
def _final_tmp_fifo(child: Hostile) -> None:
    os.mkfifo(_in_tmp("fifo"), 0o600)
    child.result_naming(_in_tmp("fifo"))


@mode("final-path-tmp-nested", FINISH, "final-text-path names a file in a folder of TMPDIR")
def _final_tmp_nested(child: Hostile) -> None:
    _in_tmp("deeper").mkdir()
    (_in_tmp("deeper") / "answer").write_text(FULL_TEXT)
    child.result_naming(_in_tmp("deeper") / "answer")


@mode("final-path-tmp-swapped", FINISH, "TMPDIR replaced by a symlink to --arg's folder")
def _final_tmp_swapped(child: Hostile) -> None:
    tmp = Path(os.environ["TMPDIR"])
    tmp.rename(tmp.with_name("tmp.moved"))
    os.symlink(Path(child.arg).parent, tmp)
    child.result_naming(tmp / Path(child.arg).name)


# -- files the parent writes or reads, replaced under it (item 3) --------------------------


@mode("control-symlink", READY, "replace control.jsonl with a symlink to --arg")
def _control_symlink(child: Hostile) -> None:
    child.plant_symlink("control.jsonl", child.arg)


@mode("control-fifo", READY, "replace control.jsonl with a FIFO")
def _control_fifo(child: Hostile) -> None:
    child.plant_fifo("control.jsonl")


@mode("final-tmp-symlink", READY, "plant final.txt.tmp as a symlink to --arg")
def _final_tmp_symlink(child: Hostile) -> None:
    child.plant_symlink("final.txt.tmp", child.arg)


@mode("final-tmp-fifo", READY, "plant final.txt.tmp as a FIFO")
def _final_tmp_fifo(child: Hostile) -> None:
    child.plant_fifo("final.txt.tmp")


@mode("final-symlink", READY, "plant final.txt as a symlink to --arg")
def _final_file_symlink(child: Hostile) -> None:
    child.plant_symlink("final.txt", child.arg)


@mode("inbox-fifo", READY, "replace inbox.jsonl with a FIFO")
def _inbox_fifo(child: Hostile) -> None:
    child.plant_fifo(child.inbox_path.name)


@mode("inbox-symlink", READY, "replace inbox.jsonl with a symlink to --arg")
def _inbox_symlink(child: Hostile) -> None:
    child.plant_symlink(child.inbox_path.name, child.arg)


@mode("events-fifo", READY, "replace events.jsonl with a FIFO (our own fd keeps working)")
def _events_fifo(child: Hostile) -> None:
    child.plant_fifo("events.jsonl")


@mode("stderr-fifo", READY, "replace stderr.log with a FIFO, then exit 3 without an exit event")
def _stderr_fifo(child: Hostile) -> None:
    child.plant_fifo("stderr.log")
    sys.exit(3)


# -- the event stream (items 4-6) -----------------------------------------------------------


@mode("huge-line", READY, "one event line of --size bytes, then a normal run")
def _huge_line(child: Hostile) -> None:
    head = b'{"v":1,"seq":0,"type":"info","run":"' + child.run.encode() + b'","summary":"'
    tail = b'"}\n'
    os.write(child.event_fd, head)
    left = max(0, child.size - len(head) - len(tail))
    chunk = b"x" * (1 << 20)
    while left > 0:
        left -= os.write(child.event_fd, chunk[: min(left, len(chunk))])
    os.write(child.event_fd, tail)


@mode("flood", READY, "--count info events as fast as possible (0: for ever), then a normal run")
def _flood(child: Hostile) -> None:
    sent = 0
    while child.count <= 0 or sent < child.count:
        batch = 1000 if child.count <= 0 else min(1000, child.count - sent)
        lines = [child.next_info() for _ in range(batch)]
        child.emit_line(b"\n".join(lines))
        sent += batch


@mode("flood-then-swap", READY, "--count info events, then events.jsonl replaced by an empty file")
def _flood_then_swap(child: Hostile) -> None:
    _flood.act(child)
    fresh = child.run_dir / ".events.hostile"
    fresh.write_bytes(b"")
    os.replace(fresh, child.run_dir / "events.jsonl")


@mode("inbox-flood", READY, "--count inbox lines of about 1 KiB, then a normal run")
def _inbox_flood(child: Hostile) -> None:
    fd = os.open(child.inbox_path, os.O_WRONLY | os.O_APPEND)
    try:
        pad = "y" * 1000
        for start in range(0, child.count, 500):
            lines = [
                json.dumps({"type": "progress", "text": f"{n} {pad}"})
                for n in range(start, min(start + 500, child.count))
            ]
            data = memoryview(("\n".join(lines) + "\n").encode())
            while data:
                data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


@mode("exit-no-result", FINISH, "exit done without a result")
def _exit_no_result(child: Hostile) -> None:
    child.exit("done")


@mode("double-result", FINISH, "two results with different texts, then exit done")
def _double_result(child: Hostile) -> None:
    for text in ("first", "second"):
        child.emit(m.Result, stop_reason="end_turn", final_text=text, usage=child.usage)
    child.exit("done")


@mode("report-deadline", START, "write the FEN_WIRE_DEADLINE it was given to the file --arg")
def _report_deadline(child: Hostile) -> None:
    Path(child.arg).write_text(os.environ.get("FEN_WIRE_DEADLINE", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", choices=sorted(MODES))
    parser.add_argument("--list", action="store_true", help="print every mode and exit")
    parser.add_argument("--arg", default="", help="a path or text the mode uses")
    parser.add_argument("--size", type=int, default=5_000_000, help="bytes (huge-line)")
    parser.add_argument("--count", type=int, default=100_000, help="events (flood)")
    parser.add_argument("--turn-ms", type=int, default=50)
    args = parser.parse_args()
    if args.list or args.mode is None:
        for spec in MODES.values():
            print(f"{spec.name:22} {spec.when:7} {spec.help}")
        return
    spec = MODES[args.mode]
    Hostile(spec, arg=args.arg, size=args.size, count=args.count, turn_ms=args.turn_ms).main()


if __name__ == "__main__":
    main()
