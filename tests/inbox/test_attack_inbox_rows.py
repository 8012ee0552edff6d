"""The inbox store attacked: rows with values of the wrong type (SQLite keeps any type in
any column: a damaged database, another version's, a hand edit). ``tether inbox RUN``
must still answer (before: an internal error, exit 4), each damaged row read with its
damaged fields as their defaults and the others untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.inbox.test_inbox_cli import tether
from tether.inbox.writer import append_inbox, create_inbox


def test_attack_a_damaged_inbox_row_is_read_not_an_internal_error(tmp_path: Path) -> None:
    path = tmp_path / "run-7" / "inbox.jsonl"
    path.parent.mkdir()
    create_inbox(path)
    append_inbox(path, {"type": "progress", "text": "step 1"})
    append_inbox(path, {"type": "progress", "text": "step 2"})
    append_inbox(path, {"type": "progress", "text": "step 3"})
    db = tmp_path / "t.db"
    assert tether("drain", str(path), "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE inbox_messages SET received_at = 'x', type = 5, body = x'00ff'"
            " WHERE offset = (SELECT min(offset) FROM inbox_messages WHERE offset > 0)"
        )
        conn.execute(
            'UPDATE inbox_messages SET body = \'{"type": "progress", "te\''
            " WHERE offset = (SELECT max(offset) FROM inbox_messages)"
        )
    as_json = tether("run-7", "--json", "--db", str(db))
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert rows[0]["body"] == {"type": "progress", "text": "step 1"}
    assert len(rows) == 3
    assert rows[1]["body"] is None
    assert rows[2]["body"] is None
    as_text = tether("run-7", "--db", str(db))
    assert as_text.returncode == 0, as_text.stderr
    assert "step 1" in as_text.stdout
