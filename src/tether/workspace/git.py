"""Running the git CLI: one call, its output as text, its failures as tether's errors.

Every worktree, diff and merge is git's own (``git worktree``, ``git diff``, ``git
merge-tree``, ``git merge --ff-only``): this module only runs it. The environment is
this process's without the variables that would point git at another repository or
index (``GIT_DIR``, ``GIT_INDEX_FILE``, ... : a hook or a test may set them), with no
prompt for credentials and no pager. :func:`scratch_index` gives a throw-away index
(a copy of a worktree's own) for the commands that must see untracked files without
touching the worktree's index.

An agent's worktree is the agent's to write, its ``.git`` entry too: git run there
would take the repository that entry names, with that repository's configuration
(``core.fsmonitor`` and ``core.hooksPath`` run commands) and its objects and refs (a
diff to review, a branch to merge into, of the agent's making). So git is never run in
a worktree by discovery: a :class:`Pinned` place names the worktree's administrative
directory in the repository (:func:`admin_dir`, found from the repository's side) as
``--git-dir`` and the worktree as ``--work-tree``, and the ``.git`` entry is not read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from tether.workspace.errors import GitFailed

__all__ = [
    "OUTPUT_LIMIT",
    "GitFailed",
    "Output",
    "Pinned",
    "Where",
    "admin_dir",
    "git",
    "git_env",
    "names",
    "scratch_index",
]

# Variables that point git somewhere else than the directory it is run in.
_REPO_ENV: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_PREFIX",
)
_ERROR_LIMIT: Final = 600  # characters of git's stderr kept in an error


_LINK_LIMIT: Final = 8192  # bytes of an administrative directory's ``gitdir`` file
OUTPUT_LIMIT: Final = 64 * 1024 * 1024  # what a git call may print unless it names a limit
_CHUNK: Final = 1 << 16
_ERROR_BYTES: Final = 64 * 1024  # of git's errors kept (a message shows 600 characters)


class Output(NamedTuple):
    code: int
    out: str
    err: str
    cut: bool = False  # ``out`` stopped at the call's limit (git was ended there)


class Pinned(NamedTuple):
    """A worktree and its administrative directory: where git runs without reading the
    worktree's own ``.git`` entry (see the module docstring)."""

    tree: str
    gitdir: str


Where = str | os.PathLike[str] | Pinned


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    return {**env, **(extra or {})}


def git(
    cwd: Where,
    *args: str,
    ok: Sequence[int] = (0,),
    env: Mapping[str, str] | None = None,
    limit: int | None = None,
) -> Output:
    """``git -C cwd ARGS...`` (a :class:`Pinned` place: with its ``--git-dir`` and
    ``--work-tree``); :class:`GitFailed` when its exit status is not in ``ok``.

    Its output is read up to ``limit`` bytes (then git is ended and the output is
    ``cut``); without one, past :data:`OUTPUT_LIMIT` is :class:`GitFailed` (what git
    prints can be the agent's: its files' names, their contents in a diff)."""
    if isinstance(cwd, Pinned):
        place = ["-C", cwd.tree, f"--git-dir={cwd.gitdir}", f"--work-tree={cwd.tree}"]
    else:
        place = ["-C", os.fspath(cwd)]
    argv = ["git", *place, *args]
    try:
        code, data, err, cut = _run(argv, git_env(env), limit or OUTPUT_LIMIT)
    except OSError as exc:
        raise GitFailed(f"cannot run git ({exc}); is git installed?") from exc
    out = Output(code, _text(data), _text(err), cut)
    if cut and limit is None:
        raise GitFailed(f"git {' '.join(args[:3])} printed more than {OUTPUT_LIMIT} bytes")
    if out.code not in ok and not cut:
        raise GitFailed(f"git {' '.join(args[:3])} failed ({out.code}): {failure(out)}")
    return out


def _run(argv: list[str], env: dict[str, str], limit: int) -> tuple[int, bytes, bytes, bool]:
    """Run ``argv``: (exit status, at most ``limit`` bytes of its output, the start of its
    errors, whether the output was cut). Errors go to a temporary file, so a flood of
    them never blocks git while its output is read."""
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env
        )
        chunks: list[bytes] = []
        size, cut = 0, False
        assert proc.stdout is not None
        with proc.stdout:
            while chunk := os.read(proc.stdout.fileno(), _CHUNK):
                if size + len(chunk) > limit:
                    chunks.append(chunk[: limit - size])
                    cut = True
                    proc.kill()
                    break
                chunks.append(chunk)
                size += len(chunk)
        code = proc.wait()
        errors.seek(0)
        return code, b"".join(chunks), errors.read(_ERROR_BYTES), cut


def failure(out: Output) -> str:
    """What git said about a failure, on one line."""
    text = " ".join((out.err or out.out).split())
    return text[:_ERROR_LIMIT] or "no message"


def names(raw: str) -> list[str]:
    """The entries of a ``-z`` listing (NUL-separated)."""
    return [name for name in raw.split("\0") if name]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def admin_dir(top: str, tree: str) -> str:
    """The administrative directory (``<common dir>/worktrees/ID``) of the worktree at
    ``tree`` of the repository checked out at ``top``, found from the repository's side:
    the one whose ``gitdir`` names ``tree/.git``. :class:`GitFailed` when there is none."""
    common = git(top, "rev-parse", "--path-format=absolute", "--git-common-dir").out.strip()
    want = os.path.join(os.path.normpath(tree), ".git")
    folder = os.path.join(common, "worktrees")
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if _names_tree(os.path.join(entry.path, "gitdir"), want):
                return entry.path
    raise GitFailed(f"the repository {top} has no worktree at {tree} (git worktree list)")


def _names_tree(link: str, want: str) -> bool:
    try:
        with open(link, "rb") as file:
            text = file.read(_LINK_LIMIT).decode("utf-8", "surrogateescape").strip()
    except OSError:
        return False
    return os.path.normpath(text) == want


@contextlib.contextmanager
def scratch_index(worktree: Where) -> Iterator[dict[str, str]]:
    """A private copy of ``worktree``'s index as ``GIT_INDEX_FILE`` (an environment to
    pass to :func:`git`), removed afterwards: ``git add -A`` there stages everything,
    untracked files included, and the worktree's own index never changes."""
    index = Path(
        git(worktree, "rev-parse", "--path-format=absolute", "--git-path", "index").out.strip()
    )
    with tempfile.TemporaryDirectory(prefix="tether-index-") as folder:
        copy = Path(folder, "index")
        with contextlib.suppress(FileNotFoundError):  # a worktree with nothing staged yet
            shutil.copy2(index, copy)  # its mtime too: git then re-reads racily clean files
        yield {"GIT_INDEX_FILE": str(copy)}
