"""`tether run` and approvals: asked in place on a terminal (y / n / a, with the bell);
with no terminal, denied at once and said on stderr; bad approval flags are usage errors.

The agent is the built-in one with ``--approval ask``: its bash asks first.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_cli_run import TIMEOUT, _env

TOUCH = "touch made.txt"
FINAL = "All done."


def _script(tmp_path: Path, command: str = TOUCH) -> Path:
    call = {"name": "bash", "arguments": {"command": command}, "id": "b1"}
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"text": "Making it.", "tool_calls": [call]}, {"text": FINAL}]))
    return path


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    script = _script(tmp_path)
    return [sys.executable, "-m", "tether", "run", "--provider", "scripted", "--script",
            str(script), "--approval", "ask", *extra, "make the file"]  # fmt: skip


def test_off_a_terminal_no_one_is_asked_the_call_is_denied_and_it_says_so(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        _argv(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == FINAL
    assert not (tmp_path / "made.txt").exists()
    note = "no one to ask: not a terminal; pass --approve RULE or run it under the daemon"
    assert note in done.stderr
    events = next((tmp_path / "home").glob("**/events.jsonl")).read_text()
    assert "approval" in events
    assert "no one to ask" in events


def test_a_rule_decides_off_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        _argv(tmp_path, "--approve", "shell:touch *"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "made.txt").exists()
    assert "no one to ask" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--approval-timeout", "5"], "go together"),
        (["--approval-default", "deny"], "go together"),
        (["--approve", "sh ell"], "not a kind"),
        (["--policy", "missing.toml"], "cannot read the policy file"),
        (["--approval", "maybe"], "invalid choice"),
    ],
)
def test_bad_approval_flags_are_usage_errors(tmp_path: Path, flags: list[str], words: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tether", "run", "--provider", "scripted", *flags, "x"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert not list((tmp_path / "home").glob("**/events.jsonl"))


class _Terminal:
    """`tether run` with a pseudo-terminal as stdin, stdout and stderr."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.controller, terminal = os.openpty()
        self.proc = subprocess.Popen(
            _argv(tmp_path, *extra),
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=_env(tmp_path),
            cwd=tmp_path,
            start_new_session=True,
        )
        os.close(terminal)
        self.seen = b""

    def wait_for(self, needle: bytes) -> None:
        deadline = time.monotonic() + TIMEOUT
        while needle not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {needle!r} in {self.seen.decode(errors='replace')[-2000:]}"
            ready, _, _ = select.select([self.controller], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.controller, 65536)
                except OSError:  # the run ended and closed the terminal
                    assert needle in self.seen, self.seen.decode(errors="replace")[-2000:]

    def type(self, line: str) -> None:
        os.write(self.controller, line.encode() + b"\r")

    def finish(self) -> int:
        """Read the terminal until the run exits (a full terminal would block its writes)."""
        deadline = time.monotonic() + TIMEOUT
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.controller], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.controller, 65536)
                except OSError:
                    break
        code = self.proc.wait(TIMEOUT)
        os.close(self.controller)
        return code


@pytest.mark.parametrize(("answer", "made"), [("n not on a Friday", False), ("y", True)])
def test_on_a_terminal_the_person_is_asked_in_place(
    tmp_path: Path, answer: str, made: bool
) -> None:
    run = _Terminal(tmp_path)
    try:
        run.wait_for(b"y = yes, n = no, a = yes and always for shell")
        run.wait_for(b"\a")  # the bell, after the prompt
        assert not (tmp_path / "made.txt").exists()  # nothing runs while it waits
        run.type(answer)
        run.wait_for(FINAL.encode())
    except BaseException:
        run.proc.kill()
        raise
    finally:
        code = run.finish()
    assert code == 0, run.seen.decode(errors="replace")
    assert (tmp_path / "made.txt").exists() == made
    if not made:
        assert b"not on a Friday" in run.seen


def test_show_lists_the_denied_calls_and_replay_shows_every_decision(tmp_path: Path) -> None:
    from .test_cli_run import tether

    done = subprocess.run(
        _argv(tmp_path, "--deny", "shell:touch *"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=tmp_path,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    shown = tether(tmp_path, "show", "latest", "--json")
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["approvals"] == {"decided": 1, "denied": 1}
    assert summary["denied"] == ["bash: touch made.txt (denied by rule shell:touch *)"]
    text = tether(tmp_path, "show", "latest").stdout
    assert "(denied by rule shell:touch *)" in text
    replayed = tether(tmp_path, "replay", "latest")  # the live view goes to stderr here
    assert "denied by the run's rule deny shell:touch *" in replayed.stderr
