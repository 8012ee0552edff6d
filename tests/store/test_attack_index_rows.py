"""The run index attacked: rows with values of the wrong type (SQLite keeps any type in
any column: a damaged database, another version's, a hand edit). ``tether runs`` and
``tether show`` must still answer (before: an internal error, exit 4), the damaged
fields read as their defaults, the rest as they were."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.cli.test_cli_run import tether
from tests.store.test_run_index import _record
from tether.store.index import RunIndex


def test_attack_a_damaged_index_row_is_read_with_defaults(tmp_path: Path) -> None:
    db = tmp_path / "home" / "tether.db"
    index = RunIndex(db)
    index.insert(_record("20261130T000001-aaaaaa", status="done", task="first"))
    index.insert(_record("20261130T000002-bbbbbb", status="done", task="second"))
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE runs_index SET created_at = 'x', usage = '[1]', argv = '\"s\"',"
            " pid = 'p', options = '[[[' WHERE id = '20261130T000002-bbbbbb'"
        )
    damaged = index.get("20261130T000002-bbbbbb")
    assert damaged is not None
    assert (damaged.task, damaged.created_at, damaged.usage, damaged.pid) == (
        "second",
        0,
        None,
        None,
    )
    listed = tether(tmp_path, "runs")
    assert listed.returncode == 0, listed.stderr
    assert "first" in listed.stdout
    assert "second" in listed.stdout
    shown = tether(tmp_path, "show", "bbbbbb")
    assert shown.returncode == 0, shown.stderr
