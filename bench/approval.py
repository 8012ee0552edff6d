"""An approval's round trip through the daemon, beside its floor in the same run.

    python bench/approval.py [--rounds 30] [--refused 5]

One real daemon (``python -m tether daemon --foreground``) and one built-in agent spawned
with ``approval: "ask"`` on the scripted provider. Each round is a turn: the model asks for
a ``bash`` call (``printf '%s\\n' "$EPOCHREALTIME" >> started``), the agent's approval desk
writes the request and waits; once ``agent.status`` shows it ``waiting``, this script calls
``agent.answer {decision: approve}`` (the daemon records it and sends the ``answer``
control; the call returns with the child's ack) and notes when the reply arrived. The
approved tool's start is the time bash wrote, on the same clock (``CLOCK_REALTIME``).

Measured per round: the ``agent.answer`` round trip, and from the answer's ack (its reply
read here) to the approved tool starting. The **floor**, in the same rounds: ``agent.answer``
of the question answered the round before (refused ``invalid_status``: the same call, its
look-up and refusal, nothing sent to the child), ``--refused`` times a round.

Target (issue 29): the approved tool starts <= 5 ms p50 after the answer is acked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bytecode import compile_tether  # bench/bytecode.py: tether as installed

from daemon import start_servers, stop_servers  # bench/daemon.py: a daemon under one dir
from tether.daemon.rpc.client import DaemonCallError, DaemonClient

NAME = "approver"
POLL_S = 0.002  # agent.status while waiting for the request (not in any measured span)
WAIT_S = 60.0


def script(path: Path, started: Path, rounds: int) -> Path:
    command = f"printf '%s\\n' \"$EPOCHREALTIME\" >> {started}"
    bash = {"name": "bash", "arguments": {"command": command}}
    turn = [{"text": "Running it.", "tool_calls": [bash]}, {"text": "Done."}]
    path.write_text(json.dumps(turn * rounds))
    return path


def until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"never got: {what}")
        time.sleep(POLL_S)


def status(client: DaemonClient) -> dict[str, Any]:
    answer: dict[str, Any] = client.call("agent.status", {"name": NAME})
    return answer


def lines(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def one_round(
    client: DaemonClient, started: Path, done: int, turn: int
) -> tuple[float, float, str]:
    """Answer the waiting approval; (the answer's round trip, ack to the tool's start, key)."""
    waiting = until("the approval request", lambda: status(client).get("waiting"))
    key = waiting["key"]
    params = {"name": NAME, "key": key, "decision": "approve"}
    sent = time.perf_counter()
    result = client.call("agent.answer", params)
    acked_at = time.time()
    trip = time.perf_counter() - sent
    if result["ack"] == "rejected":
        raise SystemExit(f"the answer was refused: {result}")
    stamps = until("the tool's start", lambda: (got := lines(started)) and len(got) > done and got)
    tool_at = float(stamps[done].replace(",", "."))
    until("the turn's end", lambda: _ready(status(client), turn))
    return trip, tool_at - acked_at, key


def _ready(row: dict[str, Any], turn: int) -> bool:
    return row["state"] == "ready" and row["turn"] >= turn


def refused(client: DaemonClient, key: str, count: int) -> list[float]:
    """``agent.answer`` of an answered question: each refused call's round trip."""
    out = []
    for _ in range(count):
        sent = time.perf_counter()
        try:
            client.call("agent.answer", {"name": NAME, "key": key, "decision": "approve"})
        except DaemonCallError as error:
            if "answered" not in error.message:
                raise
        else:
            raise SystemExit("a second answer was accepted")
        out.append(time.perf_counter() - sent)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.2f} ms, p99 {pct(values, 0.99) * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--refused", type=int, default=5, help="floor calls a round")
    args = parser.parse_args()
    compile_tether()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="ta"))
    daemon, path, echo, _ = start_servers(root)
    started = root / "started"
    trips: list[float] = []
    delays: list[float] = []
    floor: list[float] = []
    try:
        client = DaemonClient.connect(path)
        client.settimeout(WAIT_S)
        spawn = {
            "name": NAME,
            "provider": "scripted",
            "script": str(script(root / "script.json", started, args.rounds)),
            "cwd": str(root),
            "approval": "ask",
            "task": "run it",
        }
        client.call("agent.spawn", spawn)
        for turn in range(1, args.rounds + 1):
            if turn > 1:
                client.call("agent.follow_up", {"name": NAME, "text": "again"})
            trip, delay, key = one_round(client, started, turn - 1, turn)
            trips.append(trip)
            delays.append(delay)
            floor += refused(client, key, args.refused)
        client.call("agent.stop", {"name": NAME, "mode": "cancel"})
        client.close()
    finally:
        stop_servers(root, daemon, echo)
    print(
        f"{args.rounds} approvals: agent.answer (approve) {ms(trips)}; the approved tool "
        f"started {ms(delays)} after the answer's ack"
    )
    print(f"floor: agent.answer of an answered question (refused), {ms(floor)}")
    p50 = statistics.median(delays) * 1000
    print(
        f"  target: the approved tool starts <= 5 ms p50 after the ack: {p50:.2f} ms "
        f"({'met' if p50 <= 5 else 'MISSED'}); the answer's round trip "
        f"{statistics.median(trips) / statistics.median(floor):.2f}x the floor's (p50)"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
