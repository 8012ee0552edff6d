"""The built-in agent's `report` tool writes the run's inbox; the parent sees it live."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether.agent.report import ReportTool
from tether.agent.tools import ToolContext
from tether.agent.toolset import BUILTIN_TOOLS, select_tools
from tether.runtime.parent.spawn import InboxItem, spawn


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_report_appends_one_line_with_the_specs_field(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.jsonl"
    context = ToolContext(cwd=tmp_path, env={"TETHER_INBOX_PATH": str(inbox)})
    tool = ReportTool()
    assert _run(tool.run({"type": "clarification", "text": "which branch?"}, context)) == (
        "reported clarification",
        False,
    )
    assert _run(tool.run({"type": "progress", "text": "step 2"}, context))[1] is False  # type: ignore[index]
    lines = [json.loads(line) for line in inbox.read_text().splitlines()]
    assert lines == [
        {"type": "clarification", "q": "which branch?"},
        {"type": "progress", "text": "step 2"},
    ]


@pytest.mark.parametrize(
    ("arguments", "env", "problem"),
    [
        ({"type": "shout", "text": "x"}, {"TETHER_INBOX_PATH": "/tmp/x"}, "'type' must be"),
        ({"type": "done", "text": ""}, {"TETHER_INBOX_PATH": "/tmp/x"}, "non-empty"),
        ({"type": "done", "text": "ok"}, {}, "has no inbox"),
        (
            {"type": "done", "text": "ok"},
            {"RUNEX_INBOX_PATH": "/nonexistent/dir/i"},
            "cannot write",
        ),
    ],
)
def test_report_refusals_are_tool_errors(
    tmp_path: Path, arguments: dict[str, str], env: dict[str, str], problem: str
) -> None:
    text, is_error = _run(ReportTool().run(arguments, ToolContext(cwd=tmp_path, env=env)))  # type: ignore[misc]
    assert is_error
    assert problem in text


def test_report_and_subagent_are_built_in_tools() -> None:
    assert {"report", "subagent"} <= set(BUILTIN_TOOLS)
    assert select_tools(["report"]).names == ["report"]


def test_report_reaches_the_parent_as_an_inbox_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                {
                    "tool_calls": [
                        {
                            "name": "report",
                            "arguments": {"type": "approval_request", "text": "deploy?"},
                        }
                    ]
                },
                {"text": "Asked."},
            ]
        )
    )

    async def go() -> tuple[list[object], str]:
        handle = await spawn(
            "ask first", provider="scripted", child_args=["--script", str(script)], cwd=tmp_path
        )
        items = [item async for item in handle.updates()]
        result = await handle.wait()
        return items, result.final_text

    items, final = asyncio.run(go())
    messages = [i.message for i in items if isinstance(i, InboxItem)]
    (message,) = messages
    key = message.pop("msg_key")  # a question carries its key (what answers name it by)
    assert key.endswith(":0")
    assert message == {"type": "approval_request", "reason": "deploy?"}
    assert final == "Asked."
