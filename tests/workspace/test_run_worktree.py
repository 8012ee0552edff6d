"""`tether run --worktree / --base / --resume / --fork / --base-url` and `tether.resume`,
as a user runs them: real processes, a real git repository, the scripted model server
(which records what the model was sent)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.modelserver import ModelServer, open_model_server
from tether.store.index import RunIndex

TIMEOUT = 60


def git(cwd: Path | str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("TETHER_HOME", str(state))
    for name in ("TETHER_PROVIDER", "TETHER_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return state


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    (path / "sub").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "notes.txt").write_text("before\n")
    (path / "sub" / "keep.txt").write_text("kept\n")
    git(path, "add", ".")
    git(path, "-c", "user.name=me", "-c", "user.email=me@x", "commit", "-q", "-m", "start")
    return path


def tether_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "run", "--no-stdin", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def write_call(path: str, content: str, text: str) -> dict[str, Any]:
    return {
        "text": text,
        "tool_calls": [{"name": "write", "arguments": {"path": path, "content": content}}],
    }


def nothing_made(home: Path) -> bool:
    runs = home / "runs"
    trees = home / "worktrees"
    return not (runs.exists() and any(runs.iterdir())) and not (
        trees.exists() and any(trees.rglob("tree"))
    )


def test_a_run_in_its_own_worktree_then_resumed_there(home: Path, repo: Path) -> None:
    script = [
        write_call("notes.txt", "by the agent\n", "PINEAPPLE: writing"),
        {"text": "written"},
        {"text": "it was PINEAPPLE"},
    ]
    with open_model_server(script) as server:
        first = tether_cli(
            repo / "sub",
            "--provider", "anthropic", "--base-url", server.url, "--worktree",
            "remember PINEAPPLE and write notes.txt",
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        row = RunIndex(home / "tether.db").recent(limit=1)[0]
        tree = Path(row.options["worktree"]["path"])  # type: ignore[index]
        assert Path(row.cwd or "") == tree / "sub"  # the same subdirectory, in the worktree
        assert (tree / "sub" / "notes.txt").read_text() == "by the agent\n"
        assert (repo / "notes.txt").read_text() == "before\n"  # the checkout is untouched
        assert not (repo / "sub" / "notes.txt").exists()
        assert f"tether/{row.id}" in git(repo, "branch", "--list")
        assert tree.is_relative_to(home / "worktrees")

        again = tether_cli(repo, "--resume", row.id[-6:], "what was the word?")
        assert again.returncode == 0, again.stderr
        assert "it was PINEAPPLE" in again.stdout
        last = server.model_requests()[-1]["body"]
    sent = json.dumps(last["messages"])
    assert "remember PINEAPPLE and write notes.txt" in sent
    assert "PINEAPPLE: writing" in sent
    resumed = RunIndex(home / "tether.db").recent(limit=1)[0]
    assert resumed.cwd == row.cwd  # in its worktree again
    assert resumed.options is not None
    assert resumed.options["resume"] == row.id


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--worktree",), "not in a git repository"),
        (("--worktree", "--base", "no-such-ref"), "names no commit"),
        (("--base", "main"), "--base and --branch go with --worktree"),
        (("--fork",), "--fork goes with --resume"),
        (("--resume", "20990101T000000-abcdef"), "no run matches"),
        (("--worktree", "--branch", "bad..name"), "not a valid branch name"),
        (("--base-url", "ftp://x"), "not an http"),
        (("--base-url", "http://127.0.0.1:9"), "base_url goes with the built-in agent's"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_makes_nothing(
    home: Path, repo: Path, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    where = plain if args == ("--worktree",) else repo
    branches = git(repo, "branch", "--list")
    done = tether_cli(where, *args, "a task")
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert len([line for line in done.stderr.splitlines() if said in line]) == 1
    assert "Traceback" not in done.stderr
    assert nothing_made(home)
    assert git(repo, "branch", "--list") == branches
    assert git(repo, "worktree", "list").count("\n") == 1


def test_a_run_that_saved_nothing_is_not_resumable(home: Path, repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"text": "hi"}]))
    wire = tether_cli(repo, "--agent", "resp", "a task", "--", sys.executable, "-c", "pass")
    assert wire.returncode != 0
    row = RunIndex(home / "tether.db").recent(limit=1)[0]
    again = tether_cli(repo, "--resume", row.id, "go on")
    assert again.returncode == 2
    assert "is not resumable" in again.stderr
    assert "RESP frames carry no session" in again.stderr


async def _fork(home: Path, repo: Path, server: ModelServer) -> None:
    options: dict[str, Any] = {"provider": "anthropic", "base_url": server.url, "cwd": str(repo)}
    source = await tether.spawn("remember MANGO; change notes.txt", worktree=True, **options)
    assert (await source.wait()).status == "done"
    row = RunIndex(home / "tether.db").get(source.run_id)
    assert row is not None
    assert row.options is not None
    tree = Path(row.options["worktree"]["path"])
    assert (tree / "notes.txt").read_text() == "source's\n"  # not committed
    fork = await tether.resume(source.run_id, "fork: the word?", fork=True)
    assert (await fork.wait()).status == "done"
    forked = RunIndex(home / "tether.db").get(fork.run_id)
    assert forked is not None
    assert forked.options is not None
    fork_tree = Path(forked.options["worktree"]["path"])
    assert fork_tree != tree
    assert (fork_tree / "notes.txt").read_text() == "source's\n"  # starts at its work
    assert git(fork_tree, "status", "--porcelain") == ""
    assert git(tree, "status", "--porcelain") == " M notes.txt\n"  # the source goes on as it was
    assert f"tether/{fork.run_id}" in git(repo, "branch", "--list")


def test_fork_a_run_into_a_new_worktree_at_its_work(home: Path, repo: Path) -> None:
    script = [
        write_call("notes.txt", "source's\n", "MANGO noted"),
        {"text": "changed"},
        {"text": "fork: MANGO"},
    ]
    with open_model_server(script) as server:
        asyncio.run(_fork(home, repo, server))
    assert "remember MANGO" in json.dumps(server.model_requests()[2]["body"]["messages"])


def test_a_home_outside_tethers_homes_is_refused(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    (real / ".codex").mkdir(parents=True)
    (real / ".codex" / "config.toml").write_text("mine\n")

    async def go() -> None:
        with pytest.raises(tether.SpawnError, match="not one of tether's agent homes"):
            await tether.spawn("x", agent="codex", base_url="http://127.0.0.1:9", home=str(real))

    asyncio.run(go())
    assert (real / ".codex" / "config.toml").read_text() == "mine\n"
