"""The hostile TEST DOUBLE child lists its modes, each with its moment and a help line."""

from __future__ import annotations

import subprocess

from tests.doubles import hostile


def test_every_mode_is_listed_with_its_moment_and_help() -> None:
    out = subprocess.run(
        [*hostile("--list")[:2], "--list"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    assert len(rows) >= 15
    for name, when, help_text in rows:
        assert when in ("start", "ready", "finish"), name
        assert help_text.strip(), name
    assert {"final-path-victim", "control-fifo", "inbox-fifo", "huge-line", "flood"} <= {
        row[0] for row in rows
    }
