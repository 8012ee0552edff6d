"""A daemon agent picks up where it left off: after its process is SIGKILLed, and after every
tether process is killed and the runtime directory wiped (a reboot), ``tether agent
follow-up`` resumes it, and the model request of the resumed run carries the first turn's
text. The built-in agent and Claude Code (the real CLI, ``--agent claude``, pointed at the
scripted model server by ``--base-url`` alone: no hand-written configuration)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.adapters.cli_helpers import require_cli
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess
from tests.support.waits import wait_gone, wait_until

from tether.daemon.rpc.client import DaemonClient
from tether.daemon.rpc.lifecycle import stop_daemon
from tether.modelserver import ModelServer, open_model_server

SCRIPT = [
    {"text": "noted: PINEAPPLE"},  # bi's task
    {"text": "noted: MANGO"},  # cl's task
    {"text": "bi: it was PINEAPPLE"},
    {"text": "cl: it was MANGO"},
]


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with open_model_server(SCRIPT) as served:
        yield served


@pytest.fixture
def env(daemon_env: DaemonProcess) -> Iterator[dict[str, str]]:
    claude = require_cli("claude")
    env = {**daemon_env.env, "PATH": f"{Path(claude).parent}{os.pathsep}{os.environ['PATH']}"}
    daemon_env.env.update(env)
    daemon_env.start()
    try:
        yield env
    finally:
        stop_daemon(daemon_env.socket, timeout=5, force=True)
        kill_agents(Path(env["TETHER_HOME"]))


def asked(server: ModelServer, n: int) -> str:
    found = server.wait_request(lambda r: r["reply"] == n, 90)
    assert found is not None, f"no model request {n}"
    return json.dumps(found["body"]["messages"])


def state(env: dict[str, str], name: str) -> dict[str, Any]:
    done = tether(env, "status", name, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_agents_resume_after_a_reboot(
    env: dict[str, str], daemon_env: DaemonProcess, server: ModelServer, short_tmp: Path
) -> None:
    work = short_tmp / "work"
    work.mkdir()
    common = ("--cwd", str(work), "--base-url", server.url, "--wait")
    bi = tether(
        env, "spawn", "bi", "--provider", "anthropic", "--task", "remember PINEAPPLE", *common
    )
    assert bi.returncode == 0, bi.stderr
    cl = tether(env, "spawn", "cl", "--agent", "claude", "--task", "remember MANGO", *common)
    assert cl.returncode == 0, cl.stderr
    assert "noted: MANGO" in cl.stdout
    first = {name: state(env, name)["run_id"] for name in ("bi", "cl")}

    # every tether process gone, the runtime directory wiped: a reboot
    daemon_env.stop(signal.SIGKILL)
    kill_agents(Path(env["TETHER_HOME"]))
    shutil.rmtree(env["XDG_RUNTIME_DIR"])
    daemon_env.start()
    assert tether(env, "list").stdout.count("stopped (resumable)") == 2

    for name, word, reply in (("bi", "PINEAPPLE", 3), ("cl", "MANGO", 4)):
        before = state(env, name)
        assert before["state"] == "stopped"  # its process was gone at recovery (a reboot)
        assert before["resumable"] is True
        assert f"{name}" in tether(env, "list").stdout
        resumed = tether(env, "follow-up", name, "what was the word?")
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed from run {first[name]}" in resumed.stdout
        sent = asked(server, reply)
        assert f"remember {word}" in sent  # the model sees the first turn
        assert state(env, name)["run_id"] != first[name]


def test_a_sigkilled_agent_resumes(
    env: dict[str, str], server: ModelServer, short_tmp: Path
) -> None:
    work = short_tmp / "work"
    work.mkdir()
    spawned = tether(
        env, "spawn", "bi", "--provider", "anthropic", "--task", "remember PINEAPPLE",
        "--cwd", str(work), "--base-url", server.url, "--wait",
    )  # fmt: skip
    assert spawned.returncode == 0, spawned.stderr
    pid = state(env, "bi")["pid"]
    os.killpg(pid, signal.SIGKILL)
    ended = tether(env, "stop", "bi", "--timeout", "30")  # waits for the end it finds
    assert ended.returncode == 0, ended.stderr
    assert state(env, "bi")["state"] == "failed"
    resumed = tether(env, "follow-up", "bi", "what was the word?")
    assert resumed.returncode == 0, resumed.stderr
    assert "remember PINEAPPLE" in asked(server, 2)


def test_claude_code_killed_between_turns_ends_its_run_and_resumes(
    env: dict[str, str], short_tmp: Path
) -> None:
    """Claude Code's own process SIGKILLed (not tether's child): the run ends failed at
    once, resumable, instead of staying ready and failing every turn it is given."""
    work = short_tmp / "work"
    work.mkdir()
    script = [{"text": "noted: KIWI"}, {"text": "it was KIWI"}]
    with open_model_server(script) as server:
        spawned = tether(
            env, "spawn", "cl", "--agent", "claude", "--task", "remember KIWI",
            "--cwd", str(work), "--base-url", server.url, "--wait",
        )  # fmt: skip
        assert spawned.returncode == 0, spawned.stderr
        first = state(env, "cl")
        cli = [p for p in _children(first["pid"]) if b"--input-format" in _cmdline(p)]
        assert cli, _children(first["pid"])
        for pid in cli:
            os.kill(pid, signal.SIGKILL)
        wait_gone([first["pid"]], "the agent's child")  # its run ends, nobody asking

        def ended() -> dict[str, Any] | None:
            with DaemonClient.connect(Path(env["TETHER_SOCKET"])) as client:
                row: dict[str, Any] = client.call("agent.status", {"name": "cl"})
            return row if row["state"] != "ready" else None

        after = wait_until(ended, "the daemon to see the run end")
        assert (after["state"], after["resumable"]) == ("failed", True), after
        resumed = tether(env, "follow-up", "cl", "what was the word?")
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed from run {first['run_id']}" in resumed.stdout
        assert "remember KIWI" in asked(server, 2)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
