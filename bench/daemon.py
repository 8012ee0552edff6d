"""Benchmark the daemon socket against a bare length-prefixed echo server, same run.

    .venv/bin/python bench/daemon.py [--seconds 1] [--repeats 5] [--idle-seconds 5] [--agents 200]

Both servers run as separate processes on the same event loop (uvloop when installed);
the same client code drives both: send one pre-encoded request frame, wait for one frame,
decode it with ``decode_message``. The echo server only frames (no JSON), so the ratio is
what JSON decoding, dispatch and encoding cost on top of the socket round trip.

The request is ``agent.status`` of a live agent (a ``tether child --provider scripted``
spawned first) when the daemon has ``agent.*``, else ``daemon.status`` (a cheap built-in
method: no I/O, a small dict). The script says which one it used. Idle CPU is measured on
the daemon process with no clients, with 200 connected clients each holding a registered
channel, and with ``--agents`` idle agents (real ``tether child`` processes, ready and
waiting for controls): the daemon's CPU, and separately the children's summed CPU and RSS.

The echo answers each request with a frame as large as the daemon's answer (the client
then reads and decodes as much from both); ``echo-req`` (the request's own small frame
sent back) is reported beside it, and ``canned``: the same bare server answering every
request with the daemon's own answer frame, captured once (the client then decodes exactly
what it decodes from the daemon, so daemon/canned is the daemon's own work alone).

Targets: ``agent.status`` p99 with 100 clients <= 1.25x the echo's p99 (issue 29; the
median of per-run ratios); >= 0.8x the echo rate with one client (issue 16); idle CPU < 2%
of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.daemon.rpc.aclient import AsyncDaemonClient
from tether.daemon.rpc.protocol import (
    PREFIX_BYTES,
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    decode_message,
    encode_call,
    encode_frame,
)
from tether.wire.needdata import NEED_DATA

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the echo server (run as a child process) -----------------------------------------------------


class _Echo(asyncio.Protocol):
    def __init__(self, answer: bytes | None = None) -> None:
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._answer = answer  # canned: this whole frame for every request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        frame = self._decoder.single(data)  # the daemon's fast path too
        if frame is not None:
            self._transport.write(self._answer or encode_frame(frame))
            return
        self._decoder.feed(data)
        while True:
            frame = self._decoder.next_frame()
            if frame is NEED_DATA or isinstance(frame, ProtocolError):
                return
            self._transport.write(self._answer or encode_frame(frame))


async def _echo_main(path: str, answer: bytes | None = None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(lambda: _Echo(answer), path)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


# -- clients ---------------------------------------------------------------------------------------


class _Client(asyncio.Protocol):
    def __init__(self) -> None:
        self._decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Request | Response | ProtocolError] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        while True:
            frame = self._decoder.next_frame()
            if frame is NEED_DATA:
                return
            message = frame if isinstance(frame, ProtocolError) else decode_message(frame)
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(message)

    async def round_trip(self, payload: bytes) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(payload)
        message = await self.waiter
        if isinstance(message, ProtocolError):
            raise RuntimeError(message.message)


async def _load(path: Path, payload: bytes, clients: int, seconds: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_unix_connection(_Client, str(path)))[1] for _ in range(clients)]
    for conn in conns:  # warm up
        await conn.round_trip(payload)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def drive(conn: _Client) -> None:
        clock = time.perf_counter
        while True:
            start = clock()
            if start >= deadline:
                return
            await conn.round_trip(payload)
            latencies.append(clock() - start)

    began = time.perf_counter()
    await asyncio.gather(*(drive(conn) for conn in conns))
    elapsed = time.perf_counter() - began
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    latencies.sort()
    return {
        "count": len(latencies),
        "rate": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


async def _idle_connections(path: Path, count: int) -> list[AsyncDaemonClient]:
    clients = []
    for index in range(count):
        client = await AsyncDaemonClient.open(path)
        await client.call("channel.register_channel", {"session_id": f"idle{index}"})
        clients.append(client)
    return clients


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def _idle_cpu_percent(pid: int, seconds: float) -> float:
    before = _cpu_seconds(pid)
    time.sleep(seconds)
    return (_cpu_seconds(pid) - before) / seconds * 100


# -- orchestration ---------------------------------------------------------------------------------


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the server accepts a connection (its socket file exists a little earlier)."""
    deadline = time.monotonic() + 60
    while not _accepts(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server did not start ({proc.args!r})")
        time.sleep(0.02)


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _pick_method(path: Path, root: Path) -> tuple[str, Any]:
    from tether.daemon.rpc.client import DaemonCallError, DaemonClient
    from tether.daemon.rpc.protocol import ErrorCode

    with DaemonClient.connect(path, timeout=60) as client:
        try:
            client.call("agent.status", {"name": "bench"})
        except DaemonCallError as exc:
            if exc.code is ErrorCode.UNKNOWN_METHOD:
                return "daemon.status", None
        client.call("agent.spawn", _spawn_params("bench", root))
        return "agent.status", {"name": "bench"}


def _spawn_params(name: str, root: Path) -> dict[str, Any]:
    script = root / "idle.json"
    if not script.exists():
        script.write_text('[{"text": "ok"}]')
    return {"name": name, "provider": "scripted", "script": str(script), "cwd": str(root)}


def _uses_inotify(pid: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                return True
    return False


def _has_wake_fd(pid: int) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(entry.startswith(b"TETHER_WAKE_FD=") for entry in environ)


def _inotify_limit() -> str:
    try:
        return Path("/proc/sys/fs/inotify/max_user_instances").read_text().strip()
    except OSError:
        return "?"


def _group_stats(pids: list[int]) -> tuple[float, int]:
    """Summed CPU seconds and RSS (KiB) of ``pids`` (gone ones count 0)."""
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            cpu += _cpu_seconds(pid)
            status = Path(f"/proc/{pid}/status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        rss += next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0
        )
    return cpu, rss


async def spawn_agents(path: Path, root: Path, count: int, parallel: int = 8) -> list[int]:
    """Spawn ``count`` idle scripted agents ``idle0...`` on the daemon at ``path``; their pids."""
    client = await AsyncDaemonClient.open(path)
    gate = asyncio.Semaphore(parallel)

    async def one(index: int) -> int:
        async with gate:
            result = await client.call("agent.spawn", _spawn_params(f"idle{index}", root))
            pid: int = result["pid"]
            return pid

    try:
        return list(await asyncio.gather(*(one(i) for i in range(count))))
    finally:
        await client.close()


async def _remove_agents(path: Path, names: list[str]) -> None:
    client = await AsyncDaemonClient.open(path)
    try:
        await asyncio.gather(*(client.call("agent.rm", {"name": n, "force": True}) for n in names))
    finally:
        await client.close()


def _idle_agents(args: argparse.Namespace, path: Path, root: Path, daemon_pid: int) -> None:
    """Spawn ``args.agents`` idle agents; report daemon and children idle CPU and memory."""
    began = time.perf_counter()
    pids = _run(spawn_agents(path, root, args.agents))
    spawn_s = time.perf_counter() - began
    time.sleep(10.0)  # let every child finish building its agent (after `ready`)
    children_before, rss = _group_stats(pids)
    daemon_before = _cpu_seconds(daemon_pid)
    time.sleep(args.idle_seconds)
    daemon_pct = (_cpu_seconds(daemon_pid) - daemon_before) / args.idle_seconds * 100
    children_pct = (_group_stats(pids)[0] - children_before) / args.idle_seconds * 100
    status = Path(f"/proc/{daemon_pid}/status").read_text()
    daemon_rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:"))
    n = len(pids)
    print(f"{n} agents spawned in {spawn_s:.1f} s ({spawn_s / n * 1000:.0f} ms each, 8 at a time)")
    print(
        f"idle CPU, {n} idle agents: daemon {daemon_pct:.2f}% of a core (target < 2%); "
        f"children {children_pct:.2f}% of a core in all ({args.idle_seconds:g}s)"
    )
    print(
        f"memory: daemon RSS {daemon_rss / 1024:.0f} MiB; children RSS {rss / 1024:.0f} MiB "
        f"in all ({rss / 1024 / n:.1f} MiB each)"
    )
    piped = sum(_has_wake_fd(pid) for pid in pids)
    watching = sum(_uses_inotify(pid) for pid in pids)
    neither = sum(not _has_wake_fd(pid) and not _uses_inotify(pid) for pid in pids)
    print(
        f"how the children are woken: {piped} of {n} through the wake-up pipe "
        f"(TETHER_WAKE_FD), {watching} hold an inotify instance "
        f"(fs.inotify.max_user_instances = {_inotify_limit()} per user), "
        f"{neither} neither (they poll their control file)"
    )
    _run(_remove_agents(path, [f"idle{i}" for i in range(n)]))


def padded_frame(size: int) -> bytes:
    """A request frame of about ``size`` bytes, for the echo server (which sends it back:
    a baseline answer as large as the daemon's)."""
    filler = "x" * max(0, size - 60)
    return encode_call(1, "echo.pad", {"pad": filler})


def _measure(
    args: argparse.Namespace, servers: dict[str, tuple[Path, int, bytes]]
) -> dict[tuple[str, int], list[dict[str, float]]]:
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    names = list(servers)
    for repeat in range(args.repeats):
        for clients in (1, 100):
            # Rotate the order so drifting background load hits all alike.
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                path, pid, payload = servers[name]
                cpu_before = _cpu_seconds(pid)
                run = _run(_load(path, payload, clients, args.seconds))
                run["cpu_us"] = (_cpu_seconds(pid) - cpu_before) / run["count"] * 1e6
                results.setdefault((name, clients), []).append(run)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--agents", type=int, default=200, help="idle agents (0: skip)")
    parser.add_argument("--echo-server", help=argparse.SUPPRESS)
    parser.add_argument("--echo-answer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        answer = Path(args.echo_answer).read_bytes() if args.echo_answer else None
        _run(_echo_main(args.echo_server, answer))
        return

    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="tb"))
    daemon, daemon_path, echo, echo_path = start_servers(root)
    method, canned = "", None
    try:
        method, params = _pick_method(daemon_path, root)
        request = encode_call(1, method, params)
        answer = _answer_frame(daemon_path, request)
        size = len(answer) - PREFIX_BYTES
        canned, canned_path = _start_canned(root, answer)
        servers = {
            "daemon": (daemon_path, daemon.pid, request),
            "echo": (echo_path, echo.pid, padded_frame(size)),  # answers as large
            "echo-req": (echo_path, echo.pid, request),  # answers the small request
            "canned": (canned_path, canned.pid, request),  # answers the daemon's answer
        }
        _report(method, size, _measure(args, servers))
        idle = _idle_cpu_percent(daemon.pid, args.idle_seconds)

        async def with_idle_clients() -> float:
            clients = await _idle_connections(daemon_path, 200)
            await asyncio.sleep(0.5)
            loop = asyncio.get_running_loop()
            percent = await loop.run_in_executor(
                None, _idle_cpu_percent, daemon.pid, args.idle_seconds
            )
            for client in clients:
                await client.close()
            return percent

        idle_200 = _run(with_idle_clients())
        print(f"idle CPU, no clients:               {idle:.2f}% of a core ({args.idle_seconds:g}s)")
        print(f"idle CPU, 200 idle channel clients: {idle_200:.2f}% of a core (target < 2%)")
        if method == "agent.status" and args.agents > 0:
            _idle_agents(args, daemon_path, root, daemon.pid)
    finally:
        if method == "agent.status":
            with contextlib.suppress(Exception):
                _run(_remove_agents(daemon_path, ["bench"]))
        stop_servers(root, daemon, echo, *([canned] if canned is not None else []))


def _start_canned(root: Path, answer: bytes) -> tuple[subprocess.Popen[bytes], Path]:
    """The bare server answering every request with ``answer`` (the daemon's, captured)."""
    answer_file, path = root / "answer.bin", root / "canned.sock"
    answer_file.write_bytes(answer)
    argv = [sys.executable, __file__, "--echo-server", str(path), "--echo-answer", str(answer_file)]
    proc = subprocess.Popen(argv)
    _wait_for(path, proc)
    return proc, path


def daemon_env(root: Path) -> dict[str, str]:
    """The environment of a daemon (and its agents) kept entirely under ``root``."""
    env = dict(os.environ, TETHER_HOME=str(root / "home"), XDG_RUNTIME_DIR=str(root / "rt"))
    env["TETHER_SOCKET"] = str(root / "rt" / "d.sock")
    return env


def start_servers(
    root: Path,
) -> tuple[subprocess.Popen[bytes], Path, subprocess.Popen[bytes], Path]:
    """A real daemon and the bare echo server, both listening: (daemon, its socket, echo,
    its socket)."""
    daemon_path, echo_path = root / "rt" / "d.sock", root / "echo.sock"
    level = os.environ.get("BENCH_LOG", "WARNING")  # the daemon's log level
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "daemon", "--foreground", "--log-level", level],
        env=daemon_env(root),
    )
    echo = subprocess.Popen([sys.executable, __file__, "--echo-server", str(echo_path)])
    try:
        _wait_for(daemon_path, daemon)
        _wait_for(echo_path, echo)
    except BaseException:
        stop_servers(root, daemon, echo)
        raise
    return daemon, daemon_path, echo, echo_path


def stop_servers(root: Path, *procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM the servers, end any agent left behind, remove ``root``."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    _kill_leftover_agents(root)
    shutil.rmtree(root, ignore_errors=True)


def _kill_leftover_agents(root: Path) -> None:
    """Agents outlive the daemon on purpose; end any this run left behind."""
    marker = f"TETHER_HOME={root / 'home'}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ and any(v.startswith(b"TETHER_AGENT_NAME=") for v in environ):
            with contextlib.suppress(OSError):
                os.killpg(int(entry), signal.SIGKILL)


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def _answer_frame(path: Path, request: bytes) -> bytes:
    """The server's whole answer frame (prefix and body) to ``request``."""

    async def one() -> bytes:
        loop = asyncio.get_running_loop()
        transport, conn = await loop.create_unix_connection(_AnswerClient, str(path))
        transport.write(request)
        frame = await conn.frame
        transport.close()
        return frame

    return bytes(_run(one()))


class _AnswerClient(_Client):
    """Reads one answer frame and keeps it."""

    def __init__(self) -> None:
        super().__init__()
        self.frame: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self._decoder.feed(data)
        frame = self._decoder.next_frame()
        if isinstance(frame, bytes) and not self.frame.done():
            self.frame.set_result(encode_frame(frame))


def _report(method: str, size: int, results: dict[tuple[str, int], list[dict[str, float]]]) -> None:
    loop = "uvloop" if _has_uvloop() else "asyncio"
    print(
        f"request: {method}, answer {size} B ({loop}; medians of {len(results['echo', 1])} "
        "runs); echo: a frame of that size, echo-req: the request's own frame, canned: the "
        "daemon's answer frame"
    )
    header = f"{'server':<8}{'clients':>8}{'rt/s':>12}{'p50 ms':>10}{'p99 ms':>10}"
    print(header + f"{'server CPU us/req':>19}")
    for (name, clients), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(
            f"{name:<8}{clients:>8}{_median(runs, 'rate'):>12.0f}"
            f"{_median(runs, 'p50_ms'):>10.3f}{_median(runs, 'p99_ms'):>10.3f}"
            f"{_median(runs, 'cpu_us'):>19.1f}"
        )
    for clients in (1, 100):
        for echo in ("echo", "echo-req", "canned"):
            pairs = zip(results["daemon", clients], results[echo, clients], strict=True)
            ratio = statistics.median(d["rate"] / e["rate"] for d, e in pairs)
            print(
                f"daemon/{echo} rate, {clients} client(s): {ratio:.2f}x "
                "(median of per-run ratios; target >= 0.8x with 1 client)"
            )
    p99 = _median(results["daemon", 100], "p99_ms")
    echo_p99 = _median(results["echo", 100], "p99_ms")
    canned_p99 = _median(results["canned", 100], "p99_ms")
    pairs = zip(results["daemon", 100], results["echo", 100], strict=True)
    ratio = statistics.median(d["p99_ms"] / e["p99_ms"] for d, e in pairs)
    print(
        f"daemon p99 with 100 clients: {p99:.2f} ms (echo {echo_p99:.2f} ms,"
        f" canned {canned_p99:.2f} ms); target <= 1.25x the echo's p99: {ratio:.2f}x "
        f"({'met' if ratio <= 1.25 else 'MISSED'}; median of per-run ratios)"
    )


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
