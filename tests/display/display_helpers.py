"""Shared helpers for the display tests: render fixtures, compare with golden text."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from tether.display import open_display
from tether.display.replay import WireReplay

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"
SAMPLE_RUN = FIXTURES / "sample_run.jsonl"
SAMPLE_FRAMES = FIXTURES / "sample_frames.sh"
WIDTH = 80
UPDATE = os.environ.get("TETHER_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    """Compare ``text`` with golden/NAME (TETHER_UPDATE_GOLDEN=1 rewrites it)."""
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def replay(path: Path, output: str = "human") -> tuple[str, str]:
    """Render a wire file through a display at width 80, no colour: (stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    display = open_display(output, stdout=out, stderr=err, width=WIDTH, color=False)
    replayer = WireReplay(display)
    with path.open("rb") as f:
        for line in f:
            replayer.line(line.rstrip(b"\n"))
    replayer.finish()
    display.close()
    return out.getvalue(), err.getvalue()


def tether(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``tether`` CLI in a subprocess."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


def sample_frames() -> bytes:
    """The bash fixture's frames, written by the spec's util_write_msg in a real bash."""
    done = subprocess.run(["bash", str(SAMPLE_FRAMES)], capture_output=True, timeout=30, check=True)
    return done.stdout


_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen(data: str, width: int = WIDTH) -> list[str]:
    """The lines a terminal shows after ``data``: enough of VT100 for rich's live output.

    Handles CR, LF, cursor up (``CSI n A``), erase line (``CSI 2K``); other CSI sequences
    (colours, cursor visibility) change nothing on the text. Lines wrap at ``width``.
    """
    lines: list[list[str]] = [[]]
    row = col = 0
    pos = 0
    while pos < len(data):
        match = _CSI.match(data, pos)
        if match is not None:
            args, final = match.groups()
            if final == "A":
                row = max(row - int(args or "1"), 0)
            elif final == "K" and args == "2":
                lines[row] = []
            pos = match.end()
            continue
        char = data[pos]
        pos += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append([])
        else:
            if col >= width:
                row, col = row + 1, 0
                if row == len(lines):
                    lines.append([])
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
    shown = ["".join(line).rstrip() for line in lines]
    while shown and not shown[-1]:
        shown.pop()
    return shown
