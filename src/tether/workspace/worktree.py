"""Making and removing an agent's worktree (``git worktree add`` / ``remove``).

:func:`create_worktree` checks everything first and creates nothing when one check
fails: the directory is in a git repository with a work tree, the branch name is valid
and free, the base names a commit, and no worktree of tether's is there already. It
then makes the private directory (0700, see :mod:`tether.workspace.record`) and runs
``git worktree add --no-track -b BRANCH DIR COMMIT``; if anything fails after that, the
branch and the directory are removed again. The base branch (where a merge goes) is
the base when it names a branch, else the branch HEAD is on; a tag or a commit has none.

:func:`fork_worktree` starts a new worktree where another agent's work is now: at a
snapshot of it (committed or not, see :mod:`tether.workspace.snapshot`), the source
untouched; its work merges into the same base branch.

:func:`pending_work` says what would be lost: the changes that merging the agent's
work (its snapshot) into its base would still bring, found with ``git merge-tree``, so
work taken with a squash merge counts as merged too. :func:`remove_worktree` refuses
to drop such work unless forced, or keeps it on the branch (``keep_branch``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Final

import msgspec

from tether.paths import ensure_private_dir, worktrees_dir
from tether.workspace.errors import (
    BaseNotFound,
    BranchExists,
    NotARepository,
    UnmergedWork,
    WorkspaceRefused,
    WorktreeTaken,
)
from tether.workspace.git import GitFailed, admin_dir, failure, git, names
from tether.workspace.record import RECORD_FILE, TREE_DIR, Worktree, load_worktree, write_record
from tether.workspace.snapshot import merge_tree, record, rev, snapshot

__all__ = [
    "BRANCH_PREFIX",
    "Removed",
    "check_new",
    "create_worktree",
    "default_branch",
    "fork_worktree",
    "owned_by",
    "pending_work",
    "remove_worktree",
    "repository_of",
]

BRANCH_PREFIX: Final = "tether/"
_LISTED: Final = 5  # files named in a message


class Removed(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`remove_worktree` did."""

    path: str
    branch: str
    branch_kept: bool
    dropped: str  # the work dropped by force ("" when none)


def default_branch(name: str) -> str:
    """``tether/NAME``: the branch of agent (or run) ``name``."""
    return BRANCH_PREFIX + name


def repository_of(cwd: str | os.PathLike[str]) -> str:
    """The top level of the git checkout ``cwd`` is in; :class:`NotARepository` if none."""
    where = os.path.abspath(cwd)
    if not os.path.isdir(where):
        raise NotARepository(f"{where} is not a directory")
    out = git(where, "rev-parse", "--show-toplevel", ok=(0, 128))
    if out.code != 0 or not out.out.strip():
        raise NotARepository(
            f"{where} is not in a git repository with a work tree ({failure(out)}); "
            "run `git init` and commit there, or start the agent without a worktree"
        )
    return out.out.strip()


def create_worktree(
    cwd: str | os.PathLike[str],
    branch: str,
    *,
    base: str | None = None,
    owner: str = "",
    root: Path | None = None,
) -> Worktree:
    """A new worktree on a new ``branch`` from ``base`` (default HEAD) of the repository
    ``cwd`` is in, given to ``owner``; see the module docstring."""
    top = repository_of(cwd)
    commit, base_branch = _resolve_base(top, base)
    return _add(top, branch, commit, base=(base_branch, commit), owner=owner, root=root)


def check_new(top: str, branch: str | None = None, base: str | None = None) -> None:
    """Every check :func:`create_worktree` makes before it creates anything (``branch``
    None: a name that cannot be taken yet, e.g. a new run's id)."""
    _resolve_base(top, base)
    if branch is not None:
        _check_branch(top, branch)


def fork_worktree(
    source: Worktree, branch: str, *, owner: str = "", root: Path | None = None
) -> Worktree:
    """A new worktree on ``branch`` at ``source``'s work now (committed or not)."""
    snap = snapshot(source)
    base = (source.base, source.base_commit)
    return _add(source.repo, branch, snap.commit, base=base, owner=owner, root=root)


def _add(
    top: str,
    branch: str,
    start: str,
    *,
    base: tuple[str, str],  # the base branch and the commit the work began at
    owner: str,
    root: Path | None,
) -> Worktree:
    _check_branch(top, branch)
    home = _make_home(top, branch, root)
    tree = home / TREE_DIR
    try:
        worktree = Worktree(
            path=str(tree),
            branch=branch,
            repo=top,
            base=base[0],
            base_commit=base[1],
            owner=owner,
        )
        write_record(worktree)  # first: a process killed during git add leaves it findable
        args = ("worktree", "add", "--quiet", "--no-track", "-b", branch, str(tree), start)
        out = git(top, *args, ok=(0, 128, 255))
        if out.code != 0:
            raise _add_refused(branch, out.err)
        worktree = msgspec.structs.replace(worktree, gitdir=admin_dir(top, str(tree)))
        write_record(worktree)
    except BranchExists:  # someone else's, made since the check: not ours to delete
        _undo(top, tree, None)
        raise
    except BaseException:
        _undo(top, tree, branch)
        raise
    return worktree


def _add_refused(branch: str, err: str) -> WorkspaceRefused:
    if "already exists" in err:
        return BranchExists(f"the branch {branch} exists already; choose another name")
    return WorkspaceRefused(f"git worktree add refused: {' '.join(err.split())[:400]}")


def _undo(top: str, tree: Path, branch: str | None) -> None:
    """Remove what a failed :func:`_add` made (the worktree, its branch, its directory).
    The branch goes whether or not the tree was made: a checkout that failed (a full
    disk) leaves git's new branch behind without a tree."""
    if tree.exists():
        git(top, "worktree", "remove", "--force", str(tree), ok=(0, 128))
    shutil.rmtree(tree.parent, ignore_errors=True)
    git(top, "worktree", "prune", ok=(0, 128))
    if branch is not None:
        git(top, "branch", "-D", branch, ok=(0, 1))


def _resolve_base(top: str, base: str | None) -> tuple[str, str]:
    """The base's commit and its branch ("" when the base is no branch)."""
    ref = base or "HEAD"
    if ref.startswith("-") or not ref.strip():
        raise BaseNotFound(f"{ref!r} is not a git revision")
    commit = git(top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1, 128))
    if commit.code != 0:
        what = "HEAD has no commit yet: commit first, or give --base" if base is None else ""
        raise BaseNotFound(what or f"the base {base!r} names no commit in {top}")
    full = git(top, "rev-parse", "--symbolic-full-name", ref, ok=(0, 128)).out.strip()
    branch = full.removeprefix("refs/heads/") if full.startswith("refs/heads/") else ""
    return commit.out.strip(), branch


def _check_branch(top: str, branch: str) -> None:
    if git(top, "check-ref-format", "--branch", branch, ok=(0, 1, 128)).code != 0:
        raise WorkspaceRefused(f"{branch!r} is not a valid branch name")
    if git(top, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", ok=(0, 1)).code == 0:
        raise BranchExists(f"the branch {branch} exists already in {top}; choose another name")


def _make_home(top: str, branch: str, root: Path | None) -> Path:
    """The worktree's private directory, made now (refused when it exists already)."""
    common = git(top, "rev-parse", "--path-format=absolute", "--git-common-dir").out.strip()
    key = hashlib.sha256(common.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    repo_name = Path(common).parent.name if Path(common).name == ".git" else Path(common).stem
    folder = ensure_private_dir((root or worktrees_dir()) / f"{repo_name}-{key}")
    home = folder / branch.replace("/", "-")
    try:
        home.mkdir(mode=0o700)
    except FileExistsError:
        raise WorktreeTaken(
            f"tether has a worktree at {home} already (branch {branch}); remove it first"
        ) from None
    home.chmod(0o700)
    return home


def _target(worktree: Worktree) -> str:
    """The commit the agent's work merges into: its base branch's, else where it began."""
    if worktree.base:
        tip = rev(worktree.at, f"refs/heads/{worktree.base}")
        if tip:
            return tip
    return worktree.base_commit


def pending_work(worktree: Worktree) -> tuple[str, ...]:
    """The files whose changes merging the agent's work into its base would still bring
    (committed or not); () when all of its work is merged (see the module docstring)."""
    target = _target(worktree)
    work = snapshot(worktree).commit
    at = worktree.at
    merged = merge_tree(at, target, work)
    if merged.conflicts:
        return merged.conflicts
    if merged.tree == rev(at, f"{target}^{{tree}}"):
        return ()
    out = git(at, "diff-tree", "-r", "-z", "--name-only", target, merged.tree)
    return tuple(names(out.out))


def _registered(worktree: Worktree) -> bool:
    """Whether git has the worktree (not when its making was cut short, or git removed it)."""
    try:
        return os.path.isdir(worktree.at.gitdir)
    except GitFailed:
        return False


def owned_by(owner: str, *, root: Path | None = None) -> list[Worktree]:
    """Every worktree tether made (under ``root``) that is given to ``owner``: what a spawn
    cut short by a kill left before its agent's row named it."""
    found = []
    for kept in sorted((root or worktrees_dir()).glob(f"*/*/{RECORD_FILE}")):
        try:
            worktree = load_worktree(kept.parent)
        except WorkspaceRefused:
            continue
        if worktree.owner == owner:
            found.append(worktree)
    return found


def remove_worktree(
    worktree: Worktree, *, force: bool = False, keep_branch: bool = False
) -> Removed:
    """Remove the worktree and its branch. Work not merged is refused
    (:class:`UnmergedWork`) unless ``force`` drops it or ``keep_branch`` keeps it: the
    uncommitted part is then committed on the branch (the agent as its author) first."""
    alive = os.path.isdir(worktree.path) and _registered(worktree)
    kept = snapshot(worktree) if alive and keep_branch else None  # (refused: nothing done)
    pending: tuple[str, ...] = ()
    if alive and not keep_branch:
        try:
            pending = pending_work(worktree)
        except WorkspaceRefused as exc:  # work that cannot be told (a repository of its own)
            if not force:
                raise
            pending = exc.files or ("?",)
    if pending and not (force or keep_branch):
        listed = ", ".join(pending[:_LISTED]) + (", ..." if len(pending) > _LISTED else "")
        raise UnmergedWork(
            f"{worktree.branch} has work not merged into {worktree.base or 'its base'} "
            f"({len(pending)} file(s): {listed}); merge it first, or remove it with "
            "--force (drops the work) or --keep-branch (keeps it on the branch)",
            pending,
        )
    if kept is not None:
        record(worktree, kept)
    top = worktree.repo
    git(top, "worktree", "remove", "--force", worktree.path, ok=(0, 128))
    shutil.rmtree(worktree.home, ignore_errors=True)  # (git refuses a tree whose .git moved)
    git(top, "worktree", "prune")
    if not keep_branch:
        git(top, "branch", "-D", worktree.branch, ok=(0, 1))
    dropped = "" if keep_branch or not pending else f"{len(pending)} file(s) of work"
    return Removed(
        path=worktree.path, branch=worktree.branch, branch_kept=keep_branch, dropped=dropped
    )
