"""What a run is, said once: :class:`SpawnOptions`; and where this process keeps it:
:class:`Supervision`.

Theory of operation. Every way to start a run takes the same frozen Struct:
:func:`tether.spawn`, :func:`tether.run` and :func:`tether.open_run` (as ``options`` or as
its fields given by keyword), the daemon's ``agent.spawn`` (its request is a subclass:
the agent's name and the call's own settings beside these fields) and
:func:`tether.spawn_remote` (which sends these fields to another host's ``agent.spawn``).
A new option is one field here plus its use where the run is prepared.

:class:`Supervision` holds what only the local process decides (its run index and
directories, its timeouts, its watcher): never sent to a daemon, never taken from a
client. :func:`split_fields` sorts keyword arguments into the two.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from tether.numbers import PositiveSeconds, Seconds, seconds_problem
from tether.runtime.parent.outcome import Timeouts

if TYPE_CHECKING:
    from tether.runtime.parent.hub import WatchHub

__all__ = ["SpawnOptions", "Supervision", "WorktreeOption", "split_fields"]


class WorktreeOption(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A run's git worktree (see :mod:`tether.workspace`): a new one on ``branch``
    (default ``tether/NAME``, ``tether/RUN_ID`` for a run) from ``base`` (default HEAD)
    of the repository ``cwd`` is in; or ``path``, one tether made already (a resumed
    run's: it is given to this run)."""

    base: str | None = None
    branch: str | None = None
    path: str | None = None


class SpawnOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One run's options (every field optional).

    - ``agent``: which agent (``tether agents``: ``builtin``, the default, ``claude``,
      ``codex``, ``pi``, ``gemini``, ``acp``, ``resp``, ``bash-agent``); ``agent_args``:
      extra arguments for its CLI; ``argv``: with an external agent, the agent's own
      command (required for ``acp`` and ``resp``), else any program that speaks the wire
      (default ``tether child``).
    - ``provider``, ``model``: the built-in agent's model (``scripted`` needs ``script``, a
      JSON file of replies); ``child_args``: more arguments for ``tether child``.
    - ``cwd``: where the agent works; ``env``: merged over the parent's environment.
    - ``deadline_s``: the wire deadline, ``ceil(now + deadline_s)``;
      ``finalize_after_s``: send ``finalize`` at that point, so the run answers before it.
    - ``close_when_idle``: send ``close`` once the child is ready with nothing left to do
      (None: the driver's default, on for a run, off for a daemon's long-lived agent).
    - ``parent_run``: the run that started this one (its subagents), for the index.
    - ``worktree``: run in a git worktree of its own (True, or a :class:`WorktreeOption`):
      a new branch, outside the repository's tree; ``cwd`` says which repository.
    - ``resume``: continue run ``RESUME``'s conversation (its agent, options, worktree and
      home, with the fields given here changed); with ``fork`` a new conversation starts
      from it (and a new worktree at its work) and the run goes on unchanged.
    - ``base_url``: point the agent at this model server (``tether model-server``): its
      CLI's configuration is written into its private ``home`` (a new one under the state
      directory unless given); see :mod:`tether.runtime.child.adapters.config`.
    - approvals (see :mod:`tether.agent.desk`): ``approve`` / ``deny``: rules
      (``KIND[:GLOB]``: ``shell:git status*``, ``edit:src/**``, ``read``; deny wins);
      ``policy``: a TOML policy file (``approve = [...]``, ``deny = [...]``), read when the
      run starts; ``approval``: ``ask`` makes the built-in agent's bash, write and edit
      wait for an answer (default ``auto``: they run); ``approval_timeout_s`` with
      ``approval_default`` (``approve`` or ``deny``, both or neither): decide a request
      nobody answered in time; ``no_one_to_ask``: why no person can answer (then what no
      rule decides is denied at once, saying so). Without them a request waits for an
      answer for as long as it takes.
    """

    agent: str | None = None
    agent_args: tuple[str, ...] = ()
    provider: str | None = None
    model: str | None = None
    script: str | None = None
    argv: tuple[str, ...] | None = None
    child_args: tuple[str, ...] = ()
    cwd: str | None = None
    env: dict[str, str] | None = None
    deadline_s: PositiveSeconds | None = None
    finalize_after_s: PositiveSeconds | None = None
    close_when_idle: bool | None = None
    parent_run: str | None = None
    worktree: bool | WorktreeOption | None = None
    resume: str | None = None
    fork: bool = False
    base_url: str | None = None
    home: str | None = None
    approval: Literal["ask", "auto"] | None = None
    approve: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    policy: str | None = None
    approval_timeout_s: Seconds | None = None
    approval_default: Literal["approve", "deny"] | None = None
    no_one_to_ask: str | None = None

    def __post_init__(self) -> None:
        # msgspec checks the bounds when it decodes; a Python caller's values, here
        for name in ("deadline_s", "finalize_after_s", "approval_timeout_s"):
            value = getattr(self, name)
            positive = name != "approval_timeout_s"  # 0: decide by the default at once
            problem = None if value is None else seconds_problem(value, positive=positive)
            if problem is not None:
                raise ValueError(f"{name}: {problem}")

    def replace(self, **fields: Any) -> SpawnOptions:
        """A copy with ``fields`` changed (validated like the constructor)."""
        return msgspec.structs.replace(self, **fields)


@dataclass(frozen=True, slots=True)
class Supervision:
    """How this process supervises a run it starts (never sent anywhere).

    ``timeouts``: how long the parent waits before it decides a child broke a promise;
    ``runs_root``: where run directories go (default the state directory's ``runs``);
    ``db``: the run index and inbox database; ``record``: add the run to the index;
    ``inbox``: drain the run's inbox into the database and hand its messages out;
    ``follow_nested``: also hand out the updates of the runs it starts (subagents);
    ``hub``: the file watcher (default the process's shared one).
    """

    timeouts: Timeouts | None = None
    runs_root: Path | None = None
    db: Path | None = None
    record: bool = True
    inbox: bool = True
    follow_nested: bool = False
    hub: WatchHub | None = None


_OPTION_FIELDS: Final = frozenset(SpawnOptions.__struct_fields__)
_SUPERVISION_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Supervision))


def split_fields(
    options: SpawnOptions | None, fields: dict[str, Any]
) -> tuple[SpawnOptions, Supervision]:
    """``options`` with the keyword ``fields`` that name its fields applied, and a
    :class:`Supervision` of the rest. Raises ``TypeError`` for a name that is neither
    (as a misspelt keyword would) and ``ValueError`` for a bad value."""
    unknown = sorted(set(fields) - _OPTION_FIELDS - _SUPERVISION_FIELDS)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    mine = {k: _frozen(v) for k, v in fields.items() if k in _OPTION_FIELDS}
    base = options if options is not None else SpawnOptions()
    opts = base.replace(**mine) if mine else base
    supervision = Supervision(**{k: v for k, v in fields.items() if k in _SUPERVISION_FIELDS})
    return opts, supervision


def _frozen(value: Any) -> Any:
    """Lists given by keyword are kept as tuples (the Struct is frozen)."""
    return tuple(value) if isinstance(value, list) else value
