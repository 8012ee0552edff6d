"""A child's final answer and a task holding terminal escape sequences: ``tether show`` and
``tether runs`` print them without the sequences, and their ``--json`` carries no raw
control character (before: the answer's title change and screen clear went out raw)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_run import _script, tether

EVIL = "ans \x1b]0;pwned\x07\x1b[2J\x9b31m end"
CONTROLS = {chr(c) for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}


def test_attack_show_and_runs_print_no_terminal_controls(tmp_path: Path) -> None:
    script = _script(tmp_path, [{"text": EVIL}])
    run = tether(tmp_path, "run", "--provider", "scripted", "--script", script, "task " + EVIL)
    assert run.returncode == 0, run.stderr
    for argv in (("runs",), ("show", "latest"), ("runs", "--json"), ("show", "latest", "--json")):
        out = tether(tmp_path, *argv)
        assert out.returncode == 0, out.stderr
        assert not CONTROLS & set(out.stdout.replace("\n", "")), (argv, out.stdout)
    shown = tether(tmp_path, "show", "latest").stdout
    assert "ans  end" in shown  # the text is kept, its sequences are not
    summary = json.loads(tether(tmp_path, "show", "latest", "--json").stdout)
    assert summary["final_text"] == EVIL  # the same JSON value, escaped
