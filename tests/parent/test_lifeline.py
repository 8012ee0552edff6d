"""A child whose parent process dies (SIGKILL, no cleanup) ends its run instead of lingering."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.event_files import wait_for_event

PARENT = """
import asyncio, json, sys
from tether.runtime.parent.spawn import spawn

async def main():
    handle = await spawn("wait", provider="scripted", child_args=["--script", sys.argv[1]])
    print(json.dumps({"pid": handle.pid, "events": str(handle.run_dir.events)}), flush=True)
    await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""


def test_child_ends_its_run_when_the_parent_dies(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"text": "slow", "delay_ms": 60_000}]))
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home")}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(script)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert parent.stdout is not None
        info = json.loads(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        events = Path(info["events"])
        last = wait_for_event(
            events, lambda e: e["type"] == "exit", proc=None, describe=events.read_text
        )
        assert last["status"] == "failed"
        assert "parent went away" in str(last["error"])
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_tools_do_not_see_the_lifeline(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    command = 'echo "fd=${TETHER_LIFELINE_FD:-none}"'
    script.write_text(
        json.dumps(
            [{"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}, {"text": "ok"}]
        )
    )
    from tether.runtime.parent.sync import run

    os.environ["TETHER_HOME"] = str(tmp_path / "home")
    try:
        result = run("env", provider="scripted", child_args=["--script", str(script)], cwd=tmp_path)
    finally:
        del os.environ["TETHER_HOME"]
    assert result.status == "done"
    events = (Path(tmp_path / "home") / "runs" / result.run_id / "events.jsonl").read_text()
    assert "fd=none" in events
