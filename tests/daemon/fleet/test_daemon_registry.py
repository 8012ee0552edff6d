"""The SQLite agent registry and the /proc start-time helpers (real files, real processes)."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.daemon.fleet.registry import (
    AgentExists,
    AgentNotFound,
    AgentRecord,
    AgentRegistry,
    own_start_time,
)
from tether.procs import proc_start_time, process_matches


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[AgentRegistry]:
    with AgentRegistry.open(tmp_path / "state" / "tether.db") as opened:
        yield opened


def record(name: str = "alpha", **fields: object) -> AgentRecord:
    return AgentRecord(name=name, run_dir=f"/runs/{name}", state="live", **fields)  # type: ignore[arg-type]


def test_crud(registry: AgentRegistry) -> None:
    inserted = registry.insert(record(task="fix it", argv=["tether", "child"], pid=42))
    assert inserted.created_at > 0
    assert registry.get("alpha") == inserted
    assert registry.get("missing") is None
    with pytest.raises(AgentExists, match="'alpha' already exists"):
        registry.insert(record())
    updated = registry.update("alpha", state="done", exit_code=0, last_seq=7, event_offset=99)
    assert (updated.state, updated.exit_code, updated.last_seq, updated.event_offset) == (
        "done",
        0,
        7,
        99,
    )
    assert updated.argv == ["tether", "child"]
    assert updated.updated_at >= inserted.updated_at
    registry.insert(record("beta"))
    assert [r.name for r in registry.list()] == ["alpha", "beta"]
    assert [r.name for r in registry.list(["live"])] == ["beta"]
    registry.delete("alpha")
    with pytest.raises(AgentNotFound):
        registry.delete("alpha")
    with pytest.raises(AgentNotFound):
        registry.update("alpha", state="x")
    with pytest.raises(ValueError, match="cannot update"):
        registry.update("beta", name="gamma")


def test_file_is_private_wal_and_shared_safely(tmp_path: Path) -> None:
    path = tmp_path / "state" / "tether.db"
    with AgentRegistry.open(path) as registry:
        registry.insert(record())
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        db = sqlite3.connect(path)
        try:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            ours = {name for name in tables if not name.startswith("sqlite_")}
            assert ours == {"daemon_agents", "daemon_meta", "daemon_agents_state"}
        finally:
            db.close()
    with AgentRegistry.open(path) as again:  # reopening keeps the rows
        assert again.require("alpha").run_dir == "/runs/alpha"


def test_start_time_tells_a_live_child_from_a_reused_pid() -> None:
    assert own_start_time() == proc_start_time(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        started = proc_start_time(child.pid)
        assert started is not None
        assert process_matches(child.pid, started)
        assert not process_matches(child.pid, started + 1)
        assert not process_matches(child.pid, None)
    finally:
        child.kill()
        child.wait()
    assert proc_start_time(child.pid) is None or not process_matches(child.pid, started)
    assert not process_matches(None, 1)


def test_start_time_survives_odd_process_names(tmp_path: Path) -> None:
    odd = tmp_path / "a b) (c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import signal; signal.pause()"])
    try:
        assert isinstance(proc_start_time(child.pid), int)
    finally:
        child.kill()
        child.wait()
