"""What does the adapter cost? Start-up and control-to-ack, tether vs the bare CLI.

For each agent CLI that is installed (Claude Code and pi; the table :data:`CLIS` says
how to drive one directly), in the same run, against one scripted model server
(``tether.modelserver``), alternating direct and tether rounds:

- start-up: from starting the process to the CLI's first model call. Direct: spawning
  the CLI with its first message already on stdin, until its first ``message_start``
  stream event. Through tether: ``tether.spawn(task, agent=NAME)`` until the run's first
  ``llm-start`` event reaches the parent (``tether child`` start-up, the adapter, the CLI,
  the event file and the parent's tail all included). Also tether's spawn-to-``ready``.
- control round trip: direct, one control request the CLI answers at once (Claude Code:
  ``mcp_status`` -> ``control_response``; pi: ``get_state`` -> its ``response``)
  written to its stdin while it is idle, until the answer is read from its stdout;
  through tether, ``handle.follow_up(...)`` until its
  ``control-ack`` arrives, while a turn runs (the model call is held by the server).

Targets (issue 12): the adapter adds under 5 ms to an ack and under 10 % to start-up.

Usage: ``.venv/bin/python bench/agents.py [--rounds 3] [--acks 20]``
(the CLIs are looked up on PATH and in ``$TETHER_CI_CACHE/npm``; see ``.ci/setup``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import tether
from tether.modelserver import open_model_server
from tether.modelserver.clients import CLIENTS, PI_ARGS
from tether.runtime.adapters.claude import QUIET_ENV, command
from tether.runtime.adapters.registry import AGENTS, find_command
from tether.runtime.updates import RunEvent
from tether.wire import tag_of

HOLD_MS = 6000  # how long the server holds tether's model call while acks are timed


class Cli(NamedTuple):
    env: Callable[[str, Path], dict[str, str]]  # server URL, HOME -> the CLI's env (and files)
    argv: Callable[[str], list[str]]  # the program -> the direct command line
    user_line: Callable[[str], dict[str, Any]]
    is_first_call: Callable[[dict[str, Any]], bool]
    is_idle: Callable[[dict[str, Any]], bool]  # the first answer is complete
    control: Callable[[int], dict[str, Any]]  # a request answered at once
    is_answer: Callable[[dict[str, Any], int], bool]


AGENT_ARGS: dict[str, tuple[str, ...]] = {"pi": PI_ARGS}


def _pi_home(url: str, home: Path) -> dict[str, str]:
    """pi's provider config in ``home`` pointing at the server; its environment."""
    return CLIENTS["pi"].configure(url, home)[0]


CLIS: dict[str, Cli] = {
    "claude": Cli(
        env=lambda url, home: {
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "bench",
            "HOME": str(home),
            **QUIET_ENV,
        },
        argv=lambda program: command([program], []),
        user_line=lambda text: {"type": "user", "message": {"role": "user", "content": text}},
        is_first_call=lambda m: (
            m.get("type") == "stream_event" and m.get("event", {}).get("type") == "message_start"
        ),
        is_idle=lambda m: m.get("type") == "result",
        control=lambda n: {
            "type": "control_request",
            "request_id": f"b{n}",
            "request": {"subtype": "mcp_status"},
        },
        is_answer=lambda m, n: (
            m.get("type") == "control_response"
            and m.get("response", {}).get("request_id") == f"b{n}"
        ),
    ),
    "pi": Cli(
        env=_pi_home,
        argv=lambda program: [program, "--mode", "rpc", *PI_ARGS],
        user_line=lambda text: {"type": "prompt", "message": text},
        is_first_call=lambda m: (
            m.get("type") == "message_start" and m.get("message", {}).get("role") == "assistant"
        ),
        is_idle=lambda m: m.get("type") == "agent_end",
        control=lambda n: {"type": "get_state", "id": f"b{n}"},
        is_answer=lambda m, n: m.get("type") == "response" and m.get("id") == f"b{n}",
    ),
}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def direct(name: str, cli: Cli, url: str, home: Path, acks: int) -> dict[str, Any]:
    """The CLI alone: start-up to its first model call, then control round trips."""
    program = find_command(AGENTS[name], AGENTS[name].command[:1])
    assert program is not None
    env = {**os.environ, **cli.env(url, home)}
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *cli.argv(program[0]),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
        cwd=home,
        limit=16 * 1024 * 1024,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(cli.user_line("hello")).encode() + b"\n")

    async def until(predicate: Callable[[dict[str, Any]], bool]) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            if predicate(json.loads(line)):
                return
        raise RuntimeError(f"{name} ended early")

    await until(cli.is_first_call)
    first_call = time.perf_counter() - started
    await until(cli.is_idle)
    trips = []
    for n in range(acks):
        sent = time.perf_counter()
        proc.stdin.write(json.dumps(cli.control(n)).encode() + b"\n")
        await until(lambda m, n=n: cli.is_answer(m, n))
        trips.append(time.perf_counter() - sent)
    proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()
    return {"first_call": first_call, "trips": trips}


async def through_tether(name: str, cli: Cli, url: str, home: Path, acks: int) -> dict[str, Any]:
    """The same CLI as a tether child: start-up to the first llm-start, then acks."""
    runs = home / "runs"
    started = time.perf_counter()
    handle = await tether.spawn(
        "hello",
        agent=name,
        agent_args=list(AGENT_ARGS.get(name, ())),
        env=cli.env(url, home),
        cwd=home,
        runs_root=runs,
        db=home / "runs.db",
        close_when_idle=False,
    )
    spawned = time.perf_counter() - started
    ready = first_call = None
    updates = handle.updates()
    async for update in updates:
        if not isinstance(update, RunEvent):
            continue
        kind = tag_of(type(update.event))
        if kind == "ready" and ready is None:
            ready = time.perf_counter() - started
        if kind == "llm-start":
            first_call = time.perf_counter() - started
            break
    trips = []
    for n in range(acks):
        sent = time.perf_counter()
        ack = await handle.follow_up(f"later {n}")
        trips.append(time.perf_counter() - sent)
        assert ack.status == "accepted", ack
    await handle.cancel()
    await handle.wait()
    return {"spawn": spawned, "ready": ready, "first_call": first_call, "trips": trips}


async def bench(name: str, rounds: int, acks: int) -> dict[str, Any]:
    cli = CLIS[name]
    script = []
    for _ in range(rounds):
        script += [{"text": "hi"}, {"text": "held", "delay_ms": HOLD_MS}]
    out: dict[str, list[Any]] = {"direct": [], "tether": []}
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        open_model_server(script) as server,
    ):
        for r in range(rounds):
            home = Path(tmp) / f"r{r}"
            home.mkdir()
            # the script alternates: a direct reply, then tether's held one
            out["direct"].append(await direct(name, cli, server.url, home, acks))
            out["tether"].append(await through_tether(name, cli, server.url, home, acks))
    return out


def report(name: str, data: dict[str, Any]) -> dict[str, Any]:
    direct_start = [d["first_call"] for d in data["direct"]]
    tether_start = [t["first_call"] for t in data["tether"]]
    ready = [t["ready"] for t in data["tether"]]
    direct_trips = [x for d in data["direct"] for x in d["trips"]]
    tether_trips = [x for t in data["tether"] for x in t["trips"]]
    ratios = [t / d for t, d in zip(tether_start, direct_start, strict=True)]
    row = {
        "agent": name,
        "rounds": len(direct_start),
        "direct_start_ms": [ms(x) for x in direct_start],
        "tether_start_ms": [ms(x) for x in tether_start],
        "start_overhead_pct": round((statistics.median(ratios) - 1) * 100, 1),
        "tether_ready_ms_p50": ms(statistics.median(ready)),
        "direct_trip_ms_p50": ms(statistics.median(direct_trips)),
        "direct_trip_ms_p99": ms(pct(direct_trips, 0.99)),
        "tether_ack_ms_p50": ms(statistics.median(tether_trips)),
        "tether_ack_ms_p99": ms(pct(tether_trips, 0.99)),
    }
    row["ack_added_ms_p50"] = round(row["tether_ack_ms_p50"] - row["direct_trip_ms_p50"], 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="one JSON object per agent")
    parser.add_argument("--agent", action="append", choices=sorted(CLIS), help="only these")
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("TETHER_CI_CACHE", "/var/cache/tether-ci")
    os.environ.update(TETHER_CI_CACHE=env["TETHER_CI_CACHE"])
    for name in args.agent or list(CLIS):
        if find_command(AGENTS[name], AGENTS[name].command[:1]) is None:
            print(f"{name}: not installed, skipped", file=sys.stderr)
            continue
        row = report(name, asyncio.run(bench(name, args.rounds, args.acks)))
        if args.json:
            print(json.dumps(row))
            continue
        for key, value in row.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
