"""No process a run started outlives it: the reaper, with real processes and SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.event_files import wait_for_event
from tests.support.waits import HANG_S, wait_gone, wait_until
from tether import reaper


def processes_with(marker: bytes) -> list[int]:
    """Live pids whose environment holds ``marker`` (a ``NAME=value`` entry)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if marker in environ.split(b"\0") and state != b"Z":
            found.append(int(name))
    return found


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEN_WIRE", "TETHER_"))}
    return {**env, "TETHER_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}


@pytest.mark.parametrize("escape", ["plain", "setsid"], ids=["in-its-group", "own-session"])
def test_sigkill_of_the_child_mid_tool_leaves_no_process_of_the_run(
    tmp_path: Path, escape: str
) -> None:
    # `setsid sleep 30 &` leaves even the tool's own group: only the token finds it.
    command = "sleep 30" if escape == "plain" else "setsid sleep 31 & sleep 30"
    script = tmp_path / "script.json"
    bash = {"name": "bash", "arguments": {"command": command}}
    script.write_text(json.dumps([{"text": "Busy.", "tool_calls": [bash]}, {"text": "Done."}]))
    argv = [sys.executable, "-m", "tether", "run", "--provider", "scripted", "--no-stdin"]
    run = subprocess.Popen(
        [*argv, "--script", str(script), "t"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        runs = tmp_path / "home" / "runs"
        events = wait_until(
            lambda: next(runs.glob("*/events.jsonl"), None), "the run directory", proc=run
        )
        marker = f"FEN_WIRE_RUN_ID={events.parent.name}".encode()
        wait_for_event(events, lambda e: e["type"] == "tool-call", proc=run, describe=str)
        sleeps = 2 if escape == "setsid" else 1
        wait_until(lambda: len(_sleeps(marker)) >= sleeps, "the tool's sleep", proc=run)
        child = [p for p in processes_with(marker) if _is_child(p)]
        assert len(child) == 1, child
        os.kill(child[0], signal.SIGKILL)
        wait_gone(processes_with(marker), "every process of the run to end")
        assert not processes_with(marker)
        _, stderr = run.communicate(timeout=HANG_S)
        assert run.returncode == 4, stderr
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def _sleeps(marker: bytes) -> list[int]:
    return [p for p in processes_with(marker) if _cmdline(p)[:1] == [b"sleep"]]


def _is_child(pid: int) -> bool:
    return b"child" in _cmdline(pid)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def test_a_reaper_ends_marked_processes_and_tracked_groups_when_its_owner_dies() -> None:
    # The owner is a Python process that marks and tracks one group, then is SIGKILLed.
    code = (
        "import subprocess, sys, os\n"
        "from tether import reaper\n"
        "env = reaper.marked_env(os.environ)\n"
        "marked = subprocess.Popen(['sleep', '30'], env=env, start_new_session=True)\n"
        "bare = subprocess.Popen(['env', '-i', 'sleep', '32'], start_new_session=True)\n"
        "reaper.track(bare.pid)\n"
        "print(marked.pid, bare.pid, env[reaper.REAP_ENV], flush=True)\n"
        "sys.stdin.read()\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert owner.stdout is not None
    marked, bare, token = owner.stdout.readline().split()
    assert processes_with(f"{reaper.REAP_ENV}={token.decode()}".encode()) == [int(marked)]
    owner.kill()
    owner.wait()
    owner.stdin.close()  # type: ignore[union-attr]
    owner.stdout.close()
    wait_gone([int(marked), int(bare)], "both sleeps to end")


def test_while_its_owner_runs_the_reaper_is_a_shell_without_the_token() -> None:
    # no interpreter per owner until it dies; and, lacking the owner's inherited (outer)
    # token, the reaper of an outer run never ends it before it has done its work
    code = (
        "import os, sys\n"
        "from tether import reaper\n"
        "env = reaper.marked_env(os.environ)\n"
        "print(env[reaper.REAP_ENV], flush=True)\n"
        "sys.stdin.read()\n"
    )
    outer = {**os.environ, reaper.REAP_ENV: "outer-token"}
    owner = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=outer
    )
    assert owner.stdout is not None
    token = owner.stdout.readline().strip().decode()
    try:
        found = [p for p in _children(owner.pid) if _cmdline(p)[:2] == [b"/bin/sh", b"-c"]]
        assert len(found) == 1, found
        argv = _cmdline(found[0])
        assert b"tether.reaper" in argv[2]
        assert argv[3:5] == [sys.executable.encode(), token.encode()]
        environ = Path(f"/proc/{found[0]}/environ").read_bytes().split(b"\0")
        assert not any(e.startswith(f"{reaper.REAP_ENV}=".encode()) for e in environ)
    finally:
        owner.kill()
        owner.wait()
        owner.stdin.close()  # type: ignore[union-attr]
        owner.stdout.close()
    wait_gone(found, "the reaper to leave once its owner is gone")


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()
        except (OSError, IndexError):
            continue
        if name.isdigit() and int(fields[1]) == pid:
            found.append(int(name))
    return found


def test_the_waiting_shell_holds_only_the_groups_still_tracked(tmp_path: Path) -> None:
    # The shell hands what it holds to the Python reaper at EOF; here a test double in the
    # interpreter's place ($0) writes down what it was handed. Thousands of tool calls
    # (each a +PGID then -PGID) must leave nothing behind: what the shell keeps is bounded
    # by the groups alive, not by how many the owner ever started.
    handed = tmp_path / "handed"
    double = tmp_path / "python-double"
    double.write_text(f'#!/bin/sh\ncat > "{handed}"\n')
    double.chmod(0o700)
    lines = [f"{sign}{pgid}" for pgid in range(100, 3100) for sign in "+-"]
    lines += ["+12", "+112", "-999", "+5", "-12", "+7", "-5", "+5"]
    script = reaper.WAIT_SCRIPT
    done = subprocess.run(
        [reaper.SHELL, "-c", script, str(double), "token"],
        input="\n".join(lines) + "\n",
        text=True,
        timeout=60,
        check=True,
    )
    assert done.returncode == 0
    held = [line for line in handed.read_text().splitlines() if line]
    assert held == ["+112", "+7", "+5"]
