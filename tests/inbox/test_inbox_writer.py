"""Writing inboxes: private creation, one-write appends, concurrent writers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tether.inbox.messages import MAX_MESSAGE_BYTES, Done, Progress, parse_line
from tether.inbox.writer import (
    append_inbox,
    create_inbox,
    encode_line,
    inbox_env,
    inbox_path_from_env,
    run_id_for_inbox,
)


def test_create_inbox_is_private_and_exclusive(tmp_path: Path) -> None:
    path = create_inbox(tmp_path / "inbox.jsonl")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b""
    with pytest.raises(FileExistsError):
        create_inbox(path)


def test_environment_names(tmp_path: Path) -> None:
    env = inbox_env(tmp_path / "inbox.jsonl")
    assert env == {
        "TETHER_INBOX_PATH": str(tmp_path / "inbox.jsonl"),
        "RUNEX_INBOX_PATH": str(tmp_path / "inbox.jsonl"),
    }
    assert inbox_path_from_env(env) == tmp_path / "inbox.jsonl"
    assert inbox_path_from_env({"RUNEX_INBOX_PATH": "/x"}) == Path("/x")
    assert inbox_path_from_env({}) is None


def test_run_id_for_inbox() -> None:
    assert run_id_for_inbox("/state/runs/run-42/inbox.jsonl") == "run-42"
    assert run_id_for_inbox("/runex/inbox/key-7.jsonl") == "key-7"
    assert run_id_for_inbox("notes.txt") == "notes.txt"


def test_append_inbox_writes_one_line_and_returns_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    assert append_inbox(path, Progress(text="line\nbreak")) == 0  # created on demand
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = append_inbox(path, {"type": "done", "summary": "ok"})
    data = path.read_bytes()
    assert data.count(b"\n") == 2
    assert second == data.index(b"\n") + 1
    assert parse_line(data[:second]) == Progress(text="line\nbreak")
    assert parse_line(data[second:]) == Done(summary="ok")


@pytest.mark.parametrize("bad", [[1, 2], "text", 3, None])
def test_append_inbox_refuses_non_objects(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="JSON object"):
        append_inbox(tmp_path / "inbox.jsonl", bad)
    assert not (tmp_path / "inbox.jsonl").exists()


def test_append_inbox_refuses_unencodable_and_oversized(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="encodable"):
        encode_line({"x": object()})
    with pytest.raises(ValueError, match="over"):
        encode_line({"type": "progress", "text": "x" * MAX_MESSAGE_BYTES})


WRITER = """
import sys
from tether.inbox.writer import append_inbox
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(count):
    append_inbox(path, {"type": "progress", "text": f"{name}-{i}", "pad": "p" * (i % 300)})
"""


def test_concurrent_appenders_interleave_only_at_line_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    create_inbox(path)
    count = 400
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"py{k}", str(count)])
        for k in range(3)
    ]
    script = (
        "for i in $(seq 0 {n}); do"
        ' echo "{{\\"type\\":\\"progress\\",\\"text\\":\\"sh{k}-$i\\"}}" >> "$1"; done'
    )
    procs += [
        subprocess.Popen(["bash", "-c", script.format(n=count - 1, k=k), "bash", str(path)])
        for k in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    lines = path.read_bytes().split(b"\n")
    assert lines.pop() == b""
    texts = [msgspec.json.decode(line)["text"] for line in lines]  # every line whole
    assert len(texts) == 5 * count
    for writer in ("py0", "py1", "py2", "sh0", "sh1"):
        mine = [t for t in texts if t.startswith(writer + "-")]
        assert mine == [f"{writer}-{i}" for i in range(count)]


def test_append_inbox_reports_a_full_line_offset_under_contention(tmp_path: Path) -> None:
    path = tmp_path / "inbox.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "other", "300"])
    offsets = [append_inbox(path, {"type": "progress", "text": f"me-{i}"}) for i in range(300)]
    assert proc.wait(timeout=60) == 0
    data = path.read_bytes()
    for i, offset in enumerate(offsets):
        assert offset == 0 or data[offset - 1 : offset] == b"\n"
        end = data.index(b"\n", offset)
        assert parse_line(data[offset:end]) == Progress(text=f"me-{i}")
    os.remove(path)
