"""Reviewing and taking an agent's work: its diff, and its merge into the base branch.

:func:`diff` is ``git diff`` of the agent's worktree (through a scratch index, so
untracked files count and the worktree's own index is untouched) against where its
work began: the merge base of its branch and its base branch (the commit it started
from when the base is no branch), so work merged already does not show again.

:func:`merge` decides everything before it changes anything:

1. the agent's work as one commit, from objects only (:func:`~.snapshot.snapshot`);
2. that commit merged into the base branch's tip with ``git merge-tree --write-tree``:
   a conflict refuses (:class:`MergeConflict`, the files named);
3. where the base branch is checked out (any worktree of the repository), the files
   the merge changes must have no uncommitted change there, staged or not, untracked
   included: else :class:`DirtyTarget`, the files named;
4. the new commit of the base branch, with ``git commit-tree`` (a merge commit with both
   parents, or with ``squash`` one commit on the base alone).

Only then: the snapshot goes on the agent's branch (:func:`~.snapshot.record`), and the
base branch moves to the new commit, by ``git merge --ff-only`` in its checkout (git
updates exactly the files that change and keeps every other local change) or by ``git
update-ref`` from the old tip when it is checked out nowhere.
"""

from __future__ import annotations

from typing import Final

import msgspec

from tether.workspace.errors import DirtyTarget, MergeConflict, NoBaseBranch
from tether.workspace.git import git, names, scratch_index
from tether.workspace.record import Worktree
from tether.workspace.snapshot import (
    Author,
    author_of,
    identity_env,
    merge_tree,
    record,
    rev,
    snapshot,
    stage_all,
)

__all__ = [
    "DIFF_LIMIT",
    "LISTED_LIMIT",
    "Merged",
    "WorktreeDiff",
    "checkout_of",
    "diff",
    "fork_point",
    "merge",
]

_LISTED: Final = 8  # files named in a refusal
# What a diff hands out (the agent's files can be any size: a daemon reply is 16 MiB at most)
DIFF_LIMIT: Final = 4 * 1024 * 1024
LISTED_LIMIT: Final = 1024 * 1024


class WorktreeDiff(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's changes against its base."""

    branch: str
    base: str  # the base branch ("" when none)
    since: str  # the commit the diff is against
    files: tuple[str, ...]  # the files changed (the first LISTED_LIMIT bytes of names)
    text: str  # the patch (or with ``stat`` the diffstat), at most DIFF_LIMIT bytes
    cut: bool = False  # ``text`` or ``files`` stopped at its limit (said at the text's end)


class Merged(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`merge` did."""

    branch: str
    base: str
    commit: str  # the base branch's new tip ("" when there was nothing to merge)
    previous: str  # its tip before
    files: tuple[str, ...]  # the files the merge changed on the base
    committed: str  # the commit of the agent's uncommitted work ("" when it had none)
    checkout: str  # the checkout of the base that was updated ("" when none)
    squash: bool


def fork_point(worktree: Worktree) -> str:
    """Where the agent's work began, as its base branch sees it now."""
    at = worktree.at
    tip = rev(at, f"refs/heads/{worktree.base}") if worktree.base else ""
    if not tip:
        return worktree.base_commit
    found = git(at, "merge-base", tip, "HEAD", ok=(0, 1)).out.strip()
    return found or worktree.base_commit


def diff(worktree: Worktree, *, stat: bool = False) -> WorktreeDiff:
    """The agent's changes, committed or not, untracked files included (see above)."""
    at = worktree.at
    since = fork_point(worktree)
    style = ("--stat",) if stat else ("--patch",)
    with scratch_index(at) as index:
        stage_all(at, index)
        listed = git(
            at, "diff", "--cached", "--name-only", "-z", since, "--", env=index, limit=LISTED_LIMIT
        )
        args = ("diff", "--cached", "--no-color", "--no-ext-diff", *style, since, "--")
        text = git(at, *args, env=index, limit=DIFF_LIMIT)
    files = names(listed.out)
    if listed.cut:  # (the last name may be cut)
        files = files[:-1]
    patch = text.out
    cut = [f"the diff at {DIFF_LIMIT >> 20} MiB"] if text.cut else []
    cut += [f"its list of files at {LISTED_LIMIT >> 20} MiB"] if listed.cut else []
    if cut:
        patch += f"\n[tether: {', '.join(cut)} is cut; git -C {worktree.path} diff shows it]\n"
    return WorktreeDiff(
        branch=worktree.branch,
        base=worktree.base,
        since=since,
        files=tuple(files),
        text=patch,
        cut=text.cut or listed.cut,
    )


def checkout_of(worktree: Worktree, branch: str) -> str:
    """The worktree of the repository where ``branch`` is checked out ("" when none)."""
    listing = git(worktree.at, "worktree", "list", "--porcelain", "-z").out
    current = ""
    for entry in names(listing):
        if entry.startswith("worktree "):
            current = entry.removeprefix("worktree ")
        elif entry == f"branch refs/heads/{branch}":
            return current
    return ""


def _dirty(checkout: str) -> set[str]:
    """Every file with an uncommitted change in ``checkout`` (both names of a rename)."""
    entries = names(git(checkout, "status", "--porcelain=v1", "-z", "--untracked-files=all").out)
    found: set[str] = set()
    origin = False
    for entry in entries:
        if origin:  # the source name that follows a rename or copy
            found.add(entry)
            origin = False
            continue
        found.add(entry[3:])
        origin = entry[0] in "RC" or entry[1] in "RC"
    return found


def _refusal(kind: type[MergeConflict | DirtyTarget], what: str, files: list[str]) -> Exception:
    listed = ", ".join(files[:_LISTED]) + (", ..." if len(files) > _LISTED else "")
    return kind(f"{what}: {listed}; nothing was changed", files)


def merge(
    worktree: Worktree,
    *,
    squash: bool = False,
    message: str | None = None,
    author: Author | None = None,
) -> Merged:
    """Merge the agent's work into its base branch (see the module docstring)."""
    target = worktree.base
    at = worktree.at
    old = rev(at, f"refs/heads/{target}") if target else ""
    if not old:
        why = f"the branch {target} is gone" if target else "it began at a tag or commit"
        raise NoBaseBranch(
            f"{worktree.branch} has no base branch to merge into ({why}); "
            f"merge it yourself: git merge {worktree.branch}"
        )
    snap = snapshot(worktree, author)
    merged = merge_tree(at, old, snap.commit)
    if merged.conflicts:
        what = f"merging {worktree.branch} into {target} conflicts in"
        raise _refusal(MergeConflict, what, list(merged.conflicts))
    touched = names(git(at, "diff-tree", "-r", "-z", "--name-only", old, merged.tree).out)
    if not touched:
        return Merged(
            branch=worktree.branch,
            base=target,
            commit="",
            previous=old,
            files=(),
            committed="",
            checkout="",
            squash=squash,
        )
    checkout = checkout_of(worktree, target)
    dirty = sorted(_dirty(checkout) & set(touched)) if checkout else []
    if dirty:
        what = f"{checkout} (where {target} is checked out) has uncommitted changes in"
        raise _refusal(DirtyTarget, what, dirty)
    new = _merge_commit(worktree, old, snap.commit, merged.tree, squash=squash, message=message)
    record(worktree, snap)
    if checkout:
        git(checkout, "merge", "--ff-only", "--quiet", new)
    else:
        git(
            at,
            "update-ref",
            "-m",
            f"tether: merge {worktree.branch}",
            f"refs/heads/{target}",
            new,
            old,
        )
    return Merged(
        branch=worktree.branch,
        base=target,
        commit=new,
        previous=old,
        files=tuple(touched),
        committed=snap.commit if snap.uncommitted else "",
        checkout=checkout,
        squash=squash,
    )


def _merge_commit(
    worktree: Worktree, old: str, work: str, tree: str, *, squash: bool, message: str | None
) -> str:
    name = worktree.name
    text = message or (
        f"{worktree.branch}: the work of agent {name}"
        if squash
        else f"Merge {worktree.branch} (the work of agent {name}) into {worktree.base}"
    )
    parents = ("-p", old) if squash else ("-p", old, "-p", work)
    at = worktree.at
    env = identity_env(at, author_of(worktree) if squash else None)
    return git(at, "commit-tree", tree, *parents, "-m", text, env=env).out.strip()
