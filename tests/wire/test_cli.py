"""`tether wire validate` and `tether wire table` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import SHARED

FIXTURES = Path(__file__).parent / "fixtures"


def _tether(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], input=stdin, capture_output=True, timeout=60
    )


def test_validate_prints_one_verdict_per_line_and_exits_0() -> None:
    proc = _tether("wire", "validate", "--direction", "control", str(FIXTURES / "controls.jsonl"))
    assert proc.returncode == 0, proc.stderr
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    lines = (FIXTURES / "controls.jsonl").read_text().splitlines()
    assert [v["line"] for v in verdicts] == list(range(1, len(lines) + 1))
    assert all(v["ok"] for v in verdicts)
    assert verdicts[0] == {"line": 1, "ok": True, "type": "prompt"}


def test_validate_reports_codes_and_exits_1() -> None:
    entries = [json.loads(x) for x in (FIXTURES / "invalid.jsonl").read_text().splitlines()]
    controls = [e for e in entries if e["direction"] == "control" and e["line"].strip()]
    stdin = "".join(e["line"] + "\n" for e in controls).encode()
    proc = _tether("wire", "validate", "--direction", "control", "-", stdin=stdin)
    assert proc.returncode == 2
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [v["code"] for v in verdicts] == [e["code"] for e in controls]
    assert all(v["reason"] for v in verdicts)


def test_validate_reference_lines_exactly() -> None:
    invalid = SHARED / "reference" / "fen-wire" / "invalid.jsonl"
    if not invalid.exists():
        return
    entries = [json.loads(x) for x in invalid.read_text().splitlines()]
    for direction in ("control", "event"):
        chosen = [e for e in entries if e["direction"] == direction]
        stdin = "".join(e["line"] + "\n" for e in chosen).encode()
        proc = _tether("wire", "validate", "--direction", direction, stdin=stdin)
        verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [v["code"] for v in verdicts] == [e["code"] for e in chosen]


def test_validate_sequence_and_too_large_lines() -> None:
    ok = b'{"v":1,"seq":2,"type":"ready","run":"r"}\n'
    stdin = ok + b"x" * 70000 + b"\n" + ok + b'{"v":1,"seq":3,"type":"ready","run":"r"}'
    proc = _tether("wire", "validate", "--sequence", stdin=stdin)
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [v.get("code", v.get("type")) for v in verdicts] == [
        "ready",
        "too-large",
        "out-of-order",
        "ready",
    ]
    assert proc.returncode == 2


def test_missing_file_is_a_clear_error() -> None:
    proc = _tether("wire", "validate", "/nonexistent/file.jsonl")
    assert proc.returncode == 2
    assert b"cannot read" in proc.stderr


def test_table_prints_markdown() -> None:
    proc = _tether("wire", "table")
    assert proc.returncode == 0
    assert b'rejected: "child is not ready"' in proc.stdout
