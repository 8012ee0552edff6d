"""The run index: runs_* tables in the shared WAL database, private files."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from tether.runtime.parent.rundir import create_run_dir, is_run_id, new_run_id
from tether.store.index import _SCHEMA, RunIndex, RunRecord


def _record(run_id: str, **kw: object) -> RunRecord:
    values: dict[str, object] = {
        "id": run_id,
        "task": "t",
        "status": "running",
        "created_at": 1000.0,
        "run_dir": f"/runs/{run_id}",
    }
    values.update(kw)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_insert_update_get_and_private_wal_database(tmp_path: Path) -> None:
    db = tmp_path / "state" / "tether.db"
    index = RunIndex(db)
    index.insert(_record("20261130T000001-aaaaaa", provider="scripted", argv=["a", "b"]))
    assert index.update(
        "20261130T000001-aaaaaa", status="done", ended_at=1002.5, usage={"input": 3}, truncated=True
    )
    record = index.get("20261130T000001-aaaaaa")
    assert record is not None
    assert record.status == "done"
    assert record.usage == {"input": 3}
    assert record.argv == ["a", "b"]
    assert record.truncated is True
    assert record.elapsed_s == 2.5
    assert not index.update("20261130T000009-ffffff", status="done")
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"runs_index", "runs_schema"}
    with pytest.raises(ValueError, match="cannot update"):
        index.update("20261130T000001-aaaaaa", bogus=1)


def test_shares_the_database_with_other_tables(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE inbox_messages (x)")
        conn.execute("PRAGMA user_version = 7")
    index = RunIndex(db)
    index.insert(_record("20261130T000001-aaaaaa"))
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
        assert conn.execute("SELECT count(*) FROM inbox_messages").fetchone()[0] == 0


def test_recent_resolve_children_depth(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "tether.db")
    index.insert(_record("20261130T000001-aaaaaa", status="done"))
    index.insert(_record("20261130T000002-bbbbbb", parent_run="20261130T000001-aaaaaa"))
    index.insert(_record("20261130T000003-cccccc", parent_run="20261130T000002-bbbbbb"))
    assert [r.id for r in index.recent()] == [
        "20261130T000003-cccccc",
        "20261130T000002-bbbbbb",
        "20261130T000001-aaaaaa",
    ]
    assert [r.id for r in index.recent(status="done")] == ["20261130T000001-aaaaaa"]
    assert [r.id for r in index.resolve("latest")] == ["20261130T000003-cccccc"]
    assert [r.id for r in index.resolve("bbbbbb")] == ["20261130T000002-bbbbbb"]
    assert [r.id for r in index.resolve("20261130T000001")] == ["20261130T000001-aaaaaa"]
    assert len(index.resolve("20261130T")) == 3
    assert index.resolve("%") == []  # LIKE wildcards are literal
    assert [r.id for r in index.children("20261130T000001-aaaaaa")] == ["20261130T000002-bbbbbb"]
    assert index.depth("20261130T000003-cccccc") == 2
    assert index.depth("20261130T000001-aaaaaa") == 0


def test_concurrent_writers_from_threads(tmp_path: Path) -> None:
    index = RunIndex(tmp_path / "tether.db")

    def write(n: int) -> None:
        for i in range(20):
            index.insert(_record(f"20261130T{n:06d}-{i:06x}"))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(index.recent(limit=1000)) == 80


def test_an_old_database_gains_new_columns(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE runs_index (id TEXT PRIMARY KEY, task TEXT NOT NULL, provider TEXT, "
            "model TEXT, status TEXT NOT NULL, created_at REAL NOT NULL, ended_at REAL, "
            "usage TEXT, cwd TEXT, parent_run TEXT, run_dir TEXT NOT NULL, argv TEXT, pid INTEGER, "
            "deadline REAL, stop_reason TEXT, error TEXT)"
        )
        conn.execute(
            "INSERT INTO runs_index (id, task, status, created_at, run_dir) "
            "VALUES ('20261130T000001-aaaaaa', 't', 'done', 1, '/r')"
        )
    record = RunIndex(db).get("20261130T000001-aaaaaa")
    assert record is not None
    assert record.truncated is False


def test_run_ids_and_run_directories(tmp_path: Path) -> None:
    run_id = new_run_id(0)
    assert run_id.startswith("19700101T000000-")
    assert is_run_id(run_id)
    assert not is_run_id("../etc")
    assert not is_run_id("20261130T000001-ABCDEF")
    ids = {create_run_dir(tmp_path, now=0).run_id for _ in range(50)}
    assert len(ids) == 50
    run = create_run_dir(tmp_path)
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    for path in (run.control, run.events, run.stderr):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700


def test_a_live_row_whose_owner_and_child_are_gone_reads_failed_lost(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tether.procs import proc_start_time

    owner = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    started = proc_start_time(owner.pid)
    index = RunIndex(tmp_path / "t.db")
    index.insert(_record("20261130T000009-lost01", owner_pid=owner.pid, owner_start=started))
    ours = "20261130T000009-ours01"
    index.insert(_record(ours, pid=owner.pid))  # owned by this process, child alive
    row = index.get("20261130T000009-lost01")
    assert row is not None
    assert row.status == "running"
    owner.kill()
    owner.wait()
    lost = index.get("20261130T000009-lost01")
    assert lost is not None
    assert lost.status == "failed"
    assert lost.error is not None
    assert lost.error.startswith(f"lost: its parent process (pid {owner.pid})")
    assert lost.ended_at is not None
    assert [r.status for r in index.recent(status="running")] == ["running"]
    mine = index.get(ours)
    assert mine is not None
    assert (mine.status, mine.owner_pid, mine.pid_start) == ("running", os.getpid(), started)


def test_an_older_database_gains_the_new_columns_once_from_many_writers(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_SCHEMA.replace(",\n    options     TEXT", ""))  # before options was
    conn.execute(
        "INSERT INTO runs_index (id, task, status, created_at, run_dir) "
        "VALUES ('20261130T000001-aaaaaa', 't', 'done', 1.0, '/r')"
    )
    conn.commit()
    conn.close()
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            RunIndex(db).get("20261130T000001-aaaaaa")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    index = RunIndex(db)
    index.update("20261130T000001-aaaaaa", options={"agent": "claude"})
    record = index.get("20261130T000001-aaaaaa")
    assert record is not None
    assert record.options == {"agent": "claude"}


def test_the_newest_run_of_one_second_is_first(tmp_path: Path) -> None:
    """Two runs started in the same second: their ids differ only by the random suffix,
    so the order of ids is not the order of starts (``tether run --resume latest``, ``tether
    runs``, and a test that took the newest row, got the older one half the time)."""
    index = RunIndex(tmp_path / "tether.db")
    index.insert(_record("20261130T000001-ffffff", created_at=1000.25))
    index.insert(_record("20261130T000001-000000", created_at=1000.75))
    assert [r.id for r in index.recent()] == ["20261130T000001-000000", "20261130T000001-ffffff"]
    assert [r.id for r in index.resolve("latest")] == ["20261130T000001-000000"]
