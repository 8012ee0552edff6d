"""drain_file against real files and a real SQLite database."""

from __future__ import annotations

import os
import sqlite3
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.inbox.drain import Unfinished, drain_file
from tether.inbox.messages import MAX_MESSAGE_BYTES, Clarification, InboxRejection, Progress
from tether.inbox.store import ROWS_PER_INSERT, InboxStore
from tether.inbox.writer import append_inbox, create_inbox

LINES = [
    b'{"type":"progress","text":"step 1"}',
    b'{"type":"clarification","q":"which model?"}',
    b"not json",
    b'{"type":"tool_call","name":"bash"}',
    b"",
    b'{"type":"done","summary":"ok"}',
]


def write(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    path = tmp_path / "run-1" / "inbox.jsonl"
    path.parent.mkdir()
    create_inbox(path)
    return path


def rows(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT msg_key, run_id, offset, type, body, raw, rejected_reason"
            " FROM inbox_messages ORDER BY run_id, offset"
        ).fetchall()


def test_drain_stores_every_line_in_order(store: InboxStore, inbox: Path, db_path: Path) -> None:
    write(inbox, b"\n".join(LINES) + b"\n")
    result = drain_file(store, inbox, "run-1", collect=True)
    assert (result.new, result.duplicates, result.rejected) == (6, 0, 2)
    assert result.offset == inbox.stat().st_size
    stored = rows(db_path)
    offsets = [0]
    for line in LINES[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    assert [r[2] for r in stored] == offsets
    assert [r[0] for r in stored] == [f"run-1:{o}" for o in offsets]
    assert [r[3] for r in stored] == ["progress", "clarification", None, "tool_call", None, "done"]
    assert stored[0][4] == LINES[0].decode()
    assert stored[2][4:] == (None, "not json", stored[2][6])
    assert str(stored[2][6]).startswith("not_json: ")
    assert str(stored[4][6]).startswith("empty: ")
    assert [m.offset for m in result.messages] == offsets
    assert result.messages[0].message() == Progress(text="step 1")
    assert result.messages[1].message() == Clarification(q="which model?")
    rejection = result.messages[2].message()
    assert isinstance(rejection, InboxRejection)
    assert rejection.raw == "not json"


@pytest.mark.parametrize("chunk_bytes", [100_000, 2_000])
def test_rows_stored_in_groups_and_tails_match_line_by_line(
    store: InboxStore, inbox: Path, db_path: Path, chunk_bytes: int
) -> None:
    """Several full groups of ROWS_PER_INSERT and a tail, of both statements, in big
    chunks and in chunks smaller than a group: every row is the one its line makes."""
    count = 3 * ROWS_PER_INSERT + 7
    lines = [
        b"bad %d" % i if i % 5 == 3 else b'{"type":"progress","text":"t%d"}' % i
        for i in range(count)
    ]
    write(inbox, b"\n".join(lines) + b"\n")
    result = drain_file(store, inbox, "r", collect=True, chunk_bytes=chunk_bytes)
    assert (result.new, result.rejected) == (count, sum(i % 5 == 3 for i in range(count)))
    offsets = [sum(len(line) + 1 for line in lines[:i]) for i in range(count)]
    expected = [
        (f"r:{offset}", "r", offset, None, None, line.decode(), "not_json")
        if i % 5 == 3
        else (f"r:{offset}", "r", offset, "progress", line.decode(), None, None)
        for i, (offset, line) in enumerate(zip(offsets, lines, strict=True))
    ]
    got = [
        (*row[:6], None if row[6] is None else str(row[6]).partition(":")[0])
        for row in rows(db_path)
    ]
    assert got == expected
    assert [m.offset for m in result.messages] == offsets
    assert {m.received_at for m in result.messages} == {m.received_at for m in store.messages("r")}
    store.forget_offsets()
    again = drain_file(store, inbox, "r")
    assert (again.new, again.duplicates) == (0, count)


def test_a_partial_line_waits_for_its_newline(store: InboxStore, inbox: Path) -> None:
    write(inbox, LINES[0] + b"\n" + LINES[1][:10])
    assert drain_file(store, inbox, "r").new == 1
    assert drain_file(store, inbox, "r").new == 0
    write(inbox, LINES[1][10:20])
    assert drain_file(store, inbox, "r").new == 0
    write(inbox, LINES[1][20:] + b"\n")
    result = drain_file(store, inbox, "r", collect=True)
    assert result.new == 1
    assert result.messages[0].message() == Clarification(q="which model?")
    assert store.count("r") == 2


def test_redrain_reads_nothing_when_the_offset_covers_the_file(
    store: InboxStore, inbox: Path
) -> None:
    write(inbox, b"\n".join(LINES) + b"\n")
    drain_file(store, inbox, "r")
    again = drain_file(store, inbox, "r")
    assert (again.new, again.duplicates, again.bytes_read) == (0, 0, 0)


def test_redrain_with_forgotten_offsets_only_counts_duplicates(
    store: InboxStore, inbox: Path
) -> None:
    write(inbox, b"\n".join(LINES) + b"\n")
    drain_file(store, inbox, "r")
    store.forget_offsets()
    write(inbox, LINES[0] + b"\n")
    again = drain_file(store, inbox, "r")
    assert (again.new, again.duplicates) == (1, 6)
    assert store.count("r") == 7


def test_a_redrain_in_chunks_stores_exactly_the_lines_missing_rows(
    store: InboxStore, db_path: Path, inbox: Path
) -> None:
    # chunks with every row stored, none stored and some stored each take their own path
    lines = [b'{"type":"progress","text":"step %d"}' % i for i in range(40)]
    write(inbox, b"\n".join(lines) + b"\n")
    drain_file(store, inbox, "r")
    offsets = [m.offset for m in store.messages("r")]
    gone = offsets[10:20] + offsets[25:26]  # one chunk's rows all gone, another's partly
    with sqlite3.connect(db_path) as db:
        db.executemany(
            "DELETE FROM inbox_messages WHERE run_id = 'r' AND offset = ?", [(o,) for o in gone]
        )
    store.forget_offsets()
    again = drain_file(store, inbox, "r", collect=True, chunk_bytes=len(lines[0]) * 5)
    assert sorted(m.offset for m in again.messages) == gone
    assert (again.new, again.duplicates) == (len(gone), len(lines) - len(gone))
    assert [m.offset for m in store.messages("r")] == offsets


def test_runs_are_kept_apart(store: InboxStore, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write(a, LINES[0] + b"\n")
    write(b, LINES[0] + b"\n" + LINES[1] + b"\n")
    drain_file(store, a, "a")
    drain_file(store, b, "b")
    assert (store.count("a"), store.count("b"), store.count()) == (1, 2, 3)


def test_truncation_is_reported_once_and_never_reimported(store: InboxStore, inbox: Path) -> None:
    write(inbox, b"\n".join(LINES) + b"\n")
    drain_file(store, inbox, "r")
    os.truncate(inbox, 10)
    first = drain_file(store, inbox, "r")
    assert first.status == "truncated"
    assert first.incident is not None
    assert "truncated" in first.incident
    write(inbox, b"\n".join(LINES * 3) + b"\n")  # grows past the old offset again
    second = drain_file(store, inbox, "r")
    assert (second.status, second.incident, second.new) == ("truncated", None, 0)
    assert store.count("r") == len(LINES)
    (incident,) = store.incidents("r")
    assert incident[2] == "truncated"
    assert store.offset_state("r").status == "truncated"  # type: ignore[union-attr]


def test_replacement_is_reported_and_not_reimported(store: InboxStore, inbox: Path) -> None:
    write(inbox, LINES[0] + b"\n")
    drain_file(store, inbox, "r")
    replacement = inbox.with_name("new.jsonl")
    write(replacement, b"\n".join(LINES) + b"\n")
    os.replace(replacement, inbox)
    result = drain_file(store, inbox, "r")
    assert result.status == "replaced"
    assert result.incident is not None
    assert "replaced" in result.incident
    assert store.count("r") == 1
    assert [i[2] for i in store.incidents()] == ["replaced"]


def test_an_empty_inbox_is_recorded_so_a_replacement_is_caught(
    store: InboxStore, inbox: Path
) -> None:
    assert drain_file(store, inbox, "r").offset == 0
    assert store.offset_state("r") is not None
    inbox.rename(inbox.with_name("rotated.jsonl"))  # kept, so its inode is not reused
    create_inbox(inbox)
    write(inbox, LINES[0] + b"\n")
    assert drain_file(store, inbox, "r").status == "replaced"


def test_a_missing_file_changes_nothing(store: InboxStore, tmp_path: Path) -> None:
    result = drain_file(store, tmp_path / "nope.jsonl", "r")
    assert (result.status, result.new) == ("missing", 0)
    assert store.offset_state("r") is None


def test_a_16_mib_line_is_accepted_and_a_longer_one_skipped_across_calls(
    store: InboxStore, inbox: Path
) -> None:
    prefix, suffix = b'{"type":"progress","text":"', b'"}'
    fits = prefix + b"a" * (MAX_MESSAGE_BYTES - len(prefix) - len(suffix)) + suffix
    too_long = prefix + b"b" * MAX_MESSAGE_BYTES + suffix
    write(inbox, fits + b"\n" + too_long + b"\n" + LINES[1] + b"\n")
    # stop after the long line is known to be too long, before its newline
    drain_file(store, inbox, "r", max_bytes=2 * MAX_MESSAGE_BYTES + 10)
    state = store.offset_state("r")
    assert state is not None
    assert state.skipping  # stopped inside the long line: the skip is stored
    result = drain_file(store, inbox, "r", collect=True)
    assert [m.offset for m in result.messages] == [len(fits) + 1 + len(too_long) + 1]
    stored = store.messages("r")
    assert [m.type for m in stored] == ["progress", None, "clarification"]
    assert stored[0].body is not None
    assert len(stored[0].body) == MAX_MESSAGE_BYTES
    assert stored[1].rejected_reason is not None
    assert stored[1].rejected_reason.startswith("too_long: ")
    assert stored[1].raw == (prefix + b"b" * 4096)[:4096].decode()
    assert not store.offset_state("r").skipping  # type: ignore[union-attr]


def test_database_files_are_private(tmp_path: Path, inbox: Path) -> None:
    db = tmp_path / "fresh" / "deeper" / "t.db"
    with InboxStore(db) as s:
        write(inbox, LINES[0] + b"\n")
        drain_file(s, inbox, "r")
        for path in (db, db.with_name("t.db-wal"), db.with_name("t.db-shm")):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.parent.parent.stat().st_mode) == 0o700


def test_other_tables_in_the_shared_database_are_left_alone(db_path: Path, inbox: Path) -> None:
    db_path.parent.mkdir(mode=0o700)
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO runs VALUES ('r')")
    with InboxStore(db_path) as s:
        write(inbox, LINES[0] + b"\n")
        drain_file(s, inbox, "r")
    with sqlite3.connect(db_path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert conn.execute("SELECT id FROM runs").fetchall() == [("r",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert {t for t in tables if not t.startswith("sqlite_")} == {
        "runs",
        "inbox_messages",
        "inbox_offsets",
        "inbox_incidents",
        "inbox_answers",
        "inbox_closing",  # an index
    }


def test_a_busy_database_is_waited_for(store: InboxStore, inbox: Path, db_path: Path) -> None:
    write(inbox, LINES[0] + b"\n")
    other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, other.execute, args=("COMMIT",)).start()
    assert drain_file(store, inbox, "r").new == 1
    other.close()


def test_concurrent_drainers_store_each_line_once(db_path: Path, inbox: Path) -> None:
    InboxStore(db_path).close()
    for i in range(3000):
        write(inbox, b'{"type":"progress","text":"%d"}\n' % i)
    results = []

    def drainer() -> None:
        with InboxStore(db_path) as s:
            results.append(drain_file(s, inbox, "r", chunk_bytes=4096))

    threads = [threading.Thread(target=drainer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.new for r in results) == 3000
    with InboxStore(db_path) as s:
        texts = [m.body for m in s.iter_messages("r", batch=700)]
    assert texts == [f'{{"type":"progress","text":"{i}"}}' for i in range(3000)]


def test_append_inbox_offsets_are_the_msg_keys(store: InboxStore, inbox: Path) -> None:
    offsets = [append_inbox(inbox, {"type": "progress", "text": f"p{i}"}) for i in range(5)]
    offsets.append(append_inbox(inbox, Clarification(q="why?")))
    result = drain_file(store, inbox, "r", collect=True)
    assert [m.offset for m in result.messages] == offsets
    assert [m.msg_key for m in result.messages] == [f"r:{o}" for o in offsets]
    assert result.messages[-1].message() == Clarification(q="why?")


def _drain_in_slices(store: InboxStore, inbox: Path, max_bytes: int, **kw: int) -> list[int]:
    """drain_file one slice a call, as a live parent does, until nothing more is waiting;
    the stored offset after each call (each call must move it, or end the backlog)."""
    offsets: list[int] = []
    for _ in range(inbox.stat().st_size + 2):  # a guard: a call that makes no progress
        result = drain_file(store, inbox, "r", max_bytes=max_bytes, **kw)
        offsets.append(result.offset)
        if not result.more:
            return offsets
        assert len(offsets) < 2 or offsets[-1] > offsets[-2], offsets
    raise AssertionError(f"the drain never ended: offsets {offsets[-5:]}")


def test_a_line_longer_than_the_slice_is_stored_and_the_drain_goes_on(
    store: InboxStore, inbox: Path
) -> None:
    """A 1.1 MB, a 2 MiB and a 17 MiB line under a 1 MiB slice (the live parent's): the
    first two are stored, the third is rejected and skipped, the lines after them too,
    and every call moves the offset (a slice with no newline in it once restarted from
    the same offset for ever: tether run spun at 100% CPU and never exited)."""
    prefix, suffix = b'{"type":"progress","text":"', b'"}'

    def line(size: int, fill: bytes) -> bytes:
        return prefix + fill * (size - len(prefix) - len(suffix)) + suffix

    lines = [line(1_100_000, b"a"), line(2 << 20, b"b"), line(17 << 20, b"c"), LINES[1]]
    write(inbox, b"\n".join(lines) + b"\n")
    offsets = _drain_in_slices(store, inbox, 1 << 20)
    assert offsets[-1] == inbox.stat().st_size
    stored = store.messages("r")
    assert [m.type for m in stored] == ["progress", "progress", None, "clarification"]
    assert [len(m.body or "") for m in stored[:2]] == [1_100_000, 2 << 20]
    assert (stored[2].rejected_reason or "").startswith("too_long: ")


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    chunk=st.integers(1, 64),
    budget=st.integers(1, 64),
    cut=st.integers(0, 300),
)
def test_every_slice_makes_progress_and_nothing_is_lost(
    sizes: list[int], chunk: int, budget: int, cut: int
) -> None:
    """Lines of any length (longer than the chunk and the slice included), a file that
    may end inside a line: each call moves the offset or ends the backlog, every whole
    line is stored once, in order, and a partial last line waits for its newline."""
    data = b"".join(b'{"type":"progress","text":"' + b"x" * n + b'"}\n' for n in sizes)
    data = data[: len(data) - cut] if cut < len(data) else data
    with tempfile.TemporaryDirectory() as folder:
        inbox = Path(folder) / "inbox.jsonl"
        create_inbox(inbox)
        write(inbox, data)
        with InboxStore(Path(folder) / "t.db") as store:
            _drain_in_slices(store, inbox, budget, chunk_bytes=chunk)
            whole = data[: data.rfind(b"\n") + 1]
            starts = [0, *(i + 1 for i, byte in enumerate(whole) if byte == ord("\n"))][:-1]
            got = store.messages("r")
            assert [m.offset for m in got] == starts
            assert [m.body for m in got] == [
                whole[s : whole.index(b"\n", s)].decode() for s in starts
            ]
            assert store.offset_state("r").offset == len(whole)  # type: ignore[union-attr]


def test_an_unfinished_line_is_not_read_again_until_its_newline(
    store: InboxStore, inbox: Path
) -> None:
    """A live tail's Unfinished: a line written a piece at a time is read once whole,
    not again on every wake-up (that cost the square of its length)."""
    unfinished = Unfinished()
    head = b'{"type":"progress","text":"' + b"a" * (3 << 20)
    write(inbox, LINES[0] + b"\n" + head)
    first = drain_file(store, inbox, "r", max_bytes=1 << 20, unfinished=unfinished)
    assert (first.new, first.more) == (1, True)  # the slice is used up and it moved on
    rest = drain_file(store, inbox, "r", max_bytes=1 << 20, unfinished=unfinished)
    assert (rest.new, rest.more) == (0, False)  # read on to the end: the line is unfinished
    assert first.bytes_read + rest.bytes_read - len(LINES[0]) - 1 >= len(head)
    for _ in range(5):
        write(inbox, b"a" * 1000)
        again = drain_file(store, inbox, "r", max_bytes=1 << 20, unfinished=unfinished)
        assert (again.new, again.bytes_read, again.more) == (0, 0, False)
    write(inbox, b'"}\n' + LINES[1] + b"\n")
    last = drain_file(store, inbox, "r", max_bytes=1 << 20, unfinished=unfinished, collect=True)
    assert [m.type for m in last.messages] == ["progress", "clarification"]
    assert len(last.messages[0].body or "") == len(head) + 5000 + 2
    assert last.offset == inbox.stat().st_size
    # once past the limit the line must be read (and skipped) even while unfinished
    write(inbox, b"b" * (MAX_MESSAGE_BYTES + 1))
    over = drain_file(store, inbox, "r", max_bytes=1 << 20, unfinished=unfinished)
    assert over.rejected == 1
    assert store.offset_state("r").skipping  # type: ignore[union-attr]
