"""Worktrees, diffs and merges against real git repositories in tmp dirs.

Every refusal is checked to change nothing: the repository's refs, its worktree list,
``git status`` of every checkout and the files' contents are the same before and after.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tether import workspace
from tether.workspace import (
    BaseNotFound,
    BranchExists,
    DirtyTarget,
    MergeConflict,
    NotARepository,
    UnmergedWork,
    WorkspaceRefused,
    Worktree,
    WorktreeTaken,
)

ME = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}


def sh(cwd: Path | str, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "me",
            "GIT_AUTHOR_EMAIL": "me@x",
            "GIT_COMMITTER_NAME": "me",
            "GIT_COMMITTER_EMAIL": "me@x",
        },
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    sh(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("one\ntwo\nthree\n")
    (path / "keep.txt").write_text("keep\n")
    sh(path, "add", ".")
    sh(path, "commit", "-q", "-m", "start")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "state" / "worktrees"


def state(repo: Path) -> dict[str, str]:
    """Everything a refused operation must leave as it was."""
    worktrees = sh(repo, "worktree", "list", "--porcelain")
    checkouts = [
        line.split(" ", 1)[1] for line in worktrees.splitlines() if line.startswith("worktree ")
    ]
    out = {
        "refs": sh(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "worktrees": worktrees,
    }
    for checkout in checkouts:
        out[f"status {checkout}"] = sh(checkout, "status", "--porcelain", "--untracked-files=all")
        out[f"index {checkout}"] = sh(checkout, "ls-files", "--stage")
        for name in sorted(p for p in os.listdir(checkout) if p != ".git"):
            full = Path(checkout, name)
            if full.is_file():
                out[f"file {full}"] = full.read_text()
    return out


def test_two_agents_each_see_their_own_change_and_only_the_first_merge_lands(
    repo: Path, root: Path
) -> None:
    a = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    b = workspace.create_worktree(repo, "tether/b", owner="b", root=root)
    Path(a.path, "shared.txt").write_text("one\nTWO by a\nthree\n")
    Path(b.path, "shared.txt").write_text("one\nTWO by b\nthree\n")
    Path(b.path, "new.txt").write_text("b's new file\n")  # untracked

    assert Path(a.path, "shared.txt").read_text() == "one\nTWO by a\nthree\n"
    assert Path(b.path, "shared.txt").read_text() == "one\nTWO by b\nthree\n"
    assert (repo / "shared.txt").read_text() == "one\ntwo\nthree\n"

    seen = workspace.diff(a)
    assert seen.files == ("shared.txt",)
    assert "-two\n+TWO by a\n" in seen.text
    assert "by b" not in seen.text
    seen_b = workspace.diff(b)
    assert seen_b.files == ("new.txt", "shared.txt")
    assert "+b's new file" in seen_b.text
    assert "shared.txt" in workspace.diff(b, stat=True).text
    index_before = sh(b.path, "ls-files", "--stage")
    assert sh(b.path, "status", "--porcelain") == " M shared.txt\n?? new.txt\n"
    assert sh(b.path, "ls-files", "--stage") == index_before  # diff touched no index

    merged = workspace.merge(a)
    assert merged.files == ("shared.txt",)
    assert merged.checkout == str(repo)
    assert (repo / "shared.txt").read_text() == "one\nTWO by a\nthree\n"
    assert sh(repo, "status", "--porcelain") == ""
    parents = sh(repo, "log", "-1", "--format=%P", "main").split()
    assert len(parents) == 2
    assert parents[1] == merged.committed
    author = sh(repo, "log", "-1", "--format=%an <%ae>", merged.committed).strip()
    assert author == "a (tether agent) <tether-agent@localhost>"
    assert sh(a.path, "status", "--porcelain") == ""  # the agent's work is on its branch

    before = state(repo)
    with pytest.raises(MergeConflict) as refused:
        workspace.merge(b)
    assert refused.value.files == ("shared.txt",)
    assert "shared.txt" in str(refused.value)
    assert "nothing was changed" in str(refused.value)
    assert state(repo) == before
    assert workspace.diff(b).files == ("new.txt", "shared.txt")


def test_merge_refuses_a_dirty_checkout_in_the_files_it_touches(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    Path(a.path, "shared.txt").write_text("changed by a\n")
    (repo / "shared.txt").write_text("the user's edit\n")
    before = state(repo)
    with pytest.raises(DirtyTarget) as refused:
        workspace.merge(a)
    assert refused.value.files == ("shared.txt",)
    assert state(repo) == before

    # a file the merge does not touch may be dirty: git keeps the user's change
    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    (repo / "keep.txt").write_text("the user's other edit\n")
    merged = workspace.merge(a, squash=True, message="take a's work")
    assert merged.squash
    assert merged.files == ("shared.txt",)
    assert (repo / "keep.txt").read_text() == "the user's other edit\n"
    assert (repo / "shared.txt").read_text() == "changed by a\n"
    assert sh(repo, "log", "-1", "--format=%s|%P", "main").split("|")[0] == "take a's work"
    assert len(sh(repo, "log", "-1", "--format=%P", "main").split()) == 1
    assert workspace.pending_work(workspace.load_worktree(a.path)) == ()  # squash counts


def test_an_untracked_file_in_the_checkout_counts_as_dirty(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    Path(a.path, "made.txt").write_text("by a\n")
    (repo / "made.txt").write_text("the user's own\n")
    before = state(repo)
    with pytest.raises(DirtyTarget):
        workspace.merge(a)
    assert state(repo) == before


def test_a_base_checked_out_nowhere_moves_by_update_ref(repo: Path, root: Path) -> None:
    sh(repo, "branch", "release")
    a = workspace.create_worktree(repo, "tether/a", base="release", root=root)
    assert a.base == "release"
    Path(a.path, "keep.txt").write_text("kept by a\n")
    merged = workspace.merge(a)
    assert merged.checkout == ""
    assert sh(repo, "show", "release:keep.txt") == "kept by a\n"
    assert (repo / "keep.txt").read_text() == "keep\n"  # main's checkout untouched


def test_create_refuses_and_creates_nothing(repo: Path, root: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotARepository):
        workspace.create_worktree(plain, "tether/x", root=root)
    sh(repo, "branch", "tether/taken")
    before = state(repo)
    with pytest.raises(BranchExists):
        workspace.create_worktree(repo, "tether/taken", root=root)
    with pytest.raises(BaseNotFound):
        workspace.create_worktree(repo, "tether/x", base="no-such-ref", root=root)
    with pytest.raises(BaseNotFound):
        workspace.create_worktree(repo, "tether/x", base="--upload-pack=evil", root=root)
    with pytest.raises(WorkspaceRefused):
        workspace.create_worktree(repo, "bad..name", root=root)
    assert state(repo) == before
    assert not root.exists() or not any(
        p for p in root.rglob("*") if p.is_dir() and p.parent != root
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    sh(empty, "init", "-q")
    with pytest.raises(BaseNotFound, match="no commit yet"):
        workspace.create_worktree(empty, "tether/x", root=root)


def test_the_worktree_lives_privately_outside_the_repository(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    home = Path(a.path).parent
    assert not Path(a.path).is_relative_to(repo)
    assert Path(a.path).is_relative_to(root)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "worktree.json").stat().st_mode) == 0o600
    assert workspace.load_worktree(a.path) == a
    assert a.base == "main"
    assert a.base_commit == sh(repo, "rev-parse", "main").strip()
    assert sh(a.path, "symbolic-ref", "--short", "HEAD").strip() == "tether/a"
    with pytest.raises(WorktreeTaken):  # same branch slug: the directory is there
        workspace.create_worktree(repo, "tether-a", root=root)


def test_claim_gives_a_worktree_to_one_agent_at_a_time(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    assert workspace.claim(a, "a").owner == "a"
    with pytest.raises(WorktreeTaken, match="given to 'a'"):
        workspace.claim(a, "b")
    assert workspace.release(a, "b").owner == "a"  # not b's to free
    workspace.release(a, "a")
    assert workspace.claim(a, "b").owner == "b"
    assert workspace.load_worktree(a.path).owner == "b"


def test_remove_refuses_unmerged_work_without_force(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    Path(a.path, "shared.txt").write_text("unmerged\n")
    before = state(repo)
    with pytest.raises(UnmergedWork, match=r"shared\.txt") as refused:
        workspace.remove_worktree(a)
    assert refused.value.files == ("shared.txt",)
    assert state(repo) == before
    assert Path(a.path, "shared.txt").exists()

    removed = workspace.remove_worktree(a, force=True)
    assert removed.dropped
    assert not removed.branch_kept
    assert not Path(a.path).exists()
    assert not Path(a.path).parent.exists()
    assert "tether/a" not in sh(repo, "branch", "--list")
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_remove_keeps_the_work_on_the_branch(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    Path(a.path, "new.txt").write_text("kept\n")
    removed = workspace.remove_worktree(a, keep_branch=True)
    assert removed.branch_kept
    assert not removed.dropped
    assert sh(repo, "show", "tether/a:new.txt") == "kept\n"
    assert not Path(a.path).exists()


def test_remove_after_merge_needs_no_force(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    untouched = workspace.create_worktree(repo, "tether/b", root=root)
    Path(a.path, "shared.txt").write_text("merged\n")
    workspace.merge(a)
    workspace.remove_worktree(a)
    workspace.remove_worktree(untouched)  # no work at all
    assert sh(repo, "branch", "--list").split() == ["*", "main"]


def test_fork_starts_at_the_sources_work_and_leaves_it_alone(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", owner="a", root=root)
    Path(a.path, "shared.txt").write_text("a's work, not committed\n")
    status = sh(a.path, "status", "--porcelain")
    fork: Worktree = workspace.fork_worktree(a, "tether/a2", owner="a2", root=root)
    assert Path(fork.path, "shared.txt").read_text() == "a's work, not committed\n"
    assert sh(fork.path, "status", "--porcelain") == ""
    assert sh(a.path, "status", "--porcelain") == status  # the source is untouched
    assert fork.base == "main"
    assert fork.owner == "a2"
    Path(fork.path, "shared.txt").write_text("the fork's way\n")
    assert Path(a.path, "shared.txt").read_text() == "a's work, not committed\n"
    assert workspace.diff(fork).files == ("shared.txt",)


def test_a_switched_branch_is_refused_by_name(repo: Path, root: Path) -> None:
    a = workspace.create_worktree(repo, "tether/a", root=root)
    sh(a.path, "switch", "-q", "-c", "elsewhere")
    with pytest.raises(WorkspaceRefused, match="not on its branch tether/a"):
        workspace.merge(a)


def test_commits_need_no_git_identity(
    repo: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ME.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(root.parent))
    for key in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(key, raising=False)
    a = workspace.create_worktree(repo, "tether/a", root=root)
    Path(a.path, "keep.txt").write_text("no identity needed\n")
    merged = workspace.merge(a)
    assert sh(repo, "log", "-1", "--format=%cn", merged.commit).strip() == "tether"
