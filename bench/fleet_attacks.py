"""The attacks of bench/fleet_outside.py on a live fleet (its module docstring, step 6);
each returns what it saw, or raises :class:`outside.Failed`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet import proc_state  # bench/fleet.py: /proc readers
from outside import (
    LIVE,
    REPLY,
    SCRIPT_REPLIES,
    Daemon,
    _cmdline,
    _described,
    call,
    check,
    check_clean,
    code_of,
    descendants,
    listed,
    of_home,
    spawn_params,
    stop_all,
    turn,
)

from tether.daemon.rpc.aclient import AsyncDaemonClient


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
    driver = Path(__file__).with_name("fleet_outside.py")
    argv = [*python, str(driver), "--limits-run", limit, "--root", str(sub)]
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
    """SIGKILL the daemon with every agent alive, start another and SIGKILL it too while it
    re-adopts them (before it answers), start a third: check the re-adoption."""
    before = await listed(daemon.socket)
    daemon.kill()
    daemon.proc = await asyncio.to_thread(subprocess.Popen, daemon.argv(), env=daemon.env)
    await asyncio.sleep(random.uniform(0.3, 1.0))  # (its imports, then the reconcile)
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
    said = f"back in {took:.1f} s, all re-adopted"
    return f"daemon SIGKILLed with {len(names)} alive, the next one mid-reconcile; {said}"


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
        helpers = {p for p in descendants(daemon.pid) if b"forkserver" in _cmdline(p)}
        while not done.is_set():  # the agents are children of the daemon or the template
            for pid in children_of([daemon.pid, *helpers]) - known - helpers - killed:
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


def children_of(pids: list[int]) -> set[int]:
    """The direct children of ``pids`` (``/proc/PID/task/TID/children``: no /proc scan)."""
    found: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                found.update(int(child) for child in text.split())
    return found


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
        each = [await limits(root, script, limit) for limit in ("nofile:200", "nproc:60")]
        return "; ".join(each), names
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
