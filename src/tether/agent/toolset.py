"""Which tools a run gets: the built-in tools by name, and the allow-list.

``--tools bash,read`` keeps only those (:func:`select_tools`); ``--no-tools`` keeps none.
The ``subagent`` tool starts child runs through the parent runtime, which sits above this
layer, so whoever builds the agent hands its ``spawn`` in (``tether child`` passes
:func:`tether.runtime.parent.spawn.spawn`); without one the tool answers that it cannot start
sub-runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from tether.agent.ask import AskTool
from tether.agent.report import ReportTool
from tether.agent.subagent import SpawnRun, SubagentTool
from tether.agent.tools import BashTool, EditTool, ReadTool, Tool, ToolRegistry, WriteTool
from tether.errors import AgentError

__all__ = ["BUILTIN_TOOLS", "UnknownToolError", "builtin_tools", "select_tools", "tool_names"]

BUILTIN_TOOLS: Final = ("bash", "read", "write", "edit", "subagent", "report", "ask")


class UnknownToolError(AgentError, ValueError):
    """A tool name in the allow-list that no tool answers to."""


def builtin_tools(*, spawn: SpawnRun | None = None) -> dict[str, Callable[[], Tool]]:
    """Name -> factory for every built-in tool, the subagent tool starting runs with ``spawn``."""

    def subagent() -> Tool:
        return SubagentTool(spawn=spawn)

    return {
        "bash": BashTool,
        "read": ReadTool,
        "write": WriteTool,
        "edit": EditTool,
        "subagent": subagent,
        "report": ReportTool,
        "ask": AskTool,
    }


def select_tools(
    allow: Iterable[str] | None,
    factories: Mapping[str, Callable[[], Tool]] | None = None,
    *,
    spawn: SpawnRun | None = None,
) -> ToolRegistry:
    """A registry of the allowed tools (``None``: every built-in; empty: none)."""
    factories = builtin_tools(spawn=spawn) if factories is None else factories
    return ToolRegistry(factories[n]() for n in tool_names(allow, factories))


def tool_names(allow: Iterable[str] | None, known: Iterable[str] = BUILTIN_TOOLS) -> list[str]:
    """The allowed tools' names, each once (``None``: all of ``known``; empty: none);
    :class:`UnknownToolError` for a name that is not in ``known``."""
    known = list(known)
    names = known if allow is None else [n.strip() for n in allow if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownToolError(f"unknown tool {', '.join(unknown)} (available: {', '.join(known)})")
    return list(dict.fromkeys(names))
