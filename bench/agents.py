"""What does the adapter cost? Start-up and control-to-ack, tether vs the bare CLI.

For each agent CLI that is installed (:data:`CLIS`: Claude Code, Codex app-server, pi,
Gemini CLI over ACP, claude-code-acp), in one run, against one scripted model server
(``tether.modelserver``, each CLI pointed at it as ``tether.modelserver.clients`` says),
in rounds of one run per series, each series going first in turn (the first run of a
round is favoured): ``direct`` (the CLI alone), ``cold`` (``tether child`` exec'd, as the
first run of a process: ``TETHER_FORKSERVER=0``; its CLI started before the child's
interpreter by the pre-exec stage, ``runtime/child/adapters/prestart.py``), ``warm`` (forked
from the fork server's running template, as in the daemon or a parent that starts many
runs; it is started before the first round) and, with ``--before``, ``before``:

- start-up to the first answer: from starting the process to the first text delta of
  the CLI's first reply. Direct: a minimal harness speaking the CLI's own protocol
  (:class:`Direct`) starts the CLI with exactly the command line and environment tether
  gives it (:func:`tether.runtime.child.adapters.commands.cli_launch`), does the protocol's
  hand-shake (Codex: ``initialize``, ``initialized``, ``thread/start``; ACP:
  ``initialize``, ``session/new``, ``session/set_mode`` when the client sets a mode;
  Claude Code and pi need none) and sends the prompt, until the first text delta
  (Claude Code ``content_block_delta``, pi ``message_update`` ``text_delta``, Codex
  ``item/agentMessage/delta``, ACP ``agent_message_chunk``). Through tether:
  ``tether.spawn(task, agent=NAME)`` until the run's first ``assistant-text-delta``
  reaches the parent (the parent's set-up, ``tether child``, the adapter and its
  hand-shake, the CLI, the event file and the parent's tail). The overhead is the median
  of the per-round ratios. Also tether's spawn-to-``ready``, when the CLI's process
  started (``cli_exec``: from ``/proc``, 10 ms resolution) and the CPU spent until the
  first answer by tether's child and its reaper and by the CLI (and by the CLI alone in
  the direct run): on a machine whose cores are busy, tether's CPU share is what it can
  take from the CLI's start-up, the exec delay what it adds in series.
- control round trip: direct, one request the CLI answers at once, written to its stdin
  while it is idle after its first answer, until the answer is read from its stdout
  (Claude Code ``control_request`` ``mcp_status``; pi ``get_state``; Codex and ACP
  agents a JSON-RPC request for a method they do not have, answered with a "method not
  found" error by their dispatcher); through tether, ``handle.follow_up(...)`` until its
  ``control-ack``, while a turn runs (its model call held by the server).

``--burden`` adds a series: the direct run with, beside the CLI, a Python process
started with it in its own session that imports what a cold adapter child imports
before its CLI's first answer (:func:`burden_argv`) and nothing else: what the child's
CPU alone costs the CLI's start-up on these cores, apart from anything tether does in
series (reported with that process's CPU, ``burden_cpu_ms_p50``).

``--fresh`` adds a series: ``tether.spawn`` as the first call of a new interpreter that
has imported only ``tether`` (:data:`FRESH`; a fresh ``tether run --agent NAME`` or a
program's first spawn): its first spawn imports the parent's side of tether (the run
directory, the index, the supervision; ``tether.spawn`` is lazy) and execs the child,
neither of which the ``cold`` series, run from this warm process, pays. Timed from the
call, to the first text delta as the new process sees it (``fresh_spawn_call_ms_p50``:
until the call returned).

``--before SRC`` adds a series: the same tether rounds with the child run from
another source tree (``PYTHONPATH=SRC`` in its environment, exec'd: never forked from this
process's fork server, whose template runs this tree; e.g. ``git archive`` of the commit
before a change), so a change is measured before and after in the same run.

Each round also times the **floor** of a cold child's CPU: ``python -c "import asyncio"``
(its user + system CPU, from ``wait4``): the least any asyncio child costs before it does
anything. Reported: ``floor_cpu_ms_p50`` and ``cold_cpu_vs_floor`` (the cold series'
tether CPU until the first answer, over the floor's).

Targets (issue 29): tether's CPU before the CLI's first answer (cold) <= 2x the floor;
cold start-up <= +10 % on a machine with a core to spare, warm <= +10 % here (issue 12);
the adapter adds under 5 ms to an ack.

Usage: ``.venv/bin/python bench/agents.py [--rounds 3] [--acks 20] [--agent NAME]...
[--burden] [--fresh] [--before SRC]`` (the CLIs are looked up on PATH and in
``$TETHER_CI_CACHE/npm``; see ``.ci/setup``). Keep it short on a shared machine: one
agent takes 0.5-2 min.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

from bytecode import compile_tether  # bench/bytecode.py: tether as installed

import tether
from tether.modelserver import open_model_server
from tether.modelserver.clients import CLIENTS
from tether.runtime.child.adapters.commands import MODE_ARG, cli_launch
from tether.runtime.child.adapters.driver import descendants
from tether.runtime.child.adapters.registry import AGENTS, find_command
from tether.runtime.parent import forkserver
from tether.runtime.parent.updates import RunEvent
from tether.wire import tag_of

# How long the server holds tether's model call (after its first chunk) while acks are timed.
HOLD_MS = 6000
Message = dict[str, Any]


class Direct:
    """The CLI alone, driven over its stdin and stdout by this harness."""

    def __init__(self, proc: asyncio.subprocess.Process, jsonrpc: bool) -> None:
        self.proc = proc
        self.jsonrpc = jsonrpc
        self.ids = 0
        self.prompt_id: int | None = None

    def send(self, message: Message) -> None:
        assert self.proc.stdin is not None
        base = {"jsonrpc": "2.0"} if self.jsonrpc else {}
        self.proc.stdin.write(json.dumps(base | message).encode() + b"\n")

    def request(self, method: str, params: Message) -> int:
        self.ids += 1
        self.send({"id": self.ids, "method": method, "params": params})
        return self.ids

    async def until(self, predicate: Callable[[Message], bool]) -> Message:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if predicate(message):
                return message
        raise RuntimeError("the CLI ended early")

    async def call(self, method: str, params: Message) -> Message:
        ident = self.request(method, params)
        answer = await self.until(lambda m: m.get("id") == ident and "method" not in m)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result") or {})


async def _stdin_prompt(direct: Direct, text: str, home: Path, args: list[str]) -> None:
    """Claude Code: a user message; ready as soon as it is written."""
    direct.send({"type": "user", "message": {"role": "user", "content": text}})


async def _pi_prompt(direct: Direct, text: str, home: Path, args: list[str]) -> None:
    direct.send({"type": "prompt", "message": text})


async def _codex_prompt(direct: Direct, text: str, home: Path, args: list[str]) -> None:
    info = {"name": "bench", "title": "bench", "version": "0"}
    await direct.call("initialize", {"clientInfo": info, "capabilities": {}})
    direct.send({"method": "initialized"})
    started = await direct.call("thread/start", {"cwd": str(home)})
    thread = started["thread"]["id"]
    params = {"threadId": thread, "input": [{"type": "text", "text": text}]}
    direct.prompt_id = direct.request("turn/start", params)


async def _acp_prompt(direct: Direct, text: str, home: Path, args: list[str]) -> None:
    capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
    await direct.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
    session = (await direct.call("session/new", {"cwd": str(home), "mcpServers": []}))["sessionId"]
    for arg in args:
        if arg.startswith(MODE_ARG):
            mode = {"sessionId": session, "modeId": arg[len(MODE_ARG) :]}
            await direct.call("session/set_mode", mode)
    prompt = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
    direct.prompt_id = direct.request("session/prompt", prompt)


def _acp_chunk(m: Message) -> bool:
    update = m.get("params", {}).get("update", {})
    return m.get("method") == "session/update" and (
        update.get("sessionUpdate") == "agent_message_chunk"
    )


def _rpc_ping(n: int) -> Message:
    return {"id": f"b{n}", "method": "tether/bench-ping", "params": {}}


class Cli(NamedTuple):
    client: str  # its entry in tether.modelserver.clients.CLIENTS
    jsonrpc: bool  # the harness adds "jsonrpc": "2.0" (ACP)
    prompt: Callable[[Direct, str, Path, list[str]], Awaitable[None]]
    is_answer: Callable[[Message], bool]  # the first text delta of a reply
    is_idle: Callable[[Direct, Message], bool]  # the first reply is complete
    control: Callable[[int], Message]  # a request answered at once
    is_reply: Callable[[Message, int], bool]


CLIS: dict[str, Cli] = {
    "claude": Cli(
        "claude",
        False,
        _stdin_prompt,
        is_answer=lambda m: (
            m.get("type") == "stream_event"
            and m.get("event", {}).get("type") == "content_block_delta"
            and m["event"].get("delta", {}).get("type") == "text_delta"
        ),
        is_idle=lambda d, m: m.get("type") == "result",
        control=lambda n: {
            "type": "control_request",
            "request_id": f"b{n}",
            "request": {"subtype": "mcp_status"},
        },
        is_reply=lambda m, n: (
            m.get("type") == "control_response"
            and m.get("response", {}).get("request_id") == f"b{n}"
        ),
    ),
    "codex": Cli(
        "codex",
        False,
        _codex_prompt,
        is_answer=lambda m: m.get("method") == "item/agentMessage/delta",
        is_idle=lambda d, m: m.get("method") == "turn/completed",
        control=_rpc_ping,
        is_reply=lambda m, n: m.get("id") == f"b{n}" and "method" not in m,
    ),
    "pi": Cli(
        "pi",
        False,
        _pi_prompt,
        is_answer=lambda m: (
            m.get("type") == "message_update"
            and m.get("assistantMessageEvent", {}).get("type") == "text_delta"
        ),
        is_idle=lambda d, m: m.get("type") == "agent_end",
        control=lambda n: {"type": "get_state", "id": f"b{n}"},
        is_reply=lambda m, n: m.get("type") == "response" and m.get("id") == f"b{n}",
    ),
    "gemini": Cli(
        "gemini",
        True,
        _acp_prompt,
        is_answer=_acp_chunk,
        is_idle=lambda d, m: m.get("id") == d.prompt_id and "method" not in m,
        control=_rpc_ping,
        is_reply=lambda m, n: m.get("id") == f"b{n}" and "method" not in m,
    ),
    "claude-code-acp": Cli(
        "claude-code-acp",
        True,
        _acp_prompt,
        is_answer=_acp_chunk,
        is_idle=lambda d, m: m.get("id") == d.prompt_id and "method" not in m,
        control=_rpc_ping,
        is_reply=lambda m, n: m.get("id") == f"b{n}" and "method" not in m,
    ),
}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def program_of(name: str) -> list[str] | None:
    """The CLI's program and fixed arguments (its agent's command, or the client's)."""
    client = CLIENTS[CLIS[name].client]
    kind = AGENTS[client.agent]
    return find_command(kind, client.command or kind.command)


def burden_argv(agent: str) -> list[str]:
    """A stand-in for a cold adapter child's CPU: this interpreter importing ``tether
    child``, the presenter, the event log, the driver and ``agent``'s runner, then
    printing its CPU seconds."""
    runner = AGENTS[agent].runner.partition(":")[0]
    modules = (
        "tether.cli.child",
        "tether.runtime.child.presenter",
        "tether.runtime.child.files",
        "tether.runtime.child.adapters.driver",
        runner,
    )
    report = "import resource; u = resource.getrusage(resource.RUSAGE_SELF)"
    code = f"import {', '.join(modules)}\n{report}\nprint(u.ru_utime + u.ru_stime)"
    return [sys.executable, "-c", code]


async def direct(
    name: str, url: str, home: Path, acks: int, *, burden: bool = False
) -> dict[str, Any]:
    """The CLI alone: start-up to its first answer, then control round trips; with
    ``burden``, :func:`burden_argv` runs beside it from its start."""
    cli = CLIS[name]
    client = CLIENTS[cli.client]
    env, args = client.configure(url, home)
    program = program_of(name)
    assert program is not None
    launch = cli_launch(client.agent, program, args, {**os.environ, **env})
    assert launch is not None
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *launch.argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=launch.env,
        cwd=home,
        limit=16 * 1024 * 1024,
        start_new_session=True,
    )
    beside = None
    if burden:
        beside = await asyncio.create_subprocess_exec(
            *burden_argv(client.agent),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    harness = Direct(proc, cli.jsonrpc)
    extra: dict[str, float] = {}
    try:
        await cli.prompt(harness, "hello", home, args)
        await harness.until(cli.is_answer)
        first = time.perf_counter() - started
        cpu = sum(cpu_split(proc.pid).values())  # the CLI and what it started
        await harness.until(lambda m: cli.is_idle(harness, m))
        if beside is not None:
            said, _ = await beside.communicate()  # its own CPU seconds
            extra["burden_cpu"] = float(said)
            beside = None
        trips = []
        for n in range(acks):
            sent = time.perf_counter()
            harness.send(cli.control(n))
            await harness.until(lambda m, n=n: cli.is_reply(m, n))
            trips.append(time.perf_counter() - sent)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 3)
        except TimeoutError:  # claude-code-acp never leaves on EOF
            os.killpg(proc.pid, 9)
            await proc.wait()
        if beside is not None:  # the run failed first
            beside.kill()
            await beside.wait()
    return {"first": first, "trips": trips, "cli_cpu": cpu, **extra}


FRESH = """
import asyncio, json, sys, time
import tether

async def main(agent, args, argv, env, home):
    started = time.perf_counter()
    handle = await tether.spawn(
        "hello", agent=agent, agent_args=args, argv=argv, env=env, cwd=home,
        runs_root=home + "/runs", db=home + "/runs.db", close_when_idle=False,
    )
    spawned = time.perf_counter() - started
    from tether.runtime.parent.updates import RunEvent
    from tether.wire import tag_of
    async for update in handle.updates():
        kind = tag_of(type(update.event)) if isinstance(update, RunEvent) else None
        if kind in ("assistant-text-delta", "exit"):
            break
    first = time.perf_counter() - started
    await handle.cancel()
    await handle.wait()
    print(json.dumps({"first": first, "spawned": spawned, "ended": kind == "exit"}))

asyncio.run(main(*json.loads(sys.argv[1])))
"""
"""A new interpreter's first ``tether.spawn`` (``--fresh``), given its arguments as JSON."""


async def fresh(name: str, url: str, home: Path) -> dict[str, Any]:
    """The same CLI through tether from a new process's first ``tether.spawn``."""
    client = CLIENTS[CLIS[name].client]
    env, args = client.configure(url, home)
    spec = [client.agent, args, list(client.command) or None, env, str(home)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FRESH, json.dumps(spec), stdout=asyncio.subprocess.PIPE
    )
    said, _ = await asyncio.wait_for(proc.communicate(), 120)
    result: dict[str, Any] = json.loads(said)
    if proc.returncode != 0 or result["ended"]:
        raise RuntimeError(f"{name}: the fresh run failed: {said!r}")
    return result


async def through_tether(
    name: str, url: str, home: Path, acks: int, *, series: str, src: str | None = None
) -> dict[str, Any]:
    """The same CLI as a tether child: start-up to the first text delta, then acks.

    ``series``: ``cold`` execs ``tether child`` (a process's first run), ``warm`` forks
    it from the fork server's running template, ``before`` execs it from ``src``."""
    client = CLIENTS[CLIS[name].client]
    env, args = client.configure(url, home)
    if series != "warm":
        env[forkserver.ENV] = "0"
    if src is not None:  # the child (and only it) runs that source tree, exec'd
        env["PYTHONPATH"] = src
    started = time.perf_counter()
    boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    handle = await tether.spawn(
        "hello",
        agent=client.agent,
        agent_args=args,
        argv=list(client.command) or None,
        env=env,
        cwd=home,
        runs_root=home / "runs",
        db=home / "runs.db",
        close_when_idle=False,
    )
    finder = asyncio.ensure_future(_cli_started(handle.pid, boot))
    ready = first = None
    cpu: dict[str, float] = {}
    async for update in handle.updates():
        if not isinstance(update, RunEvent):
            continue
        kind = tag_of(type(update.event))
        if kind == "ready" and ready is None:
            ready = time.perf_counter() - started
        if kind == "assistant-text-delta":
            first = time.perf_counter() - started
            cpu = cpu_split(handle.pid)
            break
        if kind == "exit":
            finder.cancel()
            raise RuntimeError(f"{name}: the run ended first: {update.raw!r}")
    try:
        exec_at = await asyncio.wait_for(finder, 1)
    except TimeoutError:
        exec_at = None
    trips = []
    for n in range(acks):
        sent = time.perf_counter()
        ack = await handle.follow_up(f"later {n}")
        trips.append(time.perf_counter() - sent)
        assert ack.status == "accepted", ack
    await handle.cancel()
    await handle.wait()
    return {"ready": ready, "first": first, "trips": trips, "exec": exec_at, **cpu}


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()


def _is_tether(pid: int) -> bool:
    """``tether child``, its pre-exec stage or its reaper (the waiting shell or Python),
    else the CLI or a process it started."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        argv = handle.read().split(b"\0")
    return b"tether" in argv[1:3] or any(
        b"tether.reaper" in arg or arg.endswith(b"prestart_stage.py") for arg in argv
    )


def cpu_split(child: int) -> dict[str, float]:
    """CPU seconds so far (user + system, from /proc: 1/CLK_TCK resolution) of the tether
    child and its reaper (``adapter_cpu``) and of the CLI and what it started (``cli_cpu``).
    The parent's own CPU is not counted (the model server shares its process)."""
    split = {"adapter_cpu": 0.0, "cli_cpu": 0.0}
    for pid in [child, *descendants(child)]:
        try:
            fields = _stat(pid)
            key = "adapter_cpu" if pid == child or _is_tether(pid) else "cli_cpu"
        except OSError:
            continue
        split[key] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return split


async def _cli_started(child: int, boot: float) -> float:
    """When the CLI below the tether child started, in seconds after ``boot``."""
    for _ in range(2000):  # a /proc scan every 2 ms; the caller bounds the wait
        started = _cli_start_time(child)
        if started is not None:
            return started - boot
        await asyncio.sleep(0.002)
    raise TimeoutError


def _cli_start_time(child: int) -> float | None:
    """The start time (``CLOCK_BOOTTIME``, from ``/proc``: 1/CLK_TCK resolution) of the
    first process below ``child`` that is neither ``tether`` nor its reaper."""
    for pid in descendants(child):
        try:
            if not _is_tether(pid):
                return int(_stat(pid)[19]) / CLK_TCK
        except OSError:
            continue
    return None


async def bench(
    name: str,
    rounds: int,
    acks: int,
    before: str | None,
    *,
    burden: bool = False,
    fresh_too: bool = False,
) -> dict[str, Any]:
    series = ["direct", "cold", "warm"] + (["burden"] if burden else [])
    series += (["fresh"] if fresh_too else []) + (["before"] if before else [])
    # each series goes first in turn (the first run of a round is favoured); the script
    # follows that order: a direct run's reply ends at once, a tether run's is held
    # after its first chunk while its acks are timed
    orders = [series[r % len(series) :] + series[: r % len(series)] for r in range(rounds)]
    quick = {"text": ["hi", " there"], "chunk_ms": 1}
    held = {"text": ["hi", " held"], "chunk_ms": HOLD_MS}
    script = [quick if s in ("direct", "burden") else held for order in orders for s in order]
    out: dict[str, list[Any]] = {s: [] for s in series}
    out["floor"] = []
    # the warm runs fork from a running template (as in the daemon); it starts now
    if not await asyncio.to_thread(forkserver.shared_forkserver().wait_ready):
        raise RuntimeError("the fork server's template did not start")
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp,
        open_model_server(script) as server,
    ):
        for r, order in enumerate(orders):
            out["floor"].append(await asyncio.to_thread(floor_cpu))
            for s in order:
                home = Path(tmp) / f"r{r}-{s}"
                home.mkdir()
                if s in ("direct", "burden"):
                    run = direct(name, server.url, home, acks, burden=s == "burden")
                    out[s].append(await run)
                elif s == "fresh":
                    out[s].append(await fresh(name, server.url, home))
                else:
                    src = before if s == "before" else None
                    run = through_tether(name, server.url, home, acks, series=s, src=src)
                    out[s].append(await run)
    return out


FLOOR_CODE = "import asyncio"


def floor_cpu() -> float:
    """CPU seconds (user + system) of ``python -c "import asyncio"``, the floor of a cold
    child's start-up."""
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_CODE])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def report(name: str, data: dict[str, Any]) -> dict[str, Any]:
    direct_start = [d["first"] for d in data["direct"]]
    direct_trips = [x for d in data["direct"] for x in d["trips"]]
    row: dict[str, Any] = {
        "agent": name,
        "rounds": len(direct_start),
        "direct_first_answer_ms": [ms(x) for x in direct_start],
        "direct_cli_cpu_ms_p50": ms(statistics.median(d["cli_cpu"] for d in data["direct"])),
        "direct_trip_ms_p50": ms(statistics.median(direct_trips)),
        "direct_trip_ms_p99": ms(pct(direct_trips, 0.99)),
        "floor_cpu_ms_p50": ms(statistics.median(data["floor"])),
    }
    for series, key in (("burden", "burden_cpu"), ("fresh", "spawned")):
        if series not in data:
            continue
        start = [d["first"] for d in data[series]]
        ratios = [t / d for t, d in zip(start, direct_start, strict=True)]
        row[f"{series}_first_answer_ms"] = [ms(x) for x in start]
        row[f"{series}_start_overhead_pct"] = round((statistics.median(ratios) - 1) * 100, 1)
        extra = "burden_cpu_ms_p50" if series == "burden" else "fresh_spawn_call_ms_p50"
        row[extra] = ms(statistics.median(d[key] for d in data[series]))
    for series in ("cold", "warm", "before"):
        if series not in data:
            continue
        runs = data[series]
        start = [t["first"] for t in runs]
        trips = [x for t in runs for x in t["trips"]]
        ratios = [t / d for t, d in zip(start, direct_start, strict=True)]
        row[f"{series}_first_answer_ms"] = [ms(x) for x in start]
        row[f"{series}_start_overhead_pct"] = round((statistics.median(ratios) - 1) * 100, 1)
        row[f"{series}_ready_ms_p50"] = ms(statistics.median(t["ready"] for t in runs))
        execs = [t["exec"] for t in runs if t["exec"] is not None]
        if execs:
            row[f"{series}_cli_exec_ms_p50"] = ms(statistics.median(execs))
        adapter = statistics.median(t["adapter_cpu"] for t in runs)
        cli = statistics.median(t["cli_cpu"] for t in runs)
        row[f"{series}_cpu_ms_p50_adapter_cli"] = [ms(adapter), ms(cli)]
        row[f"{series}_cpu_vs_floor"] = round(adapter / statistics.median(data["floor"]), 2)
        row[f"{series}_ack_ms_p50"] = ms(statistics.median(trips))
        row[f"{series}_ack_ms_p99"] = ms(pct(trips, 0.99))
        row[f"{series}_ack_added_ms_p50"] = round(
            row[f"{series}_ack_ms_p50"] - row["direct_trip_ms_p50"], 2
        )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="one JSON object per agent")
    parser.add_argument("--agent", action="append", choices=sorted(CLIS), help="only these")
    parser.add_argument("--before", metavar="SRC", help="also run the child from SRC")
    parser.add_argument(
        "--burden", action="store_true", help="also run the CLI beside a cold child's imports"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="also spawn from a new process's first call"
    )
    args = parser.parse_args()
    compile_tether(*([args.before] if args.before else []))
    os.environ.setdefault("TETHER_CI_CACHE", "/var/cache/tether-ci")
    for name in args.agent or list(CLIS):
        if program_of(name) is None:
            print(f"{name}: not installed, skipped", file=sys.stderr)
            continue
        run = bench(
            name, args.rounds, args.acks, args.before, burden=args.burden, fresh_too=args.fresh
        )
        data = asyncio.run(run)
        row = report(name, data)
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        for key, value in row.items():
            print(f"{key:>28}: {value}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
