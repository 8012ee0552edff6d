"""The built-in agent's approvals through a real child: with ``--approval ask`` its bash
asks first and nothing runs until an ``answer`` comes; rules decide without asking; a
timeout takes the run's default; with no one to ask the call is denied at once."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from child_helpers import Child

MakeChild = Callable[..., Child]
TOUCH = "touch made.txt"


def _child(make_child: MakeChild, *args: str, command: str = TOUCH) -> Child:
    bash = {"name": "bash", "arguments": {"command": command}, "id": "b1"}
    script = [{"text": "Making it.", "tool_calls": [bash]}, {"text": "All done."}]
    child = make_child(script=script, args=args)
    child.env["TETHER_INBOX_PATH"] = str(child.root / "inbox.jsonl")
    child.start()
    child.send("prompt", text="Make the file.")
    return child


def _inbox(child: Child) -> list[dict[str, Any]]:
    path = child.root / "inbox.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def _waiting_key(child: Child) -> str:
    waits = child.wait_for(lambda e: e["type"] == "info" and " waits: " in e.get("summary", ""))
    found = re.search(r"approval (\S+) waits", waits["summary"])
    assert found is not None, waits
    return found.group(1)


def _finish(child: Child) -> list[dict[str, Any]]:
    child.wait_for(lambda e: e["type"] == "turn-complete")
    child.send("close")
    code, events = child.finish()
    assert code == 0
    assert events[-2]["final-text"] == "All done."
    return events


def _tool_result(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "tool-result")


def test_ask_waits_for_the_answer_then_deny_runs_nothing(make_child: MakeChild) -> None:
    child = _child(make_child, "--approval", "ask")
    key = _waiting_key(child)
    run, _, offset = key.rpartition(":")
    assert run == child.root.name
    request = _inbox(child)[-1]
    assert request["type"] == "approval_request"
    assert (child.root / "inbox.jsonl").read_bytes()[int(offset) :].startswith(b'{"type"')
    assert request["tool"] == "bash"
    assert request["kind"] == "shell"
    assert request["input"] == {"command": TOUCH}
    assert request["summary"] == TOUCH
    assert not (child.root / "made.txt").exists()
    answer = child.send("answer", key=key, decision="deny", text="not on a Friday")
    assert child.ack(answer)["status"] == "applied"
    twice = child.send("answer", key=key, decision="approve")
    events = _finish(child)
    assert child.ack(twice)["status"] == "rejected"
    assert not (child.root / "made.txt").exists()
    result = _tool_result(events)
    assert result["is-error?"] is True
    assert (
        "denied by the person supervising this run: not on a Friday" in result["result"]["content"]
    )
    decision = _inbox(child)[-1]
    assert decision["type"] == "approval_decision"
    assert (decision["key"], decision["decision"], decision["by"]) == (key, "deny", "person")


def test_ask_then_approve_runs_it(make_child: MakeChild) -> None:
    child = _child(make_child, "--approval", "ask")
    key = _waiting_key(child)
    answer = child.send("answer", key=key, decision="approve")
    assert child.ack(answer)["status"] == "applied"
    events = _finish(child)
    assert (child.root / "made.txt").exists()
    assert _tool_result(events)["is-error?"] is False


def test_a_steer_carrying_the_key_answers_too(make_child: MakeChild) -> None:
    from tether.inbox.answers import answer_text

    child = _child(make_child, "--approval", "ask")
    key = _waiting_key(child)
    child.send("steer", text=answer_text(key, "approval_request", TOUCH, "Approved. go"))
    _finish(child)
    assert (child.root / "made.txt").exists()


def test_rules_decide_without_a_request(make_child: MakeChild) -> None:
    approved = _child(make_child, "--approval", "ask", "--approve", "shell:touch *")
    _finish(approved)
    assert (approved.root / "made.txt").exists()
    denied = _child(make_child, "--approve", "shell", "--deny", "shell:touch made*")
    events = _finish(denied)
    assert not (denied.root / "made.txt").exists()
    assert "deny shell:touch made*" in _tool_result(events)["result"]["content"]
    for child, rule in ((approved, "shell:touch *"), (denied, "shell:touch made*")):
        lines = _inbox(child)
        assert [line["type"] for line in lines] == ["approval_decision"]
        assert (lines[0]["by"], lines[0]["rule"]) == ("rule", rule)


def test_the_timeout_takes_the_runs_default(make_child: MakeChild) -> None:
    child = _child(
        make_child,
        "--approval=ask",
        "--approval-timeout=0.2",
        "--approval-default=deny",
    )
    events = _finish(child)
    assert not (child.root / "made.txt").exists()
    request, decision = _inbox(child)
    assert (request["timeout_s"], request["default"]) == (0.2, "deny")
    assert (decision["by"], decision["decision"]) == ("timeout", "deny")
    assert "no answer in time" in _tool_result(events)["result"]["content"]


def test_no_one_to_ask_denies_at_once(make_child: MakeChild) -> None:
    child = _child(make_child, "--approval=ask", "--no-one-to-ask=not a terminal")
    events = _finish(child)
    assert not (child.root / "made.txt").exists()
    assert [line["by"] for line in _inbox(child)] == ["no-one"]
    assert "no one to ask: not a terminal" in _tool_result(events)["result"]["content"]


def test_without_approval_ask_the_built_in_agent_runs_as_before(make_child: MakeChild) -> None:
    child = _child(make_child)
    _finish(child)
    assert (child.root / "made.txt").exists()
    assert _inbox(child) == []


def test_bad_settings_fail_the_run_before_it_starts(make_child: MakeChild, tmp_path: Path) -> None:
    for args, words in [
        (["--approval-timeout=5"], "go together"),
        (["--approve=sh ell"], "not a kind"),
        ([f"--policy={tmp_path / 'missing.toml'}"], "cannot read the policy file"),
    ]:
        child = make_child(script="hello.json", args=args)
        child.start(wait_ready=False)
        code = child.wait_exit()
        assert code != 0
        exit_event = child.events()[-1]
        assert exit_event["status"] == "failed"
        assert words in exit_event["error"], exit_event
