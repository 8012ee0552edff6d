"""A test double that behaves as REFERENCE-FACTS §2 says the real bash-agent does.

Not bash-agent: a small Python program with its outside behaviour, for tests that cannot
fetch the real one. It takes ONE task from its arguments or, without one, from stdin until
EOF; ``--output-format stream-json`` writes its events on stdout, one JSON object per line,
beginning a NEW session with ``session_start`` (``--session NAME`` keeps the conversation
in ``$BASH_AGENT_HOME/.bash-agent/projects/KEY/NAME``, so the next process goes on from
it); it calls an Anthropic Messages API at ``$ANTHROPIC_BASE_URL/messages`` (the base
ends in ``/v1``, as bash-agent's does); it runs ``Bash`` tool calls with ``bash -lc``;
``tool_call.input`` is the model's JSON text as received; usage lines carry
``kind: "agent"``; every answer ends with ``stop end_turn`` TWICE (the model's, then its
own). SIGINT (its Ctrl-C) stops the model call or tool and writes ``stop interrupted``.
Unknown options are fatal, as in bash-agent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    options, task = parse(argv)
    if task is None:
        task = sys.stdin.read()  # bash-agent: input=$(cat), until EOF
    session_dir = session_path(options.get("session") or "default")
    session_dir.mkdir(parents=True, exist_ok=True)
    events = session_dir / "events.jsonl"
    conversation = session_dir / "conversation.jsonl"
    stream = options.get("output_format") == "stream-json"

    def emit(obj: dict[str, Any], raw: str | None = None) -> None:
        line = raw if raw is not None else json.dumps(obj, ensure_ascii=False)
        with events.open("a") as f:
            f.write(line + "\n")
        if stream:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    if not events.exists() or events.stat().st_size == 0:
        emit({"type": "session_start", "session_id": session_dir.name})
    emit({"type": "user_input", "content": task})
    messages = (
        [json.loads(line) for line in conversation.read_text().splitlines()]
        if (conversation.exists())
        else []
    )
    messages.append({"role": "user", "content": task})
    signal.signal(signal.SIGINT, _interrupt)
    code = loop(messages, emit)
    conversation.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return code


def parse(argv: list[str]) -> tuple[dict[str, str], str | None]:
    options: dict[str, str] = {}
    task = None
    args = iter(argv)
    for arg in args:
        if arg in ("--output-format", "--session", "-m", "--model", "-p", "--provider"):
            options[arg.lstrip("-").replace("-", "_")] = next(args, "")
        elif arg.startswith("-"):
            sys.stderr.write(f"\033[31mError: Unknown option: {arg}\033[0m\n")
            sys.exit(1)
        else:
            task = arg
    return options, task


def session_path(name: str) -> Path:
    base = Path(os.environ.get("BASH_AGENT_HOME") or os.environ["HOME"])
    key = "-" + re.sub(r"[^A-Za-z0-9._-]", "-", os.getcwd().strip("/")).strip("-")
    return base / ".bash-agent" / "projects" / key / name


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def loop(messages: list[dict[str, Any]], emit: Any) -> int:
    try:
        while True:
            reply = call_model(messages)
            if "error" in reply:
                emit({"type": "error", "message": str(reply["error"])})
                return 1
            stop = answer(reply, messages, emit)
            if stop != "tool_use":
                emit({"type": "stop", "reason": stop})  # its own STOP after the model's
                return 0
    except KeyboardInterrupt:
        emit({"type": "stop", "reason": "interrupted"})
        return 0


def call_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    url = os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/messages"
    body = {"model": "double", "max_tokens": 1024, "messages": messages, "tools": TOOLS}
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result
    except urllib.error.HTTPError as exc:
        return {"error": f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:200]}"}


def answer(reply: dict[str, Any], messages: list[dict[str, Any]], emit: Any) -> str:
    content = reply.get("content") or []
    results = []
    for block in content:
        if block.get("type") == "thinking":
            emit({"type": "thinking", "content": block.get("thinking", "")})
        elif block.get("type") == "text":
            text = block.get("text", "")
            half = len(text) // 2
            for chunk in (text[:half], text[half:]):
                if chunk:
                    emit({"type": "text", "content": chunk})
        elif block.get("type") == "tool_use":
            results.append(run_tool(block, emit))
    usage = reply.get("usage") or {}
    emit(
        {
            "type": "usage",
            "input_tokens": usage.get("input_tokens", 0),
            "output_tokens": usage.get("output_tokens", 0),
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "kind": "agent",
        }
    )
    stop = str(reply.get("stop_reason") or "end_turn")
    emit({"type": "stop", "reason": stop})  # the model's STOP, forwarded
    messages.append({"role": "assistant", "content": content})
    if results:
        messages.append({"role": "user", "content": results})
    return stop


def run_tool(block: dict[str, Any], emit: Any) -> dict[str, Any]:
    name, call_id, arguments = block.get("name", ""), block.get("id", ""), block.get("input", {})
    raw = json.dumps(arguments, separators=(",", ":"))  # the model's JSON text
    head = json.dumps({"type": "tool_call", "name": name, "id": call_id})[:-1]
    emit({}, raw=f'{head},"input":{raw}}}')
    if name == "Bash":
        done = subprocess.run(
            ["bash", "-lc", str(arguments.get("command", ""))],
            capture_output=True,
            text=True,
            check=False,
        )
        output = done.stdout + done.stderr
        if done.returncode:
            output = "Error: " + output
    else:
        output = f"Error: unknown tool: {name}"
    emit({"type": "tool_result", "tool_use_id": call_id, "name": name, "content": output})
    return {"type": "tool_result", "tool_use_id": call_id, "content": output}


TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
