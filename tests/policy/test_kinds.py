"""Each agent's tools normalized to kinds and subjects; docs/agents.md lists the tables."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether.policy import TOOL_KINDS, Call, call_of
from tether.policy.kinds import relative_path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def test_subjects_per_kind() -> None:
    assert call_of("claude", "Bash", {"command": "  git status "}) == Call(
        "Bash", "shell", ("git status",)
    )
    assert call_of("codex", "commandExecution", {"command": ["ls", "-la"]}).subjects == ("ls -la",)
    edit = call_of("claude", "Write", {"file_path": "/w/src/a.py"}, cwd="/w")
    assert edit == Call("Write", "edit", ("src/a.py",))
    acp = call_of("acp", "execute", {}, kind=None)
    assert acp.kind == "shell"
    files = call_of("codex", "fileChange", {}, cwd="/w", paths=["/w/a", "/w/b", "/w/a"])
    assert files.subjects == ("a", "b")
    assert call_of("claude", "mcp__github__create_issue", {}).subjects == ("github.create_issue",)
    assert call_of("claude", "WebFetch", {"url": "https://x"}).subjects == ("https://x",)
    assert call_of("pi", "select", {"title": "Allow rm?"}) == Call(
        "select", "dialog", ("Allow rm?",)
    )
    assert call_of("claude", "Task", {"prompt": "x"}).kind == "task"


def test_paths_are_made_relative_and_cannot_climb_into_a_glob() -> None:
    assert relative_path("/w/src/../x", "/w") == "x"
    assert relative_path("/w", "/w") == "."
    assert relative_path("/wx/a", "/w") == "/wx/a"
    assert relative_path("src/../../etc", "/w") == "../etc"


@given(st.text(max_size=40), st.dictionaries(st.text(max_size=10), st.text(max_size=10)))
def test_call_of_is_total(tool: str, arguments: dict[str, str]) -> None:
    for table in (*TOOL_KINDS, "unknown"):
        call = call_of(table, tool, arguments, cwd="/w")
        assert all(isinstance(s, str) for s in call.subjects)


def test_docs_list_every_tool_kind() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for table, tools in TOOL_KINDS.items():
        for tool, kind in tools.items():
            assert f"`{tool}` → `{kind}`" in text, (table, tool, kind)
