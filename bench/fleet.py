"""A fleet of idle built-in agents under one daemon: spawn, memory, idle CPU, latency, stop.

    .venv/bin/python bench/fleet.py [--agents 1000] [--idle-seconds 30] [--sample 20]
        [--parallel 16] [--acks 500] [--ack-gap-ms 30] [--statuses 1000] [--lists 20]

One real daemon (``python -m tether daemon --foreground``) and, for the baselines, the bare
length-prefixed echo server of ``bench/daemon.py`` (whose helpers this script reuses).

1. **spawn**: ``--agents`` built-in agents (``tether child --provider scripted``) through
   ``agent.spawn``, ``--parallel`` calls in flight on one connection; each call answers
   once its child is ready. Reported: the total time, the rate, per-call p50/p99.
2. **memory**: RSS and PSS (``/proc/PID/smaps_rollup``: a page shared by k processes counts
   1/k in each, so the sum counts shared pages once) of every child and of the daemon; the
   daemon's growth per agent, and its descriptors and threads before and after.
3. **idle**: utime+stime (and schedstat run time) over ``--idle-seconds`` of the daemon and
   of all children, and their context switches (each is a wake-up: a timer per idle agent
   would show here), measured by ``bench/idle.py``.
4. **list/status**: ``agent.list`` (every agent, as the spec answers it) with 1 and 8
   clients, each in a closed loop, in rounds beside its floors: the echo server carrying
   a frame of the same size, and a bare server answering the daemon's own list reply (the
   client then decodes the same rows); ``agent.status`` of random agents, one client,
   beside the echo of a frame its size.
5. **control-to-ack**: ``agent.follow_up`` to random agents (the daemon answers when the
   child's ``control-ack`` is read back; the turn it starts then runs on its own), back to
   back (each ack competes with the turns started before it: the daemon's and children's
   CPU per follow-up and the daemon's wait for a CPU are printed) and ``--ack-gap-ms``
   apart, in rounds, each beside the whole path's four wake-ups on bare processes taken
   the same way (:func:`ack_latency`); other floors: one echo round trip (the socket), one
   pipe round trip to another process (a child's wake-up and answer), and the ack's two
   wake-ups on a bare pipe pair shaped like the real path (:func:`wake_floor`: the sender
   keeps running after its write, as the daemon does, so the answer must wake it on
   another CPU).
6. **full turns**: ``agent.ask`` to ``--sample`` random agents (follow-up -> the scripted
   answer), checked.
7. **stop**: ``agent.stop`` (close) of every agent, then checked: no child process left, no
   zombie, no registry row in a live state; then ``agent.rm`` of every row.

Targets: 1,000 agents spawned in <= 30 s, <= 4 GiB PSS in all, idle CPU (daemon and
children) <= 0.5% of a core (issue 16); with 1,000 agents alive the ack's p99 <= 1.5x the
four-wake-up floor's p99, back to back and spaced; ``agent.list`` p50 <= 2x its floor with
one client, <= 3x with 8 (issue 29).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from bytecode import compile_tether  # bench/bytecode.py: tether as installed
from idle import cpu_seconds, idle_cpu  # bench/idle.py: CPU and wake-ups of processes

from daemon import (  # bench/daemon.py: the servers, the round-trip client
    _answer_frame,
    _Client,
    _run,
    _start_canned,
    daemon_env,
    padded_frame,
    start_servers,
    stop_servers,
)
from tether.daemon.fleet.registry import AgentRegistry
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.protocol import encode_call
from tether.paths import db_path

REPLY = "ok"
SCRIPT_REPLIES = 64  # model calls each agent can answer (acks and the full turn use some)
LIVE_STATES = frozenset({"starting", "ready", "running", "closing", "finalizing"})


# -- /proc ----------------------------------------------------------------------------------------


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB; PSS is RSS where smaps_rollup is missing; (0, 0) once gone."""
    fields: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            fields[name] = int(rest.split()[0])
    if "Rss" not in fields:
        rss = status_field(pid, "VmRSS")
        return rss, rss
    return fields["Rss"], fields.get("Pss", fields["Rss"])


def status_field(pid: int, name: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def proc_state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def helpers_of(daemon_pid: int, agents: set[int]) -> list[int]:
    """The daemon's other descendants (its fork server), not its agents."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except (OSError, IndexError):
                continue
            parents[int(entry)] = int(stat[1])
    found: list[int] = []
    frontier = {daemon_pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += [pid for pid in frontier if pid not in agents]
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.2f} ms, p99 {pct(values, 0.99) * 1000:.2f} ms"


# -- the fleet ------------------------------------------------------------------------------------


def write_script(root: Path) -> Path:
    script = root / "fleet.json"
    replies = [{"text": REPLY} for _ in range(SCRIPT_REPLIES)]
    script.write_text(json.dumps(replies))
    return script


def spawn_params(name: str, root: Path, script: Path) -> dict[str, Any]:
    return {"name": name, "provider": "scripted", "script": str(script), "cwd": str(root)}


async def spawn_fleet(
    path: Path, root: Path, names: list[str], parallel: int
) -> tuple[float, list[float], dict[str, int]]:
    """Spawn ``names``: (wall seconds, per-call latencies, name -> pid)."""
    script = write_script(root)
    client = await AsyncDaemonClient.open(path)
    gate = asyncio.Semaphore(parallel)
    latencies: list[float] = []
    pids: dict[str, int] = {}

    async def one(name: str) -> None:
        async with gate:
            began = time.perf_counter()
            result = await client.call("agent.spawn", spawn_params(name, root, script))
            latencies.append(time.perf_counter() - began)
            if result["state"] != "ready":
                raise SystemExit(f"agent {name} spawned as {result['state']}")
            pids[name] = int(result["pid"])

    began = time.perf_counter()
    try:
        await asyncio.gather(*(one(name) for name in names))
    finally:
        await client.close()
    return time.perf_counter() - began, latencies, pids


async def timed_calls(path: Path, payloads: list[bytes]) -> list[float]:
    """One connection, one call at a time: each payload's round trip."""
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_unix_connection(_Client, str(path))
    await conn.round_trip(payloads[0])  # warm up
    out = []
    for payload in payloads:
        began = time.perf_counter()
        await conn.round_trip(payload)
        out.append(time.perf_counter() - began)
    assert conn.transport is not None
    conn.transport.close()
    return out


async def closed_loops(path: Path, payload: bytes, clients: int, calls: int) -> list[float]:
    """``clients`` connections, each calling ``calls`` times one call at a time, all at
    once: every call's round trip."""
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_unix_connection(_Client, str(path)))[1] for _ in range(clients)]
    for conn in conns:
        await conn.round_trip(payload)  # warm up
    out: list[float] = []

    async def drive(conn: _Client) -> None:
        for _ in range(calls):
            began = time.perf_counter()
            await conn.round_trip(payload)
            out.append(time.perf_counter() - began)

    await asyncio.gather(*(drive(conn) for conn in conns))
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    return out


async def answer_size(path: Path, method: str, params: Any) -> int:
    client = await AsyncDaemonClient.open(path)
    try:
        result = await client.call(method, params)
    finally:
        await client.close()
    return len(msgspec.json.encode(result))


async def acks(path: Path, names: list[str], count: int, gap_s: float = 0.0) -> list[float]:
    """``agent.follow_up`` to ``count`` random agents, one at a time (each starts a turn),
    ``gap_s`` apart (0: back to back, so each ack competes with the turns before it)."""
    client = await AsyncDaemonClient.open(path)
    out = []
    try:
        for index in range(count):
            if gap_s:
                await asyncio.sleep(gap_s)
            name = random.choice(names)
            began = time.perf_counter()
            result = await client.call("agent.follow_up", {"name": name, "text": f"ping {index}"})
            out.append(time.perf_counter() - began)
            if result["ack"] != "accepted":
                raise SystemExit(f"follow-up to {name}: {result}")
    finally:
        await client.close()
    return out


async def full_turns(path: Path, names: list[str]) -> list[float]:
    client = await AsyncDaemonClient.open(path)
    out = []
    try:
        for name in names:
            began = time.perf_counter()
            params = {"name": name, "text": "one more", "timeout_s": 60}
            answer = await client.call("agent.ask", params)
            out.append(time.perf_counter() - began)
            if answer.get("timed_out") or answer.get("text") != REPLY:
                raise SystemExit(f"ask {name}: {answer}")
    finally:
        await client.close()
    return out


async def stop_fleet(path: Path, names: list[str], parallel: int) -> float:
    client = await AsyncDaemonClient.open(path)
    gate = asyncio.Semaphore(parallel)

    async def one(name: str) -> None:
        async with gate:
            result = await client.call("agent.stop", {"name": name, "timeout_s": 30})
            if not result.get("ended") and not result.get("already_exited"):
                raise SystemExit(f"stop {name}: {result}")

    began = time.perf_counter()
    try:
        await asyncio.gather(*(one(name) for name in names))
    finally:
        await client.close()
    return time.perf_counter() - began


async def remove_fleet(path: Path, names: list[str], parallel: int) -> int:
    client = await AsyncDaemonClient.open(path)
    gate = asyncio.Semaphore(parallel)  # the daemon caps the calls in flight per connection

    async def one(name: str) -> bool:
        async with gate:
            return bool((await client.call("agent.rm", {"name": name})).get("removed"))

    try:
        return sum(await asyncio.gather(*(one(name) for name in names)))
    finally:
        await client.close()


def pipe_floor(samples: int) -> list[float]:
    """Round trips to another process over two pipes (a wake-up and an answer)."""
    return pinged("import os,sys\nwhile os.read(0,1):\n    os.write(1,b'x')\n", samples)


class Pinger:
    """A ``python -c code`` process that answers each byte on its stdin with one on its
    stdout, pinged one byte at a time (the floors' bare processes)."""

    def __init__(self, code: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.ping()  # warm up

    def ping(self, gap_s: float = 0.0, lead_us: float = 0.0) -> float:
        """``gap_s`` asleep, then one round trip, running ``lead_us`` of CPU after the ping
        before blocking on the answer; its seconds."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if gap_s:
            time.sleep(gap_s)
        began = time.perf_counter()
        self.proc.stdin.write(b"x")
        while time.perf_counter() < began + lead_us / 1e6:
            pass
        self.proc.stdout.read(1)
        return time.perf_counter() - began

    def pings(self, samples: int, gap_s: float = 0.0, lead_us: float = 0.0) -> list[float]:
        return [self.ping(gap_s, lead_us) for _ in range(samples)]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def pinged(code: str, samples: int, gap_s: float = 0.0, lead_us: float = 0.0) -> list[float]:
    """``samples`` round trips to a new :class:`Pinger` of ``code``."""
    pinger = Pinger(code)
    try:
        return pinger.pings(samples, gap_s, lead_us)
    finally:
        pinger.close()


# What a control costs each side between the wake-ups (measured: the daemon's work after it
# appended the line, the child's from its wake-up to its ack, then its scripted turn), for
# the wake-up floor below.
FLOOR_LEAD_US = 300
FLOOR_ANSWER_US = 400
FLOOR_TURN_US = 1500


# A bare process that busies the CPU for ``us`` microseconds (the floors' stand-in for work).
SPIN = (
    "import os,time\n"
    "def spin(us):\n"
    "    end=time.perf_counter()+us/1e6\n"
    "    while time.perf_counter()<end: pass\n"
)
# The child's stand-in: answers each byte after FLOOR_ANSWER_US, then runs a FLOOR_TURN_US turn.
FLOOR_ECHO = (
    SPIN
    + "while os.read(0,1):\n"
    + f"    spin({FLOOR_ANSWER_US}); os.write(1,b'x'); spin({FLOOR_TURN_US})\n"
)


def wake_floor(samples: int, gap_s: float) -> list[float]:
    """The ack's two wake-ups on a bare pipe pair, shaped like the real path: ping an idle
    process (``gap_s`` after the last answer, so the CPUs went idle) and keep running
    FLOOR_LEAD_US before blocking on its answer; it answers FLOOR_ANSWER_US of CPU after
    its wake-up and then runs FLOOR_TURN_US more (the turn). What is above the sum of the
    work (0.7 ms) is the machine waking a process on another CPU, twice."""
    return pinged(FLOOR_ECHO, samples, gap_s, FLOOR_LEAD_US)


# The daemon's own work on the path, around the child's (the relay below): from reading the
# request to the append and wake-up, and from reading the ack to the answer written.
FLOOR_REQUEST_US = 150
FLOOR_SETTLE_US = 200


def relay(request_us: int, lead_us: int, settle_us: int, echo: str) -> str:
    """The daemon's stand-in between the client and the child's (``echo``), working the
    given microseconds at each step."""
    return (
        SPIN + "import subprocess,sys\n"
        f"child=subprocess.Popen([sys.executable,'-c',{echo!r}],stdin=subprocess.PIPE,"
        "stdout=subprocess.PIPE,bufsize=0)\n"
        "while os.read(0,1):\n"
        f"    spin({request_us}); child.stdin.write(b'x'); spin({lead_us})\n"
        f"    child.stdout.read(1); spin({settle_us}); os.write(1,b'x')\n"
        "child.stdin.close(); child.wait()\n"
    )


# The four wake-ups with the work of the path (measured) between them, and with none.
RELAY = relay(FLOOR_REQUEST_US, FLOOR_LEAD_US, FLOOR_SETTLE_US, FLOOR_ECHO)
BARE_RELAY = relay(0, 0, 0, "import os\nwhile os.read(0,1):\n    os.write(1,b'x')\n")


# -- report ---------------------------------------------------------------------------------------


def uptime() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--settle-seconds", type=float, default=5.0)
    parser.add_argument("--sample", type=int, default=20, help="agents driven through a turn")
    parser.add_argument("--parallel", type=int, default=16, help="spawns in flight")
    parser.add_argument("--acks", type=int, default=500)
    parser.add_argument("--ack-gap-ms", type=float, default=30.0)
    parser.add_argument("--statuses", type=int, default=1000)
    parser.add_argument("--lists", type=int, default=20)
    args = parser.parse_args()
    compile_tether()
    n = args.agents
    print(f"load average before: {uptime()}; {os.cpu_count()} CPUs")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="tf"))
    daemon, path, echo, echo_path = start_servers(root)
    names = [f"a{i:04d}" for i in range(n)]
    try:
        run(args, root, daemon.pid, (path, echo_path), names)
    finally:
        stop_servers(root, daemon, echo)
    print(f"load average after: {uptime()}")


def run(
    args: argparse.Namespace,
    root: Path,
    daemon_pid: int,
    sockets: tuple[Path, Path],
    names: list[str],
) -> None:
    path, echo_path = sockets
    n = len(names)
    before_rss, _ = memory_kib(daemon_pid)
    before_fds, before_threads = fd_count(daemon_pid), status_field(daemon_pid, "Threads")

    wall, latencies, pids = _run(spawn_fleet(path, root, names, args.parallel))
    print(
        f"spawn: {n} agents in {wall:.1f} s ({n / wall:.1f}/s, {args.parallel} in flight; "
        f"target 1,000 in <= 30 s); agent.spawn {ms(latencies)}"
    )
    time.sleep(args.settle_seconds)  # each child builds its agent after `ready`

    children = [memory_kib(pid) for pid in pids.values()]
    rss = sum(r for r, _ in children)
    pss = sum(p for _, p in children)
    d_rss, d_pss = memory_kib(daemon_pid)
    d_fds, d_threads = fd_count(daemon_pid), status_field(daemon_pid, "Threads")
    helpers = helpers_of(daemon_pid, set(pids.values()))
    h_rss, h_pss = (sum(m[i] for m in map(memory_kib, helpers)) for i in (0, 1))
    total_gib = (pss + d_pss + h_pss) / 1024 / 1024
    print(
        f"memory: children RSS {rss / 1024:.0f} MiB ({rss / 1024 / n:.1f} MiB each), "
        f"PSS {pss / 1024:.0f} MiB ({pss / 1024 / n:.1f} MiB each); daemon RSS "
        f"{d_rss / 1024:.0f} MiB (+{(d_rss - before_rss) / n:.0f} KiB per agent), PSS "
        f"{d_pss / 1024:.0f} MiB; {len(helpers)} helper process(es) (the fork server) RSS "
        f"{h_rss / 1024:.0f} MiB, PSS {h_pss / 1024:.0f} MiB; all PSS {total_gib:.2f} GiB "
        "(target <= 4 GiB)"
    )
    print(
        f"daemon: {d_fds} descriptors ({before_fds} before: {(d_fds - before_fds) / n:.1f} "
        f"per agent; RLIMIT_NOFILE soft {status_limit(daemon_pid)}), "
        f"{d_threads} threads ({before_threads} before)"
    )

    idle(args, daemon_pid, list(pids.values()), helpers)
    latency(args, daemon_pid, sockets, names)
    ack_latency(args, (daemon_pid, list(pids.values())), path, echo_path, names)
    sample = random.sample(names, min(args.sample, n))
    turns = _run(full_turns(path, sample))
    print(f"full turns (agent.ask -> the scripted answer): {len(turns)} agents, {ms(turns)}")

    stop_s = _run(stop_fleet(path, names, args.parallel))
    left = {name: proc_state(pid) for name, pid in pids.items()}
    alive = [name for name, state in left.items() if state not in (None, "Z")]
    zombies = [name for name, state in left.items() if state == "Z"]
    registry = AgentRegistry.open(db_path(daemon_env(root)))
    try:
        live_rows = [row.name for row in registry.list() if row.state in LIVE_STATES]
    finally:
        registry.close()
    print(
        f"stop: {n} agents in {stop_s:.1f} s; left: {len(alive)} processes, {len(zombies)} "
        f"zombies, {len(live_rows)} registry rows in a live state"
    )
    removed = _run(remove_fleet(path, names, args.parallel))
    print(f"rm: {removed} of {n} rows removed")
    if alive or zombies or live_rows or removed != n:
        raise SystemExit(f"not clean: {alive[:5]} {zombies[:5]} {live_rows[:5]}")


def status_limit(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return f"{soft}, hard {hard}"
    except OSError:
        pass
    return "?"


def idle(args: argparse.Namespace, daemon_pid: int, pids: list[int], helpers: list[int]) -> None:
    groups = {"daemon": [daemon_pid, *helpers], "children": pids}
    got = idle_cpu(groups, args.idle_seconds)
    daemon, children = got["daemon"], got["children"]
    print(
        f"(the daemon's figures include its {len(helpers)} helper process(es))",
        end=" ",
    )
    print(
        f"idle {daemon.seconds:.0f} s: daemon {daemon.cpu_pct:.2f}% of a core "
        f"(schedstat {daemon.run_pct:.3f}%, {daemon.wake_ups_per_s:.2f} wake-ups/s), children "
        f"{children.cpu_pct:.2f}% in all (schedstat {children.run_pct:.3f}%, "
        f"{children.wake_ups_per_s:.2f} wake-ups/s in all); together "
        f"{daemon.cpu_pct + children.cpu_pct:.2f}% (target <= 0.5%)"
    )


LIST_CLIENTS = (1, 8)
ROUNDS = 5  # each measure is taken in rounds, its floor's beside it, so drifting load hits both


def latency(
    args: argparse.Namespace, daemon_pid: int, sockets: tuple[Path, Path], names: list[str]
) -> None:
    path, echo_path = sockets
    n = len(names)
    request = encode_call(1, "agent.list", {})
    answer = _answer_frame(path, request)
    list_size = len(answer)
    canned, canned_path = _start_canned(path.parent.parent, answer)
    try:
        for clients in LIST_CLIENTS:
            servers = {
                "daemon": (path, request),
                "echo": (echo_path, padded_frame(list_size)),
                "same reply": (canned_path, request),
            }
            calls = max(1, args.lists // clients)
            cpu = cpu_seconds(daemon_pid)
            got, ratios = in_rounds(servers, clients, calls)
            list_cpu = (cpu_seconds(daemon_pid) - cpu) / (ROUNDS * clients * (calls + 1)) * 1000
            print(
                f"agent.list, {n} agents ({list_size / 1024:.0f} KiB), {clients} client(s): "
                f"{ms(got['daemon'])}, daemon CPU {list_cpu:.2f} ms a call; floors: an echo of "
                f"a frame that size {ms(got['echo'])}, the same reply from a bare server "
                f"{ms(got['same reply'])}; p50 ratio {ratios['echo']:.2f}x the echo, "
                f"{ratios['same reply']:.2f}x the same reply (target <= "
                f"{2 if clients == 1 else 3}x)"
            )
    finally:
        canned.terminate()
        canned.wait(10)
    status_size = _run(answer_size(path, "agent.status", {"name": names[0]}))
    payloads = [
        encode_call(1, "agent.status", {"name": random.choice(names)}) for _ in range(args.statuses)
    ]
    cpu = cpu_seconds(daemon_pid)
    statuses = _run(timed_calls(path, payloads))
    status_cpu = (cpu_seconds(daemon_pid) - cpu) / (args.statuses + 1) * 1e6
    echo = _run(timed_calls(echo_path, [padded_frame(status_size)] * args.statuses))
    ratio = statistics.median(echo) / statistics.median(statuses)
    print(
        f"agent.status of random agents ({status_size} B): {ms(statuses)}, daemon CPU "
        f"{status_cpu:.0f} us a call; echo of a frame "
        f"that size: {ms(echo)}; rate ratio {ratio:.2f}x (p50 echo / p50 daemon)"
    )


def in_rounds(
    servers: dict[str, tuple[Path, bytes]], clients: int, calls: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """``calls`` round trips per client to each server, ``clients`` at once, in ROUNDS
    rounds (the servers' order turning): every latency per server, and each floor's
    median per-round ratio of p50s (the first server's over the floor's)."""
    names = list(servers)
    got: dict[str, list[float]] = {name: [] for name in names}
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(ROUNDS):
        for k in range(len(names)):
            name = names[(round_ + k) % len(names)]
            where, payload = servers[name]
            out = _run(closed_loops(where, payload, clients, calls))
            got[name] += out
            per_round[name].append(statistics.median(out))
    first = per_round[names[0]]
    ratios = {
        name: statistics.median(a / b for a, b in zip(first, per_round[name], strict=True))
        for name in names[1:]
    }
    return got, ratios


def schedstat(pid: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) of the main thread of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
    except OSError:
        return 0, 0
    return int(fields[0]), int(fields[1])


def ack_latency(
    args: argparse.Namespace,
    procs: tuple[int, list[int]],
    path: Path,
    echo_path: Path,
    names: list[str],
) -> None:
    """Control-to-ack back to back and spaced, in ROUNDS rounds, each beside the whole
    path's four wake-ups on bare processes taken the same way: this process pings a relay
    (the daemon), which works FLOOR_REQUEST_US, pings its own echo process (the child) and
    runs FLOOR_LEAD_US on; the echo answers after FLOOR_ANSWER_US and runs a FLOOR_TURN_US
    turn; the relay works FLOOR_SETTLE_US and answers (:data:`RELAY`: what is above the
    serial work, 0.75 ms, is the machine waking processes on idle CPUs, four times); and
    the same four wake-ups with no work between them (:data:`BARE_RELAY`)."""
    daemon_pid, children = procs
    count = min(args.acks, len(names) * (SCRIPT_REPLIES // 8))
    per = max(1, count // ROUNDS)
    gap = args.ack_gap_ms / 1000
    got: dict[str, list[float]] = {
        name: []
        for name in ("b2b", "spaced", "floor b2b", "floor spaced", "bare b2b", "bare spaced")
    }
    d_cpu = c_cpu = ran = waited = 0.0
    relay, bare = Pinger(RELAY), Pinger(BARE_RELAY)
    try:
        for _ in range(ROUNDS):
            cpu = cpu_seconds(daemon_pid), sum(map(cpu_seconds, children))
            ran0, waited0 = schedstat(daemon_pid)
            got["b2b"] += _run(acks(path, names, per))
            ran1, waited1 = schedstat(daemon_pid)
            ran, waited = ran + ran1 - ran0, waited + waited1 - waited0
            d_cpu += cpu_seconds(daemon_pid) - cpu[0]
            c_cpu += sum(map(cpu_seconds, children)) - cpu[1]
            got["floor b2b"] += relay.pings(per)
            got["spaced"] += _run(acks(path, names, per // 2, gap))
            got["floor spaced"] += relay.pings(per // 2, gap)
            got["bare b2b"] += bare.pings(per)
            got["bare spaced"] += bare.pings(per // 2, gap)
    finally:
        relay.close()
        bare.close()
    done = per * ROUNDS
    pipe = pipe_floor(count)
    woken = wake_floor(count // 2, gap)
    echo = _run(timed_calls(echo_path, [encode_call(1, "echo", None)] * count))
    print(
        f"control-to-ack (agent.follow_up to random agents, {done} back to back): "
        f"{ms(got['b2b'])}; per follow-up: daemon CPU {d_cpu / done * 1000:.2f} ms, children "
        f"CPU {c_cpu / done * 1000:.2f} ms (the turn it starts), the daemon's main thread ran "
        f"{ran / done / 1e6:.2f} ms and waited for a CPU {waited / done / 1e6:.2f} ms; the "
        f"four-wake-up floor back to back: {ms(got['floor b2b'])}"
    )
    print(
        f"control-to-ack, {len(got['spaced'])} spaced {args.ack_gap_ms:g} ms apart (the turn "
        f"before has ended): {ms(got['spaced'])}; the four-wake-up floor spaced the same: "
        f"{ms(got['floor spaced'])}"
    )
    for kind in ("b2b", "spaced"):
        ratio = pct(got[kind], 0.99) / pct(got[f"floor {kind}"], 0.99)
        bare_ratio = pct(got[kind], 0.99) / pct(got[f"bare {kind}"], 0.99)
        verdict = "met" if ratio <= 1.5 else "MISSED"
        print(
            f"  target: ack p99 <= 1.5x the four-wake-up floor's p99 ({kind}): {ratio:.2f}x "
            f"({verdict}); the four wake-ups with no work between them: {ms(got[f'bare {kind}'])}"
            f", {bare_ratio:.2f}x"
        )
    print(
        f"other floors: socket echo {ms(echo)}, pipe round trip {ms(pipe)}; the ack's two "
        f"wake-ups on a bare pipe pair, spaced (the sender runs {FLOOR_LEAD_US} us on, the "
        f"answer takes {FLOOR_ANSWER_US} us, then a {FLOOR_TURN_US} us turn): {ms(woken)}; the "
        f"four-wake-up floor: client -> relay -> echo -> relay -> client, the relay working "
        f"{FLOOR_REQUEST_US} + {FLOOR_SETTLE_US} us"
    )


if __name__ == "__main__":
    main()
