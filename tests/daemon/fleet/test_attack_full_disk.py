"""The daemon's state directory on a disk that fills (a real 2 MiB tmpfs, root only).

Before: ``tether agent rm`` on a full disk answered ``internal error: OperationalError``
and yet dropped the agent from memory while its row stayed (it came back at the next
start); ``agent spawn`` said ``internal error: OSError``. Now both say the disk is full and
what to do, exit 4, and memory and the registry agree; once there is room, both work.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess

SIZE = 2 * 1024 * 1024


@contextlib.contextmanager
def small_tmpfs() -> Iterator[Path]:
    if os.geteuid() != 0 or not shutil.which("mount"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs this as root: it needs a real tmpfs (mount)")
        pytest.skip("needs root to mount a small tmpfs")
    root = Path(tempfile.mkdtemp(prefix="td-disk-", dir="/tmp"))
    mount = ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(root)]
    subprocess.run(mount, check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)
        root.rmdir()


def fill(root: Path) -> None:
    """Write until the disk refuses a single byte."""
    for block in (65536, 512, 1):
        with contextlib.suppress(OSError), (root / f"filler-{block}").open("wb") as out:
            while True:
                out.write(b"\0" * block)
                out.flush()


def tether(daemon: DaemonProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def names(daemon: DaemonProcess) -> list[str]:
    out = tether(daemon, "agent", "list", "--json")
    assert out.returncode == 0, out.stderr
    return [a["name"] for a in json.loads(out.stdout)["agents"]]


def test_attack_rm_and_spawn_on_a_full_disk_say_so_and_lose_nothing(
    daemon_env: DaemonProcess,
) -> None:
    with small_tmpfs() as disk:
        home = disk / "home"
        daemon_env.env["TETHER_HOME"] = str(home)
        script = daemon_env.root / "replies.json"
        script.write_text(json.dumps([{"text": "one"}]))
        try:
            daemon_env.start()
            spawn = ("agent", "spawn", "c", "--script", str(script), "--task", "go", "--wait")
            assert tether(daemon_env, *spawn).returncode == 0
            assert tether(daemon_env, "agent", "stop", "c", "--timeout", "20").returncode == 0
            fill(disk)
            for argv in (("agent", "rm", "c"), ("agent", "spawn", "d", "--script", str(script))):
                out = tether(daemon_env, *argv)
                assert out.returncode == 4, out
                assert "disk is full" in out.stderr, out.stderr
                assert "internal error" not in out.stderr
                assert "Traceback" not in out.stderr
            assert names(daemon_env) == ["c"]  # still in memory, as in the registry
            for filler in disk.glob("filler-*"):
                filler.unlink()
            assert tether(daemon_env, "agent", "rm", "c").returncode == 0
            assert names(daemon_env) == []
            daemon_env.stop(signal.SIGTERM)
            daemon_env.start()  # the registry agrees: nothing comes back
            assert names(daemon_env) == []
        finally:
            daemon_env.stop(signal.SIGKILL)
            kill_agents(home)
