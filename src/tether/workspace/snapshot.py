"""An agent's work as one commit: what is committed on its branch plus what is not.

:func:`snapshot` builds that commit from git objects only (a scratch index, ``git
write-tree``, ``git commit-tree`` with the agent as its author): the worktree, its
index and its branch are untouched, so a merge that is then refused has changed
nothing. :func:`record` puts the snapshot on the agent's branch (``git update-ref``
from the old head, then ``git reset`` so the index matches: the files already are the
commit's). :func:`merge_tree` merges two commits with ``git merge-tree --write-tree``,
which also touches no worktree.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from tether.workspace.errors import GitFailed, WorkspaceRefused
from tether.workspace.git import Where, failure, git, names, scratch_index
from tether.workspace.record import Worktree

__all__ = [
    "Author",
    "Merge",
    "Snapshot",
    "author_of",
    "identity_env",
    "merge_tree",
    "record",
    "rev",
    "snapshot",
    "stage_all",
]

AGENT_EMAIL: Final = "tether-agent@localhost"
_GITLINK: Final = "160000"  # a tree entry's mode for a commit of another repository
_LISTED: Final = 5  # repositories named in a refusal
_NO_COMMIT: Final = re.compile(r"error: '([^']*)' does not have a commit checked out")
FALLBACK_NAME: Final = "tether"  # the user when git knows none (a fresh machine, a container)


class Author(NamedTuple):
    name: str
    email: str


class Snapshot(NamedTuple):
    head: str  # the branch's commit
    commit: str  # head plus the uncommitted work (head itself when there is none)

    @property
    def uncommitted(self) -> bool:
        return self.commit != self.head


class Merge(NamedTuple):
    tree: str  # the merged tree (with conflict markers when there are conflicts)
    conflicts: tuple[str, ...]  # the conflicted files


def author_of(worktree: Worktree) -> Author:
    """The author of an agent's commits: its name (its branch's last part, ``tether/NAME``),
    as a tether agent."""
    return Author(f"{worktree.name} (tether agent)", AGENT_EMAIL)


def rev(cwd: Where, what: str) -> str:
    """The object ``what`` names (``git rev-parse --verify``); "" when it names none."""
    return git(cwd, "rev-parse", "--verify", "--quiet", what, ok=(0, 1, 128)).out.strip()


def identity_env(cwd: Where, author: Author | None = None) -> dict[str, str]:
    """The environment a commit is made with: ``author`` as its author (else the user);
    the user is who git knows, else :data:`FALLBACK_NAME` at :data:`AGENT_EMAIL`."""
    env: dict[str, str] = {}
    if author is not None:
        env.update(GIT_AUTHOR_NAME=author.name, GIT_AUTHOR_EMAIL=author.email)
    if git(cwd, "var", "GIT_COMMITTER_IDENT", ok=(0, 128)).code != 0:
        env.update(GIT_COMMITTER_NAME=FALLBACK_NAME, GIT_COMMITTER_EMAIL=AGENT_EMAIL)
        env.setdefault("GIT_AUTHOR_NAME", FALLBACK_NAME)
        env.setdefault("GIT_AUTHOR_EMAIL", AGENT_EMAIL)
    return env


def snapshot(worktree: Worktree, author: Author | None = None) -> Snapshot:
    """The worktree's work as a commit (see the module docstring); refused when the
    worktree is no longer on its branch (the agent switched branches)."""
    path, at = worktree.path, worktree.at
    on = git(at, "symbolic-ref", "-q", "HEAD", ok=(0, 1)).out.strip()
    if on != f"refs/heads/{worktree.branch}":
        where = on.removeprefix("refs/heads/") or "a detached HEAD"
        raise WorkspaceRefused(
            f"the worktree {path} is on {where}, not on its branch {worktree.branch}: "
            f"run `git -C {path} switch {worktree.branch}` first"
        )
    head = rev(at, "HEAD")
    with scratch_index(at) as index:
        stage_all(at, index)
        tree = git(at, "write-tree", env=index).out.strip()
    nested = embedded(at, worktree.base_commit, tree)
    if nested:
        listed = ", ".join(nested[:_LISTED]) + (", ..." if len(nested) > _LISTED else "")
        raise WorkspaceRefused(
            f"the worktree {path} holds git repositories of their own ({listed}): their "
            "work would go as links to commits that exist only in the worktree; remove "
            "their .git to make their files the agent's work, or move them out",
            nested,
        )
    if tree == rev(at, "HEAD^{tree}"):
        return Snapshot(head, head)
    message = f"tether: the uncommitted work of agent {worktree.name}"
    env = identity_env(at, author or author_of(worktree))
    commit = git(at, "commit-tree", tree, "-p", head, "-m", message, env=env).out.strip()
    return Snapshot(head, commit)


def stage_all(at: Where, index: dict[str, str]) -> None:
    """``git add --all`` into the scratch ``index``; a repository of its own with no
    commit in the worktree (``git init`` there) is refused, naming it (git cannot add it)."""
    out = git(at, "add", "--all", ok=(0, 128), env=index)
    if out.code != 0:
        found = _NO_COMMIT.findall(out.err)
        if not found:
            raise GitFailed(f"git add --all failed ({out.code}): {failure(out)}")
        raise WorkspaceRefused(
            f"{', '.join(found[:_LISTED])} in the worktree is a git repository of its own "
            "with no commit: tether cannot review or merge its files; remove its .git to "
            "make them the agent's work",
            found,
        )


def embedded(at: Where, since: str, tree: str) -> list[str]:
    """The repositories of their own (gitlinks) ``tree`` has that ``since`` did not."""
    raw = names(git(at, "diff-tree", "-r", "-z", "--raw", since, tree).out)
    found: list[str] = []
    for status, path in zip(raw[::2], raw[1::2], strict=False):
        modes = status.lstrip(":").split(" ")[:2]
        if len(modes) == 2 and modes[1] == _GITLINK and modes[0] != _GITLINK:
            found.append(path)
    return found


def record(worktree: Worktree, snap: Snapshot) -> None:
    """Put ``snap`` on the agent's branch (nothing to do when it has no uncommitted work)."""
    if not snap.uncommitted:
        return
    at = worktree.at
    ref = f"refs/heads/{worktree.branch}"
    git(at, "update-ref", "-m", "tether: the agent's work committed", ref, snap.commit, snap.head)
    git(at, "reset", "--quiet")


def merge_tree(cwd: Where, ours: str, theirs: str) -> Merge:
    """``git merge-tree --write-tree`` of two commits: the tree and the conflicted files."""
    args = ("merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs)
    out = git(cwd, *args, ok=(0, 1))
    tree, *conflicts = names(out.out)
    return Merge(tree, tuple(conflicts) if out.code == 1 else ())
