"""What idle agents cost: CPU and wake-ups of a daemon and its idle children.

    .venv/bin/python bench/idle.py [--agents 100] [--seconds 30] [--parallel 8]

Starts a daemon in a private home, spawns ``--agents`` built-in agents (scripted
provider, ready and waiting for controls), lets them settle, then measures over
``--seconds``: CPU from ``/proc/PID/stat`` utime+stime (all threads) and wake-ups
(voluntary + involuntary context switches of every thread, ``/proc/PID/task/*/status``)
for the daemon, for all children together and for the daemon's helpers (every other
process of its home: the fork server's template), and how many inotify instances the
children hold. The floor is zero: an idle agent that waits on events only costs nothing,
so every wake-up counted is one too many (the load of other processes on the machine
does not change the wake-up counts; it stretches CPU figures a little).

Reusable (``bench/fleet.py``): :func:`idle_cpu` measures any set of pids the same way;
:func:`settle` waits until a set of processes stops working (children build their agent
after ``ready``); :func:`inotify_instances` counts one process's instances.

Target (issue 16 item 2): 1,000 idle agents cost < 0.5 % of a core, daemon and children
together; with N agents here that is < 0.0005 % x N.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's tests/
from tests.support.agentd import home_processes

CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_PCT_PER_1000 = 0.5


# -- the measurement (reusable) -------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds; 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15


def run_ns(pid: int) -> int:
    """Nanoseconds on a CPU of the live threads of ``pid`` (``/proc/PID/task/*/schedstat``):
    the precise figure next to :func:`cpu_seconds`, whose clock ticks are 10 ms coarse."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def wake_ups(pid: int) -> int:
    """Context switches of every thread of ``pid`` so far (each one a wake-up or a
    preemption); 0 once it is gone."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    total += int(line.split()[1])
    return total


def inotify_instances(pid: int) -> int:
    count = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
    return count


@dataclass(frozen=True, slots=True)
class IdleCpu:
    """One idle window over a set of processes."""

    seconds: float  # wall time measured
    cpu_pct: float  # percent of one core, all the processes together (utime + stime)
    wake_ups_per_s: float  # context switches per second, all together
    processes: int
    run_pct: float = 0.0  # the same from schedstat (ns precision, live threads only)

    def per_1000(self) -> float:
        """``cpu_pct`` scaled to 1,000 processes like these."""
        return self.cpu_pct / max(1, self.processes) * 1000


def idle_cpu(groups: dict[str, Sequence[int]], seconds: float) -> dict[str, IdleCpu]:
    """CPU and wake-ups of each named group of pids over the same ``seconds`` of wall time.

    Every group is sampled at the start and at the end of one window, so the groups are
    comparable (``{"daemon": [pid], "children": pids}``)."""
    before = {name: _sample(pids) for name, pids in groups.items()}
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    out = {}
    for name, pids in groups.items():
        cpu0, wake0, ns0 = before[name]
        cpu1, wake1, ns1 = _sample(pids)
        cpu, wakes, run = 100 * (cpu1 - cpu0) / wall, (wake1 - wake0) / wall, (ns1 - ns0) / wall
        out[name] = IdleCpu(wall, cpu, wakes, len(pids), run_pct=run / 1e7)
    return out


def _sample(pids: Sequence[int]) -> tuple[float, int, int]:
    cpu = sum(cpu_seconds(p) for p in pids)
    return cpu, sum(wake_ups(p) for p in pids), sum(run_ns(p) for p in pids)


# -- the fleet under a daemon -----------------------------------------------------------------


async def _remove(socket: Path, count: int) -> None:
    from tether.daemon.rpc.aclient import AsyncDaemonClient

    client = await AsyncDaemonClient.open(socket)
    gate = asyncio.Semaphore(64)  # the daemon caps the calls in flight per connection

    async def one(name: str) -> None:
        async with gate:
            await client.call("agent.rm", {"name": name, "force": True})

    try:
        await asyncio.gather(*(one(f"idle{i}") for i in range(count)))
    finally:
        await client.close()


def settle(pids: list[int], limit_s: float = 60.0) -> None:
    """Until the children stop working (their agent is built after `ready`)."""
    deadline = time.monotonic() + limit_s
    last = sum(cpu_seconds(p) for p in pids)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = sum(cpu_seconds(p) for p in pids)
        if now - last < 0.02:
            return
        last = now


def _kill_leftovers(home: Path) -> None:
    for pid, agent in home_processes(home).items():
        if agent:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--parallel", type=int, default=8, help="spawns at a time")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="tidle"))
    home, socket = root / "home", root / "rt" / "d.sock"
    env = dict(os.environ, TETHER_HOME=str(home), XDG_RUNTIME_DIR=str(root / "rt"))
    env["TETHER_SOCKET"] = str(socket)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "daemon", "--foreground", "--log-level", "WARNING"],
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        os.environ.update(TETHER_SOCKET=str(socket))
        began = time.perf_counter()
        from daemon import spawn_agents  # bench/daemon.py: the one way benches spawn idle agents

        pids = asyncio.run(spawn_agents(socket, root, args.agents, args.parallel))
        spawn_s = time.perf_counter() - began
        settle([daemon.pid, *pids])
        load = os.getloadavg()[0]
        helpers = [p for p, agent in home_processes(home).items() if not agent and p != daemon.pid]
        groups = {"daemon": [daemon.pid], "children": pids, "helpers": helpers}
        got = idle_cpu(groups, args.seconds)
        _report(args, got, pids, spawn_s, load)
        asyncio.run(_remove(socket, args.agents))
    finally:
        daemon.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(10)
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        _kill_leftovers(home)
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _report(
    args: argparse.Namespace, got: dict[str, IdleCpu], pids: list[int], spawn_s: float, load: float
) -> None:
    n = len(pids)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load:.2f} (1 min)")
    print(f"{n} idle agents under one daemon, spawned in {spawn_s:.1f} s; window {args.seconds} s")
    daemon, children, helpers = got["daemon"], got["children"], got["helpers"]
    for name, item in got.items():
        print(
            f"  {name:<8} {item.cpu_pct:7.3f} % of a core (utime+stime), {item.run_pct:8.4f} %"
            f" (schedstat)   {item.wake_ups_per_s:8.2f} wake-ups/s   ({item.processes} processes)"
        )
    total = daemon.cpu_pct + children.cpu_pct + helpers.cpu_pct
    precise = daemon.run_pct + children.run_pct + helpers.run_pct
    per_1000 = max(total, precise) / n * 1000
    print(
        f"  together {total:7.3f} % (utime+stime) / {precise:.4f} % (schedstat) of a core;"
        f" scaled to 1,000 agents {per_1000:.3f} %"
    )
    print(f"  children holding an inotify instance: {sum(inotify_instances(p) > 0 for p in pids)}")
    verdict = "ok" if per_1000 < TARGET_PCT_PER_1000 else "MISSED"
    print(f"    target < {TARGET_PCT_PER_1000} % of a core for 1,000 agents: {verdict}")


if __name__ == "__main__":
    sys.exit(main())
