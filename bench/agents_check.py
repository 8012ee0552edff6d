"""Plays issue 12's check against the real agent CLIs: own scripts, own timings.

For each installed CLI (Claude Code, Codex app-server, pi, Gemini CLI over ACP,
claude-code-acp), each scenario runs it against its own scripted model server
(``tether.modelserver``) with replies unlike the test suite's: thinking, several text
chunks with non-ASCII and escaped text, two tool calls in one reply, a reply longer
than one wire line (``final-text-path``), a slow first byte, usage counters, a
``max_tokens`` stop, an empty reply, and tools that take seconds, ignore SIGTERM or
leave a daemonized grandchild behind. It drives the run through ``tether run --agent
NAME`` (steer and follow-up as stdin lines, finalize and cancel as SIGINT, a deadline)
and through ``tether.spawn(agent=NAME)`` (steer, follow-up, finalize, cancel and a
deadline inside a long tool, the CLI SIGKILLed mid-stream), then checks each run's
events.jsonl with the test suite's checker (``tests/adapters/cli_helpers.check_wire``:
every line a valid event, one ack per control before its effects, one result right
before ``exit done``, paired turns with stop reasons and summed usage, a failed or
timed-out exit says why), what the capability table says steer and cancel do, and that no
process carrying the run's mark survives it.

Usage: ``flock /tmp/tether-bench.lock .venv/bin/python bench/agents_check.py [--agent
NAME]... [--scenario NAME]...``; prints one line per (CLI, scenario), PASS or FAIL with
what broke, and exits 1 when anything failed. One CLI takes 1-3 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.adapters.agent_world import (  # noqa: E402
    CHECKED,
    Setup,
    World,
    of,
    until,
)
from tests.adapters.cli_helpers import (  # noqa: E402
    assert_no_survivors,
    check_wire,
    kill_marked,
    read_events,
    require_program,
)

from tether.modelserver import open_model_server  # noqa: E402

Event = dict[str, Any]
# ~100 KB, longer than one wire line (so final-text-path); no two lines alike (Gemini CLI
# cuts a reply that repeats itself: its loop detection)
LONG = "".join(
    f'Ωmega línea {n} {hashlib.sha256(str(n).encode()).hexdigest()[:40]} — "q" \\b\\ \t🚀\n'
    for n in range(1300)
)
RICH_TEXT = ["Ünïcødé ", "chunk\twith tab ", 'and "quotes" ', "✓ done\n", "second line"]
THINKING = ["Let me think… ", "∑ of the \\parts\\ ", "is <b>bold</b>."]


def calls(setup: Setup, *commands: str) -> list[dict[str, Any]]:
    client = setup.client
    return [{"name": client.shell_tool, "arguments": client.tool_args(c)} for c in commands]


def tool_reply(setup: Setup, *commands: str, **extra: Any) -> list[dict[str, Any]]:
    """One reply calling the CLI's shell tool with ``commands`` (one call each)."""
    return [{"text": "Running them.", "tool_calls": calls(setup, *commands), **extra}]


class Check:
    """One (CLI, scenario): its world, a model server, the checks of its runs."""

    def __init__(self, name: str, setup: Setup, program: str, tmp: Path, script: list[Any]):
        self.name = name
        self.setup = setup
        tmp.mkdir(parents=True, exist_ok=True)  # the server's log is created in it
        self.manager = open_model_server(script, log=tmp / "requests.jsonl")
        server = self.manager.__enter__()
        self.world = World(setup, tmp, program, server)

    def close(self) -> None:
        kill_marked(self.world.mark)
        self.manager.__exit__(None, None, None)

    def checked(self, run_dir: Path) -> list[Event]:
        events = read_events(run_dir / "events.jsonl")
        check_wire(events, read_events(run_dir / "control.jsonl"))
        assert_no_survivors(self.world.mark)
        # every model call is closed, as the built-in agent closes one (ended or not)
        calls = [e["type"] for e in events if e["type"] in ("llm-start", "llm-end")]
        assert calls == ["llm-start", "llm-end"] * (len(calls) // 2), calls
        return events

    def tether_run(self, *args: str, stdin: str | None = None) -> subprocess.Popen[str]:
        world = self.world
        agent = ["--agent", self.setup.agent, *(f"--agent-arg={a}" for a in world.agent_args)]
        tail = ["--", *self.setup.command] if self.setup.command else []
        feed = [] if stdin is not None else ["--no-stdin"]
        argv = [sys.executable, "-m", "tether", "run", *feed, *agent, *args, *tail]
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=world.env,
            cwd=world.work,
        )

    def wait_event(self, kind: str, timeout: float = 90) -> Event:
        """The first ``kind`` event of the `tether run` run (polls its events.jsonl)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for path in (self.world.root / "tether-home").glob("**/events.jsonl"):
                for line in path.read_text().splitlines():
                    if line.strip() and json.loads(line)["type"] == kind:
                        return json.loads(line)
            time.sleep(0.05)
        raise AssertionError(f"no {kind} event within {timeout} s")


def finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"tether run hung; stderr: {err[-2000:]}") from None
    return process.returncode, out, err


# -- tether run --agent NAME ----------------------------------------------------------------


def run_rich_script(setup: Setup) -> list[Any]:
    tools = tool_reply(
        setup,
        "printf 'a\\\\nb' > one.txt; sleep 1",
        'echo "ß→✓ \\"q\\"" > two.txt',
        thinking=THINKING,
        chunk_ms=40,
        usage={"input": 111, "output": 22},
    )
    tools[0]["text"] = RICH_TEXT
    return [*tools, {"text": LONG, "usage": {"input": 333, "output": 44}, "delay_ms": 700}]


def run_rich(check: Check) -> None:
    code, out, err = finish(check.tether_run("two tools then a long answer"))
    assert code == 0, (code, err[-2000:])
    assert out.rstrip("\n") == LONG.rstrip("\n"), (len(out), out[:200])
    work = check.world.work
    assert (work / "one.txt").read_text() == "a\\nb", (work / "one.txt").read_text()
    assert (work / "two.txt").read_text() == 'ß→✓ "q"\n'
    events = check.checked(check.world.cli_run_dir())
    assert len(of(events, "tool-call")) == 2, of(events, "tool-call")
    results = of(events, "tool-result")
    assert len(results) == 2, results
    ids = {e.get("id") for e in of(events, "tool-call")}
    assert {e.get("tool-call-id") for e in results} == ids, (ids, results)
    result = of(events, "result")[0]
    assert result.get("truncated?") is True, result
    assert result.get("final-text-path"), result
    deltas = "".join(e.get("delta", "") for e in of(events, "assistant-text-delta"))
    assert 'Ünïcødé chunk\twith tab and "quotes" ✓ done' in deltas, deltas[:300]
    if check.name not in ("gemini",):  # ACP from Gemini CLI carries thoughts; see below
        thinking = "".join(e.get("delta", "") for e in of(events, "assistant-thinking-delta"))
        assert "∑ of the \\parts\\" in thinking, thinking
    if check.setup.reports_usage:
        usage = of(events, "turn-complete")[0].get("usage", {})
        assert usage.get("output", 0) >= 22 + 44, usage


def run_max_tokens_script(setup: Setup) -> list[Any]:
    return [{"text": "Cut off in the mid", "stop_reason": "max_tokens", "delay_ms": 2500}]


def run_max_tokens(check: Check) -> None:
    code, _out, err = finish(check.tether_run("say something long"))
    events = check.checked(check.world.cli_run_dir())
    stops = [e["stop-reason"] for e in of(events, "turn-complete")]
    assert code in (0, 4), (code, err[-1000:])
    assert stops, "no turn-complete"
    # Gemini CLI 0.61.0 answers every finished session/prompt `end_turn` (ACP has
    # max_tokens; it never sends it): its stop reason is the CLI's, `stop`
    expected_stop = check.name == "gemini"
    assert expected_stop or stops[-1] != "stop", f"a max_tokens stop reported as {stops}"


def run_empty_script(setup: Setup) -> list[Any]:
    return [{}, {}, {}]


def run_empty(check: Check) -> None:
    code, _out, err = finish(check.tether_run("say nothing"))
    events = check.checked(check.world.cli_run_dir())
    status = events[-1]["status"]
    assert (code, status) in ((0, "done"), (4, "done"), (4, "failed")), (code, status, err[-800:])


def run_steer_stdin_script(setup: Setup) -> list[Any]:
    return [*tool_reply(setup, "sleep 3; echo slow"), *[{"text": "Answered ünï."}] * 4]


def run_steer_stdin(check: Check) -> None:
    process = check.tether_run("work then listen", stdin="")
    assert process.stdin is not None
    check.wait_event("tool-call")
    process.stdin.write("STEER ÜBER ALLES\n+FOLLOW «UP»\n")
    process.stdin.flush()
    check.wait_event("follow-up-injected")
    process.stdin.close()
    process.stdin = None
    code, out, err = finish(process)
    assert code == 0, (code, err[-1500:])
    assert out.strip() == "Answered ünï.", out
    events = check.checked(check.world.cli_run_dir())
    assert [e["text"] for e in of(events, "steering-injected")] == ["STEER ÜBER ALLES"]
    assert [e["text"] for e in of(events, "follow-up-injected")] == ["FOLLOW «UP»"]
    texts = check.world.all_model_texts()
    assert "STEER \\u00dcBER ALLES" in texts or "STEER ÜBER ALLES" in texts


def run_sigint_script(setup: Setup) -> list[Any]:
    return [tool_reply(setup, "sleep 40")[0], {"text": "Wrapped up."}]


def run_sigint_finalize(check: Check) -> None:
    process = check.tether_run("long work")
    check.wait_event("tool-call")
    process.send_signal(signal.SIGINT)
    code, out, err = finish(process)
    assert code == 0, (code, err[-1500:])
    assert out.strip() == "Wrapped up.", out
    events = check.checked(check.world.cli_run_dir())
    assert [e["stop-reason"] for e in of(events, "turn-complete")] == ["aborted", "stop"]


def run_sigint_cancel(check: Check) -> None:
    process = check.tether_run("long work")
    check.wait_event("tool-call")
    process.send_signal(signal.SIGINT)
    check.wait_event("control-ack")
    process.send_signal(signal.SIGINT)
    code, _out, err = finish(process)
    events = check.checked(check.world.cli_run_dir())
    assert (code, events[-1]["status"]) in ((3, "cancelled"), (0, "done")), (code, err[-800:])


def run_deadline_script(setup: Setup) -> list[Any]:
    return tool_reply(setup, "trap '' TERM; sleep 45")


def run_deadline(check: Check) -> None:
    limit = f"{check.setup.deadline_s + 4:g}"
    process = check.tether_run("--deadline", limit, "--finalize-before", "0", "long work")
    code, _out, err = finish(process)
    events = check.checked(check.world.cli_run_dir())
    assert code == 5, (code, err[-1500:])
    assert events[-1]["status"] == "timed-out"
    assert of(events, "tool-call"), "the deadline did not land inside the tool"


# -- tether.spawn(agent=NAME) ---------------------------------------------------------------


def spawn_steer_script(setup: Setup) -> list[Any]:
    slow = tool_reply(setup, "sleep 4; echo done-sleeping", thinking=["Planning… "])
    return [*slow, *[{"text": ["Steered ", "answer ✓"], "chunk_ms": 80}] * 4]


async def spawn_steer(check: Check) -> None:
    world = check.world
    handle = await world.spawn("a task with a slow tool")
    updates = handle.updates()
    await until(updates, "tool-call")
    steer = await handle.steer("NEW DIRECTION: ΑΒΓ")
    assert steer.status == "accepted", steer
    await until(updates, "steering-injected")
    follow = await handle.follow_up("THEN A SUMMARY")
    assert follow.status == "accepted", follow
    result = await handle.wait()
    assert result.status == "done", result
    assert result.final_text == "Steered answer ✓", result.final_text
    events = check.checked(handle.run_dir.path)
    # native steers join the running turn; ACP's opens the next prompt of the same turn
    assert len(of(events, "turn-started")) == 1, of(events, "turn-started")
    texts = world.all_model_texts()
    assert "NEW DIRECTION" in texts
    assert "THEN A SUMMARY" in texts


def spawn_finalize_script(setup: Setup) -> list[Any]:
    call = tool_reply(setup, "sleep 50", thinking=THINKING)[0]
    last = {"text": ["Final ", "from ", "what I have ✓"], "usage": {"input": 5, "output": 7}}
    return [call, last]


async def spawn_finalize(check: Check) -> None:
    handle = await check.world.spawn("work long")
    updates = handle.updates()
    await until(updates, "tool-call")
    ack = await handle.finalize("FINISH NOW — ÿ")
    assert ack.status == "accepted", ack
    result = await handle.wait()
    assert result.status == "done", result
    assert result.final_text == "Final from what I have ✓", result.final_text
    events = check.checked(handle.run_dir.path)
    stops = [e["stop-reason"] for e in of(events, "turn-complete")]
    assert stops == ["aborted", "stop"], stops
    assert "FINISH NOW" in check.world.all_model_texts()


def spawn_cancel_script(setup: Setup) -> list[Any]:
    # a grandchild that leaves its parent's process group behind (setsid), then a long tool
    return tool_reply(setup, "setsid sleep 97 & sleep 41")


async def spawn_cancel(check: Check) -> str:
    handle = await check.world.spawn("work long")
    updates = handle.updates()
    await until(updates, "tool-call")
    await asyncio.sleep(1.0)  # bench only: let the tool start its grandchild
    return await _cancelled_in_time(check, handle)


async def _cancelled_in_time(check: Check, handle: Any) -> str:
    """Cancel now; the run must end ``cancelled`` within 2 s, and pass the checks."""
    loop = asyncio.get_running_loop()
    asked = loop.time()
    ack = await handle.cancel()
    assert ack is None or ack.status == "accepted", ack
    result = await handle.wait()
    took = loop.time() - asked
    assert result.status == "cancelled", result
    check.checked(handle.run_dir.path)
    assert took < 2.0, f"exit cancelled {took:.2f} s after cancel"
    return f"cancelled {took:.2f} s after cancel"


def spawn_cancel_stream_script(setup: Setup) -> list[Any]:
    return [{"text": ["slow "] * 60, "chunk_ms": 500, "delay_ms": 300}]


async def spawn_cancel_stream(check: Check) -> None:
    handle = await check.world.spawn("stream slowly")
    updates = handle.updates()
    await until(updates, "assistant-text-delta")
    ack = await handle.cancel()
    assert ack is None or ack.status == "accepted", ack
    result = await handle.wait()
    assert result.status == "cancelled", result
    check.checked(handle.run_dir.path)


def spawn_deadline_script(setup: Setup) -> list[Any]:
    return tool_reply(setup, "sleep 2; sleep 60")


async def spawn_deadline(check: Check) -> str:
    limit = check.setup.deadline_s + 3
    asked = time.time()
    handle = await check.world.spawn("work long", deadline_s=limit)
    updates = handle.updates()
    await until(updates, "tool-call")
    result = await handle.wait()
    late = time.time() - math.ceil(asked + limit)  # an upper bound: the wire's is ceil'd
    assert result.status == "timed-out", result
    assert late < 1.5, f"exit timed-out at most {late:.2f} s after the deadline"
    events = check.checked(handle.run_dir.path)
    assert events[-1]["error"] == "run deadline exceeded", events[-1]
    return f"timed-out <= {late:.2f} s after the deadline"


def spawn_kill_script(setup: Setup) -> list[Any]:
    return [{"text": ["streaming "] * 40, "chunk_ms": 400}, {"text": "never"}]


async def spawn_kill(check: Check) -> None:
    handle = await check.world.spawn("stream then die")
    updates = handle.updates()
    await until(updates, "assistant-text-delta")
    check.world.kill_cli()
    result = await handle.wait()
    events = check.checked(handle.run_dir.path)
    assert result.status in ("done", "failed"), result
    if result.status == "done":
        assert result.stop_reason == "error", result
    errors = " ".join(e.get("error", "") for e in [*of(events, "error"), events[-1]])
    assert "signal 9" in errors or "closed its stdout" in errors, errors


async def spawn_kill_tool(check: Check) -> None:
    handle = await check.world.spawn("a tool, then the CLI dies")
    updates = handle.updates()
    await until(updates, "tool-call")
    await asyncio.sleep(1.0)  # bench only: let the tool start its grandchild
    check.world.kill_cli()
    result = await handle.wait()
    check.checked(handle.run_dir.path)  # the setsid grandchild is gone too
    assert result.status in ("done", "failed"), result


def run_bad_flag_script(setup: Setup) -> list[Any]:
    return [{"text": "never"}]


def run_bad_flag(check: Check) -> None:
    check.world.agent_args = [*check.world.agent_args, "--no-such-flag-xyz"]
    code, _out, err = finish(check.tether_run("hi"))
    events = check.checked(check.world.cli_run_dir())
    if check.name == "claude-code-acp":  # it ignores arguments it does not know
        assert code == 0, (code, err[-800:])
        return
    assert code == 4, (code, err[-800:])
    assert events[-1]["status"] == "failed", events[-1]
    assert "such-flag-xyz" in events[-1]["error"], events[-1]  # yargs: no-X negates X


def spawn_first_byte_script(setup: Setup) -> list[Any]:
    return [{"text": "too late", "delay_ms": 30000}]


async def spawn_cancel_first_byte(check: Check) -> str:
    handle = await check.world.spawn("wait for the model")
    updates = handle.updates()
    await until(updates, "user")
    await asyncio.sleep(1.5)  # bench only: the model call is in flight, no byte yet
    return await _cancelled_in_time(check, handle)


def spawn_finalize_stream_script(setup: Setup) -> list[Any]:
    return [{"text": ["slow "] * 40, "chunk_ms": 300}, {"text": ["Last ", "word ✓"]}]


async def spawn_finalize_stream(check: Check) -> None:
    handle = await check.world.spawn("stream, then wrap up")
    updates = handle.updates()
    await until(updates, "assistant-text-delta")
    ack = await handle.finalize()
    assert ack.status == "accepted", ack
    result = await handle.wait()
    assert result.status == "done", result
    assert result.final_text == "Last word ✓", result.final_text
    events = check.checked(handle.run_dir.path)
    stops = [e["stop-reason"] for e in of(events, "turn-complete")]
    assert stops == ["aborted", "stop"], stops


Scenario = Callable[[Check], Any]
SCENARIOS: dict[str, tuple[Callable[[Setup], list[Any]], Scenario]] = {
    "run-rich": (run_rich_script, run_rich),
    "run-max-tokens": (run_max_tokens_script, run_max_tokens),
    "run-empty": (run_empty_script, run_empty),
    "run-steer-stdin": (run_steer_stdin_script, run_steer_stdin),
    "run-sigint-finalize": (run_sigint_script, run_sigint_finalize),
    "run-sigint-cancel": (run_sigint_script, run_sigint_cancel),
    "run-deadline": (run_deadline_script, run_deadline),
    "spawn-steer": (spawn_steer_script, spawn_steer),
    "spawn-finalize": (spawn_finalize_script, spawn_finalize),
    "spawn-cancel": (spawn_cancel_script, spawn_cancel),
    "spawn-cancel-stream": (spawn_cancel_stream_script, spawn_cancel_stream),
    "spawn-deadline": (spawn_deadline_script, spawn_deadline),
    "spawn-kill": (spawn_kill_script, spawn_kill),
    "spawn-kill-tool": (spawn_cancel_script, spawn_kill_tool),
    "run-bad-flag": (run_bad_flag_script, run_bad_flag),
    "spawn-cancel-first-byte": (spawn_first_byte_script, spawn_cancel_first_byte),
    "spawn-finalize-stream": (spawn_finalize_stream_script, spawn_finalize_stream),
}


def program_for(setup: Setup) -> str:
    from tether.runtime.child.adapters.registry import AGENTS

    first = setup.command[0] if setup.command else AGENTS[setup.program].command[0]
    return require_program(first, AGENTS[setup.agent].package or first)


def play(name: str, scenario: str, tmp: Path) -> tuple[str | None, str]:
    """(what broke or None, a measured figure or "")."""
    setup = CHECKED[name]
    make_script, body = SCENARIOS[scenario]
    check = Check(name, setup, program_for(setup), tmp, make_script(setup))
    try:
        outcome = body(check)
        if isinstance(outcome, Awaitable):
            outcome = asyncio.run(asyncio.wait_for(_awaited(outcome), 180))
        return None, outcome if isinstance(outcome, str) else ""
    except BaseException as exc:  # a bench reports every failure and goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        where = "".join(traceback.format_tb(exc.__traceback__)[-2:])
        return "".join(traceback.format_exception_only(exc)).strip()[-1500:] + "\n" + where, ""
    finally:
        check.close()


async def _awaited(outcome: Awaitable[Any]) -> Any:
    return await outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", action="append", choices=sorted(CHECKED))
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args()
    failed = 0
    root = Path(tempfile.mkdtemp(prefix="tether-agents-check-"))
    for name in args.agent or sorted(CHECKED):
        for scenario in args.scenario or list(SCENARIOS):
            started = time.monotonic()
            problem, figure = play(name, scenario, root / f"{name}-{scenario}")
            took = time.monotonic() - started
            verdict = "PASS" if problem is None else "FAIL"
            failed += problem is not None
            print(f"{verdict} {name:16} {scenario:20} {took:5.1f} s  {figure}", flush=True)
            if problem:
                print("    " + problem.replace("\n", "\n    "), flush=True)
    print(f"runs kept in {root}" if args.keep else f"(runs in {root})")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("TETHER_CI_CACHE", "/var/cache/tether-ci")
    sys.exit(main())
