"""The wire's two extensions through a real child: ``unqueue`` withdraws a queued steer or
follow-up before it is injected; ``answer`` resolves a waiting question without entering
the conversation; cancel and finalize report the texts they dropped."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from child_helpers import Child, types

MakeChild = Callable[..., Child]


def _gated_child(make_child: MakeChild, after: dict[str, object]) -> Child:
    """A child whose first reply runs a bash tool that waits for ``child.gate().open()``."""
    child = make_child(script=[after])
    bash = {"name": "bash", "arguments": {"command": child.gate().command}, "id": "g1"}
    (child.root / "script.json").write_text(
        json.dumps([{"text": "Working.", "tool_calls": [bash]}, after])
    )
    return child.start()


def _with_inbox(make_child: MakeChild, script: list[dict[str, object]]) -> Child:
    child = make_child(script=script)
    child.env["TETHER_INBOX_PATH"] = str(child.root / "inbox.jsonl")
    return child.start()


def test_unqueue_withdraws_queued_controls_and_says_why_it_cannot(make_child: MakeChild) -> None:
    child = _gated_child(make_child, {"text": "Done."})
    child.send("prompt", text="Go.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    steer = child.send("steer", text="NEVER SEEN")
    follow = child.send("follow-up", text="ALSO NEVER")
    late = child.send("steer", text="TAKEN IN")
    assert child.ack(steer)["status"] == "accepted"
    withdrawn = child.send("unqueue", ref=steer)
    again = child.send("unqueue", ref=steer)
    unknown = child.send("unqueue", ref=999)
    dropped_follow = child.send("unqueue", ref=follow)
    assert child.ack(withdrawn)["status"] == "applied"
    assert child.ack(dropped_follow)["status"] == "applied"
    assert child.ack(again)["status"] == "rejected"
    assert child.ack(again)["reason"] == f"control {steer} was withdrawn"
    assert child.ack(unknown)["reason"] == "no queued steer or follow-up with seq 999"
    child.gate().open()
    child.wait_for(lambda e: e["type"] == "steering-injected")
    injected = child.send("unqueue", ref=late)
    assert child.ack(injected)["reason"] == f"control {late} was already handed to the agent"
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    texts = [e.get("text") for e in events if e["type"].endswith("-injected")]
    assert texts == ["TAKEN IN"]


def test_finalize_reports_the_texts_it_dropped(make_child: MakeChild) -> None:
    child = _gated_child(make_child, {"text": "Final."})
    child.send("prompt", text="Go.")
    child.wait_for(lambda e: e["type"] == "tool-call")
    follow = child.send("follow-up", text="LATER, PLEASE")
    child.send("finalize")
    code, events = child.finish()
    assert code == 0
    info = next(e for e in events if e["type"] == "info" and e.get("refs") == [follow])
    assert info["dropped"] == [{"ref": follow, "kind": "follow-up", "text": "LATER, PLEASE"}]


def test_an_answer_nothing_waits_for_is_rejected(make_child: MakeChild) -> None:
    child = make_child(script="hello.json").start()
    seq = child.send("answer", key="nobody:1", decision="approve")
    ack = child.ack(seq)
    assert ack["status"] == "rejected"
    assert ack["reason"] == "no approval or question nobody:1 waits in this run"
    child.send("close")
    assert child.finish()[0] == 0


def test_an_answer_reaches_the_ask_tool_and_not_the_conversation(make_child: MakeChild) -> None:
    ask = {"name": "ask", "arguments": {"question": "Which colour?"}, "id": "a1"}
    child = _with_inbox(make_child, [{"tool_calls": [ask]}, {"text": "Painting it blue."}])
    child.send("prompt", text="Paint.")
    waits = child.wait_for(lambda e: e["type"] == "info" and "question" in e.get("summary", ""))
    key = re.search(r"question (\S+) waits", waits["summary"])
    assert key is not None
    wrong = child.send("answer", key=key.group(1), decision="approve", text="")
    seq = child.send("answer", key=key.group(1), text="blue")
    assert child.ack(wrong)["status"] == "applied"  # a decision answers a question too
    assert child.ack(seq)["reason"] == f"no approval or question {key.group(1)} waits in this run"
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    result = next(e for e in events if e["type"] == "tool-result")
    assert result["result"]["content"] == "answer: Approved."
    assert not [e for e in events if e["type"].endswith("-injected")]
    assert "turn-started" in types(events)
