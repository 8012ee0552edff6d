"""A path rule attacked through a symlink: ``edit:src/**`` must not approve a write that a
symlink under ``src/`` (one the repository ships, say) leads out of it.

The rules match paths as strings; the desk adds where each path really leads (every
symlink that exists followed) as a subject too, so an approve rule must cover both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.test_cli_run import TIMEOUT, _env
from tether.agent.desk import Request
from tether.policy.rules import Policy, policy_of


def _project(tmp_path: Path) -> tuple[Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "src").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, project / "src" / "link")
    return project, outside


def test_attack_a_symlink_under_src_is_not_src(tmp_path: Path) -> None:
    project, outside = _project(tmp_path)
    policy = policy_of(["edit:src/**"], [f"edit:{outside}/**"])
    assert isinstance(policy, Policy)

    def decided(path: str) -> str | None:
        request = Request("builtin", "builtin", "write", {"path": path}, cwd=str(project))
        match = policy.evaluate(request.call())
        return None if match is None else match.decision

    assert decided("src/a.txt") == "approve"
    assert decided(str(project / "src" / "a.txt")) == "approve"
    assert decided("src/link/owned.txt") == "deny"  # it is outside/owned.txt: denied there
    assert decided("src/link/../a.txt") != "approve"  # (link/.. is outside's parent)


def test_attack_tether_run_never_writes_through_an_approved_symlink(tmp_path: Path) -> None:
    """The built-in agent writes ``src/link/owned.txt`` under ``--approve 'edit:src/**'``
    with nobody to ask: the write is not approved, so it is denied (before: approved, and
    the file landed outside the project)."""
    project, outside = _project(tmp_path)
    write = {"name": "write", "arguments": {"path": "src/link/owned.txt", "content": "x\n"}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "w", "tool_calls": [write]}, {"text": "done"}]))
    argv = [sys.executable, "-m", "tether", "run", "--provider", "scripted", "--script",
            str(script), "--approval", "ask", "--approve", "edit:src/**", "go"]  # fmt: skip
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=project,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert not (outside / "owned.txt").exists()
    assert "denied" in done.stderr
