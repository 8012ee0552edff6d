"""An agent's worktree as tether records it: where it is, its branch, its base, its holder.

Each worktree tether makes lives in its own private directory (0700) under the
worktrees directory (:func:`tether.paths.worktrees_dir`, ``<state>/worktrees``)::

    <worktrees>/<repo>-<hash>/<branch with / as ->/
        tree/            the git worktree itself (the agent's working directory)
        worktree.json    this record (0600)

so a worktree is found again from its path alone (:func:`load_worktree`), after a
restart too. ``owner`` is the agent (or run) the worktree is given to: :func:`claim`
gives it, and refuses while another holds it; :func:`release` frees it. Both change the
record under an exclusive ``flock`` on its directory, so two claims cannot both win.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from tether import fsafe
from tether.workspace.errors import WorkspaceRefused, WorktreeTaken
from tether.workspace.git import Pinned, admin_dir

__all__ = [
    "RECORD_FILE",
    "TREE_DIR",
    "Worktree",
    "claim",
    "load_worktree",
    "release",
    "write_record",
]

RECORD_FILE: Final = "worktree.json"
TREE_DIR: Final = "tree"
_RECORD_LIMIT: Final = 64 * 1024


class Worktree(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's worktree."""

    path: str  # the worktree: the agent's working directory
    branch: str  # its branch (``tether/NAME``)
    repo: str  # the top level of the checkout it was made from
    base: str  # the branch its work merges into; "" when the base was no branch
    base_commit: str  # the commit it started from
    owner: str = ""  # the agent (or run) it is given to; "" when free
    gitdir: str = ""  # its administrative directory in the repository (git.admin_dir)

    @property
    def home(self) -> Path:
        """The private directory that holds the worktree and its record."""
        return Path(self.path).parent

    @property
    def at(self) -> Pinned:
        """Where git runs on the worktree: never through its own ``.git`` entry, which the
        agent may have rewritten (see :mod:`tether.workspace.git`)."""
        return Pinned(self.path, self.gitdir or admin_dir(self.repo, self.path))

    @property
    def name(self) -> str:
        """The branch's last part: the agent's name for ``tether/NAME``."""
        return self.branch.rpartition("/")[2]


_decoder = msgspec.json.Decoder(Worktree)


def write_record(worktree: Worktree) -> None:
    """Write (replace) the worktree's record, 0600."""
    fsafe.replace_file(worktree.home / RECORD_FILE, msgspec.json.encode(worktree))


def load_worktree(path: str | os.PathLike[str]) -> Worktree:
    """The record of the worktree at ``path`` (its ``tree`` directory or its home);
    :class:`WorkspaceRefused` when tether made no worktree there."""
    where = Path(os.path.abspath(path))
    home = where.parent if where.name == TREE_DIR else where
    try:
        fd = fsafe.open_path(home / RECORD_FILE, os.O_RDONLY)
        try:
            data = fsafe.read_all(fd, _RECORD_LIMIT)
        finally:
            os.close(fd)
        worktree = _decoder.decode(data)
    except (OSError, msgspec.DecodeError) as exc:
        raise WorkspaceRefused(f"{where} is not a worktree tether made ({exc})") from None
    if Path(worktree.path) != home / TREE_DIR:
        raise WorkspaceRefused(f"the record in {home} names another worktree ({worktree.path})")
    return worktree


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    with fsafe.opened_dir(home) as fd:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield  # the lock goes with the descriptor


def _never(owner: str) -> bool:
    return False


def claim(worktree: Worktree, owner: str, *, stale: Callable[[str], bool] = _never) -> Worktree:
    """Give the worktree to ``owner`` (its record re-read under the lock); raises
    :class:`WorktreeTaken` while someone else holds it (``stale(holder)`` True: the
    holder has let go of it without saying so, e.g. a run that ended)."""
    with _locked(worktree.home):
        current = load_worktree(worktree.path)
        if current.owner not in ("", owner) and not stale(current.owner):
            raise WorktreeTaken(
                f"the worktree {current.path} (branch {current.branch}) is given to "
                f"{current.owner!r}; stop or remove that agent first"
            )
        claimed = msgspec.structs.replace(current, owner=owner)
        write_record(claimed)
        return claimed


def release(worktree: Worktree, owner: str) -> Worktree:
    """Free the worktree if ``owner`` holds it (else leave it as it is)."""
    with _locked(worktree.home):
        current = load_worktree(worktree.path)
        if current.owner != owner:
            return current
        freed = msgspec.structs.replace(current, owner="")
        write_record(freed)
        return freed
