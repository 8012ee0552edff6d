"""The fork server, through the parent API, against real processes.

A forked built-in child must be the same process an exec'd one is: checked from inside
(a ``command`` provider reports on the child from ``/proc``), on the wire (the same
scripted runs both ways give the same event logs), and when things die (the child, the
template). ``TETHER_FORKSERVER=0`` in a spawn's environment makes that child exec'd.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.wake_probe import kill_and_wait, parent_pid
from tether.runtime.parent import forkserver
from tether.runtime.parent.forkserver import ForkServer, shared_forkserver
from tether.runtime.parent.spawn import RunHandle, RunResult, spawn

from .helpers import FAST, Collector

REPORT = Path(__file__).parent / "doubles" / "report_child.py"
EXEC = {forkserver.ENV: "0"}
# What differs between two runs whatever starts them (the run's own names and numbers).
PER_RUN = re.compile(
    r"^(FEN_WIRE_|TETHER_WIRE_|TETHER_RUN_DIR$|TETHER_INBOX_PATH$|RUNEX_INBOX|TMPDIR$)"
)


@pytest.fixture(autouse=True)
def _fork_server_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forkserver.ENV, raising=False)


async def _warm() -> int:
    server = shared_forkserver()
    assert await asyncio.to_thread(server.wait_ready)
    pid = server.template_pid
    assert pid is not None
    return pid


async def _report(tmp_path: Path, env: dict[str, str] | None) -> tuple[dict[str, Any], RunHandle]:
    command = f"{sys.executable} {REPORT}"
    handle = await spawn(
        "report",
        provider="command",
        child_args=["--provider-option", f"command={command}"],
        cwd=tmp_path,
        env=env,
        timeouts=FAST,
    )
    result = await handle.wait()
    assert result.status == "done", result
    return json.loads(result.final_text), handle


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what differs per run (ids, paths, the lifeline's number)."""
    env = {k: v for k, v in report["env"].items() if not PER_RUN.match(k)}
    env.pop(forkserver.ENV, None)
    fds = dict(report["fds"])
    for passed in ("TETHER_LIFELINE_FD", "TETHER_WAKE_FD"):
        fds.pop(env.pop(passed))
    ids = dict.fromkeys(("pid", "ppid", "pgrp", "session"))
    return {**report, **ids, "env": env, "fds": fds}


def test_a_forked_child_is_the_process_an_exec_would_start(tmp_path: Path) -> None:
    async def go() -> tuple[int, dict[str, Any], dict[str, Any], str]:
        template = await _warm()
        forked, handle = await _report(tmp_path, None)
        execd, _ = await _report(tmp_path, EXEC)
        return template, forked, execd, handle.run_dir.path.as_posix()

    template, forked, execd, run_dir = asyncio.run(go())
    assert forked["ppid"] == template  # forked by the template ...
    assert execd["ppid"] == os.getpid()  # ... and the other one exec'd by us
    for report in (forked, execd):
        assert report["session"] == report["pgrp"] == report["pid"]  # its own session
        assert report["tty"] == 0
        assert report["sig_blocked"] == "0000000000000000"
        assert report["cwd"] == str(tmp_path)
        assert report["fds"]["0"] == "/dev/null"
        assert report["fds"]["1"] == report["fds"]["2"] == "RUN/stderr.log"
        for passed in ("TETHER_LIFELINE_FD", "TETHER_WAKE_FD"):  # the spawn's pass_fds
            assert report["fds"][report["env"][passed]] == "pipe"
        assert report["cmdline"][1:4] == ["-m", "tether", "child"]
    assert forked["env"]["TETHER_RUN_DIR"] == run_dir
    assert forked["env"]["TMPDIR"] == f"{run_dir}/tmp"  # the run's private temp directory
    assert forked["env"]["FEN_WIRE_RUN_ID"] == Path(run_dir).name
    assert _comparable(forked) == _comparable(execd)


def _normalized(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        for key in ("timestamp", "run", "run-id", "duration-seconds"):
            event.pop(key, None)
        out.append(event)
    return out


REPLIES = [
    {
        "text": "Looking.",
        "tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}],
    },
    {"text": "Done looking."},
    {"text": "Again."},
]


async def _scripted(tmp_path: Path, name: str, env: dict[str, str] | None) -> RunHandle:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(REPLIES))
    return await spawn(
        name,
        provider="scripted",
        child_args=["--script", str(script)],
        cwd=tmp_path,
        env=env,
        timeouts=FAST,
        close_when_idle=False,
    )


async def _second_turn(handle: RunHandle, seen: Collector, text: str) -> RunResult:
    """A follow-up once the first turn is complete; close after the second."""
    await seen.until_type("turn-complete")
    ack = await handle.follow_up(text)
    assert ack.status == "accepted"
    await seen.until(lambda _: seen.types().count("turn-complete") >= 2)
    assert (await handle.close()).status == "accepted"
    result = await handle.wait()
    await seen.done()
    return result


def test_the_same_runs_forked_and_execd_write_the_same_events(tmp_path: Path) -> None:
    async def one(env: dict[str, str] | None) -> tuple[RunResult, Path]:
        handle = await _scripted(tmp_path, "the task", env)
        result = await _second_turn(handle, Collector(handle), "and again")
        return result, handle.run_dir.events

    async def go() -> list[tuple[RunResult, Path]]:
        await _warm()
        return [await one(None), await one(EXEC)]

    (forked, forked_log), (execd, execd_log) = asyncio.run(go())
    assert forked.status == execd.status == "done"
    assert (forked.final_text, forked.usage) == (execd.final_text, execd.usage)
    assert _normalized(forked_log) == _normalized(execd_log)


def test_a_killed_forked_child_fails_as_an_execd_one_does(tmp_path: Path) -> None:
    async def one(env: dict[str, str] | None) -> RunResult:
        handle = await spawn(
            "wait",
            provider="scripted",
            cwd=tmp_path,
            env=env,
            timeouts=FAST,
            child_args=["--script", _slow_script(tmp_path)],
        )
        seen = Collector(handle)
        await seen.until_type("turn-started")
        os.kill(handle.pid, signal.SIGKILL)
        result = await handle.wait()
        await seen.done()
        return result

    async def go() -> tuple[RunResult, RunResult]:
        await _warm()
        return await one(None), await one(EXEC)

    forked, execd = asyncio.run(go())
    assert forked.status == execd.status == "failed"
    assert forked.error is not None
    assert "code -9" in forked.error
    assert forked.error.replace(forked.run_id, "RUN") == execd.error.replace(execd.run_id, "RUN")


def _slow_script(tmp_path: Path) -> str:
    path = tmp_path / "slow.json"
    path.write_text(json.dumps([{"text": "slow", "delay_ms": 60_000}, {"text": "again"}]))
    return str(path)


def test_children_outlive_a_killed_template_and_stay_supervised(tmp_path: Path) -> None:
    async def go() -> tuple[RunResult, int, int]:
        template = await _warm()
        handle = await _scripted(tmp_path, "the task", None)
        assert parent_pid(handle.pid) == template
        await asyncio.to_thread(kill_and_wait, template)
        # the child still answers, and its exit is seen (through a pidfd now)
        result = await _second_turn(handle, Collector(handle), "still there?")
        return result, template, await _warm()

    result, old, new = asyncio.run(go())
    assert result.status == "done"
    assert new != old  # a new template on demand


def test_a_process_starts_its_template_at_its_second_spawn() -> None:
    server = ForkServer()

    def spawn() -> object:
        prefix = forkserver.child_prefix()
        return server.spawn(prefix, env=dict(os.environ), cwd="/", stdout=2, stderr=2, cold=False)

    assert spawn() is None  # exec'd: one child never pays for a template
    assert server.template_pid is None
    assert spawn() is None  # exec'd too, while the template starts for the next ones
    assert server.template_pid is not None
    assert server.wait_ready()
    os.kill(server.template_pid, signal.SIGKILL)


def test_no_template_means_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkserver, "TEMPLATE_MODULE", "tether.no_such_module")
    server = ForkServer()
    child = server.spawn(
        forkserver.child_prefix(), env=dict(os.environ), cwd="/", stdout=2, stderr=2
    )
    assert child is None
    assert not server.wait_ready()  # and no new attempt right away


def test_only_builtin_children_are_forked() -> None:
    prefix = forkserver.child_prefix()
    assert forkserver.eligible([*prefix, "--provider", "scripted"])
    assert forkserver.eligible([*prefix, "--agent", "builtin"])
    # an external agent whose CLI runs once for the run is forked too (it starts its CLI
    # at once); the others keep exec
    assert forkserver.eligible([*prefix, "--agent", "claude"])
    assert forkserver.eligible([*prefix, "--agent=codex", "--agent-arg=-c"])
    assert forkserver.eligible([*prefix, "--agent", "acp", "--", "claude-code-acp"])
    assert not forkserver.eligible([*prefix, "--agent", "bash-agent"])
    assert not forkserver.eligible([*prefix, "--agent", "resp", "--", "prog"])
    assert not forkserver.eligible([*prefix, "--adapter", "resp", "--", "prog"])
    assert not forkserver.eligible([*prefix, "--", "prog"])
    assert not forkserver.eligible(["/bin/sh", "-c", "true"])
    assert not forkserver.enabled({forkserver.ENV: "0"})
    assert forkserver.enabled({})


SET_ENVIRON = """
import json, os, subprocess, sys
from tether.cli.forkserver import _set_environ
wanted = json.loads(sys.argv[1])
_set_environ(wanted)
shown = subprocess.run(["env", "-0"], capture_output=True, check=True).stdout.decode()
c_env = [x.split("=", 1) for x in shown.split("\\0")[:-1]]
print(json.dumps([list(os.environ.items()), c_env]))
"""


@pytest.mark.parametrize("reorder", [False, True])
def test_a_forked_childs_environment_is_the_requested_one_in_its_order(reorder: bool) -> None:
    """What a forked child's os.environ and C environment hold (only what differs is
    rewritten when the order allows): exactly the request's variables, in its order."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin"), "A": "1", "B": "2", "C": "3"}
    wanted = {"PATH": base["PATH"], "B": "two", "C": "3", "D": "4"}  # A gone, B changed, D new
    if reorder:
        wanted = {"D": "4", **wanted}
    out = subprocess.run(
        [sys.executable, "-c", SET_ENVIRON, json.dumps(wanted)],
        env=base,
        capture_output=True,
        text=True,
        check=True,
    )
    python_env, c_env = json.loads(out.stdout)
    assert python_env == [list(item) for item in wanted.items()]
    assert c_env == python_env


HOOKS = """
import json, os, sys
found = set()
register = os.register_at_fork
def spy(**hooks):
    if "after_in_child" in hooks:
        found.add(sys._getframe(1).f_globals.get("__name__"))
    register(**hooks)
os.register_at_fork = spy
from tether.cli import forkserver
forkserver._preload()
forkserver._rehearse(forkserver._start_signals())
print(json.dumps(sorted(found)))
"""


def test_the_template_registers_no_after_fork_hook_its_children_would_miss() -> None:
    """A child forked while the template has one thread skips CPython's after-fork hooks
    and runs only those AFTER_FORK names: a module that registers a new one must be
    looked at (and named there) before it is imported by the template."""
    from tether.cli.forkserver import AFTER_FORK

    out = subprocess.run(
        [sys.executable, "-c", HOOKS], capture_output=True, text=True, check=True
    ).stdout
    assert set(json.loads(out.splitlines()[-1])) <= set(AFTER_FORK)


FILL = """
import gc, json, os, sys, tempfile
from tether.cli import forkserver
def free_blocks():
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        sys._debugmallocstats()
        os.dup2(saved, 2)
        out.seek(0)
        rows = [line.split() for line in out.read().decode().splitlines()]
    return sum(int(r[4]) for r in rows if len(r) == 5 and all(p.isdigit() for p in r)
               and int(r[1]) >= 32)
forkserver._preload()
gc.collect()
before = free_blocks()
forkserver._fill_pools()
print(json.dumps([before, free_blocks()]))
"""


def test_the_template_takes_the_free_blocks_of_its_pools_before_forking(tmp_path: Path) -> None:
    """The holes in the template's pools are taken, so that a child's own small objects
    go to fresh pages instead of copying one template page for every few of them.

    The template is started compiling tether from source (an empty bytecode cache of its
    own): the holes compiling leaves are what this test needs, whatever bytecode the
    checkout holds already."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}
    out = subprocess.run(
        [sys.executable, "-c", FILL], capture_output=True, text=True, check=True, env=env
    ).stdout
    before, after = json.loads(out.splitlines()[-1])
    assert before > 1000
    assert after < before // 2  # what is left is mostly fresh pools the filling opened


RAW_FORK = """
import json, os, random, sys, threading
import tether.reaper
from tether.cli import forkserver
hook_ran = []
os.register_at_fork(after_in_child=lambda: hook_ran.append(True))
if sys.argv[1] == "two-threads":
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
assert forkserver._raw_fork() is not None
token = tether.reaper._owner.token
read, write = os.pipe()
pids = []
for _ in range(2):
    pid = forkserver._fork()
    if pid == 0:
        me = threading.current_thread()
        report = {
            "random": random.random(),
            "new_token": tether.reaper._owner.token != token,
            "hooks": bool(hook_ran),
            "main": me is threading.main_thread() and threading.get_ident() in threading._active,
            "pid": os.getpid() == threading.get_native_id(),
        }
        os.write(write, (json.dumps(report) + "\\n").encode())
        os._exit(0)
    pids.append(pid)
for pid in pids:
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
os.close(write)
print(json.dumps([random.random(), os.read(read, 65536).decode()]))
"""


@pytest.mark.parametrize("threads", ["one-thread", "two-threads"])
def test_a_child_forked_without_cpythons_hooks_gets_what_they_would_give(threads: str) -> None:
    """With one thread the template forks without CPython's after-fork work (the hooks do
    not run), with two through os.fork (they do); either way each child has its own random
    state and reaper token, and its only thread is threading's main thread."""
    out = subprocess.run(
        [sys.executable, "-c", RAW_FORK, threads], capture_output=True, text=True, check=True
    ).stdout
    ours, lines = json.loads(out)
    children = [json.loads(line) for line in lines.splitlines()]
    assert len(children) == 2
    assert len({ours, *(child["random"] for child in children)}) == 3
    for child in children:
        assert child["hooks"] is (threads == "two-threads")
        assert child["new_token"]
        assert child["main"]
        assert child["pid"]


def test_the_template_parses_a_childs_flags_once_and_leaves_bad_ones_to_the_child(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tether.cli import child as child_cli
    from tether.cli.forkserver import _parse_flags

    prefix = forkserver.child_prefix()
    flags = ["--provider", "scripted", "--script", "/x/replies.json", "--tools", "read"]
    _parse_flags([*prefix, *flags])
    before = child_cli._parsed.cache_info()
    args, command = child_cli.parse_flags(flags, "tether child")  # as the forked child does
    assert child_cli._parsed.cache_info().hits == before.hits + 1
    assert (args.script, args.tools, command) == ("/x/replies.json", "read", [])
    _parse_flags([*prefix, "--no-such-flag"])  # no exit here: the child will say it
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        child_cli.parse_flags(["--no-such-flag"], "tether child")
