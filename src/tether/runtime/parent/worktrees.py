"""A run's git worktree (``SpawnOptions.worktree``): checked before the run exists, made
(or given to it) once it does.

:func:`check_worktree` runs every check that can refuse, before anything is created (a
usage error, :class:`~tether.errors.BadOptions`): the working directory is in a git
repository, the base names a commit, a branch asked for is free, a worktree to reuse is
one tether made. :func:`open_worktree` then makes the worktree on ``tether/NAME`` (the
run's id, or the daemon agent's name), or forks the resumed run's at its work, or gives
the resumed run's own to this run (:func:`tether.workspace.claim`: refused while a live
run holds it), and returns the options the run goes on with: its ``cwd`` in the
worktree (the same subdirectory the run was asked to work in), and ``worktree`` the
worktree's path, which the run index keeps for a later resume.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from tether import workspace
from tether.errors import BadOptions, SpawnError
from tether.runtime.parent.observer import Observer
from tether.runtime.parent.options import SpawnOptions, WorktreeOption
from tether.runtime.parent.outcome import RunResult
from tether.workspace import WorkspaceRefused, Worktree

__all__ = [
    "WorktreeRelease",
    "check_worktree",
    "open_worktree",
    "release_worktree",
    "run_owner",
    "worktree_of",
]

RUN_OWNER: Final = "run:"  # a run's claim on a worktree: run:RUN_ID (the daemon's: agent:NAME)


def run_owner(run_id: str) -> str:
    return RUN_OWNER + run_id


def worktree_of(options: SpawnOptions) -> WorktreeOption | None:
    """The options' worktree as a :class:`WorktreeOption` (None: none)."""
    if options.worktree is None or options.worktree is False:
        return None
    return WorktreeOption() if options.worktree is True else options.worktree


def check_worktree(options: SpawnOptions) -> None:
    """Refuse (:class:`BadOptions`) a worktree that cannot be made; nothing is created."""
    wanted = worktree_of(options)
    if wanted is None:
        return
    try:
        if wanted.path is not None:
            workspace.load_worktree(wanted.path)
            return
        top = workspace.repository_of(options.cwd or os.getcwd())
        workspace.check_new(top, wanted.branch, wanted.base)
    except WorkspaceRefused as exc:
        raise BadOptions(f"worktree: {exc}") from None


def open_worktree(
    options: SpawnOptions, name: str, owner: str, *, stale: Callable[[str], bool]
) -> tuple[SpawnOptions, Worktree | None]:
    """The worktree made or given to ``owner`` (see the module docstring), and the options
    with ``cwd`` and ``worktree`` set to it (unchanged, and None, without one).
    ``stale(owner)`` says whether a worktree's holder has let go of it (a run that ended)."""
    wanted = worktree_of(options)
    if wanted is None:
        return options, None
    cwd = os.path.abspath(options.cwd or os.getcwd())
    try:
        if wanted.path is not None and options.fork:
            source = workspace.load_worktree(wanted.path)
            tree = workspace.fork_worktree(
                source, wanted.branch or workspace.default_branch(name), owner=owner
            )
            inside = _inside(source.path, cwd)
        elif wanted.path is not None:
            tree = workspace.claim(workspace.load_worktree(wanted.path), owner, stale=stale)
            inside = _inside(tree.path, cwd)
        else:
            branch = wanted.branch or workspace.default_branch(name)
            tree = workspace.create_worktree(cwd, branch, base=wanted.base, owner=owner)
            inside = _inside(workspace.repository_of(cwd), cwd)
    except WorkspaceRefused as exc:
        raise BadOptions(f"worktree: {exc}") from None
    except workspace.GitFailed as exc:
        raise SpawnError(f"worktree: {exc}") from None
    where = os.path.join(tree.path, inside) if inside else tree.path
    return options.replace(cwd=where, worktree=WorktreeOption(path=tree.path)), tree


def _inside(top: str, cwd: str) -> str:
    """``cwd`` relative to ``top`` when it is inside it ("" when it is not, or is top)."""
    relative = os.path.relpath(cwd, top)
    return "" if relative == "." or relative.startswith("..") else relative


def release_worktree(options: SpawnOptions, owner: str) -> Worktree | None:
    """Free the run's worktree once it has ended (None when it had none)."""
    wanted = worktree_of(options)
    if wanted is None or wanted.path is None:
        return None
    try:
        return workspace.release(workspace.load_worktree(wanted.path), owner)
    except (OSError, WorkspaceRefused):
        return None


class WorktreeRelease(Observer):
    """Frees the run's worktree when the run ends (a later resume then claims it)."""

    def __init__(self, options: SpawnOptions, owner: str) -> None:
        self._options = options
        self._owner = owner

    async def on_end(self, result: RunResult) -> str | None:
        import asyncio

        await asyncio.to_thread(release_worktree, self._options, self._owner)
        return None
