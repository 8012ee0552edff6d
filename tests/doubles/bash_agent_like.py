"""A test double with the outside behaviour of the real bash-agent, for CI (which has no copy).

Not bash-agent: a small Python program that behaves as lloydzhou/bash-agent does. It was
checked against the real program (``src/agent.sh`` at 4026ebe1 with its ``awk/`` files and
``tools.json``, run here under mawk on 2026-12-01 against tether's scripted model server):
the same scripts gave the same stream-json lines, byte for byte except ids and timings,
and ``tests/adapters/test_bash_agent.py`` runs both (the real one when ``TETHER_BASH_AGENT``
names its ``agent.sh``). What it models, as the real one does it:

- ONE task, from its arguments or, without one, from stdin until EOF (``input=$(cat)``).
- It runs under ``set -u``: with the ``claude`` provider and no ``--api-key``, an unset
  ``ANTHROPIC_API_KEY`` kills it before anything is written (``unbound variable``, exit 1).
- ``--output-format stream-json``: its events on stdout, one compact JSON object per line
  (``{"type":"text","content":"..."}``), also appended to the session's ``events.jsonl``;
  ``session_start`` first for a NEW session (``--session NAME`` keeps the conversation in
  ``$BASH_AGENT_HOME/.bash-agent/projects/KEY/NAME``, so the next process goes on from it);
  then ``user_input``.
- It calls ``$ANTHROPIC_BASE_URL/messages`` (the base ends in ``/v1``) with
  ``"stream": true`` and forwards every SSE text / thinking delta as its own ``text`` /
  ``thinking`` line; curl's ``--retry 2`` retries a 408, 429 or 5xx answer (1 s apart).
- A tool call runs as soon as its block is complete (before the call's usage and stop):
  ``tool_call`` carries ``input`` as the model's JSON text as received; ``Bash`` runs
  ``bash -lc`` with stderr merged into stdout; the output loses its trailing newlines (a
  shell ``$(...)``), gets ``Error: `` in front on a non-zero status, and is cut to 100000
  characters with bash-agent's head/tail marker; ``TodoWrite`` answers its checklist.
- After each call: ``usage`` (``kind: "agent"``), then the model's ``stop``; an answer that
  is not ``tool_use`` ends with ``stop`` a SECOND time (its own); ``max_tokens`` gives
  ``error {"message": "Response truncated (max_tokens reached)"}`` instead.
- A model error is an ``error`` line ``"<status>\\tHTTP <status>: <body>"`` and exit 0.
- SIGINT (its Ctrl-C) ends it: no line after it except the result of a tool it
  interrupted (empty), and exit 0; there is no ``stop interrupted`` line in stream-json.
  During a tool it acts only once the tool's command ends, as bash runs a trap only after
  its foreground command (the command gets the group's SIGINT too: most end at once; one
  that ignores it keeps bash-agent busy).
- Its terminal title (``ESC]0;... BEL ESC]9;4;N BEL``) goes to stderr after each call.
- Unknown options are fatal (``Error: Unknown option: X``, exit 1).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MODEL = "claude-sonnet-4-20250514"
RESULT_MAX = 100_000
RETRIED = frozenset({408, 429, 500, 502, 503, 504})
VALUED = {"-p", "--provider", "-m", "--model", "--max-tokens", "--tool-timeout", "--skill"}
VALUED |= {"--max-turns", "--max-context", "--api-key", "--base-url", "--effort"}
VALUED |= {"--thinking", "--output-format"}
Emit = Callable[[dict[str, Any]], None]


class Interrupted(Exception):
    pass


def main(argv: list[str]) -> int:
    options, task = parse(argv)
    if "api_key" not in options and "ANTHROPIC_API_KEY" not in os.environ:
        sys.stderr.write(f"{sys.argv[0]}: line 1591: ANTHROPIC_API_KEY: unbound variable\n")
        return 1
    if task is None:
        task = sys.stdin.read()  # bash-agent: input=$(cat), until EOF
    session_dir = session_path(options.get("session") or time.strftime("%Y%m%d-%H%M%S-0000"))
    session_dir.mkdir(parents=True, exist_ok=True)
    events = session_dir / "events.jsonl"
    conversation = session_dir / "conversation.jsonl"
    stream = options.get("output_format") == "stream-json"

    def emit(obj: dict[str, Any]) -> None:
        line = obj["raw"] if "raw" in obj else json.dumps(obj, separators=(",", ":"))
        with events.open("a") as f:
            f.write(line + "\n")
        if stream:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    if not events.exists() or events.stat().st_size == 0:
        emit({"type": "session_start", "session_id": session_dir.name})
    emit({"type": "user_input", "content": task})
    lines = conversation.read_text().splitlines() if conversation.exists() else []
    messages = [json.loads(line) for line in lines]
    messages.append({"role": "user", "content": task})
    signal.signal(signal.SIGINT, _interrupt)
    loop(messages, emit, options)
    conversation.write_text("".join(json.dumps(m) + "\n" for m in messages))
    title("idle")
    return 0


def parse(argv: list[str]) -> tuple[dict[str, str], str | None]:
    options: dict[str, str] = {}
    task = None
    args = iter(argv)
    for arg in args:
        if arg in VALUED:
            options[arg.lstrip("-").replace("-", "_")] = next(args, "")
        elif arg == "--print":
            options["output_format"] = "stream-json"
        elif arg == "--session":
            options["session"] = next(args, "")
        elif arg.startswith("-"):
            sys.stderr.write(f"\033[31mError: Unknown option: {arg}\033[0m\n")
            sys.exit(1)
        else:
            task = arg
    return options, task


def session_path(name: str) -> Path:
    base = Path(os.environ.get("BASH_AGENT_HOME") or os.environ["HOME"])
    key = re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9._-]", "-", os.getcwd().lstrip("/")))
    return base / ".bash-agent" / "projects" / ("-" + key.strip("-")) / name


_IN_TOOL: list[bool] = []  # non-empty while a tool's command runs
_DEFERRED: list[int] = []  # a SIGINT that came during it


def _interrupt(signum: int, frame: object) -> None:
    if _IN_TOOL:
        _DEFERRED.append(signum)
        return
    raise Interrupted


def title(status: str) -> None:
    prefix = "" if status == "idle" else "\u23f3 "
    progress = 0 if status == "idle" else 3
    sys.stderr.write(f"\033]0;{prefix}{MODEL} T:0 R:0\007\033]9;4;{progress}\007")
    sys.stderr.flush()


def loop(messages: list[dict[str, Any]], emit: Emit, options: dict[str, str]) -> None:
    try:
        while True:
            stop = one_call(messages, emit, options)
            if stop in ("error", "max_tokens", "length"):
                if stop != "error":
                    emit({"type": "error", "message": "Response truncated (max_tokens reached)"})
                return
            if stop not in ("tool_use", "tool_calls"):
                emit({"type": "stop", "reason": stop})  # its own STOP after the model's
                return
    except Interrupted:
        return  # its event pipe is closed: nothing more is written


def one_call(messages: list[dict[str, Any]], emit: Emit, options: dict[str, str]) -> str:
    """One model call: its lines, its tools run; the stop reason (``error`` on failure)."""
    text, thinking, calls, results = "", "", [], []
    usage = {"input_tokens": 0, "output_tokens": 0}
    stop = ""
    for event in call_model(messages, options):
        kind = event.get("type")
        if kind == "error":
            emit({"type": "error", "message": str(event["message"])})
            return "error"
        if kind == "text":
            emit({"type": "text", "content": event["content"]})
            text += event["content"]
        elif kind == "thinking":
            emit({"type": "thinking", "content": event["content"]})
            thinking += event["content"]
        elif kind == "tool":
            calls.append(event)
            results.append(run_tool(event, emit))
        elif kind == "usage":
            usage.update(event["usage"])
        elif kind == "stop":
            stop = event["reason"]
    cache = {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    emit({"type": "usage", **usage, **cache, "kind": "agent"})
    emit({"type": "stop", "reason": stop})  # the model's STOP, forwarded
    title("busy")
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": thinking}]
    content.append({"type": "text", "text": text})
    for call in calls:
        tool_use = {"type": "tool_use", "id": call["id"], "name": call["name"]}
        content.append(tool_use | {"input": json.loads(call["input"] or "{}")})
    messages.append({"role": "assistant", "content": content})
    if results:
        messages.append({"role": "user", "content": results})
    return stop


def call_model(messages: list[dict[str, Any]], options: dict[str, str]) -> Iterator[dict[str, Any]]:
    base = options.get("base_url") or os.environ.get("ANTHROPIC_BASE_URL")
    url = (base or "https://api.anthropic.com/v1") + "/messages"
    body = {"max_tokens": 16384, "messages": messages, "model": options.get("model", MODEL)}
    body |= {"stream": True, "tools": TOOLS}
    headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                yield from sse_events(response)
                return
        except urllib.error.HTTPError as exc:
            if exc.code in RETRIED and attempt < 2:
                continue  # at once (the real agent waits a second: nothing a test observes)
            body_text = exc.read().decode(errors="replace") or "(empty)"
            yield {"type": "error", "message": f"{exc.code}\tHTTP {exc.code}: {body_text}"}
            return
        except OSError as exc:
            yield {"type": "error", "message": f"0\tcurl: {exc}"}
            return


def sse_events(response: Any) -> Iterator[dict[str, Any]]:
    """Anthropic SSE in, what bash-agent's claude_sse.awk makes of it out."""
    event, block, tool, usage, stop = "", "", {}, {}, ""
    for raw in response:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("event: "):
            event = line[7:]
        if not line.startswith("data: "):
            continue
        data = json.loads(line[6:])
        if event == "content_block_start":
            start = data.get("content_block", {})
            block = {"text": "text", "thinking": "thinking", "tool_use": "tool"}.get(
                start.get("type"), ""
            )
            tool = {"id": start.get("id", ""), "name": start.get("name", ""), "input": ""}
        elif event == "content_block_delta":
            delta = data.get("delta", {})
            if block in ("text", "thinking") and delta.get(block):
                yield {"type": block, "content": delta[block]}
            elif block == "tool":
                tool["input"] += delta.get("partial_json", "")
        elif event == "content_block_stop" and block == "tool":
            yield {"type": "tool", **tool}
            block = ""
        elif event in ("message_start", "message_delta"):
            found = data.get("usage") or data.get("message", {}).get("usage") or {}
            usage |= {k: v for k, v in found.items() if k in ("input_tokens", "output_tokens")}
            stop = (data.get("delta") or {}).get("stop_reason") or stop
        elif event == "error":
            yield {"type": "error", "message": data.get("error", {}).get("message", "")}
            return
    yield {"type": "usage", "usage": usage}
    yield {"type": "stop", "reason": stop}


def run_tool(call: dict[str, Any], emit: Emit) -> dict[str, Any]:
    name, call_id, raw = call["name"], call["id"], call["input"]
    head = json.dumps({"type": "tool_call", "name": name, "id": call_id}, separators=(",", ":"))
    emit({"raw": f'{head[:-1]},"input":{raw}}}'})  # the model's JSON text as received
    arguments = json.loads(raw or "{}")
    try:
        output = tool_output(name, arguments)
    except Interrupted:
        emit({"type": "tool_result", "tool_use_id": call_id, "name": name, "content": ""})
        raise
    emit({"type": "tool_result", "tool_use_id": call_id, "name": name, "content": output})
    return {"type": "tool_result", "tool_use_id": call_id, "content": output}


def tool_output(name: str, arguments: dict[str, Any]) -> str:
    if name == "Bash":
        _IN_TOOL.append(True)
        try:
            done = subprocess.run(
                ["bash", "-lc", str(arguments.get("command", ""))],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
        finally:
            _IN_TOOL.clear()
        if _DEFERRED:  # bash's trap, once the foreground command is done
            raise Interrupted
        output, failed = done.stdout.rstrip("\n"), done.returncode != 0
    elif name == "TodoWrite":
        output, failed = "\n".join(_todo(t) for t in arguments.get("todos") or []), False
    else:
        output, failed = f"unknown tool: {name}", True
    return capped(f"Error: {output}" if failed else output)


def _todo(todo: dict[str, Any]) -> str:
    return f"- [{'x' if todo.get('status') == 'completed' else ' '}] {todo.get('content')}"


def capped(output: str) -> str:
    """bash-agent's tool_format_result: head, a marker, the last 5 lines."""
    if len(output) <= RESULT_MAX:
        return output
    marker = "\n\n[... truncated: showing first/last portions of %d bytes ...]\n\n"
    tail = "\n".join(output.split("\n")[-5:])
    head = RESULT_MAX - (len(marker) + 20) - len(tail)
    head = head if head > 0 else RESULT_MAX // 2
    return output[:head] + marker % len(output) + tail


TOOLS = [
    {
        "name": "Bash",
        "description": "Execute a bash command. Returns stdout and stderr.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
    {
        "name": "TodoWrite",
        "description": "Create and manage a structured task list for the current session.",
        "input_schema": {"type": "object", "properties": {"todos": {"type": "array"}}},
    },
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
