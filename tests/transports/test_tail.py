"""FileTail: one pread a read; only an empty read asks the file why (truncated, removed)."""

from __future__ import annotations

import os
from pathlib import Path

from tether.transports.tail import FileTail, TailStatus


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_a_short_read_says_nothing_more_a_full_one_says_more(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"")
    with FileTail(path, budget_bytes=16) as tail:
        assert tail.read().more is False  # empty: nothing to say
        _append(path, b"one\n")
        got = tail.read()
        assert (got.status, got.more) == (TailStatus.OK, False)
        assert [i.data for i in got.items] == [b"one"]
        _append(path, b"0123456789\n" * 3)  # 33 bytes: the first read fills its 16
        got = tail.read()
        assert got.more is True
        seen = [i.data for i in got.items]
        while got.more:
            got = tail.read()
            seen += [i.data for i in got.items]
        assert seen == [b"0123456789"] * 3
        assert tail.offset == path.stat().st_size


def test_truncation_and_removal_are_still_seen(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\nb\n")
    with FileTail(path) as tail:
        assert [i.data for i in tail.read().items] == [b"a", b"b"]
        os.truncate(path, 2)
        assert tail.read().status is TailStatus.TRUNCATED
    path.write_bytes(b"a\n")
    with FileTail(path) as tail:
        assert [i.data for i in tail.read().items] == [b"a"]
        _append(path, b"last\n")
        path.unlink()  # read to its end first, then removed
        assert [i.data for i in tail.read().items] == [b"last"]
        assert tail.read().status is TailStatus.REMOVED


def test_missing_until_created(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    with FileTail(path) as tail:
        assert tail.read().status is TailStatus.MISSING
        path.write_bytes(b"x\n")
        assert [i.data for i in tail.read().items] == [b"x"]
