"""``tether child --adapter resp`` over real control/event files, with real bash programs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.waits import wait_group_gone, wait_until

from .helpers import AdapterChild, of_type

Make = Callable[..., AdapterChild]
Program = Callable[[str, str], list[str]]


def _text_of(events: list[dict[str, object]]) -> str:
    return "".join(str(e["delta"]) for e in of_type(events, "assistant-text-delta"))


def test_example_agent_answers_with_a_real_tool_call(make_child: Make) -> None:
    child = make_child().start()
    (child.root / "notes.txt").write_text("x\n")
    ref = child.send("prompt", text="what is here?")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    kinds = [e["type"] for e in events]
    assert kinds.index("control-ack") < kinds.index("turn-started") < kinds.index("user")
    assert of_type(events, "control-ack")[0]["ref"] == ref
    call = of_type(events, "tool-call")[0]
    assert call["name"] == "bash"
    assert call["arguments"] == {"command": "ls -1A"}
    result = of_type(events, "tool-result")[0]
    assert result["tool-call-id"] == call["id"]
    assert "notes.txt" in str(result["result"])
    assert of_type(events, "assistant-thinking-delta")
    finals = [e for e in of_type(events, "assistant-text") if e["final?"]]
    assert len(finals) == 1
    turn = of_type(events, "turn-complete")[0]
    assert turn["stop-reason"] == "stop"
    assert turn["usage"]["input"] > 0
    assert turn["usage"]["output"] > 0
    answer = events[-2]
    assert answer["type"] == "result"
    assert answer["final-text"] == finals[0]["text"]
    assert answer["final-text"].startswith("You asked: what is here?")
    assert "notes.txt" in answer["final-text"]
    assert answer["usage"] == turn["usage"]
    assert not of_type(events, "error")


def test_steer_mid_turn_is_written_as_another_input(make_child: Make) -> None:
    child = make_child(env={"AGENT_STEP_DELAY": "0.5"}).start()
    child.send("prompt", text="first task")
    child.wait_type("tool-call")
    steer = child.send("steer", text="also say hello")
    injected = child.wait_type("steering-injected")
    assert injected["ref"] == steer
    assert injected["text"] == "also say hello"
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert len(of_type(events, "turn-started")) == 1  # one turn answered both inputs
    ends = [e["stop-reason"] for e in of_type(events, "llm-end") if "stop-reason" in e]
    assert ends == ["tool-use", "stop", "tool-use", "stop"]
    assert events[-2]["final-text"].startswith("You asked: also say hello")
    assert "You asked: first task" in _text_of(events)


def test_follow_up_continues_the_turn_after_the_stop(make_child: Make) -> None:
    child = make_child(env={"AGENT_STEP_DELAY": "0.5"}).start()
    child.send("prompt", text="one")
    child.wait_type("tool-call")
    follow = child.send("follow-up", text="two")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    kinds = [e["type"] for e in events]
    injected = of_type(events, "follow-up-injected")[0]
    assert injected["ref"] == follow
    # The follow-up goes in after the first answer's STOP, within the same turn.
    first_stop = kinds.index("llm-end", kinds.index("llm-end") + 1)  # after the tool call
    assert first_stop < kinds.index("follow-up-injected") < kinds.index("turn-complete")
    assert kinds.count("turn-started") == 1
    assert events[-2]["final-text"].startswith("You asked: two")


def test_finalize_aborts_the_turn_then_the_note_is_answered(make_child: Make) -> None:
    child = make_child(env={"AGENT_STEP_DELAY": "0.3"}).start()
    child.send("prompt", text="long task")
    child.wait_type("assistant-thinking-delta")
    child.send("finalize")
    code, events = child.finish()
    assert code == 0
    turns = of_type(events, "turn-complete")
    assert [t["stop-reason"] for t in turns] == ["aborted", "stop"]
    users = [e["text"] for e in of_type(events, "user")]
    assert users[1].startswith("Stop working now.")
    answer = events[-2]
    assert answer["final-text"].startswith("Final answer, without tools:")
    # Both answers were read: the aborted one's usage lands in the final turn.
    assert answer["usage"]["input"] == sum(t["usage"]["input"] for t in turns)


def test_cancel_kills_the_programs_whole_group(make_child: Make) -> None:
    child = make_child(env={"AGENT_STEP_DELAY": "30"}).start()
    child.send("prompt", text="sleepy")
    child.wait_type("assistant-thinking-delta")  # the agent now sleeps 30 s in a child
    pgid = child.program_pid()
    child.send("cancel")
    code, events = child.finish()
    assert code != 0
    assert events[-1]["status"] == "cancelled"
    assert of_type(events, "turn-complete")[0]["stop-reason"] == "aborted"
    wait_group_gone(pgid, "the program's group to end after the cancel")


def test_deadline_times_out_and_ends_the_group(make_child: Make) -> None:
    # The deadline (an absolute time, fixed before the child starts) must fall while the
    # program sleeps in its 30 s step, so that there is a group to end: 1-2 s (it was
    # `int(now) + 2`) was shorter than the start-up on a loaded machine, and the run timed
    # out before the program ran (3 of 8 runs failed at load 12). 6 s leaves start-up room.
    deadline = f"{time.time() + 6:.3f}"
    child = make_child(env={"AGENT_STEP_DELAY": "30", "FEN_WIRE_DEADLINE": deadline}).start()
    child.send("prompt", text="too slow")
    child.wait_type("assistant-thinking-delta")
    pgid = child.program_pid()
    code, events = child.finish()
    assert code != 0
    assert events[-1] == events[-1] | {"status": "timed-out", "error": "run deadline exceeded"}
    wait_group_gone(pgid)


def test_a_crash_mid_turn_ends_the_turn_with_error(make_child: Make, program: Program) -> None:
    body = r"""
tether_read_msg
tether_write_msg TEXT "half an answer"
printf 'something broke\n' >&2
i=0
while [ $i -lt 100 ]; do
  printf '  --option-%s  what it does, at some length\n' $i >&2; i=$((i+1))
done
exit 3
"""
    # the reason comes first, then a usage longer than the tail kept (as Gemini CLI's)
    child = make_child(program("crash.sh", body)).start()
    child.send("prompt", text="go")
    turn = child.wait_type("turn-complete")
    assert turn["stop-reason"] == "error"
    errors = of_type(child.events(), "error")
    assert errors[-1]["source"] == "adapter"
    assert "exited with status 3" in errors[-1]["error"]
    assert "something broke" in errors[-1]["error"]
    # The run follows the state table: ready again; a new prompt ends `error` at once.
    child.send("prompt", text="again")
    child.wait_type("turn-complete", count=2)
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert [t["stop-reason"] for t in of_type(events, "turn-complete")] == ["error", "error"]
    assert events[-2]["stop-reason"] == "error"
    assert events[-2]["final-text"] == "half an answer"


def test_malformed_frames_are_reported_and_skipped(make_child: Make, program: Program) -> None:
    body = r"""
tether_read_msg
printf 'garbage line\r\n'
printf '+OK\r\n'
printf '*2\r\n$4\r\nTEXT\r\n:5\r\n'
printf '*1\r\n$5\r\nBOGUS\r\n'
printf '*1\r\n$9\r\nTOOL_CALL\r\n'
printf '*2\r\n$4\r\nTEXT\r\n$3\r\nabcde\r\n'
tether_write_msg TEXT "still here"
tether_write_msg STOP end_turn
cat >/dev/null
"""
    child = make_child(program("bad.sh", body)).start()
    child.send("prompt", text="go")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    errors = of_type(events, "error")
    assert len(errors) >= 4
    assert {e["source"] for e in errors} == {"adapter"}
    skipped = [e["summary"] for e in of_type(events, "info")]
    assert skipped == ["skipped a frame: unknown message type 'BOGUS'"]
    assert of_type(events, "turn-complete")[0]["stop-reason"] == "stop"
    assert events[-2]["final-text"] == "still here"


def test_frames_from_the_spec_writer(make_child: Make, program: Program) -> None:
    body = r"""
while tether_read_msg; do
  util_write_msg THINKING $'two\nlines'
  util_write_msg TEXT "héllo ✓ "
  util_write_msg TEXT ""
  util_write_msg TEXT $'a\r\nb\n*1\r\n'
  util_write_msg TOOL_CALL Read tc_1 '{"path":"a b.txt","n":2}' path "a b.txt" n 2
  util_write_msg TOOL_RESULT tc_1 Read $'line 1\nline 2\n'
  util_write_msg USAGE 10 20 3 4
  util_write_msg CONTEXT_UPDATE compact auto
  util_write_msg RETRY
  util_write_msg TEXT "answer: ${TETHER_MSG[2]}"
  util_write_msg USAGE 1 2 "" null
  util_write_msg STOP end_turn
done
"""
    child = make_child(program("spec.sh", body)).start()
    child.send("prompt", text="ü\r\nx")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert not of_type(events, "error"), child.describe()
    deltas = [e.get("delta", "") for e in of_type(events, "assistant-text-delta")]
    assert deltas == ["héllo ✓ ", "", "a\r\nb\n*1\r\n", "answer: ü\r\nx"]
    assert of_type(events, "assistant-thinking-delta")[0]["delta"] == "two\nlines"
    call = of_type(events, "tool-call")[0]
    assert call == call | {"name": "Read", "id": "tc_1", "arguments": {"path": "a b.txt", "n": 2}}
    result = of_type(events, "tool-result")[0]
    assert result == result | {"name": "Read", "tool-call-id": "tc_1", "result": "line 1\nline 2\n"}
    infos = [e["summary"] for e in of_type(events, "info")]
    assert "context compact (auto)" in infos
    assert "retrying the request" in infos
    usage = of_type(events, "turn-complete")[0]["usage"]
    assert usage == {"input": 11, "output": 22, "cache-read": 3, "cache-write": 4}
    # One llm-end for the model call: its stop reason and both USAGE frames summed.
    (end,) = of_type(events, "llm-end")
    assert end == end | {"stop-reason": "stop", "usage": usage}
    # RETRY discards the text before it: the answer is only what came after.
    assert events[-2]["final-text"] == "answer: ü\r\nx"


def test_a_program_may_answer_before_reading_its_input(
    make_child: Make, program: Program, tmp_path: Path
) -> None:
    marker = tmp_path / "frames-written"
    body = rf"""
util_write_msg TEXT "written at start-up"
util_write_msg STOP end_turn
: > {marker}
exec cat >/dev/null
"""
    child = make_child(program("early.sh", body)).start()
    # the frames are in the pipe before the prompt
    wait_until(marker.exists, "the program's frames", files=[marker], proc=child.proc)
    child.send("prompt", text="go")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    kinds = [e["type"] for e in events]
    assert kinds.index("turn-started") < kinds.index("assistant-text-delta")
    assert events[-2]["final-text"] == "written at start-up"


def test_a_program_that_cannot_start_fails_the_run(make_child: Make) -> None:
    child = make_child(["/nonexistent/agent-program"]).start()
    child.send("prompt", text="go")
    code, events = child.finish()
    assert code != 0
    assert events[-1]["status"] == "failed"
    assert "cannot start /nonexistent/agent-program" in events[-1]["error"]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--adapter", "resp"], "--agent resp needs the agent's command after --"),
        (["--", "bash", "x.sh"], "a command after -- goes with --agent NAME"),
    ],
)
def test_adapter_and_command_go_together(make_child: Make, flags: list[str], error: str) -> None:
    import subprocess
    import sys

    child = make_child()
    argv = [sys.executable, "-m", "tether", "child", *flags]
    done = subprocess.run(argv, env=child.env, capture_output=True, text=True, check=False)
    assert done.returncode == 4
    assert error in done.stderr
    assert child.events()[-1]["status"] == "failed"


def test_split_writes_a_large_answer_and_a_max_tokens_stop(
    make_child: Make, program: Program
) -> None:
    body = r"""
tether_read_msg
printf '*2\r\n$4\r\nTE'
sleep 0.1
printf 'XT\r\n$7\r\nsplit '
sleep 0.1
printf 'X\r\n'
big=$(head -c 100000 /dev/zero | tr '\0' 'y')
tether_write_msg TEXT "$big"
tether_write_msg STOP max_tokens
exec cat >/dev/null
"""
    child = make_child(program("split.sh", body)).start()
    child.send("prompt", text="go")
    child.wait_type("turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert not of_type(events, "error"), child.describe()
    assert of_type(events, "assistant-text-delta")[0]["delta"] == "split X"
    assert of_type(events, "turn-complete")[0]["stop-reason"] == "length"
    result = events[-2]
    assert result["stop-reason"] == "length"
    assert result["truncated?"] is True
    path = Path(result["final-text-path"])
    assert path.read_text() == "split X" + "y" * 100000
    path.unlink()


def test_cancel_kills_a_group_that_ignores_sigterm(make_child: Make, program: Program) -> None:
    body = r"""
trap '' TERM
tether_read_msg
tether_write_msg TEXT "ignoring SIGTERM"
sleep 30 &
sleep 30
"""
    child = make_child(program("stubborn.sh", body)).start()
    child.send("prompt", text="go")
    child.wait_type("assistant-text-delta")
    pgid = child.program_pid()
    child.send("cancel")
    code, events = child.finish()
    assert events[-1]["status"] == "cancelled"
    assert code != 0
    wait_group_gone(pgid, "SIGKILL to follow the ignored SIGTERM")


def test_an_exit_while_a_leftover_process_holds_stdout(make_child: Make, program: Program) -> None:
    body = r"""
tether_read_msg
tether_write_msg TEXT "leaving a sleeper behind"
sleep 30 &
exit 7
"""
    child = make_child(program("leaver.sh", body)).start()
    pgid = child.program_pid()
    child.send("prompt", text="go")
    turn = child.wait_type("turn-complete")
    assert turn["stop-reason"] == "error"
    error = of_type(child.events(), "error")[-1]["error"]
    assert "exited with status 7" in error
    child.send("close")
    code, _ = child.finish()
    assert code == 0
    wait_group_gone(pgid, "the leftover sleeper to end with the run")
