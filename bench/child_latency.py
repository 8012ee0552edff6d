"""How fast does ``tether child`` answer? Control-to-ack latency by wake-up path, start-up.

Measures, in one run, against real ``python -m tether child`` processes:

- control-to-ack latency (p50/p99) with the child idle and in a turn, for each way a
  child learns of a control: ``wake-fd`` (the writer's byte on the inherited pipe,
  ``TETHER_WAKE_FD``: what the parent API and the daemon use), ``inotify`` (a foreign
  parent: no pipe), ``polling`` (no pipe, ``TETHER_FORCE_POLLING=1``: the spec's cadence,
  30 ms in a turn / 300 ms idle);
- the floors, measured the same way in the same run: ``pipe round trip`` (a byte to a
  bare Python echo process and a byte back, both blocking reads: the least two wake-ups
  cost) and ``pipe+file echo`` (a bare process woken by the pipe that reads the control
  line and appends an ack line, seen by this script exactly as the child's acks are: the
  least any child can do on this path);
- optionally with ``--alive N`` more idle children (woken by their pipes) alive meanwhile;
- spawn-to-ready time (p50/p90): from ``Popen`` to the ``ready`` line in the event file;
- idle CPU and wake-ups of an idle child per wake-up path (``bench/idle.py``'s measure).

Targets (issue 29): the wake-fd ack (the path tether's own parents use), idle and busy,
p50 <= 1.2x the pipe+file floor's p50 and p99 <= 2x its p99 (both floor runs, before and
after the children, pooled); an idle child under 0.1 % of a core.

This script sees every ack the same way (inotify on the event file, one ``poll`` per
wait), so the harness adds the same wake-up to every path and to the pipe+file floor.

Usage: ``.venv/bin/python bench/child_latency.py [--quick] [--samples N] [--alive N]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bytecode import compile_tether  # bench/bytecode.py: tether as installed
from idle import idle_cpu, settle

from tether.transports.wake import WakePipe
from tether.transports.watch import FileWatcher

PYTHON = sys.executable
MODES = ("wake-fd", "inotify", "polling")
TARGETS = {"ack_p50_ratio": 1.2, "ack_p99_ratio": 2.0, "idle_cpu_pct": 0.1}


# --- the harness's view of one run ----------------------------------------------------


class Run:
    """A run dir with a control file this script appends to and an event file it tails.

    ``mode`` says how the child is told: ``wake-fd`` passes a wake-up pipe and writes a
    byte after each line, ``polling`` forces polling, ``inotify`` does neither.
    """

    def __init__(self, root: Path, mode: str = "inotify", run: str = "bench") -> None:
        self.root = root
        self.control = root / "control.jsonl"
        self.events = root / "events.jsonl"
        self.run = run
        self.mode = mode
        self.seq = 0
        self.offset = 0
        self.buffer = b""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.control, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        self._control_fd = os.open(self.control, os.O_WRONLY | os.O_APPEND)
        self.wake = WakePipe() if mode == "wake-fd" else None
        self.watcher = FileWatcher()
        self.watcher.watch(self.events)
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("TETHER_FORCE_POLLING", None)
        env.update(
            FEN_WIRE_CONTROL_PATH=str(self.control),
            FEN_WIRE_EVENT_PATH=str(self.events),
            FEN_WIRE_RUN_ID=self.run,
        )
        if self.wake is not None:
            env.update(self.wake.child_env())
        if self.mode == "polling":
            env["TETHER_FORCE_POLLING"] = "1"
        return env

    def popen(self, argv: list[str]) -> None:
        fds = () if self.wake is None else self.wake.pass_fds()
        self.proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL, pass_fds=fds)
        if self.wake is not None:
            self.wake.started()

    def send(self, kind: str, **fields: Any) -> tuple[int, float]:
        """Append one control line with one write (then the wake-up byte, if any);
        returns (seq, time just before the write)."""
        self.seq += 1
        obj = {"v": 1, "seq": self.seq, "type": kind, "run": fields.pop("run", self.run)}
        obj.update(fields)
        data = json.dumps(obj).encode() + b"\n"
        start = time.perf_counter()
        os.write(self._control_fd, data)
        if self.wake is not None:
            self.wake.wake()
        return self.seq, start

    def lines(self) -> list[dict[str, Any]]:
        """New complete event lines since the last call."""
        try:
            with self.events.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in complete if line]

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> float:
        """Block until a new event line matches; returns when it was seen."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.lines():
                if match(event):
                    return time.perf_counter()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching event")
            self.watcher.wait_sync(min(left, 1.0))

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.watcher.close()
        os.close(self._control_fd)
        if self.wake is not None:
            self.wake.close()


def start_child(run: Run, script: list[dict[str, Any]]) -> float:
    """Start ``tether child``; returns the seconds from Popen to the ready line."""
    path = run.root / "script.json"
    path.write_text(json.dumps(script))
    argv = [PYTHON, "-m", "tether", "child", "--script", str(path), "--cwd", str(run.root)]
    start = time.perf_counter()
    run.popen(argv)
    seen = run.wait_for(lambda e: e["type"] == "ready")
    return seen - start


# --- the floors: bare processes on the same paths ---------------------------------------

PIPE_ECHO = "import os\nwhile os.read(0, 1): os.write(1, b'.')"
FILE_ECHO = """
import json, os, sys
control, wake, events = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd = os.open(control, os.O_RDONLY)
out = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(out, b'{"v":1,"seq":1,"type":"ready","run":"bench"}\\n')
offset, seq = 0, 1
while os.read(wake, 4096):
    data = os.pread(fd, 65536, offset)
    offset += len(data)
    for line in data.splitlines():
        seq += 1
        ref = json.loads(line)["seq"]
        ack = {"v": 1, "seq": seq, "type": "control-ack", "run": "bench", "ref": ref}
        os.write(out, json.dumps(ack | {"status": "accepted"}).encode() + b"\\n")
"""


def measure_pipe_floor(samples: int) -> list[float]:
    """A byte to a bare echo process and one back (both sides block in read)."""
    proc = subprocess.Popen(
        [PYTHON, "-c", PIPE_ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    out = []
    try:
        for _ in range(samples):
            time.sleep(random.uniform(0.002, 0.02))
            start = time.perf_counter()
            proc.stdin.write(b".")
            proc.stdout.read(1)
            out.append((time.perf_counter() - start) * 1000)
    finally:
        proc.stdin.close()
        proc.wait()
    return out


def start_file_echo(run: Run) -> None:
    """The pipe+file floor: a bare process woken by the pipe, acking in the event file."""
    assert run.wake is not None
    assert run.wake.read_fd is not None
    run.popen([PYTHON, "-c", FILE_ECHO, str(run.control), str(run.wake.read_fd), str(run.events)])
    run.wait_for(lambda e: e["type"] == "ready")


# --- measurements ---------------------------------------------------------------------


def ack_latencies(
    run: Run, samples: int, make: Callable[[], tuple[int, float]], gap_s: float = 0.02
) -> list[float]:
    """Send ``samples`` controls at random gaps (up to ``gap_s``); latencies in ms.

    For polling the gap spans its whole cadence, so a control lands at a random phase
    of its poll cycle (else every control would wait almost a full cycle).
    """
    out = []
    for _ in range(samples):
        time.sleep(random.uniform(0.002, gap_s))
        seq, start = make()
        seen = run.wait_for(lambda e, s=seq: e["type"] == "control-ack" and e.get("ref") == s)
        out.append((seen - start) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


LONG_STREAM = [{"text": ["chunk "] * 100_000, "chunk_ms": 5}]
HELLO = [{"text": "hello"}]
GAPS = {"polling": {"idle": 0.300, "busy": 0.030}}


def measure_mode(base: Path, mode: str, samples: int) -> dict[str, list[float]]:
    """Idle acks (foreign-run closes: rejected, the run stays ready), then busy acks
    (steers queued while the agent streams a long reply)."""
    results: dict[str, list[float]] = {}
    gaps = GAPS.get(mode, {})
    run = Run(base / f"{mode}-idle", mode)
    try:
        start_child(run, HELLO)
        assert run.proc is not None
        settle([run.proc.pid])  # its agent is built after `ready`: let that finish
        results["idle"] = ack_latencies(
            run, samples, lambda: run.send("close", run="someone-else"), gaps.get("idle", 0.02)
        )
    finally:
        run.close()
    run = Run(base / f"{mode}-busy", mode)
    try:
        start_child(run, LONG_STREAM)
        run.send("prompt", text="stream for a while")
        run.wait_for(lambda e: e["type"] == "assistant-text-delta")
        results["busy"] = ack_latencies(
            run, samples, lambda: run.send("steer", text="queued"), gaps.get("busy", 0.02)
        )
    finally:
        run.close()
    return results


def measure_floors(base: Path, samples: int, tag: str = "") -> dict[str, list[float]]:
    run = Run(base / f"file-echo{tag}", "wake-fd")
    try:
        start_file_echo(run)
        file_echo = ack_latencies(run, samples, lambda: run.send("close"))
    finally:
        run.close()
    return {"pipe round trip": measure_pipe_floor(samples), "pipe+file echo": file_echo}


def start_alive(base: Path, count: int) -> list[Run]:
    """``count`` idle children woken by their pipes, alive during the measurements."""
    runs = []
    for index in range(count):
        run = Run(base / f"alive{index}", "wake-fd")
        start_child(run, HELLO)
        runs.append(run)
    settle([run.proc.pid for run in runs if run.proc is not None])
    return runs


FLOORS = {
    "python -c pass": "pass",
    "python -c 'import asyncio, tether.wire'": "import asyncio, tether.wire",
}


def measure_ready(base: Path, spawns: int) -> tuple[list[float], dict[str, list[float]]]:
    """Spawn-to-ready of the child, interleaved with spawn-to-exit of two floors.

    The floors are what any Python child costs (the interpreter) and what any asyncio
    child speaking the wire costs (asyncio + msgspec + tether.wire imported): the
    child's own start-up is its time above the second floor.
    """
    times: list[float] = []
    floors: dict[str, list[float]] = {name: [] for name in FLOORS}
    for i in range(spawns):
        for name, code in FLOORS.items():
            start = time.perf_counter()
            subprocess.run([PYTHON, "-c", code], check=True)
            floors[name].append((time.perf_counter() - start) * 1000)
        run = Run(base / f"spawn{i}", "wake-fd")
        try:
            times.append(start_child(run, HELLO) * 1000)
            run.send("cancel")
            assert run.proc is not None
            run.proc.wait(10)
        finally:
            run.close()
    return times, floors


def measure_idle_cpu(base: Path, seconds: float) -> dict[str, tuple[float, float]]:
    """Each wake-up path's idle child: (% of a core, wake-ups per second), one window."""
    runs = {mode: Run(base / f"cpu-{mode}", mode) for mode in MODES}
    try:
        for run in runs.values():
            start_child(run, HELLO)
        pids = {mode: [run.proc.pid] for mode, run in runs.items() if run.proc is not None}
        settle([pid for group in pids.values() for pid in group])
        got = idle_cpu(pids, seconds)
        return {mode: (item.run_pct, item.wake_ups_per_s) for mode, item in got.items()}
    finally:
        for run in runs.values():
            run.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="acks per state and path")
    parser.add_argument("--spawns", type=int, default=10)
    parser.add_argument("--cpu-seconds", type=float, default=10.0)
    parser.add_argument("--alive", type=int, default=0, help="more idle children meanwhile")
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    args = parser.parse_args()
    compile_tether()
    if args.quick:
        args.samples, args.spawns, args.cpu_seconds = 40, 4, 3.0
    n, few = args.samples, max(20, args.samples // 5)  # idle polling: ~300 ms a sample
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        base = Path(tmp)
        alive = start_alive(base, args.alive)
        try:
            load = os.getloadavg()[0]
            floors = measure_floors(base, n)
            acks = {m: measure_mode(base, m, few if m == "polling" else n) for m in MODES}
            again = measure_floors(base, n, "2")
            floors |= {f"{k} (again)": v for k, v in again.items()}
            ready, spawn_floors = measure_ready(base, args.spawns)
            cpu = measure_idle_cpu(base, args.cpu_seconds)
        finally:
            for run in alive:
                run.close()
    report(load, args.alive, floors, acks, ready, spawn_floors, cpu)
    return 0


def report(  # noqa: PLR0917 - one call site, each argument a measurement
    load: float,
    alive: int,
    floors: dict[str, list[float]],
    acks: dict[str, dict[str, list[float]]],
    ready: list[float],
    spawn_floors: dict[str, list[float]],
    cpu: dict[str, tuple[float, float]],
) -> None:
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load:.2f} at the start"
        f" (now {os.getloadavg()[0]:.2f}); {alive} more idle children alive"
    )
    print()
    print("control-to-ack latency (ms)        p50      p90      p99      max     n")
    for name, values in floors.items():
        print(f"  floor  {name:<24}{_row(values)}")
    pooled = floors["pipe+file echo"] + floors.get("pipe+file echo (again)", [])
    floor, floor99 = pct(pooled, 0.5), pct(pooled, 0.99)
    for state in ("idle", "busy"):
        for mode in MODES:
            values = acks[mode][state]
            ratio = pct(values, 0.5) / floor
            print(f"  {state:<6} {mode:<24}{_row(values)}   p50 {ratio:.2f}x the pipe+file floor")
    print(f"  the pipe+file floor, both runs: p50 {floor:.3f} ms, p99 {floor99:.3f} ms")
    for state in ("idle", "busy"):
        values = acks["wake-fd"][state]
        p50, p99 = pct(values, 0.5), pct(values, 0.99)
        check(f"wake-fd ack p50 {state} / floor p50", p50 / floor, TARGETS["ack_p50_ratio"], "x")
        check(f"wake-fd ack p99 {state} / floor p99", p99 / floor99, TARGETS["ack_p99_ratio"], "x")
    print()
    print(
        f"spawn-to-ready (ms): p50 {pct(ready, 0.5):.1f}  p90 {pct(ready, 0.9):.1f}  "
        f"min {min(ready):.1f}  mean {statistics.fmean(ready):.1f}  n {len(ready)}"
    )
    for name, values in spawn_floors.items():
        print(f"  floor, spawn-to-exit of {name}: p50 {pct(values, 0.5):.1f}")
    print()
    for mode, (used, wakes) in cpu.items():
        print(f"idle child, {mode:<8}: {used:.4f} % of a core, {wakes:.2f} wake-ups/s")
    check("idle CPU (wake-fd)", cpu["wake-fd"][0], TARGETS["idle_cpu_pct"], "%")


def _row(values: list[float]) -> str:
    return (
        f"{pct(values, 0.5):7.3f}  {pct(values, 0.9):7.3f}  {pct(values, 0.99):7.3f}"
        f"  {max(values):7.2f}  {len(values):4d}"
    )


def check(name: str, value: float, target: float, unit: str) -> None:
    verdict = "ok" if value <= target else "MISSED"
    print(f"    target {name}: {value:.3f} {unit} <= {target} {unit}: {verdict}")


if __name__ == "__main__":
    sys.exit(main())
