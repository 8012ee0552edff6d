"""An agent's worktree at spawn: checked before anything exists, made once its name is
taken (see :mod:`tether.daemon.fleet.workspaces` for the whole story)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from tether import workspace
from tether.daemon.fleet.params import SpawnParams
from tether.runtime.child.adapters.commands import Resume
from tether.runtime.parent.continuation import continued
from tether.runtime.parent.options import SpawnOptions, WorktreeOption
from tether.runtime.parent.worktrees import check_worktree, open_worktree, worktree_of
from tether.store.index import RunIndex

__all__ = ["AGENT_OWNER", "agent_owner", "open_agent_worktree", "resolve_spawn", "resumable_run"]

AGENT_OWNER: Final = "agent:"


def agent_owner(name: str) -> str:
    """A daemon agent's claim on a worktree."""
    return AGENT_OWNER + name


def resolve_spawn(p: SpawnParams, index: RunIndex) -> tuple[SpawnParams, Resume | None]:
    """The spawn's parameters with a resumed run's options (``resume``) and its worktree
    on ``tether/NAME`` unless named, checked; the session its child resumes. Blocking;
    raises :class:`BadOptions`."""
    resumed = None
    if p.resume is not None:
        options, resumed = continued(p.options(), index)
        fields = {name: getattr(options, name) for name in SpawnOptions.__struct_fields__}
        p = msgspec.structs.replace(p, **fields)
    wanted = worktree_of(p)
    if wanted is not None and wanted.path is None and wanted.branch is None:
        branch = workspace.default_branch(p.name)
        p = msgspec.structs.replace(p, worktree=WorktreeOption(base=wanted.base, branch=branch))
    check_worktree(p.options())
    return p, resumed


def open_agent_worktree(
    p: SpawnParams, stale: Callable[[str], bool]
) -> tuple[SpawnParams, dict[str, str] | None]:
    """The agent's worktree made, forked or claimed (see the module docstring): the
    parameters with ``cwd`` in it, and its row's ``{path, branch, base}``. Blocking."""
    options, tree = open_worktree(p.options(), p.name, agent_owner(p.name), stale=stale)
    if tree is None:
        return p, None
    p = msgspec.structs.replace(p, cwd=options.cwd, worktree=options.worktree)
    return p, {"path": tree.path, "branch": tree.branch, "base": tree.base}


def resumable_run(argv: list[str] | None, run_dir: str) -> bool:
    """Whether a follow-up can resume an ended agent's run: its agent (``--agent NAME`` on
    its child's command line, else tether's own child) has a resume, and the run saved
    what it needs (a conversation, a session id). Blocking (a file or two)."""
    from pathlib import Path

    from tether.runtime.child.adapters.registry import AGENTS
    from tether.runtime.parent.continuation import session_of

    words = list(argv or ())
    if "--agent" in words[:-1]:
        agent = words[words.index("--agent") + 1]
    elif words[1:4] == ["-m", "tether", "child"]:
        agent = "builtin"
    else:
        return False
    kind = AGENTS.get(agent)
    return kind is not None and bool(kind.resume) and session_of(agent, Path(run_dir)) is not None
