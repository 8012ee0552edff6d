"""An agent's worktree attacked by the agent (its ``.git`` rewritten, a repository of its
own planted inside): tether's git calls on the user's behalf never run what the agent
configured, and review and merge the user's repository, not the agent's.

An agent confined to its worktree (Codex's or Claude Code's own sandbox) may write there,
``.git`` included; tether's git runs outside any sandbox, in the daemon or the user's
shell, so it must never take its repository, configuration or hooks from that entry.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.daemon.fleet.test_attack_full_disk import small_tmpfs
from tests.workspace.test_worktree import sh
from tether import workspace
from tether.workspace import WorkspaceRefused
from tether.workspace.review import DIFF_LIMIT


def _repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    sh(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("one\ntwo\nthree\n")
    sh(path, "add", ".")
    sh(path, "commit", "-q", "-m", "start")
    return path


def _trap(folder: Path, marker: Path) -> str:
    """A script that leaves ``marker`` when anything runs it."""
    script = folder / "trap.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
    script.chmod(0o755)
    return str(script)


def _forge(tree: Path, repo: Path, trap: str) -> Path:
    """What a hostile agent does: its ``.git`` a repository of its own (a copy of the
    user's, every ``main`` and its own branch at a commit it made), with a file system
    monitor and hooks that run its command."""
    forged = tree / ".git"
    forged.unlink()
    shutil.copytree(repo / ".git", forged)
    shutil.rmtree(forged / "worktrees")
    sh(tree, "config", "core.worktree", str(tree))
    sh(tree, "symbolic-ref", "HEAD", "refs/heads/tether/a")
    sh(tree, "config", "core.fsmonitor", trap)
    hooks = forged / "hooks"
    for hook in ("reference-transaction", "post-checkout", "pre-commit", "post-merge"):
        (hooks / hook).write_text(f"#!/bin/sh\nexec {trap}\n")
        (hooks / hook).chmod(0o755)
    sh(tree, "config", "core.hooksPath", str(hooks))
    return forged


def test_attack_an_agent_that_rewrites_its_dot_git_runs_nothing_and_fools_no_review(
    tmp_path: Path,
) -> None:
    repo, root = _repo(tmp_path), tmp_path / "state" / "worktrees"
    marker = tmp_path / "ran"
    trap = _trap(tmp_path, marker)
    made = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    tree = Path(made.path)
    (tree / "shared.txt").write_text("one\nTWO\nthree\n")  # the agent's real work
    forged = _forge(tree, repo, trap)

    found = workspace.load_worktree(tree)
    shown = workspace.diff(found)
    assert not marker.exists(), "the agent's fsmonitor ran on a review"
    assert "shared.txt" in shown.files
    assert "+TWO" in shown.text
    assert workspace.pending_work(found)
    merged = workspace.merge(found)
    assert merged.commit == sh(repo, "rev-parse", "main").strip()
    assert "TWO" in sh(repo, "show", "main:shared.txt")
    assert sh(tree, "rev-parse", "main").strip() != merged.commit  # the forgery, untouched
    workspace.remove_worktree(workspace.load_worktree(tree), force=True)
    assert not marker.exists(), marker.read_text()
    assert not forged.exists()
    assert "tether/a" not in sh(repo, "branch", "--list", "tether/a")
    assert str(tree) not in sh(repo, "worktree", "list")


def _commit_in(folder: Path) -> None:
    sh(folder, "init", "-q")
    (folder / "lib.rs").write_text("fn main() {}\n")
    sh(folder, "add", ".")
    sh(folder, "commit", "-q", "-m", "the agent's own")


@pytest.mark.parametrize("commit", [False, True], ids=["no-commit", "committed"])
def test_attack_a_repository_of_its_own_in_the_worktree_is_refused_not_lost(
    tmp_path: Path, commit: bool
) -> None:
    """An agent that runs ``git init`` in its worktree (a new project of its own), with or
    without a commit there: its files are not the worktree's to git (a gitlink to a commit
    only the worktree holds, or nothing at all). Review and merge say so, naming it (before:
    ``internal`` errors from ``git add``, or a merge of a dangling link), and ``rm`` keeps
    the worktree unless forced (before: it found no work and deleted the only copy)."""
    repo, root = _repo(tmp_path), tmp_path / "state" / "worktrees"
    made = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    project = Path(made.path, "project")
    project.mkdir()
    if commit:
        _commit_in(project)
    else:
        sh(project, "init", "-q")
        (project / "lib.rs").write_text("fn main() {}\n")
    before = sh(repo, "rev-parse", "main")
    with pytest.raises(WorkspaceRefused, match="project") as refused:
        workspace.merge(made)
    assert "project" in refused.value.files[0]
    assert sh(repo, "rev-parse", "main") == before
    with pytest.raises(WorkspaceRefused, match="project"):
        workspace.remove_worktree(made)
    with pytest.raises(WorkspaceRefused, match="project"):
        workspace.remove_worktree(made, keep_branch=True)
    assert (project / "lib.rs").exists()
    if commit:  # a review shows the link (git's own "Subproject commit")
        assert "project" in workspace.diff(made).files
    else:
        with pytest.raises(WorkspaceRefused, match="no commit"):
            workspace.diff(made)
    removed = workspace.remove_worktree(made, force=True)
    assert removed.dropped
    assert not Path(made.path).exists()


def test_attack_a_worktree_the_full_disk_cut_short_leaves_no_branch(tmp_path: Path) -> None:
    """The worktrees' disk (tether's state directory) has no room for the checkout: the
    refusal leaves nothing, the branch git made before the checkout failed included
    (before: ``tether/a`` stayed, and every later worktree of the name was refused)."""
    repo = _repo(tmp_path)
    (repo / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # more than the disk
    sh(repo, "add", "big.bin")
    sh(repo, "commit", "-q", "-m", "big")
    before = sh(repo, "for-each-ref")
    with small_tmpfs() as disk:
        with pytest.raises(WorkspaceRefused, match=r"big\.bin"):
            workspace.create_worktree(repo, "tether/a", owner="a", root=disk / "worktrees")
        assert sh(repo, "for-each-ref") == before
        assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
        assert not list((disk / "worktrees").glob("*/*"))


def test_attack_a_huge_change_is_reviewed_in_bounds(tmp_path: Path) -> None:
    """An agent that writes a 20 MB text file (a log, a dataset): its diff is cut at
    DIFF_LIMIT and says so, and git is read no further (before: git's whole output was
    held, 940 MB of daemon memory for a 300 MB file, and the reply was too large to send:
    ``internal: unencodable result``, each time the dashboard showed the agent)."""
    repo = _repo(tmp_path)
    made = workspace.create_worktree(repo, "tether/a", root=tmp_path / "state" / "worktrees")
    Path(made.path, "big.txt").write_text("x" * 100 + "\n" * 1 + ("y" * 99 + "\n") * 200_000)
    found = workspace.diff(made)
    assert found.cut
    assert found.files == ("big.txt",)
    assert len(found.text) < DIFF_LIMIT + 1000
    assert found.text.rstrip().endswith("diff shows it]")
    assert not workspace.diff(made, stat=True).cut  # the stat is small
