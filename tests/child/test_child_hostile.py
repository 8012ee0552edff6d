"""Hostile control lines and every fatal path, through a real child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from child_helpers import Child, pid_alive, types
from tests.support.waits import wait_pid_file

MakeChild = Callable[..., Child]

BAD_LINES: list[tuple[bytes, str, bool]] = [
    # (line, reason fragment, ack carries a ref)
    (b"", "", False),
    (b"   \t ", "", False),
    (b"not json", "", False),
    (b"[]", "", False),
    (b'"  []  "', "", False),
    (b"{}", "", False),
    (b'{"seq":1,"type":"close","run":"r"}', "", True),  # no v: invalid, seq readable
    (b'{"v":1,"seq":0,"type":"close","run":"r"}', "", False),
    (b'{"v":1,"seq":1e300,"type":"close","run":"r"}', "", False),
    (b'{"v":1,"seq":2,"type":"bogus","run":"r"}', "", True),
    (b'{"v":1,"seq":3,"type":"ready","run":"r"}', "is not a control message", True),
    (b'{"v":1,"seq":4,"type":"prompt","run":"r"}', "text", True),
    (b'{"v":1,"seq":5,"type":"prompt","run":"r","text":7}', "text", True),
    (b'{"v":1,"seq":6,"type":"close","run":"other"}', "run other is not r", True),
    (b'{"v":1,"seq":6,"type":"close","run":"r"}', "seq 6 does not follow 6", False),
    (b'{"v":1,"seq":5,"type":"close","run":"r"}', "seq 5 does not follow 6", False),
]


def test_every_bad_line_gets_one_rejection_and_the_run_goes_on(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.send_raw(b"".join(line + b"\n" for line, _, _ in BAD_LINES))
    child.send_raw(b"x" * 70_000 + b"\n")  # too large for one read: rejected once
    p = child.send("prompt", seq=7, text="Hi.")
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    acks = [e for e in events if e["type"] == "control-ack"]
    assert len(acks) == len(BAD_LINES) + 3
    for ack, (line, fragment, has_ref) in zip(acks, BAD_LINES, strict=False):
        assert ack["status"] == "rejected", line
        assert fragment in ack["reason"], (line, ack)
        assert ("ref" in ack) == has_ref, (line, ack)
    assert acks[len(BAD_LINES)] == {
        **acks[len(BAD_LINES)],
        "status": "rejected",
        "reason": "line exceeds 65536 bytes",
    }
    assert "ref" not in acks[len(BAD_LINES)]
    assert acks[-2]["ref"] == p
    assert acks[-2]["status"] == "accepted"
    assert events[-2]["final-text"] == "Hello from the scripted agent."


def test_a_huge_line_split_across_writes_is_skipped_to_its_newline(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.send_raw(b'{"v":1,"seq":1,"type":"prompt","run":"r","text":"' + b"a" * 100_000)
    child.send_raw(b"a" * 100_000)
    child.send_raw(b'"}\n')
    c = child.send("close", seq=2)
    code, events = child.finish()
    assert code == 0
    acks = [e for e in events if e["type"] == "control-ack"]
    assert [a["status"] for a in acks] == ["rejected", "accepted"]
    assert acks[1]["ref"] == c


def test_partial_lines_wait_for_their_newline(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    # One write: a whole line (refused: another run's), then the start of the next. The
    # whole line's ack says the child has read the write (a file grows by a whole small
    # write at once): the partial line was in its hands, and must wait for its newline.
    child.send_raw(b'{"v":1,"seq":1,"type":"close","run":"other"}\n{"v":1,"seq":2,"type":')
    child.ack(1)
    child.send_raw(b'"close","run":"r"}\n')
    code, events = child.finish()
    assert code == 0
    acks = [(e["status"], e.get("ref")) for e in events if e["type"] == "control-ack"]
    assert acks == [("rejected", 1), ("accepted", 2)]  # nothing for half a line
    assert types(events) == ["ready", "control-ack", "control-ack", "result", "exit"]


def test_version_mismatch_gets_no_ack_and_fails(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.send_raw(b'{"v":2,"seq":1,"type":"prompt","run":"r","text":"x"}\n')
    code = child.wait_exit()
    events = child.events()
    assert code == 4
    assert types(events) == ["ready", "exit"]
    assert events[-1]["status"] == "failed"
    assert "version" in events[-1]["error"]


def test_version_mismatch_stops_the_channel_mid_batch(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.send_raw(
        b'{"v":1,"seq":1,"type":"steer","run":"r","text":"x"}\n'
        b'{"v":2,"seq":2,"type":"close","run":"r"}\n'
        b'{"v":1,"seq":3,"type":"close","run":"r"}\n'
    )
    code = child.wait_exit()
    events = child.events()
    assert code == 4
    assert events[-1]["status"] == "failed"
    assert [e.get("ref") for e in events if e["type"] == "control-ack"] == [1]
    assert "result" not in types(events)


def test_truncated_control_file_is_fatal(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    s = child.send("steer", text="a fairly long steering text to make the file big")
    child.ack(s)
    with child.control.open("r+b") as handle:
        handle.truncate(10)
    code = child.wait_exit()
    events = child.events()
    assert code == 4
    assert events[-1]["status"] == "failed"
    assert events[-1]["error"].startswith("control file truncated below offset ")
    assert "result" not in types(events)


def test_control_file_created_after_start(make_child: MakeChild) -> None:
    child = make_child(script="hello.json", create_control=False).start()  # ready: it waits
    assert not child.control.exists()
    child.send("prompt", text="Hi.")
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, _events = child.finish()
    assert code == 0


def test_polling_fallback_runs_the_same(make_child: MakeChild) -> None:
    child = make_child(script="tool_answer.json", env={"TETHER_FORCE_POLLING": "1"}).start()
    child.send("prompt", text="Hi.")
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert events[-2]["final-text"] == "All done."


def test_deadline_while_idle(make_child: MakeChild) -> None:
    child = make_child(script="hello.json", env={"FEN_WIRE_DEADLINE": f"{time.time() + 0.3:.3f}"})
    child.start()
    code, events = child.finish()
    assert code == 5
    assert events[-1] == {**events[-1], "status": "timed-out", "error": "run deadline exceeded"}


def test_deadline_already_passed(make_child: MakeChild) -> None:
    child = make_child(script="hello.json", env={"TETHER_WIRE_DEADLINE": "1"})
    child.send("prompt", text="too late")
    child.start(wait_ready=False)
    code, events = child.finish()
    assert code == 5
    assert events[-1]["status"] == "timed-out"
    assert "turn-started" not in types(events)


def test_deadline_inside_a_sleeping_tool(make_child: MakeChild) -> None:
    deadline = time.time() + 3.0  # room to start and reach the tool on a slow machine
    child = make_child(script="sleep_tool.json", env={"FEN_WIRE_DEADLINE": f"{deadline:.3f}"})
    child.start()
    child.send("prompt", text="Sleep.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    pid = wait_pid_file(child.root / "tool.pid", proc=child.proc)
    code, events = child.finish()
    assert code == 5
    assert events[-1]["status"] == "timed-out"
    assert events[-2]["type"] == "turn-complete"
    assert events[-2]["stop-reason"] == "aborted"
    assert not pid_alive(pid)


def test_invalid_deadline_fails(make_child: MakeChild) -> None:
    child = make_child(script="hello.json", env={"FEN_WIRE_DEADLINE": "soon"})
    child.start(wait_ready=False)
    code, events = child.finish()
    assert code == 4  # as its exit line says
    assert types(events) == ["exit"]
    assert "FEN_WIRE_DEADLINE" in events[0]["error"]


def test_sigterm_fails_the_run(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    assert child.proc is not None
    child.proc.send_signal(signal.SIGTERM)
    code, events = child.finish()
    assert code == 4
    assert events[-1] == {**events[-1], "status": "failed", "error": "terminated by SIGTERM"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--provider", "nonesuch"], "unknown provider 'nonesuch'"),
        (["--script", "/nonexistent/replies.json"], "cannot read script"),
        (["--script", "hello.json", "--tools", "bash,teleport"], "unknown tool teleport"),
        (["--script", "hello.json", "--provider-option", "novalue"], "KEY=VALUE"),
    ],
)
def test_set_up_errors_exit_failed(make_child: MakeChild, args: list[str], fragment: str) -> None:
    child = make_child()
    child.args = [
        str(Path(__file__).parent / "scripts" / a) if a == "hello.json" else a for a in args
    ]
    child.start(wait_ready=False)
    code, events = child.finish()
    assert code == 4
    assert events[-1]["status"] == "failed"
    assert fragment in events[-1]["error"], events[-1]


def test_bad_script_is_reported(make_child: MakeChild) -> None:
    child = make_child(script=[{"text": 5}])
    child.start(wait_ready=False)
    code, events = child.finish()
    assert code == 4
    assert "reply 1: text" in events[-1]["error"]


def test_missing_environment(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if "_WIRE_" not in k}
    argv = [sys.executable, "-m", "tether", "child", "--script", "x.json"]
    proc = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=30)
    assert proc.returncode == 2
    assert b"FEN_WIRE_CONTROL_PATH and FEN_WIRE_EVENT_PATH are required" in proc.stderr
    events = tmp_path / "events.jsonl"
    env["FEN_WIRE_EVENT_PATH"] = str(events)
    env["FEN_WIRE_RUN_ID"] = "solo"
    proc = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=30)
    assert proc.returncode == 4  # an exit line was written: failed
    (line,) = events.read_text().splitlines()
    assert json.loads(line) == {
        "v": 1,
        "seq": 1,
        "type": "exit",
        "run": "solo",
        "status": "failed",
        "error": "FEN_WIRE_CONTROL_PATH and FEN_WIRE_EVENT_PATH are required",
    }
    assert events.stat().st_mode & 0o777 == 0o600


def test_removed_control_file_ends_the_run(make_child: MakeChild) -> None:
    """A parent that died and took its run directory with it: the child must not linger."""
    child = make_child(script="hello.json").start()
    child.ack(child.send("prompt", text="hi"))  # the child has the file open now
    child.control.unlink()
    code, events = child.finish()
    assert code == 4
    assert events[-1] == {**events[-1], "type": "exit", "status": "failed"}
    assert events[-1]["error"] == "control file was removed"


def test_removed_control_file_is_read_to_its_end_first(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    child.ack(child.send("prompt", text="hi"))  # the child has the file open now
    child.send("close")
    child.control.unlink()
    code, events = child.finish()
    assert code == 0, child.describe()
    assert types(events)[-2:] == ["result", "exit"]


def test_a_close_read_during_a_turn_outlives_the_removed_control_file(
    make_child: MakeChild,
) -> None:
    """Regression (a 2-core CI at load 16): the close was read while the turn still ran,
    then the parent removed the file; the run must still end done, not failed."""
    child = make_child(script="gated_tool.json")
    gate = child.gate()
    child.start()
    child.send("prompt", text="go")
    child.wait_for(lambda e: e["type"] == "tool-call")  # the turn is held at its gate
    assert child.ack(child.send("close"))["status"] == "accepted"  # now closing
    child.control.unlink()
    child.wait_for(lambda e: e["type"] == "info" and "was removed" in e["summary"])
    gate.open()
    code, events = child.finish()
    assert code == 0, child.describe()
    assert types(events)[-2:] == ["result", "exit"]
    assert events[-1]["status"] == "done"


def test_a_cancel_then_5000_steers_in_one_write_get_one_ack_each(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    lines = [{"v": 1, "seq": 1, "type": "cancel", "run": "r"}] + [
        {"v": 1, "seq": n, "type": "steer", "run": "r", "text": f"s{n}"} for n in range(2, 5002)
    ]
    child.send_raw(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    code, events = child.finish()  # the invariants check one ack per control line
    acks = [e for e in events if e["type"] == "control-ack"]
    assert [a["ref"] for a in acks] == list(range(1, 5002))
    assert acks[0]["status"] == "accepted"
    assert {a["status"] for a in acks[1:]} == {"rejected"}
    assert events[-1]["status"] == "cancelled"
    assert code != 0


def test_the_child_loop_checks_signal_numbers_as_asyncio_does() -> None:
    """The presenter's loop keeps asyncio's signal check (with a set computed once)."""
    import asyncio

    from tether.runtime.child.presenter import _ChildLoop

    ours, theirs = _ChildLoop(), asyncio.SelectorEventLoop()
    try:
        for bad in (0, 4096, -1, "SIGTERM"):
            with pytest.raises((TypeError, ValueError)) as mine:
                ours._check_signal(bad)  # type: ignore[arg-type]
            with pytest.raises((TypeError, ValueError)) as asyncios:
                theirs._check_signal(bad)  # type: ignore[attr-defined]
            assert (type(mine.value), str(mine.value)) == (
                type(asyncios.value),
                str(asyncios.value),
            )
        ours._check_signal(signal.SIGTERM)
    finally:
        ours.close()
        theirs.close()


def test_a_script_that_is_a_fifo_fails_the_run_at_once(make_child: MakeChild) -> None:
    """Nobody writes the FIFO: the child once waited in open() for ever (on its event
    loop, when forked: deaf to its lifeline and to SIGTERM); now it is refused."""
    child = make_child(args=["--provider", "scripted"])
    fifo = child.root / "replies.fifo"
    os.mkfifo(fifo)
    child.args += ["--script", str(fifo)]
    child.start()
    child.send("prompt", text="hi")
    exit_event = child.wait_for(lambda e: e["type"] == "exit")
    assert exit_event["status"] == "failed"
    assert "not a regular file" in exit_event["error"]
    assert child.wait_exit() == 4


STUCK = """
import sys
from tether.runtime.child.backstop import handle_stop_signals, watch_lifeline
watch_lifeline(int(sys.argv[1]), grace_s=0.2)
handle_stop_signals(grace_s=0.2)
print("stuck", flush=True)
open(sys.argv[2])  # nobody opens the FIFO's other end: blocked in the kernel for ever
"""


@pytest.mark.parametrize("end", ["parent-dies", "sigterm"])
def test_a_child_stuck_in_a_blocking_call_still_ends(tmp_path: Path, end: str) -> None:
    """The backstop: a child whose main thread is blocked in a system call (its event
    loop cannot run) still ends once its parent is gone (the kernel signals the
    lifeline's EOF) or once it gets SIGTERM: by the timer's SIGALRM."""
    fifo = tmp_path / "never.fifo"
    os.mkfifo(fifo)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK, str(read_end), str(fifo)],
        stdout=subprocess.PIPE,
        pass_fds=(read_end,),
    )
    os.close(read_end)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"stuck\n"
        if end == "parent-dies":
            os.close(write_end)  # as the kernel does when the parent dies
        else:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGALRM
    finally:
        if end != "parent-dies":
            os.close(write_end)
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
