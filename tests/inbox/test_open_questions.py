"""Which questions still wait: not answered, and not closed by the child's decision lines."""

from __future__ import annotations

from pathlib import Path

from tether.inbox.store import open_store


def test_decided_and_closed_questions_no_longer_wait(tmp_path: Path) -> None:
    rows = [
        (0, "approval_request", '{"type":"approval_request","reason":"a"}'),
        (50, "approval_request", '{"type":"approval_request","reason":"b"}'),
        (100, "approval_decision", '{"type":"approval_decision","key":"r:0"}'),
        (150, "approval_decision", '{"type":"approval_decision"}'),  # no key: closes nothing
        (160, "approval_decision", '{"type":"approval_decision","key":7}'),
        (200, "clarification", '{"type":"clarification","q":"?"}'),
        (250, "question_closed", '{"type":"question_closed","key":"r:200"}'),
        (300, "clarification", '{"type":"clarification","q":"??"}'),
        (350, "approval_decision", '{"type":"approval_decision","key":"other:300"}'),
    ]
    with open_store(tmp_path / "t.db") as store:
        store.insert_rows("r", 1.0, rows)
        store.insert_rows(
            "other", 1.0, [(300, "clarification", '{"type":"clarification","q":"x"}')]
        )
        store.record_answer("r:300", "r", "yes", None, 2.0)
        waiting = [m.msg_key for m in store.open_questions(["r", "other"])]
    assert waiting == ["other:300", "r:50"]
