"""Chaos over hosts: issue 15's check played before it is played on us.

    flock /tmp/tether-bench.lock .venv/bin/python bench/chaos_hosts.py --seed 1 [--runs 9]

A three-node NATS cluster on loopback ports (``tests.nats_server.run_nats_cluster``) and
three ``tether daemon --nats ... --host A|B|C --replicas 3``, each with a home of its own.
Built-in agents (the scripted provider) are spawned on the hosts from an operator's CLI
(``tether agent --host B spawn ...``) and from the Python API (``tether.spawn_remote``);
each is driven with steer, follow_up, ask, finalize or cancel (or left to its deadline),
its bash tool appends to ``$TETHER_INBOX_PATH`` and the driver appends there too, as a
shell would. Meanwhile, at moments drawn from ``--seed``, one fault at a time: a NATS node
SIGKILLed (and restarted on its port and store), a host daemon SIGKILLed (and restarted:
it must re-adopt its agents), a host's NATS connections cut (``ss -K``, again and again
for a few seconds, the server left up), a NATS node stalled (SIGSTOP, then SIGCONT).

Then, for every run: every control the driver was told landed is in the run's control
log once, with exactly one ``control-ack`` (a control whose outcome the host could not
tell, ``shutting_down``, is in it at most once, acked once if so); the run's event log
has seqs 1..N, no gap, no double, an ``exit`` last whose status is the honest one (what
ended it: finalize or close -> done, cancel -> cancelled, its deadline -> timed-out);
``events --after-seq 0`` over the host's verbs gives the same lines; its control, event
and inbox logs are in JetStream once each, in order; its inbox lines are in the host's
SQLite once each (by offset) and each tool or shell line is in the file once; an API
handle saw every event once, in order, every inbox line once, and the same status; the
child's process is gone once the run ended, and no agent process is left after the
daemons stop. Prints what it did and every violation; exits 4 if there was one.

Seeded: the workload and the fault schedule come from ``--seed``; the timing of a loaded
machine does not, so a run is reproducible in what it does, not to the millisecond.
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
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "daemon" / "hosts")]

from test_hosts import _start_when_cluster_ready  # noqa: E402
from tests.channels import read_all  # noqa: E402
from tests.nats_server import NatsCluster, run_nats_cluster  # noqa: E402
from tests.support.agentd import agent_pids, alive, kill_agents  # noqa: E402
from tests.support.daemon import DaemonProcess, make_env  # noqa: E402

from tether.daemon.hosts.names import control_channel, events_channel, inbox_channel  # noqa: E402
from tether.daemon.hosts.remote import call_host, connect  # noqa: E402
from tether.daemon.hosts.remote_run import RemoteRunHandle, spawn_remote  # noqa: E402
from tether.daemon.rpc.client import DaemonCallError, DaemonClientError  # noqa: E402
from tether.errors import ControlRefused, RunEnded  # noqa: E402

HOSTS = ("A", "B", "C")
CLI_TIMEOUT_S = 120.0  # a CLI call that takes longer is a hang
END_TIMEOUT_S = 120.0  # a run not ended this long after its ending control is a hang
EXPECTED = {"finalize": "done", "close": "done", "cancel": "cancelled", "deadline": "timed-out"}
UNKNOWN = {"shutting_down"}  # the host lost with the control in flight: it may have landed


@dataclass
class Sent:
    kind: str
    marker: str | None  # the text that finds its control line (None: a cancel)
    via: str
    outcome: str = "?"  # acked | error:<code> | refused:<...>
    seq: int | None = None


@dataclass
class Run:
    name: str
    host: str
    via: str  # cli | api
    ending: str
    script: Path
    handle: RemoteRunHandle | None = None
    run_dir: Path | None = None
    run_id: str | None = None
    pid: int | None = None
    sent: list[Sent] = field(default_factory=list)
    appended: list[bytes] = field(default_factory=list)
    seen_seqs: list[int] = field(default_factory=list)
    seen_inbox: list[dict[str, Any]] = field(default_factory=list)
    result_status: str | None = None
    cli_status: str | None = None


class Chaos:
    def __init__(self, seed: int, runs: int, root: Path, cluster: NatsCluster) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.count = runs
        self.root = root
        self.cluster = cluster
        self.daemons: dict[str, DaemonProcess] = {}
        self.operator = make_env(root / "op")
        self.operator["TETHER_NATS_URL"] = cluster.urls
        self.started = time.monotonic()
        self.violations: list[str] = []
        self.notes: list[str] = []
        self.faults: list[str] = []
        self.runs: list[Run] = []
        self.working = True
        self.fault_gap = (2.0, 6.0)  # seconds between faults
        self.stall_max = 8.0  # the longest SIGSTOP of a node

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:7.2f}] {text}", flush=True)

    def violation(self, text: str) -> None:
        self.violations.append(text)
        self.say(f"VIOLATION {text}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.say(f"note: {text}")

    # -- the hosts --------------------------------------------------------------------

    def start_hosts(self) -> None:
        for host in HOSTS:
            root = Path(tempfile.mkdtemp(dir="/tmp", prefix=f"tc{host}"))
            env = make_env(root)
            env["TETHER_NATS_URL"] = self.cluster.urls
            self.daemons[host] = DaemonProcess(root, Path(env["TETHER_SOCKET"]), env)
            _start_when_cluster_ready(self.daemons[host], self.cluster.urls, host)
            self.say(f"host {host} up (pid {self.daemons[host].pid}, home {root})")

    def restart_host(self, host: str) -> None:
        daemon = self.daemons[host]
        _start_when_cluster_ready(daemon, self.cluster.urls, host)

    def stop_hosts(self) -> None:
        for host, daemon in self.daemons.items():
            code = daemon.stop(signal.SIGTERM, timeout=30)
            self.say(f"host {host} stopped (exit {code})")

    def cleanup(self) -> None:
        kept = Path(f"/tmp/chaos-seed{self.seed}-logs")
        if self.violations:  # the daemons' and servers' logs, for the post-mortem
            shutil.rmtree(kept, ignore_errors=True)
            kept.mkdir()
            for host, daemon in self.daemons.items():
                with contextlib.suppress(OSError):
                    shutil.copy(daemon.log, kept / f"daemon-{host}.log")
            for name in self.cluster.names:
                with contextlib.suppress(OSError):
                    shutil.copy(
                        self.root / "cluster" / name / "nats-server.log", kept / f"{name}.log"
                    )
            self.say(f"logs kept in {kept}")
        for daemon in self.daemons.values():
            with contextlib.suppress(BaseException):
                daemon.stop(signal.SIGKILL)
            kill_agents(Path(daemon.env["TETHER_HOME"]))
            shutil.rmtree(daemon.root, ignore_errors=True)

    # -- the CLI ----------------------------------------------------------------------

    async def cli(self, host: str, *args: str) -> tuple[int, str, str]:
        argv = [sys.executable, "-m", "tether", "agent", "--host", host, *args]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=self.operator,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            self.violation(
                f"hang: `tether agent --host {host} {' '.join(args)}` > {CLI_TIMEOUT_S}s"
            )
            return -1, "", "hang"
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def status(self, run: Run) -> dict[str, Any] | None:
        for _ in range(60):  # a host restarting answers within seconds
            code, out, err = await self.cli(run.host, "status", run.name, "--json")
            if code == 0:
                shown: dict[str, Any] = json.loads(out)
                return shown
            if code == 2:
                self.violation(f"{run.name}: status refused: {err.strip()}")
                return None
            await asyncio.sleep(1)
        self.violation(f"{run.name}: no status from host {run.host} in a minute")
        return None

    # -- a run ------------------------------------------------------------------------

    def make_run(self, index: int) -> Run:
        rng = self.rng
        name = f"s{self.seed}r{index}"
        host = rng.choice(HOSTS)
        via = rng.choice(("cli", "api"))
        ending = rng.choices(("finalize", "cancel", "close", "deadline"), (4, 3, 2, 1))[0]
        replies: list[dict[str, Any]] = []
        for i in range(60):
            delay = rng.randint(100, 900)
            if i % 6 == 0:  # a burst: a hundred lines at once
                line = json.dumps({"type": "progress", "text": f"{name}:b{i}:N"})
                line = line.replace(":N", ":'\"$n\"'")
                command = f"for n in $(seq 100); do echo '{line}'; done >> \"$TETHER_INBOX_PATH\""
                call = {"name": "bash", "arguments": {"command": command}, "id": f"c{i}"}
                replies.append({"tool_calls": [call], "delay_ms": delay})
            elif i % 2 == 0:
                line = json.dumps({"type": "progress", "text": f"{name}:b{i}"})
                command = f"echo '{line}' >> \"$TETHER_INBOX_PATH\""
                call = {"name": "bash", "arguments": {"command": command}, "id": f"c{i}"}
                replies.append({"tool_calls": [call], "delay_ms": delay})
            else:
                replies.append({"text": f"{name} reply {i}", "delay_ms": delay})
        if ending == "deadline":  # a turn that outlasts the deadline
            replies.insert(2, {"text": "slow", "delay_ms": 600_000})
        script = self.root / f"{name}.json"
        script.write_text(json.dumps(replies))
        return Run(name, host, via, ending, script)

    async def drive(self, run: Run) -> None:
        try:
            await self._drive(run)
        except Exception as error:  # a driver bug or an unexpected error: said, not hidden
            self.violation(f"{run.name}: the driver failed: {error!r}")

    async def _drive(self, run: Run) -> None:
        rng = random.Random(f"{self.seed}:{run.name}")
        deadline = "25" if run.ending == "deadline" else None
        if not await self.spawn(run, deadline):
            return
        for step in range(rng.randint(3, 7)):
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            action = rng.choice(("steer", "steer", "follow_up", "ask", "inbox"))
            if action == "ask" and run.ending == "deadline":  # its turn never answers
                action = "steer"
            if action == "inbox":
                self.append_inbox(run, f"{run.name}:d{step}")
            elif action == "ask":
                await self.ask(run, f"{run.name}:a{step}")
            else:
                await self.control(run, action, f"{run.name}:{action[0]}{step}", rng)
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        await self.end(run, rng)

    async def spawn(self, run: Run, deadline: str | None) -> bool:
        self.say(f"{run.name}: spawn on {run.host} via {run.via}, ending by {run.ending}")
        spawned = await (
            self.spawn_api(run, deadline) if run.via == "api" else self.spawn_cli(run, deadline)
        )
        if not spawned:
            return False
        shown = await self.status(run)
        if shown is None:
            return False
        run.run_dir = Path(str(shown["run_dir"]))
        run.run_id = str(shown["run_id"])
        run.pid = shown.get("pid") if isinstance(shown.get("pid"), int) else None
        return True

    async def spawn_api(self, run: Run, deadline: str | None) -> bool:
        for _attempt in range(5):
            try:
                run.handle = await spawn_remote(
                    "start", host=run.host, nats_url=self.cluster.urls, name=run.name,
                    provider="scripted", script=str(run.script),
                    deadline_s=None if deadline is None else float(deadline),
                )  # fmt: skip
                break
            except DaemonCallError as error:
                if error.code == "agent_exists":  # the first one landed after all
                    self.note(f"{run.name}: a spawn whose answer was lost had landed")
                    run.handle = await self.adopt(run)
                    break
                self.say(f"{run.name}: spawn_remote failed ({error}); again")
            except DaemonClientError as error:
                self.say(f"{run.name}: spawn_remote failed ({error}); again")
            await asyncio.sleep(1)
        else:
            self.violation(f"{run.name}: spawn_remote never succeeded")
            return False
        reading = asyncio.ensure_future(self.read_updates(run))
        run.handle._tasks.append(reading)
        return True

    async def spawn_cli(self, run: Run, deadline: str | None) -> bool:
        args = ["spawn", run.name, "--task", "start", "--script", str(run.script), "--json"]
        args += ["--provider", "scripted"]
        if deadline is not None:
            args += ["--deadline", deadline]
        for _attempt in range(5):
            code, out, err = await self.cli(run.host, *args)
            if code == 0:
                return True
            if "agent_exists" in err or "agent_exists" in out:
                self.note(f"{run.name}: a CLI spawn whose answer was lost had landed")
                return True
            self.say(f"{run.name}: CLI spawn exit {code}: {err.strip()[:200]}; again")
            await asyncio.sleep(1)
        self.violation(f"{run.name}: CLI spawn never succeeded")
        return False

    async def adopt(self, run: Run) -> RemoteRunHandle:
        """A handle on a run spawned already (what a parent whose spawn's answer was lost
        does: it reads the run's channels from their start)."""
        cluster = await connect(self.cluster.urls)
        status = await call_host(cluster, run.host, "agent.status", {"name": run.name})
        handle = RemoteRunHandle(cluster, run.host, run.name, str(status["run_id"]))
        handle.start()
        return handle

    async def read_updates(self, run: Run) -> None:
        import tether

        assert run.handle is not None
        async for update in run.handle.updates():
            if isinstance(update, tether.RunEvent):
                run.seen_seqs.append(update.event.seq)
            elif isinstance(update, tether.InboxItem):
                run.seen_inbox.append(update.message)

    def append_inbox(self, run: Run, text: str) -> None:
        assert run.run_dir is not None
        line = json.dumps({"type": "progress", "text": text}).encode() + b"\n"
        with (run.run_dir / "inbox.jsonl").open("ab") as shell:  # echo >> $TETHER_INBOX_PATH
            shell.write(line)
        run.appended.append(line.rstrip(b"\n"))
        self.say(f"{run.name}: appended {text} to its inbox")

    async def control(self, run: Run, kind: str, marker: str | None, rng: random.Random) -> Sent:
        fields: dict[str, Any] = {}
        if kind in ("steer", "follow_up"):
            fields["text"] = marker
        elif kind == "finalize":
            fields["note"] = marker
        via = run.via
        sent = Sent(kind, marker, via)
        run.sent.append(sent)
        if via == "api":
            assert run.handle is not None
            try:
                method = {
                    "steer": run.handle.steer,
                    "follow_up": run.handle.follow_up,
                    "finalize": run.handle.finalize,
                    "cancel": run.handle.cancel,
                }[kind]
                ack = await asyncio.wait_for(method(**fields), CLI_TIMEOUT_S)
                sent.outcome, sent.seq = "acked", ack.ref if isinstance(ack.ref, int) else None
            except TimeoutError:
                self.violation(f"{run.name}: {kind} via the API hung")
                sent.outcome = "error:hang"
            except (ControlRefused, RunEnded) as error:
                sent.outcome = f"refused:{error}"
            except DaemonCallError as error:
                sent.outcome = f"error:{error.code}"
                self.say(f"{run.name}: {kind} failed {error.code}: {error.message[:120]}")
            except DaemonClientError as error:  # no daemon of that host: it never got it
                sent.outcome = "error:unavailable"
                self.say(f"{run.name}: {kind} failed: {error}")
        else:
            verb = {"follow_up": "follow-up"}.get(kind, kind)
            args = [verb, run.name]
            if kind in ("steer", "follow_up"):
                args.append(str(marker))
            elif kind == "finalize":
                args += ["--note", str(marker)]
            code, out, err = await self.cli(run.host, *args, "--json")
            if code == 0:
                answer = json.loads(out)
                sent.outcome, sent.seq = "acked", answer.get("seq")
            else:
                sent.outcome = f"error:{_code(out, err)}"
                self.say(f"{run.name}: CLI {kind} exit {code}: {err.strip()[:160]}")
        self.say(f"{run.name}: {kind} {marker or ''} -> {sent.outcome} seq {sent.seq}")
        return sent

    async def ask(self, run: Run, marker: str) -> None:
        sent = Sent("ask", marker, "cli")
        run.sent.append(sent)
        code, out, err = await self.cli(run.host, "ask", run.name, marker, "--json")
        if code == 0:
            answer = json.loads(out)
            sent.outcome, sent.seq = "acked", answer.get("seq")
        else:
            sent.outcome = f"error:{_code(out, err)}"
        self.say(f"{run.name}: ask {marker} -> {sent.outcome} (exit {code}) {err.strip()[:120]}")

    async def end(self, run: Run, rng: random.Random) -> None:
        if run.ending == "close":
            await self.stop_close(run)
        elif run.ending in ("finalize", "cancel"):
            for attempt in range(5):
                marker = f"{run.name}:z{attempt}" if run.ending == "finalize" else None
                sent = await self.control(run, run.ending, marker, rng)
                if not sent.outcome.startswith("error:"):
                    break
                shown = await self.status(run)
                if shown is not None and shown.get("state") in EXPECTED.values():
                    break
                await asyncio.sleep(1)
        await self.wait_end(run)

    async def stop_close(self, run: Run) -> None:
        for _attempt in range(5):  # again while its host is away (it ends the run once)
            sent = Sent("close", None, "cli")
            run.sent.append(sent)
            code, out, err = await self.cli(
                run.host, "stop", run.name, "--mode", "close", "--timeout", "60", "--json"
            )
            sent.outcome = "acked" if code == 0 else f"error:{_code(out, err)}"
            self.say(f"{run.name}: stop --mode close -> exit {code} {err.strip()[:120]}")
            if code != 3:
                return
            await asyncio.sleep(1)

    async def wait_end(self, run: Run) -> None:
        """Until the run's exit is read, from the API handle or ``events --follow``."""
        if run.handle is not None:
            try:
                result = await asyncio.wait_for(run.handle.wait(), END_TIMEOUT_S)
                run.result_status = result.status
            except TimeoutError:
                self.violation(f"{run.name}: the API handle's wait() hung")
            self.say(f"{run.name}: ended {run.result_status} (API)")
            return
        last = 0
        began = time.monotonic()
        while time.monotonic() - began < END_TIMEOUT_S:
            code, out, _ = await self.cli(
                run.host, "events", run.name, "--after-seq", str(last), "--follow", "--json"
            )
            for line in out.splitlines():
                event = json.loads(line)
                if "seq" not in event:  # {"error": ...}: the host went away; resume
                    continue
                if event["seq"] != last + 1:
                    self.violation(
                        f"{run.name}: events --follow gave seq {event['seq']} after {last}"
                    )
                last = event["seq"]
                if event.get("type") == "exit":
                    run.cli_status = event.get("status")
            if run.cli_status is not None:
                self.say(f"{run.name}: ended {run.cli_status} (events --follow)")
                return
            self.say(f"{run.name}: events --follow exit {code} at seq {last}; resuming")
            await asyncio.sleep(0.5)
        self.violation(f"{run.name}: no exit read in {END_TIMEOUT_S}s")

    # -- the faults -------------------------------------------------------------------

    async def faults_loop(self) -> None:
        rng = random.Random(f"{self.seed}:faults")
        while self.working:
            await asyncio.sleep(rng.uniform(*self.fault_gap))
            if not self.working:
                return
            kind = rng.choice(("node", "daemon", "cut", "stall"))
            if kind == "stall":  # a node that hangs (its connections stay open, silent)
                index = rng.randrange(len(self.cluster.nodes))
                seconds = rng.uniform(1.0, self.stall_max)
                self.fault(f"SIGSTOP NATS node n{index} for {seconds:.1f}s")
                process = self.cluster.nodes[index].process
                process.send_signal(signal.SIGSTOP)
                await asyncio.sleep(seconds)
                process.send_signal(signal.SIGCONT)
                self.say(f"NATS node n{index} continued")
            elif kind == "node":
                index = rng.randrange(len(self.cluster.nodes))
                self.fault(f"SIGKILL NATS node n{index}")
                self.cluster.kill(index)
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                await asyncio.to_thread(self.cluster.restart, index)
                self.say(f"NATS node n{index} restarted")
            elif kind == "daemon":
                host = rng.choice(HOSTS)
                self.fault(f"SIGKILL host daemon {host}")
                self.daemons[host].stop(signal.SIGKILL)
                await asyncio.sleep(rng.uniform(0.2, 3.0))
                await asyncio.to_thread(self.restart_host, host)
                self.say(f"host daemon {host} restarted (pid {self.daemons[host].pid})")
            else:
                host = rng.choice(HOSTS)
                seconds = rng.uniform(1.0, 5.0)
                self.fault(f"cut host {host}'s NATS connections for {seconds:.1f}s")
                cuts = await self.cut(host, seconds)
                self.say(f"host {host} connected again ({cuts} connections cut)")

    def fault(self, text: str) -> None:
        self.faults.append(text)
        self.say(f"FAULT {text}")

    async def cut(self, host: str, seconds: float) -> int:
        """Abort every TCP connection of ``host``'s daemon to the cluster, again and
        again for ``seconds`` (its reconnects are cut too): the server stays up."""
        pid = self.daemons[host].pid
        ports = {node.port for node in self.cluster.nodes}
        cuts = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for local, remote in _connections(pid, ports):
                done = await asyncio.to_thread(
                    subprocess.run,
                    ["ss", "-K", "-tn", f"( sport = :{local} and dport = :{remote} )"],
                    capture_output=True,
                    check=False,
                )
                cuts += done.returncode == 0
            await asyncio.sleep(0.05)
        return cuts

    # -- the checks -------------------------------------------------------------------

    async def check(self, run: Run) -> None:
        if run.run_dir is None or run.run_id is None:
            return
        directory = run.run_dir
        controls = _lines(directory / "control.jsonl")
        events = _lines(directory / "events.jsonl")
        inbox = _lines(directory / "inbox.jsonl")
        decoded = [json.loads(line) for line in events]
        seqs = [event["seq"] for event in decoded]
        if seqs != list(range(1, len(seqs) + 1)):
            self.violation(f"{run.name}: event seqs are not 1..N: {_gaps(seqs)}")
        if not decoded or decoded[-1]["type"] != "exit":
            self.violation(f"{run.name}: its event log does not end with an exit")
        self.check_status(run, decoded[-1].get("status") if decoded else None)
        self.check_acks(run, controls, decoded)
        self.check_sent(run, controls)
        self.check_inbox_file(run, inbox)
        await self.check_jetstream(run, controls, events, inbox)
        self.check_sqlite(run, directory / "inbox.jsonl")
        await self.check_events_verb(run, events)
        if run.handle is not None:
            self.check_handle(run, seqs, inbox)
        if run.pid is not None and not await asyncio.to_thread(_gone, run.pid, 30.0):
            self.violation(f"{run.name}: its child {run.pid} is alive after its exit")

    def check_acks(self, run: Run, controls: list[bytes], decoded: list[dict[str, Any]]) -> None:
        control_seqs = [json.loads(line)["seq"] for line in controls]
        if len(control_seqs) != len(set(control_seqs)):
            self.violation(f"{run.name}: a control seq twice in control.jsonl: {control_seqs}")
        acks: dict[int, int] = {}
        for event in decoded:
            if event["type"] == "control-ack":
                acks[event["ref"]] = acks.get(event["ref"], 0) + 1
        for seq in control_seqs:
            if acks.get(seq, 0) != 1:
                self.violation(f"{run.name}: control {seq} acked {acks.get(seq, 0)} times")
        for ref in set(acks) - set(control_seqs):
            self.violation(f"{run.name}: an ack for control {ref}, not in control.jsonl")

    def check_status(self, run: Run, status: object) -> None:
        want = EXPECTED[run.ending]
        ends = [s for s in run.sent if s.kind in ("finalize", "cancel", "close")]
        if status != want:
            self.violation(f"{run.name}: ended {status}, ended by {run.ending} ({ends})")
        for seen in (run.result_status, run.cli_status):
            if seen is not None and seen != status:
                self.violation(f"{run.name}: the driver read status {seen}, the log says {status}")

    def check_sent(self, run: Run, controls: list[bytes]) -> None:
        texts = [json.loads(line) for line in controls]
        for sent in run.sent:
            if sent.marker is None:
                continue
            found = [c for c in texts if sent.marker in (c.get("text"), c.get("note"))]
            landed = len(found)
            if sent.outcome == "acked" and landed != 1:
                self.violation(f"{run.name}: {sent.kind} {sent.marker} acked, in the log {landed}x")
            elif sent.outcome == "acked" and sent.seq is not None and found[0]["seq"] != sent.seq:
                logged = found[0]["seq"]
                self.violation(
                    f"{run.name}: {sent.marker} answered seq {sent.seq}, logged {logged}"
                )
            elif sent.outcome.startswith("error:") and landed > 1:
                self.violation(f"{run.name}: {sent.marker} failed yet is in the log {landed}x")
            elif sent.outcome.startswith("error:"):
                code = sent.outcome[6:]
                if code not in UNKNOWN and landed:
                    self.violation(f"{run.name}: {sent.marker} failed {code} but landed")
                self.note(
                    f"{run.name}: {sent.kind} {sent.marker} failed {code}; "
                    f"{'it landed' if landed else 'it did not land'}"
                )

    def check_inbox_file(self, run: Run, inbox: list[bytes]) -> None:
        texts = [json.loads(line).get("text") for line in inbox]
        for line in run.appended:
            count = inbox.count(line)
            if count != 1:
                self.violation(f"{run.name}: the shell line {line!r} is in the inbox {count}x")
        for text in set(texts):
            if texts.count(text) != 1:
                self.violation(f"{run.name}: inbox line {text!r} {texts.count(text)}x")

    async def check_jetstream(
        self, run: Run, controls: list[bytes], events: list[bytes], inbox: list[bytes]
    ) -> None:
        from tether.transports.jetstream import open_jetstream

        assert run.run_id is not None
        channel = await open_jetstream(self.cluster.urls)
        try:
            for name, local in (
                (control_channel(run.host, run.run_id), controls),
                (events_channel(run.host, run.run_id), events),
                (inbox_channel(run.host, run.run_id), inbox),
            ):
                end = time.monotonic() + 60  # forwarding catches up; a bound
                while True:
                    got = [entry.data for entry in await read_all(channel, name, len(local))]
                    if got == local:
                        break
                    if time.monotonic() > end or len(got) > len(local):
                        self.violation(
                            f"{run.name}: {name} in JetStream has {len(got)} lines, "
                            f"the file {len(local)}: {_diff(got, local)}"
                        )
                        break
                    await asyncio.sleep(0.5)
        finally:
            await channel.aclose()

    def check_sqlite(self, run: Run, path: Path) -> None:
        db = Path(self.daemons[run.host].env["TETHER_HOME"]) / "tether.db"
        offsets = _line_offsets(path)
        with contextlib.closing(sqlite3.connect(db)) as con:
            rows = [
                row[0]
                for row in con.execute(
                    "SELECT offset FROM inbox_messages WHERE run_id = ? ORDER BY offset",
                    (run.run_id,),
                )
            ]
        if rows != offsets:
            self.violation(f"{run.name}: inbox rows in SQLite at {rows}, lines at {offsets}")

    async def check_events_verb(self, run: Run, events: list[bytes]) -> None:
        args = ("events", run.name, "--after-seq", "0", "--json", "--limit", "10000")
        code, out, err = await self.cli(run.host, *args)
        if code != 0:
            self.violation(f"{run.name}: events --after-seq 0 exit {code}: {err.strip()[:200]}")
            return
        got = [json.loads(line) for line in out.splitlines()]
        if got != [json.loads(line) for line in events]:
            self.violation(
                f"{run.name}: events --after-seq 0 gave {len(got)} events, the log {len(events)}"
            )

    def check_handle(self, run: Run, seqs: list[int], inbox: list[bytes]) -> None:
        first = run.seen_seqs[0] if run.seen_seqs else 1
        if run.seen_seqs != seqs[first - 1 :]:
            self.violation(f"{run.name}: the API handle saw seqs {_gaps(run.seen_seqs)}")
        want = [json.loads(line) for line in inbox]
        if run.seen_inbox != want:
            self.violation(
                f"{run.name}: the API handle saw {len(run.seen_inbox)} inbox lines, "
                f"the file has {len(want)}; missing {[m for m in want if m not in run.seen_inbox]}"
            )

    def check_no_orphans(self) -> None:
        for host, daemon in self.daemons.items():
            left = agent_pids(Path(daemon.env["TETHER_HOME"]))
            if left:
                self.violation(f"host {host}: agent processes left after stop: {left}")

    # -- the whole ----------------------------------------------------------------------

    async def main(self) -> None:
        faults = asyncio.ensure_future(self.faults_loop())
        self.runs = [self.make_run(i) for i in range(self.count)]
        drives = []
        for run in self.runs:
            drives.append(asyncio.ensure_future(self.drive(run)))
            await asyncio.sleep(self.rng.uniform(0.1, 1.5))
        await asyncio.gather(*drives)
        self.working = False
        await faults
        self.say("workload done; checking")
        for run in self.runs:
            await self.check(run)
            if run.handle is not None:
                await run.handle.release()


def _gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exits within ``timeout`` (a child reaped by its daemon: polled)."""
    end = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def _code(out: str, err: str) -> str:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return str(json.loads(out)["error"]["code"])
    for code in ("shutting_down", "busy", "invalid_status", "agent_not_found", "internal"):
        if code in err:
            return code
    return "unknown"


def _lines(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    return [line for line in path.read_bytes().split(b"\n")[:-1] if line]


def _line_offsets(path: Path) -> list[int]:
    offsets, at = [], 0
    data = path.read_bytes() if path.exists() else b""
    for line in data.split(b"\n")[:-1]:
        if line:
            offsets.append(at)
        at += len(line) + 1
    return offsets


def _gaps(seqs: list[int]) -> str:
    doubles = sorted({s for s in seqs if seqs.count(s) > 1})
    missing = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
    return f"{len(seqs)} seqs, doubled {doubles[:10]}, missing {missing[:10]}"


def _diff(got: list[bytes], want: list[bytes]) -> str:
    doubled = [line[:60] for line in set(got) if got.count(line) > 1]
    missing = [line[:60] for line in want if line not in got]
    return f"doubled {doubled[:3]}, missing {missing[:3]}"


def _connections(pid: int, ports: set[int]) -> list[tuple[int, int]]:
    """(local port, server port) of ``pid``'s established TCP connections to ``ports``."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    found = []
    with open("/proc/net/tcp") as table:
        for row in table.readlines()[1:]:
            parts = row.split()
            local, remote, state, inode = parts[1], parts[2], parts[3], parts[9]
            remote_port = int(remote.split(":")[1], 16)
            if state == "01" and inode in inodes and remote_port in ports:
                found.append((int(local.split(":")[1], 16), remote_port))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--fault-gap", default="2,6", help="LO,HI seconds between faults")
    parser.add_argument("--stall-max", type=float, default=8.0, help="longest node SIGSTOP")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="chaos"))
    print(f"seed {args.seed}, {args.runs} runs, in {root}; load {os.getloadavg()[0]:.1f}")
    chaos: Chaos | None = None
    try:
        with run_nats_cluster(root / "cluster", 3) as cluster:
            chaos = Chaos(args.seed, args.runs, root, cluster)
            low, high = (float(part) for part in args.fault_gap.split(","))
            chaos.fault_gap = (low, high)
            chaos.stall_max = args.stall_max
            chaos.start_hosts()
            asyncio.run(chaos.main())
            chaos.stop_hosts()
            chaos.check_no_orphans()
    finally:
        if chaos is not None:
            chaos.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    assert chaos is not None
    took = time.monotonic() - chaos.started
    print(f"\nseed {args.seed}: {len(chaos.runs)} runs, {len(chaos.faults)} faults, {took:.0f} s")
    for fault in chaos.faults:
        print(f"  fault: {fault}")
    for note in chaos.notes:
        print(f"  note: {note}")
    print(f"{len(chaos.violations)} violations; load {os.getloadavg()[0]:.1f}")
    for violation in chaos.violations:
        print(f"  VIOLATION {violation}")
    sys.exit(4 if chaos.violations else 0)


if __name__ == "__main__":
    main()
