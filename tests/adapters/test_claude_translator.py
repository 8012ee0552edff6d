"""The Claude Code translator in memory: stream-json lines in, actions out."""

from __future__ import annotations

from typing import Any

from tether.agent.desk import Verdict
from tether.agent.runner import Injection
from tether.policy import Call
from tether.runtime.child.adapters.claude import (
    ClaudeTranslator,
    command,
    final_args,
    final_command,
)
from tether.runtime.child.adapters.translate import (
    Ask,
    Broken,
    Ended,
    Send,
    Show,
    Started,
    Withdraw,
)

TEXT_BLOCK = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}


def stream(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event}


def replay(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}, "isReplay": True}


def result(**fields: Any) -> dict[str, Any]:
    base = {"type": "result", "subtype": "success", "stop_reason": "end_turn"}
    return base | {"usage": {"input_tokens": 3, "output_tokens": 2}} | fields


def shown(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.event for a in actions if isinstance(a, Show)]


def test_the_command_asks_permissions_on_stdio_unless_the_user_chose() -> None:
    argv = command(["/bin/claude"], ["--model=x"])
    assert argv[:2] == ["/bin/claude", "-p"]
    assert "--replay-user-messages" in argv
    assert argv[-3:] == ["--permission-prompt-tool", "stdio", "--model=x"]
    assert "stdio" not in command(["c"], ["--dangerously-skip-permissions"])
    assert final_args("s1") == ["--resume", "s1", "--tools", ""]
    assert final_args(None) == ["--tools", ""]
    resumed = ["claude", "-p", "--resume", "/h/old.jsonl", "--fork-session", "--model", "m"]
    assert final_command(resumed, "new") == [
        "claude",
        "-p",
        "--model",
        "m",
        "--resume",
        "new",
        "--tools",
        "",
    ]
    assert final_command(["claude", "--resume=x", "-c"], None) == ["claude", "--tools", ""]


def test_a_turn_streams_and_ends_at_its_result() -> None:
    t = ClaudeTranslator()
    (init_request,) = t.handshake()
    assert isinstance(init_request, Send)
    assert init_request.message["request"]["subtype"] == "initialize"
    answer = {"subtype": "success", "request_id": init_request.message["request_id"]}
    assert t.receive({"type": "control_response", "response": answer}) == [Started(None)]
    sent = t.start_turn(Injection("hi"))
    assert sent == [Send({"type": "user", "message": {"role": "user", "content": "hi"}})]
    init = {"type": "system", "subtype": "init", "session_id": "s1", "model": "m1"}
    assert t.receive(init) == [Started("s1")]
    assert t.receive(replay("hi")) == []
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}
    assert shown(t.receive(stream(start))) == [
        {"type": "llm-start", "provider": "claude", "model": "m1"}
    ]
    t.receive(
        stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    )
    delta = {"type": "text_delta", "text": "Hello"}
    out = shown(t.receive(stream({"type": "content_block_delta", "index": 0, "delta": delta})))
    assert out == [{"type": "assistant-text-delta", "content-index": 0, "delta": "Hello"}]
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 2},
    }
    t.receive(stream(end))
    kinds = [e["type"] for e in shown(t.receive(stream({"type": "message_stop"})))]
    assert kinds == ["assistant-text", "assistant-stream-end", "llm-end"]
    ended = t.receive(result())
    assert ended == [Ended("stop", ended[0].usage)]
    assert ended[0].usage.input == 3
    assert t.final_text == "Hello"


def test_a_refused_initialize_breaks_the_set_up() -> None:
    t = ClaudeTranslator()
    (request,) = t.handshake()
    assert isinstance(request, Send)
    answer = {"subtype": "error", "request_id": request.message["request_id"], "error": "no"}
    (broken,) = t.receive({"type": "control_response", "response": answer})
    assert isinstance(broken, Broken)
    assert "no" in broken.reason


def test_a_steer_not_yet_taken_in_keeps_the_turn_open() -> None:
    t = ClaudeTranslator()
    t.handshake()
    t.start_turn(Injection("go"))
    t.receive(replay("go"))
    t.inject(Injection("steer me", "steering", 4))
    assert t.receive(result()) == []  # Claude Code goes on with the steer
    assert shown(t.receive(replay("steer me"))) == [
        {"type": "steering-injected", "text": "steer me", "ref": 4}
    ]
    ended = t.receive(result())
    assert [type(a) for a in ended] == [Ended]
    assert ended[0].usage.input == 6  # both results count


def test_interrupt_ends_the_turn_aborted_and_salvages_the_text() -> None:
    t = ClaudeTranslator()
    t.handshake()
    t.start_turn(Injection("go"))
    t.receive(stream({"type": "message_start", "message": {}}))
    t.receive(
        stream({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    )
    delta = {"type": "text_delta", "text": "partial"}
    t.receive(stream({"type": "content_block_delta", "index": 0, "delta": delta}))
    (send,) = t.interrupt()
    assert isinstance(send, Send)
    assert send.message["request"] == {"subtype": "interrupt"}
    assert t.interrupt() == []  # once
    out = t.receive(result(subtype="error_during_execution", is_error=True))
    assert isinstance(out[-1], Ended)
    assert out[-1].stop_reason == "aborted"
    texts = [e for e in shown(out) if e["type"] == "assistant-text"]
    assert texts == [
        {"type": "assistant-text", "final?": False, "content-index": 0, "text": "partial"}
    ]


def test_an_error_result_ends_the_turn_with_its_message() -> None:
    t = ClaudeTranslator()
    t.handshake()
    t.start_turn(Injection("go"))
    t.receive(replay("go"))
    (ended,) = t.receive(result(is_error=True, result="API Error: 400 boom"))
    assert isinstance(ended, Ended)
    assert ended.stop_reason == "error"
    assert ended.error is not None
    assert "API Error: 400 boom" in ended.error


def test_a_permission_prompt_asks_the_desk_and_is_answered_in_claudes_words() -> None:
    t = ClaudeTranslator()
    argument = {"command": "rm x"}
    request = {"subtype": "can_use_tool", "tool_name": "Bash", "input": argument}
    (ask,) = t.receive({"type": "control_request", "request_id": "r1", "request": request})
    assert isinstance(ask, Ask)
    assert ask.token == "r1"
    assert ask.request.call() == Call("Bash", "shell", ("rm x",))
    (send,) = t.answered("r1", Verdict("deny", "person", text="no"))
    assert isinstance(send, Send)
    assert send.message == {
        "type": "control_response",
        "response": {
            "subtype": "success",
            "request_id": "r1",
            "response": {
                "behavior": "deny",
                "message": "tether: denied by the person supervising this run: no",
            },
        },
    }
    assert t.answered("r1", Verdict("approve", "person")) == []  # answered once
    asked = {**request, "tool_use_id": "tu2"}
    t.receive({"type": "control_request", "request_id": "r2", "request": asked})
    (allow,) = t.answered("r2", Verdict("approve", "rule", rule="shell"))
    assert isinstance(allow, Send)
    assert allow.message["response"]["response"] == {
        "behavior": "allow",
        "updatedInput": argument,
        "toolUseID": "tu2",
    }
    t.receive({"type": "control_request", "request_id": "r3", "request": request})
    assert t.receive({"type": "control_cancel_request", "request_id": "r3"}) == [Withdraw("r3")]
    assert t.answered("r3", Verdict("deny", "withdrawn")) == []
    other = t.receive({"type": "control_request", "request_id": "r2", "request": {"subtype": "x"}})
    assert isinstance(other[0], Send)
    assert other[0].message["response"]["subtype"] == "error"


def test_anything_else_yields_actions_never_an_exception() -> None:
    t = ClaudeTranslator()
    for junk in [
        None,
        1,
        [],
        {"type": 5},
        {"type": "stream_event", "event": []},
        {"type": "user", "message": {"content": [1, {"type": "tool_result"}]}},
        {"type": "result"},
        {"type": "control_request"},
    ]:
        assert isinstance(t.receive(junk), list)
