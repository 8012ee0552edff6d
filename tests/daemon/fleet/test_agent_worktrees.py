"""Agents side by side in worktrees of their own, through the daemon as a user drives it
(``tether agent ...``: real processes, a real git repository, the scripted model server
that records what the model was sent): each sees only its own change, ``diff`` shows
exactly it, the first ``merge`` lands, the second is refused as a conflict with nothing
changed, ``rm`` refuses unmerged work without ``--force``; a follow-up to an ended agent
resumes its conversation in its worktree; ``fork`` starts a new agent from it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentd import kill_agents
from tests.support.daemon import DaemonProcess

from tether.daemon.rpc.lifecycle import stop_daemon
from tether.modelserver import ModelServer, open_model_server


def tether(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def git(cwd: Path | str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout


def write(path: str, content: str, text: str) -> dict[str, Any]:
    call = {"name": "write", "arguments": {"path": path, "content": content}}
    return {"text": text, "tool_calls": [call]}


SCRIPT = [
    write("shared.txt", "line by a\n", "a: writing"),
    {"text": "a wrote it"},
    write("shared.txt", "line by b\n", "b: writing"),
    {"text": "b wrote it"},
    {"text": "a again: I wrote shared.txt"},  # a's follow-up, resumed
    {"text": "a2: forked"},  # the fork's first turn
]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with open_model_server(SCRIPT) as served:
        yield served


@pytest.fixture
def env(daemon_env: DaemonProcess) -> Iterator[dict[str, str]]:
    try:
        yield daemon_env.env
    finally:
        stop_daemon(daemon_env.socket, timeout=5, force=True)
        kill_agents(Path(daemon_env.env["TETHER_HOME"]))


@pytest.fixture
def repo(short_tmp: Path) -> Path:
    path = short_tmp / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("line\n")
    git(path, "add", ".")
    git(path, "-c", "user.name=me", "-c", "user.email=me@x", "commit", "-q", "-m", "start")
    return path


def repo_state(repo: Path) -> tuple[str, str, str, str]:
    return (
        git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "worktree", "list", "--porcelain"),
        (repo / "shared.txt").read_text(),
    )


def nth_request(server: ModelServer, n: int) -> dict[str, Any]:
    """The n-th model request (1-based), once it has come (a resumed run asks on its own)."""
    found = server.wait_request(lambda r: r["reply"] == n, 60)
    assert found is not None, f"no model request {n}"
    return found


def status(env: dict[str, str], name: str) -> dict[str, Any]:
    done = tether(env, "status", name, "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def spawn(env: dict[str, str], repo: Path, server: ModelServer, name: str, task: str) -> None:
    done = tether(
        env, "spawn", name, "--worktree", "--cwd", str(repo), "--provider", "anthropic",
        "--base-url", server.url, "--task", task, "--wait",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_two_agents_in_worktrees_diff_merge_conflict_rm_resume_fork(
    env: dict[str, str], repo: Path, server: ModelServer
) -> None:
    spawn(env, repo, server, "a", "write shared.txt (a)")
    spawn(env, repo, server, "b", "write shared.txt (b)")
    a, b = status(env, "a"), status(env, "b")
    assert (a["branch"], a["base"], b["branch"]) == ("tether/a", "main", "tether/b")
    assert Path(a["worktree"], "shared.txt").read_text() == "line by a\n"
    assert Path(b["worktree"], "shared.txt").read_text() == "line by b\n"
    assert (repo / "shared.txt").read_text() == "line\n"
    shown = tether(env, "status", "a").stdout  # what a person reads shows them too
    assert f"worktree:  {a['worktree']}\n" in shown
    assert "branch:    tether/a (base main)\n" in shown

    diff = tether(env, "diff", "a")
    assert diff.returncode == 0, diff.stderr
    assert "-line\n+line by a\n" in diff.stdout
    assert "by b" not in diff.stdout
    assert "shared.txt" in tether(env, "diff", "b", "--stat").stdout

    merged = tether(env, "merge", "a")
    assert merged.returncode == 0, merged.stderr
    assert "tether/a merged into main" in merged.stdout
    assert (repo / "shared.txt").read_text() == "line by a\n"
    author = git(repo, "log", "-1", "--format=%an", "main^2").strip()
    assert author == "a (tether agent)"

    before = repo_state(repo)
    b_files = git(b["worktree"], "status", "--porcelain")
    refused = tether(env, "merge", "b")
    assert refused.returncode == 2
    assert "conflicts in: shared.txt" in refused.stderr
    assert repo_state(repo) == before
    assert git(b["worktree"], "status", "--porcelain") == b_files

    kept = tether(env, "rm", "b")
    assert kept.returncode == 2  # a live agent, and work merged nowhere
    assert tether(env, "stop", "b").returncode == 0
    unmerged = tether(env, "rm", "b")
    assert unmerged.returncode == 2
    assert "not merged into main" in unmerged.stderr
    assert "shared.txt" in unmerged.stderr
    assert Path(b["worktree"]).exists()
    gone = tether(env, "rm", "b", "--force")
    assert gone.returncode == 0, gone.stderr
    assert not Path(b["worktree"]).exists()
    assert "tether/b" not in git(repo, "branch", "--list")

    assert tether(env, "stop", "a").returncode == 0
    assert status(env, "a")["state"] == "done"
    resumed = tether(env, "follow-up", "a", "what did you write?")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from run {a['run_id']}" in resumed.stdout
    asked = json.dumps(nth_request(server, 5)["body"]["messages"])
    assert "write shared.txt (a)" in asked  # the model sees the first turn
    again = status(env, "a")
    assert again["run_id"] != a["run_id"]
    assert again["worktree"] == a["worktree"]  # in its worktree again

    fork = tether(env, "fork", "a", "a2", "--task", "and you?")
    assert fork.returncode == 0, fork.stderr
    a2 = status(env, "a2")
    assert a2["branch"] == "tether/a2"
    assert a2["worktree"] != a["worktree"]
    assert Path(a2["worktree"], "shared.txt").read_text() == "line by a\n"  # at a's work
    forked = json.dumps(nth_request(server, 6)["body"]["messages"])
    assert "write shared.txt (a)" in forked
    assert "what did you write?" in forked


def bash(command: str, text: str) -> dict[str, Any]:
    call = {"name": "Bash", "arguments": {"command": command, "description": "write it"}}
    return {"text": text, "tool_calls": [call]}


def test_claude_code_and_the_built_in_agent_side_by_side(
    env: dict[str, str], repo: Path, short_tmp: Path
) -> None:
    from tests.adapters.cli_helpers import require_cli

    claude = require_cli("claude")
    env = {**env, "PATH": f"{Path(claude).parent}:{env['PATH']}"}
    script = [
        bash("printf 'line by claude\\n' > shared.txt", "claude: writing"),
        {"text": "claude wrote it"},
        write("shared.txt", "line by a\n", "a: writing"),
        {"text": "a wrote it"},
    ]
    with open_model_server(script) as server:
        spawned = tether(
            env, "spawn", "c", "--agent", "claude", "--agent-arg=--allowedTools=Bash",
            "--worktree", "--cwd", str(repo), "--base-url", server.url,
            "--task", "write shared.txt (c)", "--wait",
        )  # fmt: skip
        assert spawned.returncode == 0, spawned.stderr
        spawn(env, repo, server, "a", "write shared.txt (a)")
    c, a = status(env, "c"), status(env, "a")
    assert Path(c["worktree"], "shared.txt").read_text() == "line by claude\n"
    assert Path(a["worktree"], "shared.txt").read_text() == "line by a\n"
    assert "+line by claude\n" in tether(env, "diff", "c").stdout
    assert tether(env, "merge", "c").returncode == 0
    assert (repo / "shared.txt").read_text() == "line by claude\n"
    before = repo_state(repo)
    refused = tether(env, "merge", "a")
    assert refused.returncode == 2
    assert "shared.txt" in refused.stderr
    assert repo_state(repo) == before
