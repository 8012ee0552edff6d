"""How soon does a run whose agent CLI never answers its hand-shake fail?

For each adapter (Claude Code, Codex app-server, pi, Gemini CLI, ACP), ``tether.spawn``
runs the silent agent CLI TEST DOUBLE (``tests/doubles/silent_cli.py``: it reads stdin,
answers nothing, ignores SIGTERM) with the run's start timeout set to ``--start-s``, and
times spawn to the run's ``failed`` result. The floor is the start timeout itself: no
run can fail sooner, and the figure is how much the failure (the hand-shake's timer, the
CLI's end: SIGTERM ignored, so SIGKILL after the grace, the run's verdict) adds to it.

The test (tests/adapters/test_handshake.py) checks that the start timeout, not the old
fixed 60 s, ends such a run; this is its figure, which a shared machine's load moves.

Target: the failure comes within the start timeout + 2 s (the kill grace and the verdict).

Usage: ``.venv/bin/python bench/start_timeout.py [--start-s 2] [--rounds 3]
[--agent NAME]...``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.doubles import silent_cli  # noqa: E402

import tether  # noqa: E402
from tether.runtime.parent.outcome import Timeouts  # noqa: E402

AGENTS = ("claude", "codex", "pi", "gemini", "acp")
TARGET_EXTRA_S = 2.0


async def one(agent: str, start_s: float, root: Path) -> float:
    """Seconds from the spawn call to the failed result (``root`` exists)."""
    started = time.monotonic()
    handle = await tether.spawn(
        "hello",
        agent=agent,
        argv=silent_cli(pid_file=root / "cli.pid"),
        cwd=root,
        runs_root=root / "runs",
        db=root / "runs.db",
        timeouts=Timeouts(start_s=start_s),
    )
    result = await handle.wait()
    took = time.monotonic() - started
    if result.status != "failed" or "start timeout" not in (result.error or ""):
        raise SystemExit(f"{agent}: not failed by the start timeout: {result}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start-s", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agent", action="append", choices=AGENTS)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="tether-bench-start-") as tmp:
        for agent in args.agent or AGENTS:
            took = []
            for n in range(args.rounds):
                root = Path(tmp, f"{agent}-{n}")
                root.mkdir()
                took.append(asyncio.run(one(agent, args.start_s, root)))
            p50 = statistics.median(took)
            extra = p50 - args.start_s
            ok = extra <= TARGET_EXTRA_S
            failed |= not ok
            print(
                f"{agent:8} failed {p50:6.2f} s p50 (max {max(took):.2f}) after spawn; "
                f"floor {args.start_s:g} s (the start timeout): +{extra:.2f} s, "
                f"target <= +{TARGET_EXTRA_S:g} s {'ok' if ok else 'MISSED'}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
