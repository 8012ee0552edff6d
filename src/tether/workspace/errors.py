"""The workspace's errors (drawn in :mod:`tether.errors`' tree).

:class:`WorkspaceRefused` and its kinds mean nothing was done: the input or the state
does not allow it (exit status 2, a usage error); each message says what to do next.
:class:`GitFailed` is git failing where it should not (exit status 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from tether import exits
from tether.errors import WorkspaceError

__all__ = [
    "BaseNotFound",
    "BranchExists",
    "DirtyTarget",
    "GitFailed",
    "MergeConflict",
    "NoBaseBranch",
    "NotARepository",
    "UnmergedWork",
    "WorkspaceRefused",
    "WorktreeTaken",
]


class GitFailed(WorkspaceError):
    """git itself failed where it should not have (a broken repository, a full disk)."""

    exit_code: ClassVar[int] = exits.FAILED


class WorkspaceRefused(WorkspaceError, ValueError):
    """Nothing was done: the input or the repository's state does not allow it."""

    exit_code: ClassVar[int] = exits.USAGE

    def __init__(self, message: str, files: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.files = tuple(files)  # the files it is about, when there are some


class NotARepository(WorkspaceRefused):
    """The directory is in no git repository (or in one without a work tree)."""


class BranchExists(WorkspaceRefused):
    """The branch a new worktree would make exists already."""


class BaseNotFound(WorkspaceRefused):
    """The base names no commit (or HEAD has none yet)."""


class WorktreeTaken(WorkspaceRefused):
    """The worktree is given to another agent, or its directory is in use."""


class UnmergedWork(WorkspaceRefused):
    """Removing the worktree would lose work that is merged nowhere."""


class MergeConflict(WorkspaceRefused):
    """The agent's work conflicts with its base branch in ``files``."""


class DirtyTarget(WorkspaceRefused):
    """The checkout of the base branch has uncommitted changes in ``files``, which the
    merge would change."""


class NoBaseBranch(WorkspaceRefused):
    """The worktree's base is no branch (a tag, a commit), or that branch is gone."""
