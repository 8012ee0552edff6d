"""A git worktree per agent: made, reviewed (diff), taken (merge) and removed, by git.

Theory of operation. An agent given a worktree works on its own branch (default
``tether/NAME``) in its own checkout, made by ``git worktree add`` outside the
repository's tree, in a private directory under tether's state directory
(:mod:`.record`). Two agents writing the same file each see only their own change.
Everything is the git CLI's own work (:mod:`.git`): worktrees, diffs, merges; tether
only decides, before it changes anything, whether an operation may go ahead, so a
refused one changes nothing anywhere:

- :func:`create_worktree` / :func:`fork_worktree` (:mod:`.worktree`): not a git
  repository, an invalid or existing branch, a base that names no commit, a worktree
  already there: refused, nothing created;
- :func:`diff` (:mod:`.review`): the agent's changes against its base, committed or
  not, untracked files included;
- :func:`merge`: the agent's uncommitted work committed on its branch (the agent as its
  author), then merged into the base branch where the agent came from; a conflict, or
  uncommitted changes in the base's checkout in the files the merge touches, refuses
  with the files named;
- :func:`remove_worktree`: the worktree and its branch; work not merged is refused
  unless forced or kept on the branch;
- :func:`claim` / :func:`release`: a worktree is given to one agent at a time.

Every call blocks (it runs git): call it from a thread in async code. Errors: see
:mod:`.errors` (drawn in :mod:`tether.errors`).
"""

from __future__ import annotations

from tether.workspace.errors import (
    BaseNotFound,
    BranchExists,
    DirtyTarget,
    GitFailed,
    MergeConflict,
    NoBaseBranch,
    NotARepository,
    UnmergedWork,
    WorkspaceRefused,
    WorktreeTaken,
)
from tether.workspace.record import Worktree, claim, load_worktree, release
from tether.workspace.review import Merged, WorktreeDiff, diff, merge
from tether.workspace.snapshot import Author
from tether.workspace.worktree import (
    BRANCH_PREFIX,
    Removed,
    check_new,
    create_worktree,
    default_branch,
    fork_worktree,
    owned_by,
    pending_work,
    remove_worktree,
    repository_of,
)

__all__ = [
    "BRANCH_PREFIX",
    "Author",
    "BaseNotFound",
    "BranchExists",
    "DirtyTarget",
    "GitFailed",
    "MergeConflict",
    "Merged",
    "NoBaseBranch",
    "NotARepository",
    "Removed",
    "UnmergedWork",
    "WorkspaceRefused",
    "Worktree",
    "WorktreeDiff",
    "WorktreeTaken",
    "check_new",
    "claim",
    "create_worktree",
    "default_branch",
    "diff",
    "fork_worktree",
    "load_worktree",
    "merge",
    "owned_by",
    "pending_work",
    "release",
    "remove_worktree",
    "repository_of",
]
