"""Scale-out figures over NATS JetStream, each beside a baseline measured in the same run.

    .venv/bin/python bench/scale_out.py [--samples 300] [--runs 1000] [--appends 5000] [--r3]

- **control-to-ack across hosts**: ``agent.steer`` sent from host A's side over NATS
  request/reply to host B's daemon, whose agent (a ``tether child``, busy in a long turn)
  acks it; next to the same steer over B's local socket, over the socket of a daemon in
  no cluster, ``daemon.status`` over NATS (the relay alone) and over B's socket (the
  socket call alone: B's own steer work is the local steer less it), a bare NATS
  request/reply to an echo responder in another process, and ``RemoteRunHandle.steer``
  (the verb, then the ack read back from JetStream). With ``--r3`` also against a three-node cluster
  whose streams and registry have three replicas.
- **fan-in**: one process follows ``--runs`` run channels at once, with one ordered
  consumer per run and then with one consumer over ``run.*.events`` demultiplexed by
  channel name (``JetStreamChannel.tail_matching``); each run first gets a greeting line,
  and the sampling starts once every follower has read its own; then a line is appended
  to a random run, and the time until its follower has it is recorded (p50/p99).
- **appends/s**: acknowledged appends with message ids, one at a time, 64 in flight, in
  ``append_many`` bursts of 512; and a host bridge (``Outbound``) forwarding a control
  flood already in its file (the lines/s from the first pump to its commit).

Targets (issue 15): cross-host ack p50 <= 2 ms (R1), <= 4 ms (R3), within 1.5x of bare
NATS request/reply; 1,000-run fan-in p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.nats_server import run_nats_cluster, run_nats_server  # noqa: E402

from tether.daemon.hosts.bridge import PUMP_LINES, Outbound  # noqa: E402
from tether.daemon.hosts.remote import call_host, connect  # noqa: E402
from tether.daemon.hosts.remote_run import spawn_remote  # noqa: E402
from tether.daemon.rpc.aclient import AsyncDaemonClient  # noqa: E402
from tether.transports.channel import Entry  # noqa: E402
from tether.transports.jetstream import open_jetstream  # noqa: E402

ECHO = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1].split(","))
    async def echo(msg):
        await msg.respond(msg.data)
    await nc.subscribe("bench.echo", cb=echo)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


FAN_IN = {
    "core": "core NATS sub (floor)",
    "per-run": "one tail per run",
    "matching": "one tail, run.*",
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"p50_ms": statistics.median(ms), "p99_ms": pct(ms, 0.99), "n": len(ms)}


async def interleaved(
    samples: int, calls: dict[str, Callable[[], Awaitable[Any]]]
) -> dict[str, list[float]]:
    """Every call once per round, ``samples`` rounds, the order turning each round: on a
    loaded machine each path then sees the same conditions (and the same forwarding
    backlog on host B) instead of a phase of its own."""
    names = list(calls)
    for _ in range(min(20, samples)):  # warm-up
        for name in names:
            await calls[name]()
    out: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(samples):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            await calls[name]()
            out[name].append(time.perf_counter() - start)
    return out


@contextlib.contextmanager
def daemons(url: str, root: Path, replicas: int) -> Iterator[dict[str, dict[str, str]]]:
    envs: dict[str, dict[str, str]] = {}
    procs = []
    try:
        for host in ("A", "B", "plain"):  # "plain": a daemon in no cluster (the floor)
            home = root / host
            env = dict(os.environ)
            env.update(
                TETHER_HOME=str(home / "home"),
                XDG_RUNTIME_DIR=str(home / "rt"),
                TETHER_SOCKET=str(home / "rt" / "d.sock"),
            )
            argv = [sys.executable, "-m", "tether", "daemon", "--foreground"]
            argv += ["--log-level", "WARNING"]
            if host != "plain":
                argv += ["--nats", url, "--host", host, "--replicas", str(replicas)]
            procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))
            envs[host] = env
        for env in envs.values():
            _wait_socket(Path(env["TETHER_SOCKET"]))
        yield envs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def _wait_socket(path: Path) -> None:
    from tether.daemon.rpc.lifecycle import probe

    deadline = time.monotonic() + 20
    while not probe(path, timeout=0.5):
        if time.monotonic() > deadline:
            raise SystemExit(f"daemon at {path} did not answer")
        time.sleep(0.05)


async def ack_round_trips(
    url: str, env_b: dict[str, str], env_plain: dict[str, str], samples: int
) -> dict[str, Any]:
    script = Path(env_b["TETHER_HOME"]).parent / "long.json"
    script.write_text(json.dumps([{"text": "long", "delay_ms": 600_000}]))
    local = await AsyncDaemonClient.open(Path(env_b["TETHER_SOCKET"]))
    plain = await AsyncDaemonClient.open(Path(env_plain["TETHER_SOCKET"]))
    spawn = {"name": "w", "task": "t", "provider": "scripted", "script": str(script)}
    await local.call("agent.spawn", spawn)
    await plain.call("agent.spawn", spawn)
    import nats

    client = await connect(url)
    bare = await nats.connect(url.split(","))  # the floor: a client with nothing of tether's
    echo = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ECHO, url, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert echo.stdout is not None
        await echo.stdout.readline()
        steer = {"name": "w", "text": "nudge"}
        handle = await spawn_remote(
            "t", host="B", nats_url=url, name="rh", provider="scripted", script=str(script)
        )
        try:
            results = await interleaved(
                samples,
                {
                    "bare NATS request/reply": lambda: bare.request(
                        "bench.echo", b"x" * 64, timeout=5
                    ),
                    "daemon.status across hosts": lambda: call_host(
                        client, "B", "daemon.status", {}
                    ),
                    "daemon.status, local socket": lambda: local.call("daemon.status", {}),
                    "steer->ack, no cluster": lambda: plain.call("agent.steer", steer),
                    "steer->ack, local socket": lambda: local.call("agent.steer", steer),
                    "steer->ack, across hosts": lambda: call_host(
                        client, "B", "agent.steer", steer
                    ),
                    "RemoteRunHandle.steer": lambda: handle.steer("nudge"),
                },
            )
        finally:
            await handle.aclose()
        for daemon in (local, plain):
            await daemon.call("agent.stop", {"name": "w", "mode": "cancel", "timeout_s": 5})
        # each round's call over the bare call of the same round: at a high or moving
        # load a steadier ratio than the ratio of the two medians
        floor = results["bare NATS request/reply"]
        return {
            name: {
                **summary(values),
                "paired_x": statistics.median(v / b for v, b in zip(values, floor, strict=True)),
            }
            for name, values in results.items()
        }
    finally:
        echo.kill()
        await echo.wait()
        await client.aclose()
        await bare.close()
        await local.close()
        await plain.close()


class Arrivals:
    """What the followers of a fan-in saw: greetings first, then the timed samples."""

    def __init__(self, runs: int, samples: int) -> None:
        self.runs, self.samples = runs, samples
        self.sent: dict[bytes, tuple[str, float]] = {}
        self.latencies: list[float] = []
        self.greeted: set[str] = set()
        self.ready, self.done = asyncio.Event(), asyncio.Event()

    def seen(self, name: str, data: bytes) -> None:
        if data == b"{}":  # the greeting every run gets first: its follower is live
            self.greeted.add(name)
            if len(self.greeted) == self.runs:
                self.ready.set()
            return
        expected = self.sent.pop(data, None)
        if expected is not None and expected[0] == name:
            self.latencies.append(time.perf_counter() - expected[1])
            if len(self.latencies) >= self.samples:
                self.done.set()


async def fan_in(url: str, runs: int, samples: int, *, mode: str) -> dict[str, float]:
    """One process follows ``runs`` run channels: one ordered consumer per run
    (``per-run``), one consumer over ``run.*.events`` demultiplexed by channel name
    (``matching``), or (``core``, the floor) a plain NATS subscription over the same
    names, published to outside the stream (nothing stored)."""
    channel = await open_jetstream(url, prefix="fan" + os.urandom(3).hex())
    names = [f"run.r{i}.events" for i in range(runs)]
    seen = Arrivals(runs, samples)

    async def follow(name: str) -> None:
        async for item in channel.tail(name):
            if isinstance(item, Entry):
                seen.seen(name, item.data)

    async def follow_all() -> None:
        async for name, entry in channel.tail_matching("run.*.events"):
            seen.seen(name, entry.data)

    async def core_message(message: Any) -> None:
        seen.seen(message.subject.removeprefix("core."), message.data)

    async def append(name: str, line: bytes) -> None:
        if mode == "core":
            await channel.client.publish(f"core.{name}", line)
            await channel.client.flush()
        else:
            await channel.append(name, line)

    subscription = None
    if mode == "core":
        subscription = await channel.client.subscribe("core.run.*.events", cb=core_message)
    followers = (
        [follow_all()] if mode == "matching" else [] if mode == "core" else map(follow, names)
    )
    tails = [asyncio.ensure_future(follower) for follower in followers]
    try:
        for name in names:
            await append(name, b"{}")
        async with asyncio.timeout(60):
            await seen.ready.wait()  # every follower is subscribed and has read its greeting
        for i in range(samples):
            line = b'{"n":%d}' % i
            name = random.choice(names)
            seen.sent[line] = (name, time.perf_counter())
            await append(name, line)
            await asyncio.sleep(0.002)
        async with asyncio.timeout(30):
            await seen.done.wait()
        return summary(seen.latencies)
    finally:
        for tail in tails:
            tail.cancel()
        await asyncio.gather(*tails, return_exceptions=True)
        if subscription is not None:
            await subscription.unsubscribe()
        await channel.aclose()


async def append_rates(url: str, count: int) -> dict[str, float]:
    channel = await open_jetstream(url, prefix="ap" + os.urandom(3).hex())
    try:
        start = time.perf_counter()
        for i in range(count):
            await channel.append("run.a.events", b'{"n":%d}' % i, msg_id=f"a:{i}")
        one = count / (time.perf_counter() - start)
        start = time.perf_counter()
        batch = 64
        for base in range(0, count, batch):
            await asyncio.gather(
                *(
                    channel.append("run.b.events", b'{"n":%d}' % i, msg_id=f"b:{i}")
                    for i in range(base, min(count, base + batch))
                )
            )
        many = count / (time.perf_counter() - start)
        start = time.perf_counter()
        lines = [(b'{"n":%d}' % i, f"c:{i}") for i in range(count)]
        for base in range(0, count, PUMP_LINES):
            await channel.append_many("run.c.events", lines[base : base + PUMP_LINES])
        burst = count / (time.perf_counter() - start)
        return {
            "appends/s, 1 in flight": one,
            "appends/s, 64 in flight": many,
            f"appends/s, append_many {PUMP_LINES}": burst,
            "forwarded lines/s (a flood)": await forwarding_rate(channel, count),
        }
    finally:
        await channel.aclose()


async def forwarding_rate(channel: Any, count: int) -> float:
    """A host's bridge (``Outbound``) forwarding a control flood already in its file."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="tbf") as tmp:
        path = Path(tmp) / "control.jsonl"
        path.write_bytes(b"".join(b'{"seq":%d,"type":"steer"}\n' % i for i in range(count)))
        bridge = Outbound(channel, "run.d.control", path)
        await bridge.start()
        start = time.perf_counter()
        while await bridge.pump():
            pass
        await bridge.commit()
        elapsed = time.perf_counter() - start
        bridge.close()
        assert bridge.forwarded == count
        return count / elapsed


def run_cluster(args: argparse.Namespace, url: str, replicas: int, label: str) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(dir="/tmp", prefix="tbs") as tmp,
        daemons(url, Path(tmp), replicas) as envs,
    ):
        acks = asyncio.run(ack_round_trips(url, envs["B"], envs["plain"], args.samples))
    result: dict[str, Any] = {"label": label, "acks": acks}
    if replicas == 1:
        for mode in FAN_IN:
            result[mode] = asyncio.run(fan_in(url, args.runs, args.samples, mode=mode))
    result["appends"] = asyncio.run(append_rates(url, args.appends))
    return result


def report(result: dict[str, Any]) -> None:
    print(f"\n== {result['label']}")
    acks = result["acks"]
    bare = acks["bare NATS request/reply"]["p50_ms"]
    for name, figures in acks.items():
        ratio = figures["p50_ms"] / bare
        print(
            f"  {name:<28} p50 {figures['p50_ms']:6.2f} ms  p99 {figures['p99_ms']:6.2f} ms"
            f"  n {figures['n']:>4}  p50/bare {ratio:4.2f}x  paired {figures['paired_x']:4.2f}x"
        )
    # The floor a cross-host steer can have: the relay (a verb over NATS answered at once)
    # plus B's own steer work (its local steer less its local socket call).
    b_work = (
        acks["steer->ack, local socket"]["p50_ms"] - acks["daemon.status, local socket"]["p50_ms"]
    )
    floor = acks["daemon.status across hosts"]["p50_ms"] + b_work
    across = acks["steer->ack, across hosts"]["p50_ms"]
    print(
        f"  B's steer work {b_work:.2f} ms; relay + it {floor:.2f} ms ({floor / bare:.2f}x bare)"
        f" vs across hosts {across:.2f} ms: tether adds {across - floor:+.2f} ms beyond them"
    )
    for key, label in FAN_IN.items():
        if key in result:
            f = result[key]
            print(f"  fan-in, {label:<20} p50 {f['p50_ms']:6.2f} ms  p99 {f['p99_ms']:6.2f} ms")
    for name, rate in result["appends"].items():
        print(f"  {name:<28} {rate:9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1000, help="run channels tailed at once")
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--r3", action="store_true", help="also a three-node R3 cluster")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="tbn") as tmp:
        with run_nats_server(Path(tmp) / "single") as server:
            results.append(run_cluster(args, server.url, 1, f"R1, one node ({args.runs} runs)"))
        if args.r3:
            with run_nats_cluster(Path(tmp) / "cluster", 3) as cluster:
                time.sleep(3)  # JetStream's meta leader election
                results.append(run_cluster(args, cluster.urls, 3, "R3, three nodes"))
        shutil.rmtree(tmp, ignore_errors=True)
    for result in results:
        report(result)


if __name__ == "__main__":
    main()
