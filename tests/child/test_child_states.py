"""Every reachable row of the state table, through a real child process.

``starting`` is not reachable from outside (the child reads no control before
``ready``) and ``done`` lasts only until ``exit``; the terminal row is reached by
lines already in the file when the run exits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from child_helpers import Child, index_of, pid_alive, types
from tests.support.waits import wait_pid_file

MakeChild = Callable[..., Child]


# -- ready ------------------------------------------------------------------------------


def test_ready_prompt_runs_a_turn_and_close_finishes(make_child: MakeChild) -> None:
    child = make_child(script="tool_answer.json").start()
    p = child.send("prompt", text="Look around.")
    assert child.ack(p)["status"] == "accepted"
    child.wait_for(lambda e: e["type"] == "turn-complete")
    c = child.send("close")
    code, events = child.finish()
    assert code == 0
    kinds = types(events)
    assert kinds[:3] == ["ready", "control-ack", "turn-started"]
    assert kinds[-4:] == ["turn-complete", "control-ack", "result", "exit"]
    assert events[-3]["ref"] == c
    assert events[-3]["status"] == "accepted"
    turn = next(e for e in events if e["type"] == "turn-complete")
    assert turn == {**turn, "turn": 1, "stop-reason": "stop", "usage": {"input": 30, "output": 7}}
    result = events[-2]
    assert result["final-text"] == "All done."
    assert result["usage"] == {"input": 30, "output": 7}
    assert events[-1]["status"] == "done"
    # the display events in the order the agent produced them
    expected = [
        "agent-started",
        "user",
        "llm-start",
        "assistant-thinking-delta",
        "assistant-text-delta",
        "assistant-thinking",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
        "tool-call",
        "tool-result",
        "llm-start",
        "assistant-text-delta",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
        "agent-turn-complete",
    ]
    assert kinds[3 : 3 + len(expected)] == expected
    tool_result = next(e for e in events if e["type"] == "tool-result")
    assert tool_result["result"] == {"content": "tool-output\n"}
    assert tool_result["is-error?"] is False
    assert tool_result["tool-call-id"] == "c1"


def test_ready_close_emits_empty_result(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    c = child.send("close")
    code, events = child.finish()
    assert code == 0
    assert types(events) == ["ready", "control-ack", "result", "exit"]
    assert events[1] == {**events[1], "ref": c, "status": "accepted"}
    assert events[2]["final-text"] == ""
    assert events[3]["status"] == "done"


def test_ready_cancel_exits_cancelled(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    c = child.send("cancel")
    code, events = child.finish()
    assert code == 3
    assert types(events) == ["ready", "control-ack", "exit"]
    assert events[1]["ref"] == c
    assert events[1]["status"] == "accepted"
    assert events[2]["status"] == "cancelled"


def test_ready_finalize_runs_the_tool_free_turn(make_child: MakeChild) -> None:
    child = make_child(script="sleep_tool.json", args=["--provider", "scripted"])
    child.args[child.args.index("--script") + 1] = str(_second_reply_only(child))
    child.start()
    f = child.send("finalize")
    code, events = child.finish()
    assert code == 0
    assert child.ack(f)["status"] == "accepted"
    user = next(e for e in events if e["type"] == "user")
    assert user["text"].startswith("Stop working now. Without calling tools")
    assert "tool-call" not in types(events)  # tool choice none drops the scripted call
    assert events[-2]["final-text"] == "The final answer."
    assert events[-2]["context"] == "partial"  # a forced answer, from what it had so far
    assert [e["turn"] for e in events if e["type"] == "turn-started"] == [1]


def _second_reply_only(child: Child) -> Path:
    path = child.root / "final.json"
    path.write_text('[{"text": "The final answer.", "tool_calls": [{"name": "bash"}]}]')
    return path


@pytest.mark.parametrize(
    ("kind", "event"), [("steer", "steering-injected"), ("follow-up", "follow-up-injected")]
)
def test_ready_steer_or_follow_up_starts_a_turn(
    make_child: MakeChild, kind: str, event: str
) -> None:
    child = make_child(script="hello.json").start()
    s = child.send(kind, text="Do this instead.")
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    injected = events[index_of(events, lambda e: e["type"] == event)]
    assert injected["ref"] == s
    assert injected["text"] == "Do this instead."
    assert "user" not in types(events)
    assert index_of(events, lambda e: e.get("ref") == s) < index_of(
        events, lambda e: e["type"] == "turn-started"
    )


# -- running ----------------------------------------------------------------------------


def test_running_row(make_child: MakeChild) -> None:
    """prompt rejected; steer and follow-up queued and injected with their refs."""
    child = make_child(script="gated_tool.json")
    gate = child.gate()
    child.start()
    child.send("prompt", text="Start.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    p2 = child.send("prompt", text="Another.")
    s = child.send("steer", text="Steer text.")
    f = child.send("follow-up", text="Follow-up text.")
    assert child.ack(p2) == {
        **child.ack(p2),
        "status": "rejected",
        "reason": "a turn is running; send steer or follow-up",
    }
    assert child.ack(s)["status"] == "accepted"
    assert child.ack(f)["status"] == "accepted"
    gate.open()
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    steer = index_of(events, lambda e: e["type"] == "steering-injected")
    follow = index_of(events, lambda e: e["type"] == "follow-up-injected")
    assert events[steer]["ref"] == s
    assert events[steer]["text"] == "Steer text."
    assert events[follow]["ref"] == f
    llm_starts = [i for i, e in enumerate(events) if e["type"] == "llm-start"]
    # the steer goes in before the second model call, the follow-up when it would end
    assert llm_starts[0] < steer < llm_starts[1] < follow < llm_starts[2]
    assert [e["turn"] for e in events if e["type"] == "turn-started"] == [1]
    assert events[-2]["final-text"] == "reply three"
    assert events[-2]["usage"] == {"input": 6, "output": 6}


def test_running_close_lets_the_turn_finish(make_child: MakeChild) -> None:
    child = make_child(script="gated_tool.json")
    gate = child.gate()
    child.start()
    child.send("prompt", text="Start.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    c = child.send("close")
    assert child.ack(c)["status"] == "accepted"
    # closing row
    rejected = {kind: child.send(kind, text="x") for kind in ("prompt", "steer", "follow-up")}
    for seq in rejected.values():
        assert child.ack(seq) == {
            **child.ack(seq),
            "status": "rejected",
            "reason": "run is closing",
        }
    c2 = child.send("close")
    assert child.ack(c2)["status"] == "applied"
    gate.open()
    code, events = child.finish()
    assert code == 0
    assert types(events)[-3:] == ["turn-complete", "result", "exit"]
    assert events[-2]["final-text"] == "reply two"


def test_running_finalize_interrupts_the_tool_and_drops_queued(make_child: MakeChild) -> None:
    child = make_child(script="sleep_tool.json").start()
    child.send("prompt", text="Sleep.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    s = child.send("steer", text="never injected")
    f = child.send("follow-up", text="never injected either")
    fin = child.send("finalize", note="Answer now.")
    code, events = child.finish()
    assert code == 0
    assert child.ack(fin)["status"] == "accepted"
    info = events[index_of(events, lambda e: e["type"] == "info" and "refs" in e)]
    assert info["refs"] == [s, f]
    first_done = events[index_of(events, lambda e: e["type"] == "turn-complete")]
    assert first_done["turn"] == 1
    assert first_done["stop-reason"] == "aborted"
    results = [e for e in events if e["type"] == "tool-result"]
    assert [r["id"] for r in results] == ["s1", "s2"]
    assert all(r["is-error?"] for r in results)
    assert "cancelled" in results[0]["result"]["content"]
    user = [e for e in events if e["type"] == "user"]
    assert user[-1]["text"] == "Answer now."
    assert [e["turn"] for e in events if e["type"] == "turn-started"] == [1, 2]
    assert events[-2]["final-text"] == "The final answer."
    assert "steering-injected" not in types(events)


def test_closing_finalize_and_finalizing_row(make_child: MakeChild) -> None:
    child = make_child(script="gated_tool.json")
    child.gate()  # never opened: the finalize interrupts the tool
    child.start()
    child.send("prompt", text="Start.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    child.send("close")
    fin = child.send("finalize")
    assert child.ack(fin)["status"] == "accepted"
    code, events = child.finish()
    assert code == 0
    assert [e["turn"] for e in events if e["type"] == "turn-started"] == [1, 2]
    assert (
        events[index_of(events, lambda e: e["type"] == "turn-complete")]["stop-reason"] == "aborted"
    )
    assert events[-2]["final-text"] == "reply two"


def test_finalizing_row_while_the_final_turn_runs(make_child: MakeChild) -> None:
    script = [{"text": "slow final answer", "delay_ms": 60000}]
    child = make_child(script=script).start()
    fin = child.send("finalize")
    child.ack(fin)
    child.wait_for(lambda e: e["type"] == "llm-start")
    acks = {
        "finalize": child.send("finalize"),
        "close": child.send("close"),
        "prompt": child.send("prompt", text="x"),
        "steer": child.send("steer", text="x"),
        "follow-up": child.send("follow-up", text="x"),
    }
    for kind in ("finalize", "close"):
        assert child.ack(acks[kind])["status"] == "applied"
    for kind in ("prompt", "steer", "follow-up"):
        ack = child.ack(acks[kind])
        assert ack["status"] == "rejected"
        assert ack["reason"] == "run is finalizing"
    c = child.send("cancel")
    code, events = child.finish()
    assert code == 3
    assert child.ack(c)["status"] == "accepted"
    assert events[-1]["status"] == "cancelled"
    assert types(events)[-2] == "turn-complete"
    assert events[-2]["stop-reason"] == "aborted"


# -- terminal ---------------------------------------------------------------------------


def test_terminal_row_rejects_lines_already_in_the_file(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    first = child.seq + 1
    lines = b"".join(
        f'{{"v":1,"seq":{first + i},"type":"{kind}","run":"r"{extra}}}\n'.encode()
        for i, (kind, extra) in enumerate(
            [
                ("cancel", ""),
                ("prompt", ',"text":"x"'),
                ("steer", ',"text":"x"'),
                ("follow-up", ',"text":"x"'),
                ("finalize", ""),
                ("close", ""),
                ("cancel", ""),
            ]
        )
    )
    child.send_raw(lines)
    code, events = child.finish()
    assert code == 3
    acks = [e for e in events if e["type"] == "control-ack"]
    assert acks[0]["status"] == "accepted"
    assert all(a["status"] == "rejected" and a["reason"] == "run is cancelled" for a in acks[1:])
    assert len(acks) == 7


def test_cancel_during_a_turn_kills_the_tool_group(make_child: MakeChild) -> None:
    child = make_child(script="sleep_tool.json").start()
    child.send("prompt", text="Sleep.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    pid = wait_pid_file(child.root / "tool.pid", proc=child.proc)
    c = child.send("cancel")
    code, events = child.finish()
    assert code == 3
    assert child.ack(c)["status"] == "accepted"
    assert events[-1]["status"] == "cancelled"
    assert types(events)[-2] == "turn-complete"
    assert events[-2]["stop-reason"] == "aborted"
    assert not pid_alive(pid), "the tool's sleep outlived the cancel"
