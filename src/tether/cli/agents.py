"""``tether agents``: the agents tether can run (:data:`DESCRIPTION`)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from tether.runtime.child.adapters.registry import (
    AGENTS,
    CONTROLS,
    AgentKind,
    find_command,
    version_of,
)

DESCRIPTION = """\
The agents tether can run, whether each is installed, its version, and what each control
does with it (--markdown: the table of docs/agents.md)."""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per agent")
    out.add_argument(
        "--markdown", action="store_true", help="the capability table (docs/agents.md)"
    )
    return parser


def main(argv: list[str], prog: str = "tether agents") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.markdown:
        print(markdown(), end="")
        return 0
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(AGENTS)) as pool:  # version queries are slow
        rows = list(pool.map(status, AGENTS.values()))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        where = row["path"] or ("not installed" if row["command"] else "(the command after --)")
        if row["name"] == "builtin":
            where = "built in"
        version = f"  {row['version']}" if row["version"] else ""
        print(f"{row['name']:<11} {row['title']}: {where}{version}")
        for control, cell in [*row["controls"].items(), ("approvals", row["approvals"])]:
            print(f"    {control:<9} {cell['support']:<9} {cell['how']}")
    return 0


def status(agent: AgentKind, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One agent: installed where, its version, its controls."""
    env = os.environ if env is None else env
    found = find_command(agent, agent.command[:1], env) if agent.command else None
    return {
        "name": agent.name,
        "title": agent.title,
        "command": list(agent.command),
        "installed": agent.name == "builtin" or found is not None,
        "path": found[0] if found else None,
        "version": version_of(agent, env) if found else None,
        "package": agent.package,
        "model": agent.model,
        "controls": {
            k: {"support": c.support.value, "how": c.how} for k, c in agent.controls.items()
        },
        "approvals": {"support": agent.approvals.support.value, "how": agent.approvals.how},
    }


def markdown() -> str:
    """The capability table, control by control and agent by agent, from the registry."""
    names = list(AGENTS)
    lines = [
        "| control | " + " | ".join(f"`{n}`" for n in names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for control in CONTROLS:
        cells = []
        for name in names:
            cap = AGENTS[name].controls[control]
            cells.append(f"**{cap.support.value}**: {cap.how}")
        lines.append(f"| {control} | " + " | ".join(cells) + " |")
    for what in ("resume", "fork"):
        cells = []
        for name in names:
            agent = AGENTS[name]
            how = agent.resume if what == "resume" else agent.fork
            cells.append(f"**yes**: {how}" if how else f"**no**: {agent.not_resumable}")
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    cells = [f"**{a.approvals.support.value}**: {a.approvals.how}" for a in AGENTS.values()]
    lines.append("| approvals | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "| agent | what it is | protocol | command | npm package (pinned in CI) "
        "| the run's model | notes |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for agent in AGENTS.values():
        command = f"`{' '.join(agent.command)}`" if agent.command else "after `--`"
        if agent.name == "builtin":
            command = "(in process)"
        package = f"`{agent.package}`" if agent.package else ""
        lines.append(
            f"| `{agent.name}` | {agent.title} | {agent.protocol} | {command} | {package} | "
            f"{agent.model} | {agent.notes} |"
        )
    return "\n".join(lines) + "\n"
