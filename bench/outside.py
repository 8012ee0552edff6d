"""What bench/fleet_outside.py drives the daemon with, as a user would (no tether internals
beyond its public client): the daemon as ``python -m tether daemon --foreground``, calls
over its socket through :class:`tether.daemon.rpc.aclient.AsyncDaemonClient` and the CLI,
processes and descriptors read from ``/proc``. Every check raises :class:`Failed`."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fleet import proc_state  # bench/fleet.py: /proc readers

from daemon import daemon_env  # bench/daemon.py: a daemon kept under one directory
from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.client import DaemonCallError, DaemonConnectionLost
from tether.daemon.rpc.protocol import ErrorCode

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

        self.proc = subprocess.Popen(
            self.argv(),
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

    def argv(self) -> list[str]:
        daemon = [sys.executable, "-m", "tether", "daemon", "--foreground"]
        return [*daemon, "--socket", str(self.socket), "--log-level", "WARNING"]

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
