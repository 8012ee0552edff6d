"""The fleet check played from outside: a user's orchestrator against ``tether daemon``.

    flock /tmp/tether-bench.lock .venv/bin/python bench/fleet_outside.py [--agents 1000]
        [--clients 8] [--in-flight 4] [--sample 50] [--idle-seconds 30] [--attacks all]

Only public surfaces: the daemon is ``python -m tether daemon --foreground --socket S``
(SIGKILLed and started again the same way), the calls go over its socket through the
Python client (:class:`tether.daemon.aclient.AsyncDaemonClient`), a few through the CLI
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
   daemon with every agent alive, then a new one: every agent re-adopted once, same pid,
   none orphaned, a turn still works).
7. **stop**: ``agent.stop`` of every agent, ``agent.rm`` of every row (then no process
   holds a run's file open, the daemon included), ``tether daemon`` stopped; then no
   process of the run left, no descriptor into its home, no socket, the daemon's lock free.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet import memory_kib, ms, proc_state  # bench/fleet.py: /proc readers
from idle import idle_cpu  # bench/idle.py: CPU and wake-ups of processes

from daemon import daemon_env  # bench/daemon.py: a daemon kept under one directory
from tether.daemon.aclient import AsyncDaemonClient
from tether.daemon.client import DaemonCallError, DaemonConnectionLost
from tether.daemon.protocol import ErrorCode

REPLY = "ok"
SCRIPT_REPLIES = 64
LIVE = frozenset({"starting", "ready", "running", "closing", "finalizing"})


class Failed(Exception):
    """A check of the driver failed: what was seen."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise Failed(what)


def uptime() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the daemon, as a user starts it ---------------------------------------------------------


class Daemon:
    """``tether daemon --foreground`` under ``root``, started again after a SIGKILL."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = daemon_env(root)
        self.socket = Path(self.env["TETHER_SOCKET"])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, limit: tuple[str, int] | None = None) -> int:
        """Start it (under ``("nofile" | "nproc", N)``, soft and hard) until it answers."""

        def lower() -> None:
            if limit is not None:
                which = {"nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}
                resource.setrlimit(which[limit[0]], (limit[1], limit[1]))

        argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
        self.proc = subprocess.Popen(
            [*argv, "--socket", str(self.socket), "--log-level", "WARNING"],
            env=self.env,
            preexec_fn=lower if limit is not None else None,  # noqa: PLW1509
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, f"the daemon exited ({self.proc.returncode})")
            with contextlib.suppress(Exception):
                asyncio.run(call(self.socket, "daemon.status", None))
                return self.proc.pid
            time.sleep(0.05)
        raise Failed("the daemon did not answer within 60 s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> int:
        """SIGTERM, as ``tether daemon stop`` sends; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tether", "agent", "--socket", str(self.socket), *args]
        return subprocess.run(
            argv, check=False, env=self.env, capture_output=True, text=True, timeout=60
        )


async def call(path: Path, method: str, params: Any) -> Any:
    async with await AsyncDaemonClient.open(path) as client:
        return await client.call(method, params)


async def code_of(awaitable: Any) -> Any:
    """The call's result, or its error code (a string) when it failed."""
    try:
        return await awaitable
    except DaemonCallError as exc:
        return exc.code.value
    except DaemonConnectionLost:
        return "connection_lost"


# -- /proc -----------------------------------------------------------------------------------


def parents() -> dict[int, int]:
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
                found[int(entry)] = int(stat[1])
    return found


def descendants(pid: int) -> list[int]:
    tree = parents()
    found: list[int] = []
    frontier = {pid}
    while frontier:
        frontier = {p for p, parent in tree.items() if parent in frontier}
        found += frontier
    return found


def of_home(root: Path) -> list[int]:
    """Every live process whose environment names this run's home (daemon, template,
    agents: also those reparented away from the daemon)."""
    marker = f"TETHER_HOME={root / 'home'}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                if marker in environ and proc_state(int(entry)) not in (None, "Z"):
                    found.append(int(entry))
    return found


def holding(root: Path) -> list[tuple[int, str]]:
    """(pid, target) of every descriptor of another process that points into ``root``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{entry}/fd/{fd}")
                    if target.startswith(str(root)):
                        found.append((int(entry), target))
    return found


# -- spawning --------------------------------------------------------------------------------


def spawn_params(name: str, root: Path, script: Path, index: int) -> dict[str, Any]:
    base = {"name": name, "provider": "scripted", "script": str(script), "cwd": str(root)}
    return base if index % 2 else {**base, "agent": "builtin"}  # fno-agents' shape / tether's


async def spawn_fleet(
    path: Path, script: Path, names: list[str], clients: int, in_flight: int
) -> tuple[float, list[float], dict[str, int], list[float]]:
    """Spawn ``names`` from ``clients`` connections while another lists: (wall s, spawn
    latencies, name -> pid, list latencies)."""
    latencies: list[float] = []
    pids: dict[str, int] = {}
    lists: list[float] = []
    done = asyncio.Event()

    async def one(client: AsyncDaemonClient, gate: asyncio.Semaphore, index: int) -> None:
        async with gate:
            began = time.perf_counter()
            params = spawn_params(names[index], script.parent, script, index)
            result = await client.call("agent.spawn", params)
            latencies.append(time.perf_counter() - began)
            check(result["state"] == "ready", f"{names[index]} spawned as {result['state']}")
            pids[names[index]] = int(result["pid"])

    async def client_part(part: int) -> None:
        gate = asyncio.Semaphore(in_flight)
        async with await AsyncDaemonClient.open(path) as client:
            indexes = range(part, len(names), clients)
            await asyncio.gather(*(one(client, gate, i) for i in indexes))

    async def lister() -> None:
        async with await AsyncDaemonClient.open(path) as client:
            while not done.is_set():
                acked = len(pids)
                began = time.perf_counter()
                rows = (await client.call("agent.list", {}))["agents"]
                lists.append(time.perf_counter() - began)
                seen = [row["name"] for row in rows]
                check(len(seen) == len(set(seen)), "agent.list named an agent twice")
                check(len(seen) >= acked, f"agent.list showed {len(seen)} of {acked} acked")
                await asyncio.sleep(0.2)

    began = time.perf_counter()
    listing = asyncio.create_task(lister())
    try:
        await asyncio.gather(*(client_part(part) for part in range(clients)))
    finally:
        done.set()
        await listing
    wall = time.perf_counter() - began
    check(len(set(pids.values())) == len(pids), "two agents were acked with one pid")
    return wall, latencies, pids, lists


async def listed(path: Path) -> dict[str, dict[str, Any]]:
    rows = (await call(path, "agent.list", {}))["agents"]
    return {row["name"]: row for row in rows}


# -- latency ---------------------------------------------------------------------------------


async def timed(path: Path, method: str, params: list[Any]) -> list[float]:
    out = []
    async with await AsyncDaemonClient.open(path) as client:
        await client.call(method, params[0])  # warm-up
        for one in params:
            began = time.perf_counter()
            await client.call(method, one)
            out.append(time.perf_counter() - began)
    return out


async def timed_many(path: Path, method: str, params: list[Any], clients: int) -> list[float]:
    parts = await asyncio.gather(*(timed(path, method, params[i::clients]) for i in range(clients)))
    return [value for part in parts for value in part]


# -- a full turn -----------------------------------------------------------------------------


async def turn(path: Path, name: str) -> float:
    """One agent through full turns; the first one's wall time. See the module docstring (5)."""
    took = []
    async with await AsyncDaemonClient.open(path) as client:
        first = (await client.call("agent.status", {"name": name}))["turn"]
        for verb in ("agent.follow_up", "agent.steer"):  # on an idle agent each starts a turn
            after = int((await client.call("agent.status", {"name": name}))["last_seq"])
            began = time.perf_counter()
            ack = await client.call(verb, {"name": name, "text": "go"})
            check(ack["ack"] == "accepted" and ack["seq"] > 0, f"{verb} to {name}: {ack}")
            events = await follow_until(client, name, after, "turn-complete")
            took.append(time.perf_counter() - began)
            acks = [e for e in events if e["type"] == "control-ack" and e.get("ref") == ack["seq"]]
            check(len(acks) == 1, f"{name}: {len(acks)} control-acks of seq {ack['seq']}")
            check(events[-1].get("stop-reason") == "stop", f"{name}: turn ended {events[-1]}")
            check(any(REPLY in json.dumps(e) for e in events), f"{name}: no {REPLY!r} in the turn")
        answer = await client.call("agent.ask", {"name": name, "text": "again", "timeout_s": 60})
        check(answer.get("text") == REPLY and not answer["timed_out"], f"ask {name}: {answer}")
        status = await client.call("agent.status", {"name": name})
        check(status["state"] == "ready" and status["turn"] == first + 3, f"{name}: {status}")
    return took[0]


async def follow_until(
    client: AsyncDaemonClient, name: str, after: int, kind: str
) -> list[dict[str, Any]]:
    """``agent.events {follow}`` from ``after`` until an event of ``kind``: the events, each
    seq once and in order (the stream is stopped by answering an error)."""
    events: list[dict[str, Any]] = []
    seen = asyncio.Event()

    async def on_request(request: Any) -> Any:
        for event in request.params["events"]:
            last = events[-1]["seq"] if events else after
            check(event["seq"] == last + 1, f"{name}: seq {event['seq']} after {last}")
            events.append(event)
        if any(event["type"] == kind for event in request.params["events"]):
            seen.set()
            raise DaemonCallError(ErrorCode.INTERNAL, "seen")  # answered as an error: stop
        return {}

    client.on_request = on_request
    stream = asyncio.ensure_future(
        client.call("agent.events", {"name": name, "after_seq": after, "follow": True})
    )
    try:
        await asyncio.wait_for(seen.wait(), 60)
        await asyncio.wait_for(stream, 10)
    finally:
        client.on_request = None
    return events[: next(i for i, e in enumerate(events) if e["type"] == kind) + 1]


def cli_turns(daemon: Daemon, names: list[str]) -> None:
    """A few agents through the CLI: status, then follow_up."""
    for name in names:
        status = daemon.cli("status", name, "--json")
        check(status.returncode == 0, f"tether agent status {name}: {status.stderr}")
        check(json.loads(status.stdout)["state"] == "ready", f"{name}: {status.stdout}")
        follow = daemon.cli("follow-up", name, "go", "--json")
        check(follow.returncode == 0, f"tether agent follow-up {name}: {follow.stderr}")
        check(json.loads(follow.stdout)["ack"] == "accepted", f"{name}: {follow.stdout}")


# -- stop ------------------------------------------------------------------------------------


async def stop_all(path: Path, names: list[str], clients: int) -> float:
    async def part(chunk: list[str]) -> None:
        async with await AsyncDaemonClient.open(path) as client:
            gate = asyncio.Semaphore(8)

            async def one(name: str) -> None:
                async with gate:
                    result = await client.call("agent.stop", {"name": name, "timeout_s": 60})
                    check(
                        bool(result.get("ended") or result.get("already_exited")),
                        f"stop {name}: {result}",
                    )
                    removed = await client.call("agent.rm", {"name": name})
                    check(removed["removed"] is True, f"rm {name}: {removed}")

            await asyncio.gather(*(one(name) for name in chunk))

    began = time.perf_counter()
    await asyncio.gather(*(part(names[i::clients]) for i in range(clients)))
    return time.perf_counter() - began


def check_clean(daemon: Daemon) -> None:
    """After the daemon stopped: nothing of the run is left (module docstring, 7)."""
    left = of_home(daemon.root)
    check(not left, f"processes left: {[(pid, _described(pid)) for pid in left[:5]]}")
    held = holding(daemon.root)
    check(not held, f"descriptors into the home left: {held[:10]}")
    check(not daemon.socket.exists(), f"the socket {daemon.socket} is left")
    lock = daemon.socket.with_name(daemon.socket.name + ".lock")
    if lock.exists():
        with open(lock) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise Failed(f"the daemon's lock {lock} is still held") from None


# -- attacks ---------------------------------------------------------------------------------


async def same_name(path: Path, root: Path, script: Path, clients: int) -> str:
    async def one(index: int) -> Any:
        async with await AsyncDaemonClient.open(path) as client:
            params = spawn_params("contested", root, script, index)
            return await code_of(client.call("agent.spawn", params))

    results = await asyncio.gather(*(one(i) for i in range(clients * 4)))
    won = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if r == "agent_exists"]
    check(len(won) == 1 and len(lost) == len(results) - 1, f"same name: {results}")
    rows = [name for name in await listed(path) if name == "contested"]
    check(rows == ["contested"], f"contested listed {len(rows)} times")
    await call(path, "agent.rm", {"name": "contested", "force": True})
    return f"{len(results)} spawns of one name: 1 agent, {len(lost)} agent_exists"


async def disconnect(path: Path, root: Path, script: Path, count: int) -> str:
    """Clients that close their connection with spawns in flight, at spread-out moments
    (the daemon finishes what is in flight after a clean close; the first answer it cannot
    write loses the connection, with the other spawns still running)."""
    names = [f"gone{i:03d}" for i in range(count)]
    for first in range(0, count, 4):
        client = await AsyncDaemonClient.open(path)
        requests = [
            asyncio.ensure_future(
                client.call("agent.spawn", spawn_params(names[i], root, script, i))
            )
            for i in range(first, min(count, first + 4))
        ]
        await asyncio.sleep(0.002 * (first % 20))
        await client.close()
        for request in requests:
            with contextlib.suppress(Exception):
                await request
    # every name is now usable: listed (then removable) or free (then spawnable)
    deadline = time.monotonic() + 60
    rows = await listed(path)
    while any(rows.get(n, {}).get("state") == "starting" for n in names):
        check(time.monotonic() < deadline, "agents left starting")
        await asyncio.sleep(0.1)
        rows = await listed(path)
    kept = [n for n in names if n in rows]
    for index, name in enumerate(names):
        if name in rows:
            result = await call(path, "agent.rm", {"name": name, "force": True})
            check(result["removed"], f"rm {name}: {result}")
        result = await code_of(call(path, "agent.spawn", spawn_params(name, root, script, index)))
        check(isinstance(result, dict), f"{name} after its client went away: {result}")
        await call(path, "agent.rm", {"name": name, "force": True})
    return f"{count} clients gone mid-spawn: {len(kept)} agents spawned anyway, all names usable"


async def kill_children(path: Path, names: list[str], pids: dict[str, int], count: int) -> str:
    victims = random.sample(names, count)
    for name in victims:
        os.kill(pids[name], signal.SIGKILL)
    async with await AsyncDaemonClient.open(path) as client:
        for name in victims:
            deadline = time.monotonic() + 30
            while (state := (await client.call("agent.status", {"name": name}))["state"]) in LIVE:
                check(time.monotonic() < deadline, f"{name} still {state} after SIGKILL")
                await asyncio.sleep(0.05)
            check(state == "failed", f"{name} SIGKILLed ended {state}")
        for name in random.sample([n for n in names if n not in victims], 5):
            ack = await client.call("agent.follow_up", {"name": name, "text": "still there?"})
            check(ack["ack"] == "accepted", f"{name} after the kills: {ack}")
        for name in victims:
            await client.call("agent.rm", {"name": name})
    return f"{count} agents SIGKILLed: each ended failed, the others answer"


async def kill_template(path: Path, root: Path, script: Path, daemon_pid: int, count: int) -> str:
    """SIGKILL the fork server's template while ``count`` spawns are in flight."""
    names = [f"tk{i:03d}" for i in range(count)]
    async with await AsyncDaemonClient.open(path) as client:
        calls = [
            asyncio.ensure_future(
                code_of(client.call("agent.spawn", spawn_params(n, root, script, i)))
            )
            for i, n in enumerate(names)
        ]
        await asyncio.sleep(0.05)
        templates = [p for p in descendants(daemon_pid) if b"forkserver" in _cmdline(p)]
        for pid in templates:
            os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(*calls)
        failed = [r for r in results if r == "spawn_failed"]
        ok = [r for r in results if isinstance(r, dict)]
        check(len(ok) + len(failed) == count, f"spawns during the template's kill: {results}")
        rows = await listed(path)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, dict):
                check(rows[name]["state"] in LIVE, f"{name} acked but {rows[name]['state']}")
                ack = await client.call("agent.follow_up", {"name": name, "text": "alive?"})
                check(ack["ack"] == "accepted", f"{name}: {ack}")
            else:
                check(name not in rows, f"{name} refused but listed")
        after = await code_of(client.call("agent.spawn", spawn_params("tkafter", root, script, 0)))
        check(isinstance(after, dict), f"a spawn after the template's death: {after}")
        for name in [*(n for n, r in zip(names, results, strict=True) if isinstance(r, dict))]:
            await client.call("agent.rm", {"name": name, "force": True})
        await client.call("agent.rm", {"name": "tkafter", "force": True})
    said = f"{len(ok)} ready, {len(failed)} spawn_failed"
    return f"template SIGKILLed ({len(templates)}) under {count} spawns: {said}"


def _described(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return f"{stat[:120]} {_cmdline(pid)[:60]!r}"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def limits(root: Path, script: Path, limit: str) -> str:
    """A daemon of its own under a low limit (``nofile:N``: ``ulimit -n N``, soft and hard;
    ``nproc:N``: RLIMIT_NPROC, which binds only a user other than root: the daemon and
    this client then run as ``nobody``): spawn until refused; it stays up and answers."""
    kind = limit.partition(":")[0]
    sub = Path(tempfile.mkdtemp(dir="/tmp", prefix=f"tfl-{kind}-"))
    script = sub / script.name
    script.write_text(json.dumps([{"text": REPLY}] * SCRIPT_REPLIES))
    python, env = [sys.executable], dict(os.environ)
    if kind == "nproc" and os.geteuid() == 0:
        os.chown(sub, NOBODY, NOBODY)
        os.chown(script, NOBODY, NOBODY)
        python = as_nobody(env)
    argv = [*python, __file__, "--limits-run", limit, "--root", str(sub)]
    try:
        done = await asyncio.to_thread(
            subprocess.run, argv, check=False, capture_output=True, text=True, env=env, timeout=120
        )
    finally:
        shutil.rmtree(sub, ignore_errors=True)
    check(done.returncode == 0, f"under {limit}: {done.stdout[-2000:]} {done.stderr[-3000:]}")
    return done.stdout.strip()


def as_nobody(env: dict[str, str]) -> list[str]:
    """The command that runs this Python as ``nobody`` (``env`` gets the import path): the
    system's interpreter of the same version, since this one may sit in root's home."""
    import sysconfig

    import tether

    paths = [str(Path(tether.__file__).parents[1]), sysconfig.get_paths()["purelib"]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python]


NOBODY = 65534


async def limited(root: Path, limit: str) -> str:
    """``--limits-run``: the part of :func:`limits` under the limit (a process of its own)."""
    kind, _, value = limit.partition(":")
    daemon = Daemon(root)
    script = root / "replies.json"
    codes: dict[str, int] = {}
    ready = 0
    await asyncio.to_thread(daemon.start, (kind, int(value)))
    try:
        async with await AsyncDaemonClient.open(daemon.socket) as client:
            for index in range(400):
                params = spawn_params(f"l{index:03d}", root, script, index)
                result = await code_of(client.call("agent.spawn", params))
                if isinstance(result, dict):
                    ready += 1
                    continue
                codes[result] = codes.get(result, 0) + 1
                if sum(codes.values()) >= 5:
                    break
            check(set(codes) == {"spawn_failed"}, f"{ready} spawned, then {codes}")
            status = await client.call("daemon.status", None)
            check(status["pid"] == daemon.pid, f"daemon.status: {status}")
            rows = await client.call("agent.list", {})
            check(len(rows["agents"]) == ready, f"{len(rows['agents'])} listed, {ready} ready")
            names = [row["name"] for row in rows["agents"]]
            for name in random.sample(names, min(3, len(names))):
                ack = await client.call("agent.follow_up", {"name": name, "text": "there?"})
                check(ack["ack"] == "accepted", f"{name} under the limit: {ack}")
        await stop_all(daemon.socket, names, 1)
        check(daemon.stop() == 0, "the limited daemon's exit")
        check_clean(daemon)
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()
    return f"{limit}: {ready} spawned, then {codes}; the daemon answered and stopped cleanly"


async def restart(daemon: Daemon, names: list[str], pids: dict[str, int]) -> str:
    """SIGKILL the daemon with every agent alive, start another, check the re-adoption."""
    before = await listed(daemon.socket)
    daemon.kill()
    began = time.perf_counter()
    await asyncio.to_thread(daemon.start)
    took = time.perf_counter() - began
    report = await call(daemon.socket, "agent.reconcile", {})
    rows = await listed(daemon.socket)
    check(sorted(rows) == sorted(before), f"{len(rows)} agents after the restart, {len(before)}")
    moved = [n for n in names if rows[n]["pid"] != pids[n]]
    check(not moved, f"agents with another pid after the restart: {moved[:5]}")
    states = {n: rows[n]["state"] for n in names if rows[n]["state"] != "ready"}
    check(not states, f"not ready after the restart: {list(states.items())[:5]}")
    check(not report["orphaned"] and not report["errors"], f"reconcile: {report}")
    check(sorted(report["recovered"]) == sorted(names), "reconcile did not recover every agent")
    for name in names:
        check(proc_state(pids[name]) not in (None, "Z"), f"{name}'s process is gone")
    return f"daemon SIGKILLed with {len(names)} alive, back in {took:.1f} s, all re-adopted"


async def flood(path: Path, names: list[str], count: int) -> str:
    """``count`` clients at once (more than the daemon's 512 connections), each asking one
    agent's status: each is answered, or refused ``busy``; then it serves as before."""

    async def one(name: str) -> Any:
        try:
            client = await AsyncDaemonClient.open(path)
        except OSError as exc:
            return f"connect: {exc.strerror}"
        try:
            return await code_of(client.call("agent.status", {"name": name}))
        finally:
            await client.close()

    results = await asyncio.gather(*(one(random.choice(names)) for _ in range(count)))
    kinds: dict[str, int] = {}
    for result in results:
        kind = "answered" if isinstance(result, dict) else str(result)
        kinds[kind] = kinds.get(kind, 0) + 1
    check(set(kinds) <= {"answered", "busy"}, f"{count} clients at once: {kinds}")
    check((await call(path, "agent.status", {"name": names[0]}))["name"] == names[0], "after")
    return f"{count} clients at once: {kinds}"


async def kill_spawning(daemon: Daemon, script: Path, known: set[int], count: int) -> str:
    """SIGKILL every new child the moment it shows up, while ``count`` spawns are under way:
    each answers ``spawn_failed`` (its name then free) or ready (then it ends ``failed``)."""
    names = [f"ks{i:03d}" for i in range(count)]
    killed: set[int] = set()
    done = asyncio.Event()

    async def killer() -> None:
        while not done.is_set():
            helpers = {p for p in descendants(daemon.pid) if b"forkserver" in _cmdline(p)}
            for pid in set(descendants(daemon.pid)) - known - helpers - killed:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            await asyncio.sleep(0.002)

    async def one(client: AsyncDaemonClient, index: int) -> Any:
        params = spawn_params(names[index], script.parent, script, index)
        if index % 2:  # exec'd, slow to start: killed before `ready`
            child = [sys.executable, "-m", "tether", "child", "--provider", "scripted"]
            late = ["sh", "-c", 'sleep 0.3; exec "$@"', "sh", *child, "--script", str(script)]
            params = {"name": names[index], "argv": late, "cwd": str(script.parent)}
        return await code_of(client.call("agent.spawn", params))

    killing = asyncio.create_task(killer())
    async with await AsyncDaemonClient.open(daemon.socket) as client:
        results = await asyncio.gather(*(one(client, i) for i in range(count)))
    done.set()
    await killing
    refused = [n for n, r in zip(names, results, strict=True) if r == "spawn_failed"]
    acked = [n for n, r in zip(names, results, strict=True) if isinstance(r, dict)]
    check(len(refused) + len(acked) == count, f"spawns with their children killed: {results}")
    async with await AsyncDaemonClient.open(daemon.socket) as client:
        for name in acked:
            deadline = time.monotonic() + 30
            while (state := (await client.call("agent.status", {"name": name}))["state"]) in LIVE:
                check(time.monotonic() < deadline, f"{name} still {state}, its process killed")
                await asyncio.sleep(0.05)
            check(state == "failed", f"{name} killed ended {state}")
            await client.call("agent.rm", {"name": name})
        rows = await client.call("agent.list", {})
        listed_names = {row["name"] for row in rows["agents"]}
        check(not listed_names & set(refused), "a refused spawn is listed")
        for name in refused:
            result = await code_of(
                client.call("agent.spawn", spawn_params(name, script.parent, script, 0))
            )
            check(isinstance(result, dict), f"{name} after its refused spawn: {result}")
            await client.call("agent.rm", {"name": name, "force": True})
    await until_only_listed(daemon)
    said = f"{len(refused)} spawn_failed, {len(acked)} ready then failed"
    return f"{len(killed)} children SIGKILLed mid-spawn (half exec'd, slow): {said}"


async def restart_mid_spawn(daemon: Daemon, script: Path, count: int, clients: int) -> str:
    """SIGKILL the daemon with ``count`` spawns under way, start another: every acked agent
    is there with its pid, every other name is an honest row or free, and no process of
    the home is one that no row names (a child left at its gate)."""
    names = [f"rs{i:03d}" for i in range(count)]
    results: dict[str, Any] = {}
    quarter = asyncio.Event()

    async def part(chunk: list[str]) -> None:
        async with await AsyncDaemonClient.open(daemon.socket) as client:
            gate = asyncio.Semaphore(4)

            async def one(name: str) -> None:
                async with gate:
                    params = spawn_params(name, script.parent, script, len(results))
                    results[name] = await code_of(client.call("agent.spawn", params))
                    if len(results) >= count // 4:
                        quarter.set()

            await asyncio.gather(*(one(name) for name in chunk))

    spawning = asyncio.gather(*(part(names[i::clients]) for i in range(clients)))
    await quarter.wait()
    daemon.kill()
    await spawning
    await asyncio.to_thread(daemon.start)
    rows = await listed(daemon.socket)
    acked = {n: r for n, r in results.items() if isinstance(r, dict)}
    for name, result in acked.items():
        check(
            name in rows and rows[name]["pid"] == result["pid"], f"acked {name}: {rows.get(name)}"
        )
        check(rows[name]["state"] == "ready", f"acked {name} is {rows[name]['state']}")
    ours = [n for n in names if n in rows]
    states: dict[str, int] = {}
    for name in ours:
        states[rows[name]["state"]] = states.get(rows[name]["state"], 0) + 1
    free = [n for n in names if n not in rows]
    for name in free[:5]:
        result = await code_of(
            call(daemon.socket, "agent.spawn", spawn_params(name, script.parent, script, 0))
        )
        check(isinstance(result, dict), f"free name {name}: {result}")
        ours.append(name)
    await until_only_listed(daemon)
    for name in ours:
        await call(daemon.socket, "agent.rm", {"name": name, "force": True})
    return (
        f"daemon SIGKILLed under {count} spawns ({len(acked)} acked): {states} rows of them "
        f"after the restart, {len(free)} names free, no process unaccounted for"
    )


async def restart_mid_stop(daemon: Daemon, names: list[str], clients: int) -> tuple[str, list[str]]:
    """SIGKILL the daemon while ``names`` are being stopped, start another: each ended
    ``done`` (its process gone) or is alive and listed once with its pid; the survivors."""
    before = await listed(daemon.socket)
    answered = asyncio.Event()
    count = 0

    async def part(chunk: list[str]) -> None:
        nonlocal count
        async with await AsyncDaemonClient.open(daemon.socket) as client:
            for name in chunk:
                result = await code_of(client.call("agent.stop", {"name": name, "timeout_s": 60}))
                count += 1
                if count >= len(names) // 4:
                    answered.set()
                if result == "connection_lost":
                    return

    stopping = asyncio.gather(*(part(names[i::clients]) for i in range(clients)))
    await answered.wait()
    daemon.kill()
    await stopping
    await asyncio.to_thread(daemon.start)
    rows = await listed(daemon.socket)
    ended: dict[str, int] = {}
    for name in names:
        row = rows[name]
        if row["state"] in LIVE:
            check(row["pid"] == before[name]["pid"], f"{name} has another pid: {row}")
            check(
                proc_state(row["pid"]) not in (None, "Z"), f"{name} listed live, its process gone"
            )
        else:
            check(
                row["state"] == "done", f"{name} stopped ended {row['state']}: {row.get('error')}"
            )
            check(proc_state(row["pid"]) in (None, "Z"), f"{name} ended, its process alive")
            ended[name] = 1
    for name in ended:
        await call(daemon.socket, "agent.rm", {"name": name})
    await until_only_listed(daemon)
    alive = [n for n in names if n not in ended]
    said = f"daemon SIGKILLed stopping {len(names)}: {len(ended)} ended done, {len(alive)} alive"
    return said, alive


async def until_only_listed(daemon: Daemon, limit_s: float = 15.0) -> None:
    """Until every process of the home is the daemon, its template or a listed live
    agent's (a child whose starter died leaves its gate at once)."""
    deadline = time.monotonic() + limit_s
    while True:
        rows = await listed(daemon.socket)
        known = {row["pid"] for row in rows.values() if row["state"] in LIVE}
        helpers = set(descendants(daemon.pid))
        extra = [p for p in of_home(daemon.root) if p not in known | helpers | {daemon.pid}]
        if not extra:
            return
        check(
            time.monotonic() < deadline, f"unlisted processes: {[_described(p) for p in extra[:3]]}"
        )
        await asyncio.sleep(0.1)


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


ATTACKS = [
    "same-name",
    "flood",
    "disconnect",
    "kill-children",
    "kill-template",
    "kill-spawning",
    "limits",
    "restart-mid-spawn",
    "restart-mid-stop",
    "restart",
]


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


async def attacked(
    attack: str,
    args: argparse.Namespace,
    daemon: Daemon,
    script: Path,
    fleet: tuple[list[str], dict[str, int]],
) -> tuple[str, list[str]]:
    """One attack of the module docstring (6): what it found, the agents still alive."""
    path, root = daemon.socket, daemon.root
    names, pids = fleet
    if attack == "same-name":
        return await same_name(path, root, script, args.clients), names
    if attack == "disconnect":
        return await disconnect(path, root, script, 40), names
    if attack == "kill-children":
        said = await kill_children(path, names, pids, max(1, len(names) // 50))
        return said, [n for n in names if proc_state(pids[n]) not in (None, "Z")]
    if attack == "kill-template":
        return await kill_template(path, root, script, daemon.pid, 24), names
    if attack == "limits":
        said = [await limits(root, script, limit) for limit in ("nofile:200", "nproc:60")]
        return "; ".join(said), names
    if attack == "flood":
        return await flood(path, names, 700), names
    if attack == "kill-spawning":
        known = {daemon.pid, *(pids[n] for n in names)}
        return await kill_spawning(daemon, script, known, 30), names
    if attack == "restart-mid-spawn":
        return await restart_mid_spawn(daemon, script, 200, args.clients), names
    if attack == "restart-mid-stop":
        victims = random.sample(names, min(100, len(names) // 4))
        said, alive = await restart_mid_stop(daemon, victims, args.clients)
        return said, [n for n in names if n not in victims or n in alive]
    if attack == "restart":
        said = await restart(daemon, names, pids)
        await turn(path, random.choice(names))
        return said, names
    raise SystemExit(f"unknown attack {attack!r} (known: {', '.join(ATTACKS)})")


if __name__ == "__main__":
    try:
        main()
    except Failed as exc:
        raise SystemExit(f"FAILED: {exc}") from None
