"""A run that continues another (``SpawnOptions.resume``): what it runs with, and what it
hands its child to pick the conversation up.

Theory of operation. The run index keeps each run's options as it ran, resolved (its
worktree's path, its agent's home: :attr:`tether.store.index.RunRecord.options`). To
continue run R, :func:`continued`:

1. reads R's row (none, one kept before options were, or, unless forking, one still
   running: a usage error, :class:`~tether.errors.BadOptions`, naming what to do instead);
2. finds what R's agent saved: the built-in agent's ``conversation.jsonl`` in R's run
   directory, an external agent's session id (``agent-session``, written by its
   adapter); an agent without resume, or a run that saved nothing (its agent never
   started), is ``not resumable``, with the reason;
3. gives the new run R's options with every field the caller set changed (``task``
   aside, nothing else is needed), so it runs the same agent with the same arguments, in
   the same worktree (or, forking, a new one at its work) and the same home.

The child then gets ``--resume SESSION`` (and ``--fork``): see
:class:`~tether.runtime.child.adapters.commands.Resume`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import msgspec

from tether import fsafe
from tether.errors import BadOptions
from tether.runtime.child.adapters.commands import Resume
from tether.runtime.child.adapters.driver import SESSION_FILE
from tether.runtime.parent.options import SpawnOptions
from tether.store.index import LIVE_STATUSES, RunIndex

__all__ = ["CONVERSATION_FILE", "continued", "options_of", "session_of"]

CONVERSATION_FILE: Final = "conversation.jsonl"  # tether.agent.conversation's (a child's)
_SESSION_LIMIT: Final = 8192


def options_of(raw: dict[str, Any] | None) -> SpawnOptions | None:
    """The options a run row keeps, decoded (None for a row without, or a bad one)."""
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, SpawnOptions)
    except (msgspec.ValidationError, ValueError):
        return None


def session_of(agent: str, run_dir: Path) -> str | None:
    """What ``agent`` saved in ``run_dir`` to be resumed from (None: nothing)."""
    if agent == "builtin":
        saved = run_dir / CONVERSATION_FILE
        return str(saved) if saved.is_file() else None
    try:
        fd = fsafe.open_path(run_dir / SESSION_FILE, os.O_RDONLY)
        try:
            data = fsafe.read_all(fd, _SESSION_LIMIT)
        finally:
            os.close(fd)
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[0].strip() if lines else None


def _given(options: SpawnOptions) -> dict[str, Any]:
    """The fields of ``options`` that are not their defaults (what the caller set)."""
    default = SpawnOptions()
    return {
        name: getattr(options, name)
        for name in SpawnOptions.__struct_fields__
        if getattr(options, name) != getattr(default, name)
    }


def continued(options: SpawnOptions, index: RunIndex) -> tuple[SpawnOptions, Resume]:
    """The new run's options and the session its child resumes (see above)."""
    from tether.runtime.child.adapters.registry import get_agent, resolve_agent

    run_id = options.resume or ""
    record = index.get(run_id)
    if record is None:
        raise BadOptions(f"resume: no run {run_id!r} in the run index (see `tether runs`)")
    if record.status in LIVE_STATUSES and not options.fork:  # a fork may start from it
        raise BadOptions(
            f"resume: run {run_id} is still {record.status}; send it a follow-up instead"
        )
    prior = options_of(record.options)
    if prior is None:
        raise BadOptions(f"resume: run {run_id} kept no options (an older tether ran it)")
    agent = resolve_agent(prior.agent, prior.provider)
    kind = get_agent(agent)
    if not (kind.fork if options.fork else kind.resume):
        raise BadOptions(f"run {run_id} is not resumable: agent {agent}: {kind.not_resumable}")
    session = session_of(agent, Path(record.run_dir))
    if session is None:
        saved = "no conversation" if agent == "builtin" else "no session of its agent"
        raise BadOptions(f"run {run_id} is not resumable: it saved {saved} (did its agent start?)")
    return prior.replace(**_given(options)), Resume(session, fork=options.fork)
