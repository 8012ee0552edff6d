"""Each agent's tools, normalized: the kind a tool call is, and the subject a glob sees.

One table per agent (:data:`TOOL_KINDS`) maps the agent's own tool names to the kinds
rules name (``shell``, ``edit``, ``read``, ``web``, ``mcp``); a tool not in it keeps its
own name (lower case) as its kind, so a rule can still name it. :func:`call_of` builds
the :class:`~tether.policy.rules.Call` a policy weighs from a tool's name and input as
the agent sent them (untrusted JSON, read defensively):

- ``shell``: the command (a list of words is joined with spaces), stripped;
- ``edit`` / ``read``: each path the call touches, made relative to the run's working
  directory when it lies below it (``/work/src/a.py`` -> ``src/a.py``), normalized
  (``src/../x`` -> ``x``; a path that climbs out stays ``../x``, which ``src/**`` never
  matches);
- ``web``: the URL (or the search query);
- ``mcp``: ``server.tool``.

ACP agents name no tool: the ACP ``kind`` of the call (``execute``, ``edit``, ``read``,
``fetch``, ...) stands for it. pi's extension dialogs are kind ``dialog``, their method
(``select``, ``confirm``, ``input``, ``editor``) the tool, their title the subject.
docs/agents.md lists the tables (a test keeps it in step).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from tether.policy.rules import PATH_KINDS, Call

__all__ = ["DIALOG", "TOOL_KINDS", "call_of", "kind_of", "mcp_subject", "relative_path"]

DIALOG: Final = "dialog"
_CLAUDE: Final = {
    "Bash": "shell",
    "BashOutput": "shell",
    "KillShell": "shell",
    "Edit": "edit",
    "MultiEdit": "edit",
    "Write": "edit",
    "NotebookEdit": "edit",
    "Read": "read",
    "Glob": "read",
    "Grep": "read",
    "LS": "read",
    "WebFetch": "web",
    "WebSearch": "web",
}
TOOL_KINDS: Final[dict[str, dict[str, str]]] = {
    "builtin": {"bash": "shell", "write": "edit", "edit": "edit", "read": "read"},
    "claude": _CLAUDE,
    "codex": {
        "commandExecution": "shell",
        "fileChange": "edit",
        "execCommand": "shell",
        "applyPatch": "edit",
        "mcpToolCall": "mcp",
    },
    # ACP's ToolKind (session/update tool_call.kind): what claude-code-acp, Gemini CLI and
    # every ACP agent say a call is
    "acp": {
        "execute": "shell",
        "edit": "edit",
        "delete": "edit",
        "move": "edit",
        "read": "read",
        "search": "read",
        "fetch": "web",
    },
    "pi": {
        "bash": "shell",
        "edit": "edit",
        "write": "edit",
        "read": "read",
        "grep": "read",
        "find": "read",
        "ls": "read",
        "select": DIALOG,
        "confirm": DIALOG,
        "input": DIALOG,
        "editor": DIALOG,
    },
}
_COMMAND_KEYS: Final = ("command", "cmd")
_PATH_KEYS: Final = ("file_path", "path", "notebook_path", "filePath", "absolute_path")
_WEB_KEYS: Final = ("url", "query")
_TEXT_KEYS: Final = ("title", "message")


def kind_of(table: str, tool: str) -> str:
    """The kind of ``tool`` in the table ``table`` (an agent family: :data:`TOOL_KINDS`);
    its own name, lower case, when unmapped."""
    kind = TOOL_KINDS.get(table, {}).get(tool)
    if kind is not None:
        return kind
    if tool.startswith("mcp__"):
        return "mcp"
    return tool.lower()


def call_of(
    table: str,
    tool: str,
    arguments: object,
    *,
    cwd: str | None = None,
    paths: Iterable[object] = (),
    kind: str | None = None,
    real: Callable[[str], str] | None = None,
) -> Call:
    """The call a policy weighs (see the module docstring); ``table``: the agent family
    (:data:`TOOL_KINDS`). ``paths``: paths the agent
    names beside its input (ACP ``locations``, Codex's file changes); ``kind``: the kind
    when the agent says it (else from the table); ``real``: where a path really leads
    (symlinks followed: the caller's file system), a subject too beside the path as
    named, so ``src/**`` approves ``src/link/x`` only when ``src/link`` stays in ``src``."""
    kind = kind or kind_of(table, tool)
    args = arguments if isinstance(arguments, Mapping) else {}
    if kind == "shell":
        subjects = _first(args, _COMMAND_KEYS, _command)
    elif kind in PATH_KINDS:
        found = [p for p in (*_all(args, _PATH_KEYS), *paths) if isinstance(p, str) and p]
        named = [relative_path(p, cwd) for p in found]
        subjects = tuple(dict.fromkeys([*named, *(real(p) for p in found)] if real else named))
    elif kind == "web":
        subjects = _first(args, _WEB_KEYS, _text)
    elif kind == "mcp":
        subjects = (mcp_subject(tool),)
    elif kind == DIALOG:
        subjects = _first(args, _TEXT_KEYS, _text)
    else:
        subjects = _first(args, _COMMAND_KEYS, _command) or _first(args, _PATH_KEYS, _text)
    return Call(tool, kind, subjects)


def mcp_subject(tool: str) -> str:
    """``server.tool`` for Claude Code's ``mcp__server__tool`` (others as they are)."""
    if tool.startswith("mcp__"):
        server, _, name = tool[5:].partition("__")
        return f"{server}.{name}" if name else server
    return tool


def relative_path(path: str, cwd: str | None) -> str:
    """``path`` normalized, relative to ``cwd`` when it lies below it (pure string work)."""
    clean = posixpath.normpath(path)
    if cwd and posixpath.isabs(clean):
        base = posixpath.normpath(cwd)
        if clean == base:
            return "."
        if clean.startswith(base.rstrip("/") + "/"):
            return clean[len(base.rstrip("/")) + 1 :]
    return clean


def _command(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return " ".join(str(v) for v in value).strip()
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _first(args: Mapping[str, Any], keys: Sequence[str], read: Any) -> tuple[str, ...]:
    for key in keys:
        value = read(args.get(key))
        if value is not None:
            return (value,)
    return ()


def _all(args: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    return [v for key in keys if isinstance(v := args.get(key), str)]
