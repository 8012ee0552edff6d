"""The scripted model server: the script's replies as Anthropic and Gemini SSE, logged."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.waits import wait_until
from tether.modelserver import open_model_server

SCRIPT = [
    {
        "thinking": "hmm",
        "text": "Let me look.",
        "tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}, "id": "toolu_1"}],
    },
    {"text": "All done.", "usage": {"input": 7, "output": 3}},
    {"error": "scripted failure"},
]


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse(data: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    events = []
    for block in data.decode().split("\n\n"):
        name, payload = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                payload = json.loads(line[6:])
        if payload is not None:
            events.append((name, payload))
    return events


def test_anthropic_messages_stream_text_thinking_and_tool_use(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with open_model_server(SCRIPT, log=log) as server:
        url = f"{server.url}/v1/messages"
        status, data = post(url, {"model": "m", "stream": True, "messages": [{"role": "user"}]})
        assert status == 200
        events = sse(data)
        names = [name for name, _ in events]
        assert names[0] == "message_start"
        assert names[-1] == "message_stop"
        deltas = [e["delta"] for n, e in events if n == "content_block_delta"]
        assert {"type": "thinking_delta", "thinking": "hmm"} in deltas
        assert {"type": "text_delta", "text": "Let me look."} in deltas
        assert {"type": "input_json_delta", "partial_json": '{"command": "ls"}'} in deltas
        starts = [e["content_block"] for n, e in events if n == "content_block_start"]
        assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
        assert starts[2]["id"] == "toolu_1"
        assert starts[2]["name"] == "Bash"
        end = next(e for n, e in events if n == "message_delta")
        assert end["delta"]["stop_reason"] == "tool_use"

        status, data = post(url, {"model": "m", "messages": []})  # not streamed
        assert status == 200
        whole = json.loads(data)
        assert whole["content"] == [{"type": "text", "text": "All done."}]
        assert whole["usage"]["input_tokens"] == 7
        assert whole["stop_reason"] == "end_turn"

        status, data = post(url, {"model": "m", "stream": True, "messages": []})
        assert status == 400
        assert b"scripted failure" in data
        status, data = post(url, {"model": "m", "stream": True, "messages": []})
        assert status == 400
        assert b"used up" in data
        count = post(f"{url}/count_tokens", {"messages": []})
        assert count[0] == 200
        assert "input_tokens" in json.loads(count[1])
        assert post(f"{server.url}/nothing/here", {})[0] == 404
    # one line per request, written by its handler's thread as its answer ends: two
    # requests asked one after the other can land in the other order (CI saw it)
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    by_reply = {r["reply"]: r for r in logged if r["reply"] is not None}
    assert sorted(by_reply) == [1, 2, 3]
    assert by_reply[1]["api"] == "anthropic"
    assert by_reply[1]["body"]["stream"] is True
    unscripted = sorted(r["api"] for r in logged if r["reply"] is None)
    assert unscripted == ["anthropic", "anthropic", "none"]


def test_gemini_stream_generate_content(tmp_path: Path) -> None:
    with open_model_server(SCRIPT) as server:
        url = f"{server.url}/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
        status, data = post(url, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        assert status == 200
        chunks = [payload for _, payload in sse(data)]
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        assert {"text": "hmm", "thought": True} in parts
        assert {"text": "Let me look."} in parts
        call = next(p["functionCall"] for p in parts if "functionCall" in p)
        assert call["name"] == "Bash"
        assert call["args"] == {"command": "ls"}
        assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
        assert chunks[-1]["usageMetadata"]["totalTokenCount"] > 0
        whole_url = f"{server.url}/v1beta/models/gemini-x:generateContent"
        status, data = post(whole_url, {"contents": []})
        assert status == 200
        reply = json.loads(data)
        assert reply["candidates"][0]["content"]["parts"] == [{"text": "All done."}]
        assert reply["usageMetadata"]["promptTokenCount"] == 7
        assert post(whole_url, {"contents": []})[0] == 400


def test_the_model_server_command_prints_its_url_and_serves(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "hello"}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "model-server", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("listening on http://127.0.0.1:")
        url = first.removeprefix("listening on ")
        status, data = post(f"{url}/v1/messages", {"model": "m", "messages": []})
        assert status == 200
        assert json.loads(data)["content"][0]["text"] == "hello"
    finally:
        proc.terminate()
        code = proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0


def test_a_bad_script_is_a_usage_error(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text('[{"txt": 1}]')
    done = subprocess.run(
        [sys.executable, "-m", "tether", "model-server", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown key" in done.stderr


def test_a_structured_output_call_takes_no_reply() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "complexity_reasoning": {"type": "STRING"},
            "complexity_score": {"type": "INTEGER"},
            "pick": {"type": "STRING", "enum": ["flash", "pro"]},
        },
        "required": ["complexity_reasoning", "complexity_score", "pick"],
    }
    config = {"responseMimeType": "application/json", "responseJsonSchema": schema}
    with open_model_server(SCRIPT) as server:
        url = f"{server.url}/v1beta/models/router:generateContent"
        status, data = post(url, {"contents": [], "generationConfig": config})
        assert status == 200
        text = json.loads(data)["candidates"][0]["content"]["parts"][0]["text"]
        assert json.loads(text) == {
            "complexity_reasoning": "scripted",
            "complexity_score": 1,
            "pick": "flash",
        }
        assert server.model_requests() == []  # the script is for the agent's own turns


def test_the_agent_sdks_file_path_extraction_takes_no_reply() -> None:
    """claude-code-acp asks a small model which files each Bash command touched, beside
    its own next call: answered "none", it leaves the script to the agent's turns."""
    system = [
        {"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK."},
        {"type": "text", "text": "Extract any file paths that this command reads or modifies. For"},
    ]
    command = {"role": "user", "content": "Command: echo ran >> side.txt\nOutput: \n\n"}
    extraction = {"model": "haiku", "system": system, "tools": [], "messages": [command]}
    turn = {"model": "sonnet", "messages": [{"role": "user", "content": "go"}], "tools": [{}]}
    with open_model_server([{"text": "the turn's reply"}]) as server:
        status, data = post(f"{server.url}/v1/messages", extraction)
        assert status == 200
        assert json.loads(data)["content"][0]["text"].endswith("<filepaths>\n</filepaths>")
        status, data = post(f"{server.url}/v1/messages", {**extraction, "stream": True})
        assert status == 200
        assert "<filepaths>" in data.decode()
        status, data = post(f"{server.url}/v1/messages", turn)
        assert json.loads(data)["content"][0]["text"] == "the turn's reply"
        wait_until(lambda: len(server.requests) == 3, "the three requests logged")
        assert sorted(r["reply"] or 0 for r in server.requests) == [0, 0, 1]  # any order
        # the same prompt with tools is an agent's turn like any other
        status, data = post(f"{server.url}/v1/messages", {**extraction, "tools": [{}]})
        assert status == 400  # it took a reply: the script is used up


def test_wait_request_wakes_on_the_request_it_waits_for() -> None:
    import threading

    with open_model_server([{"text": "one"}, {"text": "two"}]) as server:
        assert server.wait_request(lambda r: True, timeout=0.01) is None
        url = server.url + "/v1/messages"
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        sender = threading.Thread(target=post, args=(url, dict(body, metadata={"k": "MARK"})))
        post(url, body)
        sender.start()
        found = server.wait_request(lambda r: "MARK" in json.dumps(r["body"]), timeout=30)
        sender.join()
        assert found is not None
        assert found["n"] == 2
