"""The fleet check played from outside: a user's orchestrator against ``tether daemon``.

    flock /tmp/tether-bench.lock .venv/bin/python bench/fleet_outside.py [--agents 1000]
        [--clients 8] [--in-flight 4] [--sample 50] [--idle-seconds 30] [--attacks all]

Only public surfaces: the daemon is ``python -m tether daemon --foreground --socket S``
(SIGKILLed and started again the same way), the calls go over its socket through the
Python client (:class:`tether.daemon.rpc.aclient.AsyncDaemonClient`), a few through the CLI
(``tether agent status|steer|follow_up``); processes and memory are read from ``/proc``.

1. **spawn**: ``--agents`` built-in agents (scripted provider) from ``--clients``
   connections at once, ``--in-flight`` calls each, half as tether writes the call
   (``agent: "builtin"``), half as fno-agents' client does (``provider`` alone), while
   another client calls ``agent.list`` in a loop (no name twice, never more agents than
   were acked). Every ack is checked: ``ready``, a live pid, no pid twice.
2. **memory**: PSS (``/proc/PID/smaps_rollup``) of the daemon and every descendant.
3. **idle**: CPU and wake-ups of all of them over ``--idle-seconds``.
4. **latency**: ``agent.list`` and ``agent.status`` round trips with every agent alive,
   one client and ``--clients`` clients at once.
5. **turns**: ``--sample`` random agents driven through full turns each: ``agent.follow_up``
   and then ``agent.steer`` to the idle agent (each starts a turn), acked once each, the
   turn-complete read back over ``agent.events {follow}`` (every seq once, in order) and
   the turn's text checked; then ``agent.ask`` and its answer; a few through the CLI.
6. **attacks** (``--attacks``, a comma list or ``all``): ``same-name`` (many clients spawn
   one name: one wins, the rest ``agent_exists``), ``flood`` (700 clients at once, over the
   daemon's 512 connections: each answered or refused ``busy``), ``disconnect`` (a client that goes
   away mid-spawn: the name is listed or free, never stuck), ``kill-children`` (SIGKILL
   of random agents: each ends ``failed``, the rest answer), ``kill-spawning`` (SIGKILL of
   each new child the moment it shows up: every spawn answers ``spawn_failed``, its name
   then free, or ready and then ``failed``), ``kill-template`` (SIGKILL of
   the fork server's template mid-spawn: every spawn answers, as an agent or as
   ``spawn_failed``), ``limits`` (a daemon started under a low ``ulimit -n`` and a low
   RLIMIT_NPROC: spawns fail ``spawn_failed``, the daemon stays up and answers),
   ``restart-mid-spawn`` (SIGKILL of the daemon with 200 spawns under way, then a new one:
   every acked agent there with its pid, the other names honest rows or free, no process
   that no row names), ``restart-mid-stop`` (the same with stops under way: each of those
   agents ended ``done`` or still alive and listed once), ``restart`` (SIGKILL of the
   daemon with every agent alive, then of the next one while it re-adopts them, then a
   third: every agent re-adopted once, same pid, none orphaned, a turn still works).
7. **stop**: ``agent.stop`` of every agent, ``agent.rm`` of every row (then no process
   holds a run's file open, the daemon included), ``tether daemon`` stopped; then no
   process of the run left, no descriptor into its home, no socket, the daemon's lock free.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bytecode import compile_tether  # bench/bytecode.py: tether as installed
from fleet import memory_kib, ms  # bench/fleet.py: /proc readers
from fleet_attacks import ATTACKS, attacked, limited
from idle import idle_cpu  # bench/idle.py: CPU and wake-ups of processes
from outside import (  # bench/outside.py: the daemon, clients and /proc, as a user has them
    REPLY,
    SCRIPT_REPLIES,
    Daemon,
    Failed,
    check,
    check_clean,
    cli_turns,
    descendants,
    holding,
    listed,
    of_home,
    spawn_fleet,
    stop_all,
    timed,
    timed_many,
    turn,
    uptime,
)

# -- the run ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4, help="spawn calls per client")
    parser.add_argument("--sample", type=int, default=50, help="agents driven through a turn")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--statuses", type=int, default=1000)
    parser.add_argument("--attacks", default="all")
    parser.add_argument("--limits-run", help=argparse.SUPPRESS)  # see limited()
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_tether()
    if args.limits_run:
        print(asyncio.run(limited(args.root, args.limits_run)))
        return
    attacks = args.attacks.split(",") if args.attacks != "all" else ATTACKS
    print(f"load average before: {uptime()}; {os.cpu_count()} CPUs")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="tfo"))
    daemon = Daemon(root)
    try:
        asyncio.run(run(args, attacks, daemon))
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()
        for pid in of_home(root):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(root)], check=False)
    print(f"load average after: {uptime()}")


async def run(args: argparse.Namespace, attacks: list[str], daemon: Daemon) -> None:
    script = daemon.root / "replies.json"
    script.write_text(json.dumps([{"text": REPLY}] * SCRIPT_REPLIES))
    await asyncio.to_thread(daemon.start)
    names = [f"o{i:04d}" for i in range(args.agents)]
    pids = await measure(args, daemon, script, names)
    for attack in attacks:
        began = time.perf_counter()
        said, names = await attacked(attack, args, daemon, script, (names, pids))
        print(f"attack {attack}: {said} ({time.perf_counter() - began:.1f} s)")
    rest = sorted(await listed(daemon.socket))
    stopped = await stop_all(daemon.socket, rest, args.clients)
    check(not await listed(daemon.socket), "rows left after rm")
    runs = str(daemon.root / "home" / "runs")
    kept = [(p, t) for p, t in holding(daemon.root) if t.startswith(runs)]
    check(not kept, f"run files still open with every agent removed: {kept[:5]}")
    code = daemon.stop()
    check(code == 0, f"the daemon exited {code}")
    check_clean(daemon)
    print(f"stop: {len(rest)} stopped and removed in {stopped:.1f} s; nothing left")


async def measure(
    args: argparse.Namespace, daemon: Daemon, script: Path, names: list[str]
) -> dict[str, int]:
    """Steps 1-5 of the module docstring; name -> pid."""
    path = daemon.socket
    wall, spawns, pids, lists = await spawn_fleet(path, script, names, args.clients, args.in_flight)
    print(
        f"spawn: {len(names)} in {wall:.1f} s ({len(names) / wall:.0f}/s; {args.clients} clients "
        f"x {args.in_flight} in flight), agent.spawn {ms(spawns)}; agent.list while spawning "
        f"({len(lists)} calls) {ms(lists)}"
    )
    rows = await listed(path)
    check(sorted(rows) == names, f"{len(rows)} listed after the spawns")
    check(all(rows[n]["pid"] == pids[n] for n in names), "listed pids differ from the acks")

    await asyncio.sleep(3)  # each child builds its agent after `ready`
    procs = [daemon.pid, *descendants(daemon.pid)]
    pss = sum(memory_kib(pid)[1] for pid in procs)
    d_pss = memory_kib(daemon.pid)[1]
    print(
        f"memory: {len(procs)} processes (daemon and descendants), PSS {pss / 1024**2:.2f} GiB "
        f"in all ({(pss - d_pss) / len(names) / 1024:.2f} MiB an agent; daemon {d_pss / 1024:.0f}"
        " MiB) (target <= 4 GiB)"
    )
    got = (await asyncio.to_thread(idle_cpu, {"all": procs}, args.idle_seconds))["all"]
    print(
        f"idle {got.seconds:.0f} s: {got.cpu_pct:.3f}% of a core (schedstat {got.run_pct:.3f}%),"
        f" {got.wake_ups_per_s:.2f} wake-ups/s, all {len(procs)} processes (target <= 0.5%)"
    )
    one = await timed(path, "agent.list", [{}] * 20)
    many = await timed_many(path, "agent.list", [{}] * 40, args.clients)
    print(f"agent.list, {len(names)} agents: 1 client {ms(one)}; {args.clients} clients {ms(many)}")
    params = [{"name": random.choice(names)} for _ in range(args.statuses)]
    one = await timed(path, "agent.status", params)
    many = await timed_many(path, "agent.status", params, args.clients)
    print(f"agent.status: 1 client {ms(one)}; {args.clients} clients {ms(many)}")

    turns = [await turn(path, name) for name in random.sample(names, min(args.sample, len(names)))]
    await asyncio.to_thread(cli_turns, daemon, random.sample(names, 3))
    print(f"full turns: {len(turns)} agents (follow_up -> turn-complete, then ask) {ms(turns)}")
    return pids


if __name__ == "__main__":
    try:
        main()
    except Failed as exc:
        raise SystemExit(f"FAILED: {exc}") from None
