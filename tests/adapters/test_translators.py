"""The sans-IO translators of the Codex, pi and ACP adapters: recorded CLI output in,
wire display events and CLI requests out; total on any input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.agent.desk import Verdict
from tether.agent.provider import Usage
from tether.agent.runner import Injection
from tether.display.boundary import tool_output
from tether.policy import Call
from tether.runtime.child.adapters.acp import AcpTranslator, split_mode_arg
from tether.runtime.child.adapters.codex import CodexTranslator
from tether.runtime.child.adapters.commands import HANDSHAKES
from tether.runtime.child.adapters.pi import PiTranslator
from tether.runtime.child.adapters.translate import (
    Action,
    Ask,
    Broken,
    Ended,
    Send,
    Show,
    Started,
    Withdraw,
)

FIXTURES = Path(__file__).parent / "fixtures"


def lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


def feed(translator: Any, messages: list[Any]) -> list[Action]:
    out: list[Action] = []
    for message in messages:
        out += translator.receive(message)
    return out


def shown(actions: list[Action]) -> list[dict[str, Any]]:
    return [a.event for a in actions if isinstance(a, Show)]


def types(actions: list[Action]) -> list[str]:
    return [e["type"] for e in shown(actions)]


def sent(actions: list[Action]) -> list[dict[str, Any]]:
    return [a.message for a in actions if isinstance(a, Send)]


# -- pi -------------------------------------------------------------------------------------


def test_pi_recorded_tool_turn() -> None:
    pi = PiTranslator()
    assert sent(pi.handshake()) == [{"id": "tether-state", "type": "get_state"}]
    start = pi.start_turn(Injection("Say hi using a tool"))
    assert sent(start) == [{"id": "tether-1", "type": "prompt", "message": "Say hi using a tool"}]
    out = feed(pi, [{"id": "tether-1", "type": "response", "command": "prompt", "success": True}])
    out += feed(pi, lines("pi_tool_turn.jsonl")[1:])
    assert types(out) == [
        "llm-start",
        "assistant-text-delta",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
        "tool-call",
        "tool-result",
        "llm-start",
        "assistant-thinking-delta",
        "assistant-text-delta",
        "assistant-thinking",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
    ]
    events = shown(out)
    assert events[2]["final?"] is False
    assert events[-3]["final?"] is True
    assert events[4]["stop-reason"] == "tool-use"
    call, result = events[5], events[6]
    assert call == {
        "type": "tool-call",
        "name": "bash",
        "id": "call_1",
        "arguments": {"command": "echo hello-from-tool"},
    }
    assert result["result"] == {"content": "hello-from-tool\n"}
    assert result["is-error?"] is False
    ended = [a for a in out if isinstance(a, Ended)]
    assert ended == [Ended("stop", Usage(20, 10), None)]
    assert pi.final_text == "Done: the tool said hello."
    state = pi.receive(lines("pi_tool_turn.jsonl")[0] | {"id": "tether-state"})
    assert state == [Started(None)] or isinstance(state[0], Started)


def test_pi_steer_is_shown_when_pi_takes_it_in_and_holds_the_end() -> None:
    pi = PiTranslator()
    pi.start_turn(Injection("go"))
    feed(pi, [{"type": "response", "id": "tether-1", "success": True}, {"type": "agent_start"}])
    steer = sent(pi.inject(Injection("left", "steering", 7)))
    assert steer == [
        {"id": "tether-2", "type": "prompt", "message": "left", "streamingBehavior": "steer"}
    ]
    follow = sent(pi.inject(Injection("then", "follow-up", 8)))
    assert follow[0]["streamingBehavior"] == "followUp"
    out = feed(pi, [{"type": "queue_update", "steering": ["left"], "followUp": ["then"]}])
    out += feed(pi, [{"type": "response", "id": "tether-2", "success": True}])
    user = {"role": "user", "content": [{"type": "text", "text": "left"}]}
    out += feed(pi, [{"type": "message_start", "message": user}])
    assert shown(out) == [{"type": "steering-injected", "text": "left", "ref": 7}]
    # agent_end while a command is unanswered does not end the turn
    assert not [a for a in feed(pi, [{"type": "agent_end"}]) if isinstance(a, Ended)]
    done = feed(pi, [{"type": "response", "id": "tether-3", "success": True}])
    assert [a for a in done if isinstance(a, Ended)]
    infos = [e for e in shown(done) if e["type"] == "info"]
    assert infos
    assert "8" in infos[0]["summary"]


def test_pi_steer_that_finds_pi_idle_keeps_the_turn_for_the_new_run() -> None:
    pi = PiTranslator()
    pi.start_turn(Injection("go"))
    feed(pi, [{"type": "response", "id": "tether-1", "success": True}, {"type": "agent_start"}])
    pi.inject(Injection("late", "steering", 3))
    assert not [a for a in feed(pi, [{"type": "agent_end"}]) if isinstance(a, Ended)]
    out = feed(pi, [{"type": "response", "id": "tether-2", "success": True}])
    assert not [a for a in out if isinstance(a, Ended)]
    user = {"role": "user", "content": "late"}
    out = feed(pi, [{"type": "agent_start"}, {"type": "message_start", "message": user}])
    assert shown(out) == [{"type": "steering-injected", "text": "late", "ref": 3}]
    assert [a for a in feed(pi, [{"type": "agent_end"}]) if isinstance(a, Ended)]


def test_pi_refused_prompt_ends_the_turn_with_an_error_and_dialogs_ask_the_desk() -> None:
    pi = PiTranslator()
    pi.start_turn(Injection("go"))
    out = feed(pi, [{"type": "response", "id": "tether-1", "success": False, "error": "no model"}])
    ended = [a for a in out if isinstance(a, Ended)]
    assert ended
    assert ended[0].stop_reason == "error"
    assert "no model" in (ended[0].error or "")
    ask = pi.receive(
        {"type": "extension_ui_request", "id": "u1", "method": "confirm", "title": "ok?"}
    )
    assert ask == [Ask(ask[0].request, "u1")]
    assert (ask[0].request.tool, ask[0].request.summary) == ("confirm", "ok?")
    assert ask[0].request.call().kind == "dialog"
    assert sent(ask) == []  # nothing is answered until the desk decides
    assert sent(pi.answered("u1", Verdict("deny", "person"))) == [
        {"type": "extension_ui_response", "id": "u1", "confirmed": False}
    ]
    assert pi.answered("u1", Verdict("approve", "person")) == []  # answered once
    assert pi.interrupt()[0] == Send({"id": "tether-2", "type": "abort"})


@pytest.mark.parametrize(
    ("method", "options", "verdict", "answer"),
    [
        ("confirm", None, Verdict("approve", "person"), {"confirmed": True}),
        ("select", ["Yes", "No"], Verdict("approve", "person"), {"value": "Yes"}),
        ("select", ["Allow once", "Block"], Verdict("deny", "rule"), {"value": "Block"}),
        ("select", ["red", "blue"], Verdict("approve", "person", text="Blue"), {"value": "blue"}),
        ("select", ["red", "blue"], Verdict("approve", "person"), {"cancelled": True}),
        ("input", None, Verdict("approve", "person", text="42"), {"value": "42"}),
        ("editor", None, Verdict("deny", "person"), {"cancelled": True}),
        ("confirm", None, Verdict("deny", "withdrawn"), {"cancelled": True}),
    ],
)
def test_pi_dialogs_are_answered_with_what_the_person_chose(
    method: str, options: list[str] | None, verdict: Verdict, answer: dict[str, Any]
) -> None:
    pi = PiTranslator()
    request: dict[str, Any] = {"type": "extension_ui_request", "id": "d", "method": method}
    if options is not None:
        request["options"] = options
    (ask,) = pi.receive(request)
    assert isinstance(ask, Ask)
    assert ask.request.choices == tuple(options or ())
    assert sent(pi.answered("d", verdict)) == [
        {"type": "extension_ui_response", "id": "d", **answer}
    ]


# -- codex ----------------------------------------------------------------------------------


def codex_ready() -> CodexTranslator:
    codex = CodexTranslator("/work")
    opening = sent(codex.handshake())  # pipelined: written as soon as Codex starts
    assert [m.get("method") for m in opening] == ["initialize", "initialized", "thread/start"]
    assert "jsonrpc" not in opening[0]
    assert opening[2]["params"] == {"cwd": "/work"}
    assert opening == HANDSHAKES["codex"]("/work", None, None)  # what `tether child` writes
    assert codex.receive({"id": 1, "result": {"userAgent": "x"}}) == []
    started = codex.receive({"id": 2, "result": {"thread": {"id": "thr"}}})
    assert started == [Started("thr")]
    return codex


def test_codex_recorded_tool_turn() -> None:
    codex = codex_ready()
    start = sent(codex.start_turn(Injection("hi")))
    assert start == [
        {
            "id": 3,
            "method": "turn/start",
            "params": {"threadId": "thr", "input": [{"type": "text", "text": "hi"}]},
        }
    ]
    recorded = [m for m in lines("codex_tool_turn.jsonl") if m.get("id") not in (1, 2)]
    out = feed(codex, recorded)
    assert types(out) == [
        "info",  # the warning about model metadata
        "llm-start",
        "assistant-text-delta",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
        "tool-call",
        "tool-result",
        "llm-start",
        "assistant-thinking-delta",
        "assistant-text-delta",
        "assistant-thinking",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
    ]
    events = shown(out)
    assert events[5] == {"type": "llm-end", "stop-reason": "tool-use"}
    assert events[6]["name"] == "exec_command"
    assert "echo hello-from-codex" in events[6]["arguments"]["command"]
    assert events[7]["result"]["content"].strip() == "hello-from-codex"
    assert events[7]["result"]["details"] == {"exitCode": 0}  # the display shows content
    assert tool_output(events[7]["result"]).strip() == "hello-from-codex"
    assert events[7]["is-error?"] is False
    assert events[-1]["usage"] == {"input": 10, "output": 5}
    assert [a for a in out if isinstance(a, Ended)] == [Ended("stop", Usage(20, 10), None)]
    assert codex.final_text == "The tool said hello."


def test_codex_steer_waits_for_the_turn_id_and_a_refused_steer_opens_the_next_turn() -> None:
    codex = codex_ready()
    codex.start_turn(Injection("hi"))
    assert codex.inject(Injection("more", "steering", 5)) == []
    out = codex.receive({"id": 3, "result": {"turn": {"id": "t1", "status": "inProgress"}}})
    steer = sent(out)
    assert steer[0]["method"] == "turn/steer"
    assert steer[0]["params"]["expectedTurnId"] == "t1"
    done = codex.receive(
        {"method": "turn/completed", "params": {"turn": {"id": "t1", "status": "completed"}}}
    )
    assert not [a for a in done if isinstance(a, Ended)]  # the steer is unanswered
    refused = codex.receive({"id": steer[0]["id"], "error": {"code": -32600, "message": "no turn"}})
    assert shown(refused) == [{"type": "steering-injected", "text": "more", "ref": 5}]
    assert sent(refused)[0]["method"] == "turn/start"


def test_codex_steer_refused_before_its_turn_completed_opens_the_next_turn() -> None:
    # CI saw Codex refuse a steer ("no active turn to steer") before it sent the
    # turn/completed of the turn that had ended: the steer was shown as refused and lost
    codex = codex_ready()
    codex.start_turn(Injection("hi"))
    codex.receive({"id": 3, "result": {"turn": {"id": "t1", "status": "inProgress"}}})
    steer = sent(codex.inject(Injection("more", "steering", 5)))
    refused = codex.receive(
        {"id": steer[0]["id"], "error": {"code": -32600, "message": "no active turn to steer"}}
    )
    assert not sent(refused)
    assert [e["type"] for e in shown(refused)] == ["info"]
    done = codex.receive(
        {"method": "turn/completed", "params": {"turn": {"id": "t1", "status": "completed"}}}
    )
    assert not [a for a in done if isinstance(a, Ended)]  # the steer opens the next turn
    assert shown(done)[-1] == {"type": "steering-injected", "text": "more", "ref": 5}
    assert sent(done)[0]["method"] == "turn/start"


def test_codex_interrupt_before_the_turn_id_and_failed_turns() -> None:
    codex = codex_ready()
    codex.start_turn(Injection("hi"))
    assert codex.interrupt() == []
    out = codex.receive({"id": 3, "result": {"turn": {"id": "t1"}}})
    assert sent(out) == [
        {"id": 4, "method": "turn/interrupt", "params": {"threadId": "thr", "turnId": "t1"}}
    ]
    turn = {"id": "t1", "status": "interrupted"}
    ended = codex.receive({"method": "turn/completed", "params": {"turn": turn}})
    assert ended[-1] == Ended("aborted", Usage(), None)
    codex.start_turn(Injection("again"))
    failed = {"id": "t2", "status": "failed", "error": {"message": "model exploded"}}
    codex.receive({"id": 5, "result": {"turn": {"id": "t2"}}})
    out = codex.receive({"method": "turn/completed", "params": {"turn": failed}})
    assert out[-1] == Ended("error", Usage(), "model exploded")
    # Codex 0.171.0 sends a failed turn's error twice (an `error` notification, then in
    # turn/completed, as for a max_output_tokens stop): it is shown once
    codex.start_turn(Injection("once more"))
    codex.receive({"id": 6, "result": {"turn": {"id": "t3"}}})
    cut = {"message": "Incomplete response returned, reason: max_output_tokens"}
    noted = codex.receive({"method": "error", "params": {"error": cut, "willRetry": False}})
    failed = {"id": "t3", "status": "failed", "error": cut}
    out = noted + codex.receive({"method": "turn/completed", "params": {"turn": failed}})
    assert [e["error"] for e in shown(out) if e["type"] == "error"] == [cut["message"]]
    assert out[-1] == Ended("error", Usage(), cut["message"])


def test_codex_approvals_ask_the_desk_and_unknown_requests_are_refused() -> None:
    codex = codex_ready()
    params = {"threadId": "thr", "turnId": "t", "itemId": "i", "command": "rm -rf /"}
    out = codex.receive(
        {"id": 90, "method": "item/commandExecution/requestApproval", "params": params}
    )
    assert len(out) == 1
    assert isinstance(out[0], Ask)
    assert out[0].token == 90
    assert out[0].request.call() == Call("commandExecution", "shell", ("rm -rf /",))
    assert sent(out) == []
    assert sent(codex.answered(90, Verdict("deny", "person"))) == [
        {"id": 90, "result": {"decision": "decline"}}
    ]
    codex.receive({"id": 92, "method": "item/commandExecution/requestApproval", "params": params})
    always = Verdict("approve", "person", scope="always")
    assert sent(codex.answered(92, always)) == [
        {"id": 92, "result": {"decision": "acceptForSession"}}
    ]
    item = {"type": "fileChange", "id": "f1", "changes": [{"path": "/work/src/a.py"}]}
    codex.receive({"method": "item/started", "params": {"item": item}})
    file_params = {"threadId": "thr", "turnId": "t", "itemId": "f1"}
    (ask,) = codex.receive(
        {"id": 93, "method": "item/fileChange/requestApproval", "params": file_params}
    )
    assert isinstance(ask, Ask)
    assert ask.request._replace(cwd="/work").call() == Call("fileChange", "edit", ("src/a.py",))
    assert sent(codex.answered(93, Verdict("deny", "withdrawn"))) == [
        {"id": 93, "result": {"decision": "cancel"}}
    ]
    legacy = {
        "command": ["ls"],
        "callId": "c",
        "conversationId": "thr",
        "cwd": "/",
        "parsedCmd": [],
    }
    codex.receive({"id": 94, "method": "execCommandApproval", "params": legacy})
    assert sent(codex.answered(94, Verdict("approve", "rule"))) == [
        {"id": 94, "result": {"decision": "approved"}}
    ]
    wants = {"fileSystem": {"write": ["/x"]}}
    perm = {"cwd": "/", "itemId": "p", "permissions": wants, "threadId": "thr", "turnId": "t"}
    codex.receive({"id": 95, "method": "item/permissions/requestApproval", "params": perm})
    assert sent(codex.answered(95, Verdict("approve", "person"))) == [
        {"id": 95, "result": {"permissions": wants}}
    ]
    out = codex.receive({"id": 91, "method": "attestation/generate", "params": {}})
    assert sent(out)[0]["error"]["code"] == -32601
    out = codex.receive({"id": 96, "method": "item/tool/requestUserInput", "params": {}})
    assert sent(out) == [{"id": 96, "result": {"answers": {}}}]


def test_codex_broken_handshake() -> None:
    codex = CodexTranslator("/w", model="m1")
    assert sent(codex.handshake())[2]["params"] == {"cwd": "/w", "model": "m1"}
    out = codex.receive({"id": 1, "error": {"code": 1, "message": "nope"}})
    assert isinstance(out[0], Broken)
    assert "nope" in out[0].reason


# -- ACP ------------------------------------------------------------------------------------


def _tool_update(update_kind: str, ident: str, **fields: Any) -> dict[str, Any]:
    update = {"sessionUpdate": update_kind, "toolCallId": ident, **fields}
    params = {"sessionId": "s1", "update": update}
    return {"jsonrpc": "2.0", "method": "session/update", "params": params}


def acp_ready(mode: str | None = None) -> AcpTranslator:
    acp = AcpTranslator("/work", mode=mode)
    first = sent(acp.handshake())[0]
    assert first["jsonrpc"] == "2.0"
    assert first["params"]["protocolVersion"] == 1
    out = acp.receive({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}})
    assert sent(out)[0]["params"] == {"cwd": "/work", "mcpServers": []}
    out = acp.receive({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s1"}})
    if mode is None:
        assert out == [Started("s1")]
    else:
        assert sent(out)[0]["params"] == {"sessionId": "s1", "modeId": mode}
        assert acp.receive({"jsonrpc": "2.0", "id": 3, "result": {}}) == [Started("s1")]
    return acp


def test_acp_recorded_claude_code_acp_tool_turn() -> None:
    acp = acp_ready("bypassPermissions")
    prompt = sent(acp.start_turn(Injection("hi")))[0]
    assert prompt["method"] == "session/prompt"
    assert prompt["id"] == 4
    recorded = [m for m in lines("acp_claude_tool_turn.jsonl") if m.get("id") not in (1, 2, 3)]
    out = feed(acp, recorded)
    assert types(out) == [
        "llm-start",
        "assistant-text-delta",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
        "tool-call",
        "tool-result",
        "llm-start",
        "assistant-thinking-delta",
        "assistant-text-delta",
        "assistant-thinking",
        "assistant-text",
        "assistant-stream-end",
        "llm-end",
    ]
    events = shown(out)
    assert events[5]["arguments"] == {"command": "echo hello-from-acp", "description": "say hello"}
    assert "hello-from-acp" in events[6]["result"]["content"]
    assert tool_output(events[6]["result"]) == "hello-from-acp"  # not raw JSON
    assert out[-1] == Ended("stop", Usage(), None)
    assert acp.final_text == "The tool said hello."


def test_acp_permission_is_answered_with_the_option_chosen_and_cancel_ends_the_prompt() -> None:
    acp = acp_ready()
    prompt = sent(acp.start_turn(Injection("hi")))[0]
    options = [
        {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
        {"optionId": "no", "name": "Reject", "kind": "reject_once"},
    ]
    params = {"sessionId": "s1", "toolCall": {"toolCallId": "t", "title": "rm"}, "options": options}
    request = {"jsonrpc": "2.0", "id": 50, "method": "session/request_permission", "params": params}
    acp.receive(_tool_update("tool_call", "t", kind="execute", rawInput={"command": "rm x"}))
    out = acp.receive(request)
    assert len(out) == 1
    assert isinstance(out[0], Ask)
    assert out[0].token == 50
    assert out[0].request.call() == Call("execute", "shell", ("rm x",))
    assert out[0].request.choices[0] == {"optionId": "yes", "name": "Allow", "kind": "allow_once"}
    answer = sent(acp.answered(50, Verdict("deny", "person")))[0]
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "no"}}
    acp.receive({**request, "id": 51})
    answer = sent(acp.answered(51, Verdict("approve", "person", scope="always")))[0]
    assert answer["result"] == {"outcome": {"outcome": "selected", "optionId": "yes"}}
    acp.receive({**request, "id": 52})
    answer = sent(acp.answered(52, Verdict("deny", "withdrawn")))[0]
    assert answer["result"] == {"outcome": {"outcome": "cancelled"}}
    cancel = sent(acp.interrupt())
    assert cancel[0] == {
        "jsonrpc": "2.0",
        "method": "session/cancel",
        "params": {"sessionId": "s1"},
    }
    out = acp.receive({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "cancelled"}})
    assert out[-1] == Ended("aborted", Usage(), None)
    fs = acp.receive({"jsonrpc": "2.0", "id": 9, "method": "fs/read_text_file", "params": {}})
    assert sent(fs)[0]["error"]["code"] == -32601


def test_acp_usage_and_mode_argument() -> None:
    acp = acp_ready()
    prompt = sent(acp.start_turn(Injection("hi")))[0]
    usage = {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7, "cachedReadTokens": 1}
    out = acp.receive({"id": prompt["id"], "result": {"stopReason": "max_tokens", "usage": usage}})
    assert out[-1] == Ended("length", Usage(5, 2, 1), None)
    assert split_mode_arg(["--session-mode=plan", "--x"]) == ("plan", ["--x"])


# -- totality -------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = ["type", "method", "id", "params", "result", "error", "message", "update", "item", "turn"]
MESSAGE = st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6) | JSON


def in_turn(kind: str) -> Any:
    if kind == "pi":
        pi = PiTranslator()
        pi.handshake()
        pi.start_turn(Injection("x"))
        return pi
    translator = codex_ready() if kind == "codex" else acp_ready()
    translator.start_turn(Injection("x"))
    return translator


@pytest.mark.parametrize("kind", ["pi", "codex", "acp"])
@settings(max_examples=150, deadline=None)
@given(messages=st.lists(MESSAGE, max_size=8))
def test_translators_are_total(kind: str, messages: list[Any]) -> None:
    translator = in_turn(kind)
    for message in messages:
        for action in translator.receive(message):
            assert isinstance(action, Send | Show | Started | Ended | Ask | Withdraw | Broken)
            if isinstance(action, Ask):
                assert isinstance(action.request.call(), Call)
                for verdict in (Verdict("approve", "person"), Verdict("deny", "withdrawn")):
                    translator.answered(action.token, verdict)
    translator.inject(Injection("s", "steering", 1))
    translator.interrupt()
    assert isinstance(translator.final_text, str)


def test_acp_recorded_gemini_tool_turn() -> None:
    acp = acp_ready()
    prompt = sent(acp.start_turn(Injection("hi")))[0]
    recorded = [m for m in lines("acp_gemini_tool_turn.jsonl") if m.get("id") not in (1, 2)]
    out = feed(acp, [m | {"id": prompt["id"]} if m.get("id") == 4 else m for m in recorded])
    kinds = types(out)
    assert kinds[:2] == ["llm-start", "assistant-text-delta"]
    assert "tool-call" in kinds
    assert kinds.index("tool-result") == kinds.index("tool-call") + 1
    call, result = shown(out)[kinds.index("tool-call") :][:2]
    # Gemini CLI names the command only in the title: shown as a shell command
    assert (call["name"], call["arguments"]) == ("shell", {"command": "echo hello-from-gemini"})
    assert result["name"] == "shell"
    assert out[-1] == Ended("stop", Usage(4, 10), None)
    assert acp.final_text == "The tool said hello."
