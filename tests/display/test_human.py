"""The human renderer: plain text at width 80 compared with golden files, and its rules."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import msgspec
import pytest
from display_helpers import SAMPLE_RUN, WIDTH, check_golden, replay, screen

from tether.display import Notice, UserInput, open_display
from tether.display.layout import cells
from tether.wire import decode


def plain(**kw: object) -> tuple[object, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    display = open_display("human", stdout=out, stderr=err, width=WIDTH, color=False, **kw)  # type: ignore[arg-type]
    return display, out, err


def events(path=SAMPLE_RUN):  # type: ignore[no-untyped-def]
    with path.open("rb") as f:
        for line in f:
            raw = line.rstrip(b"\n")
            yield decode(raw, "event"), raw


def test_sample_run_golden() -> None:
    out, err = replay(SAMPLE_RUN)
    check_golden("sample_run.human.txt", err)
    assert out == "The repo is a toolkit.\nIts docs/ has two guides.\n"


def test_live_equals_replay() -> None:
    """Events fed one by one, as the live parent does, draw exactly what a replay draws."""
    display, out, err = plain()
    top = None
    for event, raw in events():
        top = top or event.run
        display.event(event, run=event.run, depth=0 if event.run == top else 1, raw=raw)
    display.final(
        status="done",
        final_text="The repo is a toolkit.\nIts docs/ has two guides.",
        usage={"input": 420, "output": 75},
        truncated=False,
        elapsed_s=7.0,
    )
    display.close()
    replay_out, replay_err = replay(SAMPLE_RUN)
    assert (out.getvalue(), err.getvalue()) == (replay_out, replay_err)
    assert replay(SAMPLE_RUN) == (replay_out, replay_err)


def test_agent_cannot_drive_the_terminal() -> None:
    out, err = replay(SAMPLE_RUN)
    for text in (out, err):
        assert "\x1b" not in text
        assert "\x07" not in text
        assert "pwned" not in text


def test_one_line_items_fit_the_width() -> None:
    _, err = replay(SAMPLE_RUN)
    for line in err.splitlines():
        if line[:1] in "→←·┌└" or line.startswith("  "):
            assert cells(line) <= WIDTH, line


def test_tool_call_and_result_are_cut() -> None:
    display, _, err = plain()
    ev = msgspec.json.encode
    lines = [
        {"type": "tool-call", "name": "bash", "arguments": {"command": "x" * 500}},
        {
            "type": "tool-result",
            "name": "bash",
            "is-error?": True,
            "result": {"content": "\n".join("y" * 200 for _ in range(30))},
        },
    ]
    for seq, obj in enumerate(lines, 1):
        event = decode(ev({"v": 1, "seq": seq, "run": "r", **obj}), "event")
        display.event(event, run="r")  # type: ignore[arg-type]
    display.close()
    text = err.getvalue().splitlines()
    assert text[0].startswith('→ bash {"command":"xxx')
    assert text[0].endswith("…")
    assert cells(text[0]) == WIDTH
    assert "… 18 lines omitted …" in err.getvalue()
    assert len(text) == 2 + 8 + 1 + 4
    assert all(cells(line) <= WIDTH for line in text)


def test_messages_user_input_and_notices() -> None:
    display, out, err = plain()
    display.message(UserInput("steer", "look \x1b[2Jhere\nand there"), run="r")
    display.message(Notice("careful", "warning"))
    display.notice("the child is gone", level="error")
    display.notice("hello")
    display.close()
    assert err.getvalue() == (
        "» steer: look here\n  and there\n! careful\n✗ the child is gone\ni hello\n"
    )
    assert out.getvalue() == ""


def test_status_prints_state_changes_only_when_plain() -> None:
    display, _, err = plain()
    for elapsed in (0.1, 0.2, 0.3):
        display.status(state="running", elapsed_s=elapsed)
    display.status(state="finalizing", elapsed_s=1.5, note="deadline")
    display.status(state="finalizing", elapsed_s=1.7)
    display.close()
    assert err.getvalue() == "· running (0.1s)\n· finalizing (1.5s): deadline\n"


def test_inbox() -> None:
    display, _, err = plain()
    display.inbox({"type": "progress", "text": "step 1"}, run="r")
    display.inbox({"type": "progress", "text": "step 1"}, run="r")
    display.inbox({"type": "progress", "text": "step 2"}, run="r")
    display.inbox({"type": "clarification", "q": "which model?"}, run="r")
    display.inbox({"type": "approval_request", "reason": "delete build/"}, run="r")
    display.inbox({"type": "done", "summary": "all good"}, run="r")
    display.inbox({"type": "progress", "text": "nested"}, run="sub", depth=1)
    display.close()
    assert err.getvalue() == (
        "· progress: step 1\n"
        "· progress: step 2\n"
        "! r asks: which model?\n"
        "! r asks for approval: delete build/\n"
        '✉ done {"summary":"all good"}\n'
        "┌ sub\n"
        "│ · progress: nested\n"
    )


def test_final_answer_goes_to_stdout_only() -> None:
    display, out, err = plain()
    display.final(
        status="failed",
        final_text="partial\x1b[2J answer",
        usage=None,
        truncated=True,
        elapsed_s=75.0,
    )
    display.close()
    assert out.getvalue() == "partial\x1b[2J answer\n"  # not a terminal: verbatim
    footer = err.getvalue()
    assert footer.startswith("── failed · 1m15s · answer truncated ─")
    assert cells(footer.rstrip("\n")) == WIDTH


def test_importing_the_display_does_not_import_rich() -> None:
    code = (
        "import io, sys\n"
        "from tether.display import open_display\n"
        "d = open_display('human', stdout=io.StringIO(), stderr=io.StringIO(), color=False)\n"
        "d.notice('x'); d.close()\n"
        "assert 'rich' not in sys.modules, 'rich imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pty")
def _drain(master: int, chunks: list[bytes]) -> str:
    while True:
        try:
            chunk = os.read(master, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def test_terminal_gets_colour_and_a_live_status_line() -> None:
    _, plain_err = replay(SAMPLE_RUN)
    expected = plain_err.splitlines()[:-1]
    master, slave = os.openpty()
    os.set_blocking(master, False)
    tty = open(slave, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
    chunks: list[bytes] = []
    try:
        err = io.StringIO()
        display = open_display("human", stdout=tty, stderr=err, width=WIDTH)
        display.status(state="starting", elapsed_s=0.5)
        display.status(state="running", elapsed_s=1.0, note="working")
        for event, raw in events():
            display.event(event, run=event.run, depth=0 if event.run == "run-1" else 1, raw=raw)
            tty.flush()
            # At every step: finished lines, maybe the line being streamed, the status line.
            *body, status = screen(_drain(master, chunks))
            assert status.startswith("● running · 1.0s · working")
            done = len(body) if body == expected[: len(body)] else len(body) - 1
            assert body[:done] == expected[:done]
            if done < len(body):
                assert expected[done].startswith(body[done])
        display.final(
            status="done",
            final_text="answer \x1b]0;pwned\x07text",
            usage=None,
            truncated=False,
            elapsed_s=2.0,
        )
        display.close()
        tty.flush()
        _drain(master, chunks)
    finally:
        tty.close()
        os.close(master)
    raw = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[" in raw  # colour and cursor control from rich itself
    assert "working" in raw  # the live status line was drawn
    assert "pwned" not in raw
    assert "\x1b]" not in raw  # no OSC ever reaches the terminal
    assert err.getvalue() == ""
    # What the terminal shows at the end: the plain rendering (the status line is gone),
    # then the footer and the answer, sanitized because stdout is a terminal.
    shown = screen(raw)
    assert shown[: len(expected)] == expected
    assert shown[len(expected)].startswith("── done · 2.0s ─")
    assert shown[len(expected) + 1 :] == ["answer text"]


def test_several_top_level_runs_get_a_header_at_each_switch() -> None:
    display, _out, err = plain()
    display.message(UserInput("user", "first"), run="run-a")
    display.message(UserInput("user", "second"), run="run-b")
    display.message(UserInput("user", "again"), run="run-b")
    display.message(UserInput("user", "back"), run="run-a")
    display.close()
    assert err.getvalue() == (
        "» user: first\n━ run-b\n» user: second\n» user: again\n━ run-a\n» user: back\n"
    )


def test_a_done_run_whose_last_turn_failed_says_so() -> None:
    from tether.display import ended_label

    assert ended_label("done", "error") == "done, last turn failed"
    assert ended_label("done", "end_turn") == "done"
    assert ended_label("failed", "error") == "failed"
