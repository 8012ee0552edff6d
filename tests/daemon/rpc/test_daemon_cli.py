"""``tether daemon start|stop|status`` against real detached daemons."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.daemon import DaemonProcess

from tether.daemon.rpc.lifecycle import pid_alive


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_start_status_stop_detached(daemon_env: DaemonProcess) -> None:
    env = daemon_env.env
    missing = tether(env, "daemon", "status", "--json")
    assert missing.returncode == 3
    assert json.loads(missing.stdout)["running"] is False

    started = tether(env, "daemon", "start", "--json")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    pid = info["pid"]
    try:
        assert info["started"] is True
        assert os.getsid(pid) == pid  # its own session: not killed with our process group
        again = tether(env, "daemon", "start")
        assert again.returncode == 0
        assert "already running" in again.stdout

        status = tether(env, "daemon", "status", "--json")
        assert status.returncode == 0
        data = json.loads(status.stdout)
        assert (data["running"], data["answering"], data["pid"]) == (True, True, pid)
        assert data["daemon"]["pid"] == pid
        human = tether(env, "daemon", "status")
        assert f"running (pid {pid})" in human.stdout

        stopped = tether(env, "daemon", "stop", "--json")
        assert stopped.returncode == 0
        assert json.loads(stopped.stdout) == {
            "stopped": True,
            "pid": pid,
            "socket": str(daemon_env.socket),
        }
        assert not daemon_env.socket.exists()
    finally:
        if pid_alive(pid):
            os.kill(pid, 9)
    assert tether(env, "daemon", "stop").stdout.startswith("tether daemon is not running")
    assert tether(env, "daemon", "status").returncode == 3


def test_usage_errors(daemon_env: DaemonProcess) -> None:
    assert tether(daemon_env.env, "daemon").returncode == 2
    both = tether(daemon_env.env, "daemon", "--foreground", "status")
    assert both.returncode == 2


def test_ensure_running_starts_once(daemon_env: DaemonProcess) -> None:
    code = (
        "from tether.daemon.rpc.lifecycle import ensure_running, stop_daemon\n"
        "print(ensure_running(), ensure_running())\n"
        "from tether import paths\n"
        "print(stop_daemon(paths.socket_path()) is not None)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=daemon_env.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.split() == ["True", "False", "True"], result.stderr
