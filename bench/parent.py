"""Parent benchmarks: a whole run's wall time, and a control's ack round trip.

    .venv/bin/python bench/parent.py [--runs 10]

Prints medians and ratios against baselines measured in the same run:

- run: ``tether.run`` on the real scripted child (spawn, ready, prompt, one turn, close,
  result, exit, index rows) vs. starting the same interpreter to import the child's modules
  and exit (the floor any child start pays).
- ack: ``await handle.steer()`` (append a control line, the child notices, acks, the parent
  notices) vs. a bare write+read of one line through a pipe between two processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_run(runs: int, script: Path) -> tuple[float, float]:
    from tether.runtime.sync import run

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
    from tether.runtime.parent import spawn

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["TETHER_HOME"] = home
        quick = Path(home) / "quick.json"
        quick.write_text(json.dumps([{"text": "ok"}]))
        slow = Path(home) / "slow.json"
        slow.write_text(json.dumps([{"text": "slow", "delay_ms": 60_000}]))
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
