"""Parent benchmarks: a whole run's wall time, and a control's ack round trip.

    .venv/bin/python bench/parent.py [--runs 10]

Prints medians and ratios against baselines measured in the same run:

- run: ``tether.run`` on the real scripted child (spawn, ready, prompt, one turn, close,
  result, exit, index rows) vs. starting the same interpreter to import the child's modules
  and exit (the floor any child start pays).
- ack: ``await handle.steer()`` (append a control line, the child notices, acks, the parent
  notices) vs. a bare write+read of one line through a pipe between two processes.
- spawn (``--spawns N``, issue 16 item 1): spawn-to-``ready`` of built-in children forked from
  the fork server vs exec'd (``TETHER_FORKSERVER=0``), interleaved in the same run, through
  ``tether.spawn`` (the call to the ``ready`` event) and through a daemon (``agent.spawn``,
  which answers once the child is ready; idle agents; the daemon from ``bench/daemon.py``);
  then the RSS and PSS (``/proc/PID/smaps_rollup``) per child with all of them alive (the
  ``tether.spawn`` ones in a long scripted turn), the template's own PSS counted into the
  forked children's total. ``--spawns 0`` skips it.
- cold (``--cold N``, issue 16): N cold ``tether run`` processes (a fresh interpreter each,
  the scripted provider), each timed from just before its start to its run directory
  appearing (the parent's own start-up: interpreter, imports, arguments, the run directory)
  and on to the child's ``ready`` line in ``events.jsonl`` (the child's start: exec'd, a
  second interpreter). Interleaved with the floors: ``python -c pass`` (one interpreter
  start), ``python -c "import tether.cli.run, tether.runtime.parent.spawn"`` (the parent's
  imports) and ``python -c "import tether.cli.child, tether.agent.loop"`` (what any
  process must have imported before a child can say ``ready``, forked or exec'd). The
  files are polled every 0.5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bytecode import compile_tether  # bench/bytecode.py: tether as installed


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_run(runs: int, script: Path) -> tuple[float, float]:
    from tether.runtime.parent.sync import run

    baseline, full = [], []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import tether.cli.child, tether.agent.loop"], check=True
        )
        baseline.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = run("bench", provider="scripted", child_args=["--script", str(script)])
        full.append(time.perf_counter() - start)
        assert result.status == "done", result
    return _median_ms(full), _median_ms(baseline)


async def _acks(count: int, script: Path) -> list[float]:
    from tether.runtime.parent.spawn import spawn

    handle = await spawn(
        "bench", provider="scripted", child_args=["--script", str(script)], close_when_idle=False
    )
    samples = []
    async for update in handle.updates():
        if type(getattr(update, "event", None)).__name__ == "TurnStarted":
            break
    for _ in range(count):
        start = time.perf_counter()
        await handle.steer("x")
        samples.append(time.perf_counter() - start)
    await handle.aclose()
    return samples


def bench_pipe(count: int) -> list[float]:
    echo = "import sys\nfor line in sys.stdin: sys.stdout.write(line); sys.stdout.flush()"
    proc = subprocess.Popen(
        [sys.executable, "-c", echo], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        proc.stdin.write(b'{"type":"steer"}\n')
        proc.stdin.flush()
        proc.stdout.readline()
        samples.append(time.perf_counter() - start)
    proc.stdin.close()
    proc.wait()
    return samples


# -- spawn-to-ready, exec vs the fork server ------------------------------------------------

EXEC = {"TETHER_FORKSERVER": "0"}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def _memory_kib(pid: int) -> tuple[int, int]:
    """(Rss, Pss) of ``pid`` in KiB, from /proc/PID/smaps_rollup."""
    fields = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                fields[key] = int(rest.split()[0])
    return fields.get("Rss", 0), fields.get("Pss", 0)


def _spawn_line(where: str, forked: list[float], execd: list[float]) -> None:
    print(
        f"spawn-to-ready {where}: fork server p50 {_pct(forked, 0.5):.1f} ms p99 "
        f"{_pct(forked, 0.99):.1f} ms | exec p50 {_pct(execd, 0.5):.1f} ms p99 "
        f"{_pct(execd, 0.99):.1f} ms ({len(forked)} + {len(execd)} spawns, interleaved)"
    )


def _memory_line(where: str, forked: list[int], execd: list[int], template: int | None) -> None:
    def per_child(pids: list[int], extra: int = 0) -> str:
        rss = sum(_memory_kib(p)[0] for p in pids) / max(1, len(pids)) / 1024
        pss = (sum(_memory_kib(p)[1] for p in pids) + extra) / max(1, len(pids)) / 1024
        return f"RSS {rss:.1f} MiB, PSS {pss:.1f} MiB"

    shared = _memory_kib(template)[1] if template else 0
    print(
        f"memory per child {where}: forked {per_child(forked, shared)} (template PSS "
        f"{shared / 1024:.1f} MiB included) | exec'd {per_child(execd)}"
    )


async def _spawn_ready(script: Path, env: dict[str, str] | None) -> tuple[float, Any]:
    from tether.runtime.parent.spawn import spawn

    start = time.perf_counter()
    handle = await spawn(
        "bench",
        provider="scripted",
        child_args=["--script", str(script)],
        env=env,
        close_when_idle=False,
    )
    async for update in handle.updates():
        if type(getattr(update, "event", None)).__name__ == "Ready":
            break
    return time.perf_counter() - start, handle


async def _parent_spawns(count: int, script: Path) -> None:
    from tether.runtime.parent.forkserver import shared_forkserver

    server = shared_forkserver()
    assert await asyncio.to_thread(server.wait_ready), "the fork server's template did not start"
    forked: list[float] = []
    execd: list[float] = []
    handles: dict[str, list[Any]] = {"fork": [], "exec": []}
    for index in range(-1, count):  # -1: a first spawn each way, not counted
        for kind, env, samples in (("fork", None, forked), ("exec", EXEC, execd)):
            seconds, handle = await _spawn_ready(script, env)
            if index >= 0:
                samples.append(seconds)
            handles[kind].append(handle)
    await asyncio.sleep(1.0)  # let the children build their agents (after `ready`)
    _spawn_line("through tether.spawn", forked, execd)
    pids = {kind: [h.pid for h in group] for kind, group in handles.items()}
    _memory_line("(tether.spawn)", pids["fork"], pids["exec"], server.template_pid)
    for handle in handles["fork"] + handles["exec"]:
        await handle.cancel()
    await asyncio.gather(*(h.wait() for h in handles["fork"] + handles["exec"]))


def _daemon_spawns(count: int, script: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from daemon import start_servers, stop_servers
    from tether.daemon.rpc.client import DaemonClient

    root = Path(tempfile.mkdtemp(prefix="tether-bench-spawn-"))
    daemon, path, echo, _ = start_servers(root)
    forked: list[float] = []
    execd: list[float] = []
    pids: dict[str, list[int]] = {"fork": [], "exec": []}
    try:
        with DaemonClient.connect(path, timeout=60) as client:
            for index in range(-1, count):  # -1: a first spawn each way, not counted
                for kind, env, samples in (("fork", {}, forked), ("exec", EXEC, execd)):
                    params = {  # no task: an idle agent, as bench/fleet.py spawns them
                        "name": f"{kind}{index}",
                        "provider": "scripted",
                        "script": str(script),
                        "cwd": str(root),
                        "env": env,
                    }
                    start = time.perf_counter()
                    result = client.call("agent.spawn", params)
                    if index >= 0:
                        samples.append(time.perf_counter() - start)
                    pids[kind].append(result["pid"])
            time.sleep(1.0)
            template = _ppid(pids["fork"][0])
            _spawn_line("through the daemon (agent.spawn)", forked, execd)
            _memory_line("(daemon)", pids["fork"], pids["exec"], template)
    finally:
        stop_servers(root, daemon, echo)


def _poll(found: Any, deadline: float) -> Any:
    while time.perf_counter() < deadline:
        if (value := found()) is not None:
            return value
        time.sleep(0.0005)
    raise TimeoutError("the cold run did not get there in time")


def _cold_run(home: Path, script: Path) -> tuple[float, float]:
    """(start to run directory, start to ``ready``) of one cold ``tether run``, seconds."""
    runs = home / "runs"
    before = set(os.listdir(runs)) if runs.exists() else set()
    command = [sys.executable, "-m", "tether", "run", "--provider", "scripted"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*command, "--script", str(script), "cold"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def new_dir() -> Path | None:
        fresh = set(os.listdir(runs)) - before if runs.exists() else set()
        return runs / fresh.pop() if fresh else None

    def ready(events: Path) -> bool | None:
        with contextlib.suppress(OSError):
            if b'"type":"ready"' in events.read_bytes():
                return True
        return None

    deadline = start + 30
    run_dir = _poll(new_dir, deadline)
    at_dir = time.perf_counter() - start
    _poll(lambda: ready(run_dir / "events.jsonl"), deadline)
    at_ready = time.perf_counter() - start
    assert proc.wait(timeout=60) == 0
    return at_dir, at_ready


def _cold_runs(count: int, home: Path, script: Path) -> None:
    codes = {
        "pass": "pass",
        "imports": "import tether.cli.run, tether.runtime.parent.spawn",
        "child": "import tether.cli.child, tether.agent.loop",
    }
    floors: dict[str, list[float]] = {name: [] for name in codes}
    dirs: list[float] = []
    readies: list[float] = []
    for index in range(-1, count):  # -1: one uncounted round (the database, the caches)
        for name, code in codes.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            if index >= 0:
                floors[name].append(time.perf_counter() - start)
        at_dir, at_ready = _cold_run(home, script)
        if index >= 0:
            dirs.append(at_dir)
            readies.append(at_ready)
    child = [r - d for d, r in zip(dirs, readies, strict=True)]
    print(
        f"cold tether run, start to the child's ready: p50 {_pct(readies, 0.5):.1f} ms"
        f" (p99 {_pct(readies, 0.99):.1f}) = parent start-up to its run directory p50"
        f" {_pct(dirs, 0.5):.1f} ms + the exec'd child to ready p50 {_pct(child, 0.5):.1f} ms;"
        f" floors: python -c pass p50 {_pct(floors['pass'], 0.5):.1f} ms, the parent's"
        f" imports p50 {_pct(floors['imports'], 0.5):.1f} ms, an interpreter importing the"
        f" child's modules p50 {_pct(floors['child'], 0.5):.1f} ms ({count} runs, interleaved)"
    )


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--spawns", type=int, default=20, help="spawns each way (0: skip)")
    parser.add_argument("--only-spawns", action="store_true", help="skip the run and ack rounds")
    parser.add_argument("--cold", type=int, default=0, help="cold `tether run` starts (0: skip)")
    args = parser.parse_args()
    compile_tether()
    with tempfile.TemporaryDirectory() as home:
        os.environ["TETHER_HOME"] = home
        quick = Path(home) / "quick.json"
        quick.write_text(json.dumps([{"text": "ok"}]))
        slow = Path(home) / "slow.json"
        slow.write_text(json.dumps([{"text": "slow", "delay_ms": 60_000}]))
        print(f"load average {os.getloadavg()[0]:.1f}")
        if args.cold:
            _cold_runs(args.cold, Path(home), quick)
        if args.spawns:
            asyncio.run(_parent_spawns(args.spawns, slow))
            _daemon_spawns(args.spawns, slow)
        if args.only_spawns:
            return
        full, floor = bench_run(args.runs, quick)
        print(
            f"run: median {full:.1f} ms vs interpreter+imports {floor:.1f} ms "
            f"(ratio {full / floor:.2f})"
        )
        acks = asyncio.run(_acks(args.runs * 5, slow))
        pipe = bench_pipe(args.runs * 5)
        ack_ms, pipe_ms = _median_ms(acks), _median_ms(pipe)
        print(
            f"ack: median {ack_ms:.2f} ms vs pipe echo {pipe_ms:.3f} ms "
            f"(ratio {ack_ms / pipe_ms:.1f})"
        )


if __name__ == "__main__":
    main()
